"""One run per target: the run lock, with real processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hardening_kit import Repo

from assay.errors import LockError
from assay.journal import lock as lock_mod
from assay.journal.lock import RunLock

CLI = [sys.executable, "-c", "from assay.cli.app import main; main()"]

HOLDER = """
import sys, time
from pathlib import Path
from assay.journal.lock import RunLock
RunLock(Path(sys.argv[1]), heartbeat_s=0.2).acquire()
print("held", flush=True)
time.sleep(60)
"""


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})


def hold(path: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "held"
    return p


def test_second_run_refuses_and_names_the_holder(repo: Repo) -> None:
    path = repo.root / ".assay" / "run.lock"
    holder = hold(path)
    try:
        r = cli("run", "-C", str(repo.root), "--budget", "1")
        out = r.stdout + r.stderr
        assert r.returncode == 2, out
        assert "another assay run holds" in out
        assert f"pid {holder.pid}" in out and socket.gethostname() in out
        assert "Traceback" not in out
        assert not (repo.root / ".assay" / "journal.sqlite").exists() or \
            "e0001" not in out  # it did nothing
    finally:
        holder.kill()
        holder.wait()


def test_dead_holder_is_taken_over_and_the_run_says_so(repo: Repo) -> None:
    path = repo.root / ".assay" / "run.lock"
    holder = hold(path)
    holder.send_signal(signal.SIGKILL)  # dies holding the lock
    holder.wait()
    assert json.loads(path.read_text())["pid"] == holder.pid
    r = cli("run", "-C", str(repo.root), "--budget", "1")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert f"took over a stale lock from pid {holder.pid}" in out
    assert "is dead" in out
    assert not path.exists()  # released at the end


def test_old_heartbeat_is_stale_even_when_the_pid_lives(tmp_path: Path) -> None:
    path = tmp_path / "run.lock"
    path.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(),
                                "heartbeat": time.time() - 3600, "started": time.time() - 4000}))
    lk = RunLock(path).acquire()
    try:
        assert "heartbeat is 3600s old" in lk.took_over
        assert json.loads(path.read_text())["pid"] == os.getpid()
    finally:
        lk.release()


def test_live_lock_on_another_host_refuses(tmp_path: Path) -> None:
    path = tmp_path / "run.lock"
    path.write_text(json.dumps({"pid": 1, "host": "elsewhere.example", "heartbeat": time.time(),
                                "started": time.time()}))
    with pytest.raises(LockError, match=r"pid 1 on elsewhere\.example"):
        RunLock(path).acquire()
    assert json.loads(path.read_text())["host"] == "elsewhere.example"  # untouched


def test_garbage_lock_file_is_stale(tmp_path: Path) -> None:
    path = tmp_path / "run.lock"
    path.write_text("{not json")
    with RunLock(path) as lk:
        assert "unreadable" in lk.took_over


RACER = """
import sys, time
from pathlib import Path
from assay.errors import LockError
from assay.journal.lock import RunLock
start = float(sys.argv[2])
while time.time() < start:
    pass
try:
    RunLock(Path(sys.argv[1])).acquire()
    print("won", flush=True)
except LockError:
    print("lost", flush=True)
sys.stdin.read()  # the winner holds the lock until every racer has answered
"""


@pytest.mark.parametrize("stale_first", [False, True])
def test_racing_takers_exactly_one_wins(tmp_path: Path, stale_first: bool) -> None:
    path = tmp_path / "run.lock"
    if stale_first:  # everyone sees the same stale lock and tries to take it over
        path.write_text(json.dumps({"pid": 999_999_999, "host": socket.gethostname(),
                                    "heartbeat": time.time(), "started": time.time()}))
    start = time.time() + 1.5
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(path), str(start)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(6)]
    outs = [p.stdout.readline().strip() for p in procs if p.stdout is not None]
    for p in procs:
        p.communicate(timeout=60)
    assert sorted(outs) == ["lost"] * 5 + ["won"], outs


def _wait(pred: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def test_heartbeat_moves_and_stops_after_a_takeover(tmp_path: Path) -> None:
    path = tmp_path / "run.lock"
    lk = RunLock(path, heartbeat_s=0.05).acquire()
    first = json.loads(path.read_text())["heartbeat"]
    assert _wait(lambda: json.loads(path.read_text())["heartbeat"] > first)
    # Another host takes it over (our heartbeat looked stale to it), under the guard flock
    # as a real taker does: from then on we stop touching it.
    other = {"pid": 4242, "host": "other", "heartbeat": time.time(), "started": time.time()}
    with lk._guard():
        path.write_text(json.dumps(other))
    assert _wait(lambda: not lk.held)  # the heartbeat thread saw it and stopped
    lk.release()
    assert json.loads(path.read_text()) == other


def test_is_stale_reasons() -> None:
    now = time.time()
    assert lock_mod.is_stale(None)[0]
    dead = lock_mod.LockInfo(999_999_999, socket.gethostname(), now, now)
    assert lock_mod.is_stale(dead) == (True, f"process 999999999 on {socket.gethostname()} "
                                             "is dead")
    live = lock_mod.LockInfo(os.getpid(), socket.gethostname(), now, now)
    assert lock_mod.is_stale(live) == (False, "")


def test_second_assay_run_refuses_while_a_real_run_is_alive(repo: Repo) -> None:
    from hardening_kit import running_blocks, set_bench, wait_for

    set_bench(repo, f"sleep 0.5 && {sys.executable} bench.py")
    first = subprocess.Popen([*CLI, "run", "-C", str(repo.root), "--budget", "30"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: running_blocks(repo) > 0, 60)
        r = cli("run", "-C", str(repo.root), "--budget", "1")
        out = r.stdout + r.stderr
        assert r.returncode == 2, out
        assert f"pid {first.pid} on {socket.gethostname()}" in out and "Traceback" not in out
        assert first.poll() is None  # the first run is untouched
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)
    assert first.returncode == 128 + signal.SIGTERM  # a clean stop by SIGTERM exits 143
