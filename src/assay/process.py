"""Run one command as an untrusted subprocess, with honest limits.

What it does: a fresh process group (``start_new_session``), a hard wall-clock timeout
that kills the WHOLE group (SIGTERM, then SIGKILL after a grace period), a kill of any
process the command left behind when it exits, an environment built only from an
allowlist, optional memory (RLIMIT_AS) and CPU-time (RLIMIT_CPU) limits, optional no-network
runs through ``unshare -rn``, and stdout/stderr written to files.

What it does NOT protect against: a process that escapes its group with ``setsid`` and
double-forks (it outlives the kill), reads of files outside the worktree, or
filesystem writes outside it. Treat the benchmark as semi-trusted code you chose to run.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .config import EnvSpec, LimitSpec
from .errors import ExecutorError

GRACE_S = 2.0


@dataclass(frozen=True)
class ProcResult:
    exit_code: int | None
    timed_out: bool
    cancelled: bool
    wall_s: float
    stdout: str
    stderr: str


class CancelToken:
    """Shared between the orchestrator and a running block: cancel() kills its group."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._pgids: set[int] = set()
        self._lock = threading.Lock()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        self._event.set()
        with self._lock:
            for pgid in list(self._pgids):
                kill_group(pgid)

    def _add(self, pgid: int) -> None:
        with self._lock:
            self._pgids.add(pgid)
            if self._event.is_set():
                kill_group(pgid)

    def _remove(self, pgid: int) -> None:
        with self._lock:
            self._pgids.discard(pgid)

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def scrubbed_env(spec: EnvSpec, extra: Mapping[str, str] | None = None,
                 base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Only the allowlisted variables of ``base`` (default: this process), then fixed values."""
    src = os.environ if base is None else base
    env = {k: v for k, v in src.items() if k in spec.allow}
    env.setdefault("PATH", os.defpath)
    env.update(spec.set)
    if extra:
        env.update(extra)
    return env


_UNSHARE_OK: bool | None = None


def network_isolation_available() -> tuple[bool, str]:
    """Whether ``unshare -rn`` works here (user namespaces may be disabled)."""
    global _UNSHARE_OK
    exe = shutil.which("unshare")
    if exe is None:
        return False, "the `unshare` program is not installed (util-linux)"
    if _UNSHARE_OK is None:
        try:
            r = subprocess.run([exe, "-rn", "true"], capture_output=True, timeout=10)
            _UNSHARE_OK = r.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _UNSHARE_OK = False
    if not _UNSHARE_OK:
        return False, ("`unshare -rn` failed: this machine does not allow unprivileged network "
                       "namespaces; set limits.network = true or run where they are allowed")
    return True, "unshare -rn"


def _limiter(limits: LimitSpec | None) -> Callable[[], None] | None:
    if limits is None or (limits.memory_mb is None and limits.cpu_s is None):
        return None

    def apply() -> None:  # runs in the child before exec
        if limits.memory_mb is not None:
            size = limits.memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (size, size))
        if limits.cpu_s is not None:
            resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))

    return apply


def run(cmd: str, *, cwd: Path, env: Mapping[str, str], timeout_s: float,
        stdout_path: Path, stderr_path: Path, limits: LimitSpec | None = None,
        cancel: CancelToken | None = None) -> ProcResult:
    """Run ``cmd`` with bash in its own process group; never leaves a process behind."""
    argv = ["bash", "-c", cmd]
    if limits is not None and not limits.network:
        ok, why = network_isolation_available()
        if not ok:
            raise ExecutorError(f"limits.network = false was asked for, but {why}")
        argv = ["unshare", "-rn", *argv]
    stdout_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=dict(env), stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=_limiter(limits))
        except OSError as exc:
            raise ExecutorError(f"cannot start {cmd!r} in {cwd}: {exc}") from exc
        pgid = proc.pid
        if cancel is not None:
            cancel._add(pgid)
        timed_out = False
        try:
            deadline = start + timeout_s
            while True:
                try:
                    proc.wait(timeout=min(0.05, max(0.0, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    if cancel is not None and cancel.cancelled:
                        break
                    if time.monotonic() >= deadline:
                        timed_out = True
                        break
            if proc.returncode is None:
                kill_group(pgid, signal.SIGTERM)
                try:
                    proc.wait(timeout=GRACE_S)
                except subprocess.TimeoutExpired:
                    kill_group(pgid, signal.SIGKILL)
                    proc.wait()
        finally:
            kill_group(pgid, signal.SIGKILL)  # leftovers of a finished command
            if cancel is not None:
                cancel._remove(pgid)
    wall = time.monotonic() - start
    cancelled = cancel is not None and cancel.cancelled
    return ProcResult(exit_code=None if (timed_out or cancelled) else proc.returncode,
                      timed_out=timed_out, cancelled=cancelled, wall_s=wall,
                      stdout=stdout_path.read_text(errors="replace"),
                      stderr=stderr_path.read_text(errors="replace"))
