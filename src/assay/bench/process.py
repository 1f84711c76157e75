"""Run one command as an untrusted subprocess, with honest limits.

What it does: a fresh process group (``start_new_session``), a hard wall-clock timeout
that kills the WHOLE group (SIGTERM, then SIGKILL after a grace period), a kill of any
process the command left behind when it exits, an environment built only from an
allowlist, optional memory (RLIMIT_AS) and CPU-time (RLIMIT_CPU) limits, optional no-network
runs through ``unshare -rn``, optional hidden paths (a mount namespace), and stdout/stderr
written to files. Limits are set by a small wrapper process that then execs the command
(never a ``preexec_fn``, which is unsafe in a threaded program).

Crash safety: the direct child (the wrapper) sets ``PR_SET_PDEATHSIG`` (SIGKILL when the
orchestrator thread that started it dies, Linux only), and every command started under a
target's state folder is recorded in ``.assay/procs/`` with a random token placed in its
environment. When the orchestrator is killed (``kill -9``), the next run calls :func:`reap`
while holding the
run lock: every process still carrying a recorded token is killed, so nothing a dead run
started keeps running (or keeps loading the machine) after a restart.

What it does NOT protect against, without a ``sandbox`` (:mod:`assay.sandbox`, which
covers these): a process that escapes its group with ``setsid`` and double-forks while the
orchestrator is alive (it outlives the kill until the next :func:`reap`), one that also
scrubs its environment, reads of files outside the worktree (other than the ``hide``
paths), or filesystem writes outside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import keys
from .. import sandbox as sandboxing
from ..config.spec import EnvSpec, LimitSpec
from ..config.watch import Watcher
from ..errors import ExecutorError

GRACE_S = 2.0
TOKEN_VAR = "ASSAY_PROC_TOKEN"
PROCS_DIR = "procs"


@dataclass(frozen=True)
class ProcResult:
    exit_code: int | None
    timed_out: bool
    cancelled: bool
    wall_s: float
    stdout: str
    stderr: str
    stopped: str = ""  # why a watcher stopped the run early ('' if it did not)


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


_LIVE: dict[int, str] = {}  # process groups started by run() and not yet finished


def kill_all() -> int:
    """SIGKILL every process group this process started and that still runs.

    Takes no lock, so it is safe in a signal handler (an immediate stop on a second Ctrl-C).
    """
    groups = list(_LIVE)
    for pgid in groups:
        kill_group(pgid)
    return len(groups)


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def scrubbed_env(spec: EnvSpec, extra: Mapping[str, str] | None = None,
                 base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Only the allowlisted variables of ``base`` (default: this process), then fixed values."""
    src = keys.environ() if base is None else base
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


_MOUNT_OK: bool | None = None


def mount_isolation_available() -> tuple[bool, str]:
    """Whether a private mount and PID namespace (``unshare -rm --pid``) works here."""
    global _MOUNT_OK
    exe = shutil.which("unshare")
    if exe is None or shutil.which("mount") is None:
        return False, "the `unshare` and `mount` programs are not installed (util-linux)"
    if _MOUNT_OK is None:
        try:
            r = subprocess.run([exe, "-rm", "--pid", "--fork", "--kill-child", "--mount-proc",
                                "sh", "-c", "mount -t tmpfs -o size=64k assay-hidden /mnt"
                                " 2>/dev/null || mount -t tmpfs -o size=64k assay-hidden /tmp"],
                               capture_output=True, timeout=10)
            _MOUNT_OK = r.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _MOUNT_OK = False
    if not _MOUNT_OK:
        return False, "this machine does not allow unprivileged mount namespaces"
    return True, "unshare -rm --pid"


# The wrapper between the orchestrator and the command: it asks to die with its parent
# (PR_SET_PDEATHSIG, Linux), sets the resource limits, then execs the command. Doing this in
# a process of its own, not in a ``preexec_fn``, is safe when the orchestrator runs threads.
_WRAPPER = """\
import os, resource, signal, sys
parent, memory, cpu = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
if sys.platform.startswith("linux"):
    import ctypes
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(137)
if memory > 0:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
if cpu > 0:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
os.execvp(sys.argv[4], sys.argv[4:])
"""

# Run inside the new mount namespace: cover each hidden path (an empty tmpfs on a folder,
# /dev/null on a file), then exec the command.
_HIDE = ('c=$1; shift; for p do if [ -d "$p" ]; then mount -t tmpfs -o size=64k,mode=0700 '
         'assay-hidden "$p"; else mount --bind /dev/null "$p"; fi || { echo "assay: cannot '
         'hide $p from the command" >&2; exit 126; }; done; exec bash -c "$c"')


_LINUX_TOOLS = sys.platform.startswith("linux") and bool(shutil.which("setpriv")) \
    and bool(shutil.which("prlimit"))


def wrap(argv: list[str], limits: LimitSpec | None) -> list[str]:
    """``argv`` behind a wrapper that sets the parent-death signal and the limits.

    On Linux, util-linux's ``setpriv --pdeathsig`` and ``prlimit`` (small C programs, each
    execs the next); elsewhere, or without them, the Python wrapper :data:`_WRAPPER`.
    """
    memory = limits.memory_mb * 1024 * 1024 if limits is not None and limits.memory_mb else 0
    cpu = limits.cpu_s if limits is not None and limits.cpu_s else 0
    if _LINUX_TOOLS:
        out = ["setpriv", "--pdeathsig", "KILL", "--"]
        if memory or cpu:
            out += ["prlimit", *([f"--as={memory}:{memory}"] if memory else []),
                    *([f"--cpu={cpu}:{cpu + 5}"] if cpu else []), "--"]
        return [*out, *argv]
    return [sys.executable, "-I", "-S", "-c", _WRAPPER, str(os.getpid()), str(memory),
            str(cpu), *argv]


def command_argv(cmd: str, limits: LimitSpec | None, hide: Sequence[Path] = (),
                 sandbox: sandboxing.Spec | None = None) -> list[str]:
    """The argv that runs ``cmd``: the sandbox or namespaces (no network, hidden paths),
    then the limits."""
    if sandbox is not None:
        found = sandboxing.probe()
        if not found.ok:
            raise ExecutorError(f"a sandboxed run was asked for, but {found.why}")
        return wrap(sandboxing.argv(sandbox, cmd, found.tool), limits)
    no_network = limits is not None and limits.network is False
    if no_network:
        ok, why = network_isolation_available()
        if not ok:
            raise ExecutorError(f"limits.network = false was asked for, but {why}")
    if hide:
        ok, why = mount_isolation_available()
        if not ok:
            raise ExecutorError(f"paths were to be hidden from the command, but {why}")
        flags = "-rm" + ("n" if no_network else "")
        argv = ["unshare", flags, "--pid", "--fork", "--kill-child", "--mount-proc",
                "sh", "-c", _HIDE, "assay-hide", cmd, *(str(p) for p in hide)]
    elif no_network:
        argv = ["unshare", "-rn", "bash", "-c", cmd]
    else:
        argv = ["bash", "-c", cmd]
    return wrap(argv, limits)


def registry_for(cwd: Path) -> Path | None:
    """``<root>/.assay/procs`` when ``cwd`` is a target root (with state) or inside ``.assay``."""
    try:
        cwd = Path(cwd).resolve()
    except OSError:
        return None
    for p in (cwd, *cwd.parents):
        if p.name == ".assay":
            return p / PROCS_DIR
    if (cwd / ".assay").is_dir():
        return cwd / ".assay" / PROCS_DIR
    return None


def _register(registry: Path | None, token: str, cmd: str) -> Path | None:
    """Record a command about to start (before it starts: a crash cannot hide it)."""
    if registry is None:
        return None
    try:
        registry.mkdir(parents=True, exist_ok=True)
        entry = registry / f"{token}.json"
        tmp = registry / f"{token}.tmp"
        tmp.write_text(json.dumps({"token": token, "owner": os.getpid(), "cmd": cmd[:300],
                                   "started": time.time()}))
        os.replace(tmp, entry)
        return entry
    except OSError:
        return None  # bookkeeping must never stop a run


def _tokens_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return ""
    for item in raw.split(b"\0"):
        if item.startswith(TOKEN_VAR.encode() + b"="):
            return item.split(b"=", 1)[1].decode(errors="replace")
    return ""


def reap(registry: Path) -> list[int]:
    """Kill every process a dead orchestrator started (found by its token); return their pids.

    Call only while holding the target's run lock: then no live run owns these entries.
    """
    if not registry.is_dir():
        return []
    tokens: dict[str, Path] = {}
    for entry in registry.glob("*.json"):
        try:
            raw = json.loads(entry.read_text())
            tokens[str(raw["token"])] = entry
        except (OSError, ValueError, KeyError, TypeError):
            entry.unlink(missing_ok=True)
    for tmp in registry.glob("*.tmp"):
        tmp.unlink(missing_ok=True)
    if not tokens:
        return []
    killed: list[int] = []
    me = os.getpid()
    proc = Path("/proc")
    if proc.is_dir():
        for _ in range(3):  # a dying parent may still fork: sweep until nothing is left
            found = False
            for d in proc.iterdir():
                if not d.name.isdigit() or int(d.name) == me:
                    continue
                pid = int(d.name)
                if _tokens_of(pid) in tokens:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                        found = True
            if not found:
                break
            time.sleep(0.05)
    for entry in tokens.values():
        entry.unlink(missing_ok=True)
    return sorted(set(killed))


def run(cmd: str, *, cwd: Path, env: Mapping[str, str], timeout_s: float,
        stdout_path: Path, stderr_path: Path, limits: LimitSpec | None = None,
        cancel: CancelToken | None = None, registry: Path | None = None,
        hide: Sequence[Path] = (), watch: Watcher | None = None,
        sandbox: sandboxing.Spec | None = None) -> ProcResult:
    """Run ``cmd`` with bash in its own process group; never leaves a process behind.

    ``hide`` names paths the command must not see: it then runs in its own mount and PID
    namespace where each is covered (an empty folder, an empty file), and sees only its own
    processes in ``/proc``; :func:`mount_isolation_available` says whether the machine
    allows it (else this raises ExecutorError). ``registry`` (default: the ``.assay/procs``
    folder of the target holding ``cwd``) records the process so that a later run can
    :func:`reap` it after a crash. ``watch`` reads the output as it arrives and stops the
    run at its first breach (``ProcResult.stopped`` says why). ``sandbox`` runs it inside
    that sandbox (see :mod:`assay.sandbox`; ``hide`` is then not used), with ``TMPDIR``
    set to its private ``/tmp``.
    """
    argv = command_argv(cmd, limits, hide, sandbox)
    if sandbox is not None:
        env = {**env, "TMPDIR": "/tmp"}
    stdout_path.parent.mkdir(parents=True, exist_ok=True)
    if registry is None:
        registry = registry_for(cwd)
    token = secrets.token_hex(8)
    child_env = {**env, TOKEN_VAR: token}
    entry = _register(registry, token, cmd)
    start = time.monotonic()
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=child_env, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            if entry is not None:
                entry.unlink(missing_ok=True)
            raise ExecutorError(f"cannot start {cmd!r} in {cwd}: {exc}") from exc
        pgid = proc.pid
        _LIVE[pgid] = cmd
        if cancel is not None:
            cancel._add(pgid)
        follow = _Follower(stdout_path, watch) if watch is not None else None
        try:
            timed_out, stopped = _wait(proc, start + timeout_s, cancel, follow)
        finally:
            kill_group(pgid, signal.SIGKILL)  # leftovers of a finished command
            _LIVE.pop(pgid, None)
            if cancel is not None:
                cancel._remove(pgid)
            if entry is not None:
                entry.unlink(missing_ok=True)
    wall = time.monotonic() - start
    cancelled = cancel is not None and cancel.cancelled
    if follow is not None:
        if not stopped:
            follow.drain(time.monotonic())  # the lines printed after the last poll
        follow.close()
    return ProcResult(exit_code=None if (timed_out or cancelled or stopped) else proc.returncode,
                      timed_out=timed_out, cancelled=cancelled, wall_s=wall,
                      stdout=stdout_path.read_text(errors="replace"),
                      stderr=stderr_path.read_text(errors="replace"), stopped=stopped)


def _wait(proc: subprocess.Popen[bytes], deadline: float, cancel: CancelToken | None,
          follow: _Follower | None) -> tuple[bool, str]:
    """Wait until ``proc`` ends, is cancelled, passes ``deadline`` or breaches its watch; a
    process still running then is terminated, and killed after a grace period. Returns
    whether it timed out and why its watch stopped it ('' when it did not)."""
    timed_out = False
    stopped = ""
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
            if follow is not None:
                stopped = follow.poll(time.monotonic())
                if stopped:
                    break
    if proc.returncode is None:
        kill_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
    return timed_out, stopped


class _Follower:
    """Reads a growing output file line by line and hands complete lines to a watcher."""

    def __init__(self, path: Path, watch: Watcher) -> None:
        self.fh = open(path, "rb")  # noqa: SIM115 - closed by close()
        self.watch = watch
        self.rest = b""

    def poll(self, now: float) -> str:
        chunk = self.fh.read()
        if chunk:
            *lines, self.rest = (self.rest + chunk).split(b"\n")
            for raw in lines:
                for part in raw.split(b"\r"):  # progress bars rewrite one line
                    why = self.watch.feed(part.decode(errors="replace"), now)
                    if why:
                        return why
        return self.watch.tick(now)

    def drain(self, now: float) -> None:
        """Feed what is left (the run has ended: a breach here stops nothing)."""
        self.poll(now)
        if self.rest:
            self.watch.feed(self.rest.decode(errors="replace"), now)
            self.rest = b""

    def close(self) -> None:
        self.fh.close()
