"""Subprocess runner: process groups, timeouts that kill everything, scrubbed env."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from assay.bench.process import CancelToken, mount_isolation_available, run, scrubbed_env
from assay.config.spec import EnvSpec, LimitSpec


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _reaped(pid: int, timeout: float = 30.0) -> bool:
    """Poll until ``pid`` is gone or a zombie (a killed process is reaped asynchronously)."""
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    cmd = f"(sleep 60 & echo $! >> {pids}; wait) & echo $! >> {pids}; sleep 60"
    start = time.monotonic()
    r = run(cmd, cwd=tmp_path, env={"PATH": os.environ["PATH"]}, timeout_s=0.5,
            stdout_path=tmp_path / "o", stderr_path=tmp_path / "e")
    assert r.timed_out and r.exit_code is None
    assert time.monotonic() - start < 30  # not the command's 60 s
    for pid in map(int, pids.read_text().split()):
        assert _reaped(pid), f"orphan process {pid} survived the timeout"


def test_leftover_background_children_are_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    r = run(f"sleep 60 & echo $! > {pids}; echo done", cwd=tmp_path,
            env={"PATH": os.environ["PATH"]}, timeout_s=10, stdout_path=tmp_path / "o",
            stderr_path=tmp_path / "e")
    assert r.exit_code == 0 and r.stdout.strip() == "done"
    assert _reaped(int(pids.read_text()))


def test_cancel_kills_a_running_command(tmp_path: Path) -> None:
    import threading

    token = CancelToken()
    threading.Timer(0.3, token.cancel).start()
    r = run("sleep 30", cwd=tmp_path, env={"PATH": os.environ["PATH"]}, timeout_s=60,
            stdout_path=tmp_path / "o", stderr_path=tmp_path / "e", cancel=token)
    assert r.cancelled and r.exit_code is None
    assert r.wall_s < 25  # killed at the cancel, not after the command's 30 s


def test_environment_is_scrubbed() -> None:
    base = {"PATH": "/bin", "OPENAI_API_KEY": "sk-secret", "HOME": "/root", "MY_TOKEN": "t"}
    env = scrubbed_env(EnvSpec(allow=("PATH", "HOME"), set={"FOO": "1"}), {"X": "2"}, base=base)
    assert env == {"PATH": "/bin", "HOME": "/root", "FOO": "1", "X": "2"}


def test_memory_limit_applies(tmp_path: Path) -> None:
    import sys

    r = run(f"{sys.executable} -c \"x = bytearray(2_000_000_000)\"", cwd=tmp_path,
            env={"PATH": os.environ["PATH"]}, timeout_s=30, stdout_path=tmp_path / "o",
            stderr_path=tmp_path / "e", limits=LimitSpec(memory_mb=300))
    assert r.exit_code != 0 and "MemoryError" in r.stderr


def test_cpu_limit_applies(tmp_path: Path) -> None:
    import sys

    r = run(f"{sys.executable} -c \"while True: pass\"", cwd=tmp_path,
            env={"PATH": os.environ["PATH"]}, timeout_s=120, stdout_path=tmp_path / "o",
            stderr_path=tmp_path / "e", limits=LimitSpec(cpu_s=1))
    assert not r.timed_out  # ended by RLIMIT_CPU (SIGXCPU), long before the wall clock
    assert r.exit_code is not None and r.exit_code != 0


def test_no_subprocess_call_in_the_package_uses_preexec_fn() -> None:
    # preexec_fn runs Python between fork and exec: unsafe when other threads hold locks.
    import ast

    import assay

    src = Path(assay.__file__).parent
    found = [f"{path.relative_to(src)}:{node.lineno}"
             for path in sorted(src.rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if isinstance(node, ast.keyword) and node.arg == "preexec_fn"]
    assert not found, f"preexec_fn used at {found}; set limits in a wrapper (process.wrap)"


@pytest.mark.parametrize("wrapper", ["setpriv+prlimit", "python"])
def test_limits_are_set_by_a_wrapper_and_hold_in_threads(tmp_path: Path, wrapper: str,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    # No preexec_fn: every command of a threaded caller gets its own limits, set by the
    # wrapper process (the command reads them back from /proc/self/limits).
    from concurrent.futures import ThreadPoolExecutor

    from assay.bench import process

    if wrapper == "python":
        monkeypatch.setattr(process, "_LINUX_TOOLS", False)
    elif not process._LINUX_TOOLS:
        pytest.skip("setpriv and prlimit (util-linux) are not installed here")

    def one(i: int) -> str:
        r = run("grep -E 'Max (address space|cpu time)' /proc/self/limits", cwd=tmp_path,
                env={"PATH": os.environ["PATH"]}, timeout_s=120,
                stdout_path=tmp_path / f"o{i}", stderr_path=tmp_path / f"e{i}",
                limits=LimitSpec(memory_mb=200 + i, cpu_s=30 + i))
        assert r.exit_code == 0, r.stderr
        return r.stdout

    with ThreadPoolExecutor(max_workers=6) as pool:
        outs = list(pool.map(one, range(6)))
    for i, out in enumerate(outs):
        cpu = next(ln for ln in out.splitlines() if "cpu time" in ln).split()
        mem = next(ln for ln in out.splitlines() if "address space" in ln).split()
        assert cpu[3] == str(30 + i) and cpu[4] == str(35 + i), out
        assert mem[3] == str((200 + i) * 1024 * 1024), out


def test_hidden_paths_are_covered_and_other_processes_invisible(tmp_path: Path) -> None:
    ok, why = mount_isolation_available()
    if not ok:
        pytest.skip(why)
    secret = tmp_path / "state"
    secret.mkdir()
    (secret / "journal.sqlite").write_text("holdout 0.123")
    single = tmp_path / "holdout.py"
    single.write_text("print('holdout')")
    work = tmp_path / "work"
    work.mkdir()
    r = run(f"cat {secret}/journal.sqlite; cat {single}; ls {secret}; echo procs "
            f"$(ls /proc | grep -c '^[0-9]'); cat /proc/{os.getpid()}/cmdline; echo end",
            cwd=work, env={"PATH": os.environ["PATH"]}, timeout_s=60,
            stdout_path=tmp_path / "o", stderr_path=tmp_path / "e", hide=[secret, single])
    assert "holdout" not in r.stdout and "0.123" not in r.stdout, r.stdout
    procs = int(r.stdout.split("procs ")[1].split()[0])
    assert procs < 10, r.stdout  # its own few processes, not this machine's
    assert r.stdout.rstrip().endswith("end")
    assert (secret / "journal.sqlite").read_text() == "holdout 0.123"  # untouched outside
