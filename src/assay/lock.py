"""One run per target: a lock file holding PID, host and a heartbeat.

``.assay/run.lock`` is created atomically (``O_EXCL``). A lock whose process is dead (same
host) or whose heartbeat is older than ``stale_after_s`` is stale: it is taken over, and the
caller is told whose lock it was. A live lock makes :func:`acquire` raise :class:`LockError`
naming its holder.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import LockError

HEARTBEAT_S = 2.0
STALE_AFTER_S = 30.0


@dataclass(frozen=True)
class LockInfo:
    pid: int
    host: str
    heartbeat: float
    started: float


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read(path: Path) -> LockInfo | None:
    try:
        raw = json.loads(path.read_text())
        return LockInfo(int(raw["pid"]), str(raw["host"]), float(raw["heartbeat"]),
                        float(raw.get("started", raw["heartbeat"])))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_stale(info: LockInfo | None, stale_after_s: float = STALE_AFTER_S) -> tuple[bool, str]:
    if info is None:
        return True, "the lock file is unreadable"
    if info.host == socket.gethostname() and not _alive(info.pid):
        return True, f"process {info.pid} on {info.host} is dead"
    age = time.time() - info.heartbeat
    if age > stale_after_s:
        return True, f"its heartbeat is {age:.0f}s old (limit {stale_after_s:.0f}s)"
    return False, ""


class RunLock:
    def __init__(self, path: Path, stale_after_s: float = STALE_AFTER_S) -> None:
        self.path = path
        self.stale_after_s = stale_after_s
        self.took_over: str = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.time()

    def _write(self, flags: int) -> None:
        body = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                           "heartbeat": time.time(), "started": self._started})
        fd = os.open(self.path, flags, 0o644)
        try:
            os.write(fd, body.encode())
        finally:
            os.close(fd)

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            try:
                self._write(os.O_WRONLY | os.O_CREAT | os.O_EXCL)
                break
            except FileExistsError:
                info = read(self.path)
                stale, why = is_stale(info, self.stale_after_s)
                if not stale and info is not None:
                    raise LockError(
                        f"another assay run holds {self.path}: pid {info.pid} on {info.host}, "
                        f"heartbeat {time.time() - info.heartbeat:.0f}s ago. Stop it first "
                        "(Ctrl-C or kill), or wait for it to finish.") from None
                holder = f"pid {info.pid} on {info.host}" if info else "an unknown holder"
                self.took_over = f"took over a stale lock from {holder}: {why}"
                # Rename-then-remove so two racing takers cannot both remove a fresh lock.
                tomb = self.path.with_suffix(f".stale.{os.getpid()}")
                try:
                    os.replace(self.path, tomb)
                    os.unlink(tomb)
                except FileNotFoundError:
                    pass
        else:
            raise LockError(f"could not take {self.path} after three tries; another run is "
                            "starting at the same time")
        self._thread = threading.Thread(target=self._beat, name="assay-lock", daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            info = read(self.path)
            if info is None or info.pid != os.getpid():
                return  # someone took it over: stop touching it
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                       "heartbeat": time.time(), "started": self._started}))
            os.replace(tmp, self.path)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        info = read(self.path)
        if info is not None and info.pid == os.getpid():
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
