"""One run per target: a lock file holding PID, host and a heartbeat.

``.assay/run.lock`` holds ``{"pid", "host", "heartbeat", "started"}``. Every decision about
it (take it, take over a stale one, refresh the heartbeat, release it) is made while holding
an exclusive ``flock`` on ``.assay/run.lock.guard``, so two processes starting at the same
instant cannot both win, and a taker cannot remove a lock that was refreshed a moment ago.

A lock is stale when its process is dead (same host), or when its heartbeat is older than
``stale_after_s`` (any host: a hung or vanished orchestrator). A stale lock is taken over and
:attr:`RunLock.took_over` says whose it was and why; a live lock makes :meth:`RunLock.acquire`
raise :class:`LockError` naming its holder. The heartbeat is refreshed every ``HEARTBEAT_S``
by a daemon thread; it stops touching the file the moment another process owns it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import LockError

HEARTBEAT_S = 2.0
STALE_AFTER_S = 30.0


@dataclass(frozen=True)
class LockInfo:
    pid: int
    host: str
    heartbeat: float
    started: float

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


def read(path: Path) -> LockInfo | None:
    try:
        raw = json.loads(path.read_text())
        return LockInfo(int(raw["pid"]), str(raw["host"]), float(raw["heartbeat"]),
                        float(raw.get("started", raw["heartbeat"])))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
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
    def __init__(self, path: Path, stale_after_s: float = STALE_AFTER_S,
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self.path = Path(path)
        self.stale_after_s = stale_after_s
        self.heartbeat_s = heartbeat_s
        self.took_over: str = ""
        self.held = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.time()

    @property
    def guard_path(self) -> Path:
        return self.path.with_name(self.path.name + ".guard")

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        fd = os.open(self.guard_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def _write(self) -> None:
        body = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                           "heartbeat": time.time(), "started": self._started})
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, body.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)

    def acquire(self) -> RunLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._guard():
                if self.path.exists():
                    info = read(self.path)
                    if info is not None and info.pid == os.getpid() \
                            and info.host == socket.gethostname() and self.held:
                        return self
                    stale, why = is_stale(info, self.stale_after_s)
                    if not stale and info is not None:
                        raise LockError(
                            f"another assay run holds {self.path}: {info.describe()}, started "
                            f"{time.time() - info.started:.0f}s ago, heartbeat "
                            f"{time.time() - info.heartbeat:.0f}s ago. Stop it first (Ctrl-C, "
                            "`assay stop` or kill), or wait for it to finish.")
                    holder = info.describe() if info else "an unknown holder"
                    self.took_over = f"took over a stale lock from {holder}: {why}"
                self._write()
        except OSError as exc:
            raise LockError(f"cannot take the run lock {self.path}: {exc}") from None
        self.held = True
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="assay-lock", daemon=True)
        self._thread.start()
        return self

    def _mine(self) -> bool:
        info = read(self.path)
        return info is not None and info.pid == os.getpid() and \
            info.host == socket.gethostname()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                with self._guard():
                    if not self._mine():
                        self.held = False
                        return  # someone took it over: stop touching it
                    self._write()
            except OSError:
                continue  # a full disk for a moment: try again at the next beat

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if not self.held:
            return
        self.held = False
        try:
            with self._guard():
                if self._mine():
                    self.path.unlink(missing_ok=True)
        except OSError:
            pass

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder(path: Path) -> LockInfo | None:
    """The live holder of the lock at ``path``, or None when it is free or stale."""
    info = read(path)
    stale, _ = is_stale(info)
    return None if stale else info
