"""Graceful stop on SIGINT / SIGTERM, and an immediate stop on a second signal (real CLI)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hardening_kit import (
    CLI,
    Repo,
    cmdline,
    journal_rows,
    procs_under,
    running_blocks,
    set_bench,
    wait_dead,
    wait_for,
)

SLOW = f"sleep 0.4 && {sys.executable} bench.py"


def start_run(repo: Repo, budget: int = 30) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, "run", "-C", str(repo.root), "--budget", str(budget)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "200"})


def check_consistent(repo: Repo) -> None:
    assert journal_rows(repo, "PRAGMA integrity_check")[0][0] == "ok"
    assert running_blocks(repo) == 0 or True  # a hard stop may leave leases: resume clears
    rows = journal_rows(repo, "SELECT b.id, COUNT(r.id), b.state FROM blocks b LEFT JOIN runs r"
                              " ON r.block_id = b.id GROUP BY b.id")
    for bid, n, state in rows:
        assert state == "done" or n == 0, f"{bid} is {state} with {n} partial runs"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_one_signal_stops_gracefully(repo: Repo, sig: signal.Signals) -> None:
    set_bench(repo, SLOW)
    proc = start_run(repo)
    try:
        assert wait_for(lambda: running_blocks(repo) > 0, 60), "no block started"
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig.value, out  # 130 after Ctrl-C, 143 after SIGTERM
    assert f"stopped by {sig.name}" in out and "Traceback" not in out
    assert "they will run again on resume" in out
    check_consistent(repo)
    assert running_blocks(repo) == 0  # cancelled blocks were put back in the queue
    assert not (repo.root / ".assay" / "run.lock").exists()
    assert wait_dead(procs_under(repo.root)) == []
    assert wait_dead(repo.bench_pids()) == []
    # Resume: the re-queued blocks run and every experiment is accounted for once.
    before = journal_rows(repo, "SELECT COUNT(*) FROM experiments")[0][0]
    r = subprocess.run([*CLI, "run", "-C", str(repo.root), "--budget", str(before)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    states = journal_rows(repo, "SELECT state, COUNT(*) FROM experiments GROUP BY state")
    assert sum(n for _, n in states) == before
    assert all(s in ("kept", "discarded", "invalid", "crashed") for s, _ in states), states
    assert running_blocks(repo) == 0


def test_second_signal_stops_at_once(repo: Repo, tmp_path: Path) -> None:
    # A slow on_finish hook keeps the graceful stop busy long enough to signal it again.
    repo.write_config(extra="[hooks]\non_finish = 'sleep 30'\non_finish_timeout = 60\n")
    set_bench(repo, f"sleep 5 && {sys.executable} bench.py")
    proc = start_run(repo)
    assert proc.stdout is not None
    try:
        assert wait_for(lambda: running_blocks(repo) > 0 and procs_under(repo.root), 60)
        proc.send_signal(signal.SIGINT)
        seen = ""
        while "they will run again on resume" not in seen:
            line = proc.stdout.readline()
            assert line, seen
            seen += line
        assert wait_for(lambda: any("sleep" in cmdline(p) for p in procs_under(repo.root)),
                        20), "the hook did not start"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, seen + out
    assert "Traceback" not in seen + out
    assert wait_dead(procs_under(repo.root)) == []  # benchmarks and the hook were killed
    check_consistent(repo)
    # The next run takes over the lock, re-runs the pending hook, and carries on.
    repo.write_config(extra="")
    set_bench(repo, SLOW)
    r = subprocess.run([*CLI, "run", "-C", str(repo.root), "--budget", "2"],
                       capture_output=True, text=True, timeout=180)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "took over a stale lock" in out
    assert running_blocks(repo) == 0
    check_consistent(repo)
