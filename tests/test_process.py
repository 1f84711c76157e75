"""Subprocess runner: process groups, timeouts that kill everything, scrubbed env."""

from __future__ import annotations

import os
import time
from pathlib import Path

from assay.config import EnvSpec, LimitSpec
from assay.process import CancelToken, run, scrubbed_env


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
