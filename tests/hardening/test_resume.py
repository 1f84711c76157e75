"""Crash recovery: orphans reaped, git locks cleared, worktrees restored, results kept once,
and the deterministic dispatch order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from hardening_kit import (
    CLI,
    ListProposer,
    Repo,
    alive,
    journal_rows,
    make_repo,
    procs_under,
    running_blocks,
    set_bench,
    wait_dead,
    wait_for,
)

import assay.api as api
from assay.executors.base import Executor
from assay.model import Block, BlockKind, BlockResult, Slot


def test_orphans_of_a_killed_run_are_reaped_on_restart(repo: Repo, tmp_path: Path) -> None:
    grand = tmp_path / "grand.txt"
    set_bench(repo, f"setsid sleep 60 & echo $! >> {grand}; sleep 60 & echo $! >> {grand}; "
                    f"sleep 60; {sys.executable} bench.py")
    proc = subprocess.Popen([*CLI, "run", "-C", str(repo.root), "--budget", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: grand.exists() and len(grand.read_text().split()) >= 2, 60)
        time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGKILL)  # kill -9 the orchestrator mid-run
        proc.wait()
    left = procs_under(repo.root)
    pids = [int(p) for p in grand.read_text().split()]
    assert any(alive(p) for p in pids), "the setup should leave orphans behind"
    with api.session(api.load(repo.root), proposer=ListProposer([])):
        pass  # taking the lock reaps what the dead run left
    assert wait_dead(pids + left) == []
    assert procs_under(repo.root) == []
    msgs = [m for (m,) in journal_rows(repo, "SELECT message FROM events")]
    assert any("took over a stale lock" in m for m in msgs)
    assert any("left running by a dead run" in m for m in msgs)


def test_stale_git_locks_and_dirty_worktrees_are_recovered(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, counted=True)
    items = [{"params": {"SIZE": 1000}}, {"params": {"SIZE": 400000}},
             {"params": {"SIZE": 500}}, {"params": {"SIZE": 300}}]
    api.run(repo.root, budget=2, proposer_obj=ListProposer(items))
    trees = repo.root / ".assay" / "worktrees"
    # What a kill -9 of the whole process group could leave behind:
    for name in ("s0-a", "s0-b", "s1-a", "s1-b"):
        gitdir = Path((trees / name / ".git").read_text().split(":", 1)[1].strip())
        (gitdir / "index.lock").write_text("")
        (trees / name / "bench.py").write_text("print('METRIC speed=1e12')\n")  # dirty
        (trees / name / "data" / "stray.txt").write_text("left over")
    common = repo.root / ".git" / "refs" / "heads" / "assay"
    (common / "main.lock").write_text("")
    s = api.run(repo.root, budget=2, proposer_obj=ListProposer(items))  # a second session
    assert s.finished == 4
    states = {e["params"]["SIZE"]: e for e in api.log(repo.root)}
    # Measured normally on the recovered slots: neither failed, and the better one was kept
    # (which one depends on which finished first: the other is then measured against it).
    assert {states[500]["state"], states[300]["state"]} <= {"kept", "discarded"}, states
    assert "kept" in {states[500]["state"], states[300]["state"]}, states
    msgs = [m for (m,) in journal_rows(repo, "SELECT message FROM events")]
    assert any("git lock file(s)" in m for m in msgs)
    # The worktrees were restored: no stray file, and the real benchmark ran.
    assert not (trees / "s0-b" / "data" / "stray.txt").exists()


def test_a_result_told_twice_is_counted_once(repo: Repo) -> None:
    with api.session(api.load(repo.root),
                     proposer=ListProposer([{"params": {"SIZE": 1000}}])) as loop:
        loop.start()
        [exp] = loop.ask(1)
        loop.dispatch()
        results: list[BlockResult] = []
        while not results:
            results = loop.executor.wait(timeout=0.5)
        first = loop.tell(results[0])
        runs = len(loop.journal.runs(exp.id))
        assert first is not None
        assert loop.tell(results[0]) is None  # already recorded: nothing happens
        assert len(loop.journal.runs(exp.id)) == runs
        assert not loop.journal.lease_block(results[0].block_id, "", "x", 60)
        loop.end()


class RecordingExecutor(Executor):
    """One slot; records the blocks it is given and never finishes them."""

    name = "recording"

    def __init__(self) -> None:
        self.submitted: list[str] = []
        self._busy: str | None = None

    @property
    def slots(self) -> Sequence[Slot]:
        return [Slot("s0")]

    def free_slot_names(self) -> list[str]:
        return [] if self._busy else ["s0"]

    def submit(self, block: Block) -> str:
        assert block.block_id not in self.submitted, f"{block.block_id} dispatched twice"
        self.submitted.append(block.block_id)
        self._busy = block.block_id
        return "s0"

    def finish(self) -> None:
        self._busy = None

    def wait(self, timeout: float | None = None) -> list[BlockResult]:
        return []

    def running(self) -> set[str]:
        return {self._busy} if self._busy else set()

    def cancel(self, block_id: str) -> None:
        self._busy = None


def test_dispatch_order_is_deterministic_and_never_repeats(repo: Repo) -> None:
    exe = RecordingExecutor()
    items = [{"params": {"SIZE": v}} for v in (1000, 2000, 3000)]
    with api.session(api.load(repo.root), proposer=ListProposer(items), executor=exe) as loop:
        inc = loop.start()
        e1, e2, e3 = loop.ask(3)  # three first blocks, FIFO
        time.sleep(0.01)
        rerun = loop.journal.add_block(e3.id, BlockKind.RERUN, "AB", inc)
        time.sleep(0.01)
        confirm = loop.journal.add_block(e2.id, BlockKind.CONFIRM, "AB", inc)
        time.sleep(0.01)
        aa = loop.journal.add_block("cal", BlockKind.AA, "AB", inc, prefer_slot="s0")
        order = []
        for _ in range(7):
            loop.dispatch()
            loop.dispatch()  # a second call with the slot busy starts nothing
            exe.finish()
        order = exe.submitted
        assert order == [aa, rerun, confirm, f"{e1.id}-b1", f"{e2.id}-b1", f"{e3.id}-b1"], order
        assert len(set(order)) == len(order)
        rows = journal_rows(repo, "SELECT id, attempts FROM blocks")
        assert all(a == 1 for _, a in rows), rows  # each leased exactly once


def test_stale_running_blocks_are_requeued_with_their_partial_runs_dropped(repo: Repo) -> None:
    proc = subprocess.Popen([*CLI, "run", "-C", str(repo.root), "--budget", "4"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: running_blocks(repo) > 0, 60)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    running = {b for (b,) in journal_rows(repo, "SELECT id FROM blocks WHERE state='running'")}
    r = subprocess.run([*CLI, "run", "-C", str(repo.root), "--budget", "4"],
                       capture_output=True, text=True, timeout=180)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "re-queued" in out and all(b in out for b in running)
    rows = journal_rows(repo, "SELECT b.id, b.run_order, COUNT(r.id) FROM blocks b "
                              "JOIN runs r ON r.block_id = b.id GROUP BY b.id")
    assert all(n == len(order) for _, order, n in rows), rows
    assert journal_rows(repo, "SELECT COUNT(*) FROM experiments")[0][0] == 4
