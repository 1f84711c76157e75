"""The executor conformance kit: the contract of :mod:`assay.executors.base`, as tests.

Subclass a contract in your test suite, name the subclass ``Test...`` and say how to build
the executor; pytest collects the inherited tests::

    from assay.testing.executors import BenchmarkExecutorContract, KitRepo

    class TestMyExecutor(BenchmarkExecutorContract):
        def make_executor(self, repo: KitRepo, request: pytest.FixtureRequest) -> Executor:
            return MyExecutor(repo.target, repo.ws)

- :class:`ExecutorContract` holds for every executor, a function-backed twin included:
  a result comes back once, submit is idempotent, a slot holds one block, prefer/avoid
  are honoured, a cancelled block's result never comes back.
- :class:`BenchmarkExecutorContract` adds what executors running real benchmark processes
  owe: logs on this machine, a failing benchmark is a result (not a retry), runs on one
  slot never overlap, cancel kills the processes.

Both build a small real target (:func:`make_kit_repo`: a git repository whose benchmark
prints ``METRIC score=<100 - 10 * LEVEL>`` and leaves marks of when it ran where). Needs
pytest.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..config import spec as config
from ..executors.base import Executor
from ..model import Block, BlockKind, BlockResult, Candidate, Incumbent, RunStatus
from ..repo.git import git
from ..repo.workspace import Workspace

BENCH = r'''
import os, sys, time, pathlib
marks = pathlib.Path(os.environ["MARK_DIR"])
slot = os.environ.get("ASSAY_SLOT", "?")
mode = pathlib.Path("mode.txt").read_text().strip()
t0 = time.time()
(marks / f"start-{slot}-{os.getpid()}").write_text(f"{t0}")
if mode == "fail":
    print("boom", file=sys.stderr)
    sys.exit(3)
if mode == "sleep":
    (marks / "sleep.pid").write_text(str(os.getpid()))
    time.sleep(120)
work = float(os.environ.get("WORK_S", "0.2"))
end = time.process_time() + work
x = 0
while time.process_time() < end:
    for i in range(1000):
        x += i * i
level = int(os.environ.get("LEVEL", "0"))
t1 = time.time()
with open(marks / f"slot-{slot}.log", "a") as fh:
    fh.write(f"{t0} {t1} {os.getpid()}\n")
print(f"METRIC score={100 - 10 * level + (os.getpid() % 7) * 0.01}")
'''


def config_text(mark_dir: Path, work_s: float = 0.2, slots: int = 2, executor: str = "local",
                extra: str = "") -> str:
    """The kit target's assay.toml."""
    return f'''
[metric]
name = "score"
direction = "maximize"

[commands]
bench = "{sys.executable} bench.py"
bench_timeout = 300

[scope]
editable = ["mode.txt"]
protected = ["bench.py"]

[[params]]
name = "LEVEL"
type = "int"
low = 0
high = 9
default = 0

[run]
slots = {slots}
executor = "{executor}"

[decision]
rule = "fixed"
pairs_per_block = 1
max_pairs = 2
aa_blocks = 0
delta = 0.01

[env]
set = {{ MARK_DIR = "{mark_dir}", WORK_S = "{work_s}" }}
{extra}
'''


IDENT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
         "GIT_COMMITTER_EMAIL": "t@t"}


@dataclass
class KitRepo:
    """The kit's target: a git repository with the marking benchmark."""

    root: Path
    marks: Path
    target: config.Target
    ws: Workspace
    head: str

    def block(self, bid: str, mode: str | None = None, order: str = "AB",
              prefer: str | None = None, avoid: str | None = None,
              level: int = 0) -> Block:
        """A block whose candidate sets ``mode.txt`` to ``mode`` (fail, sleep) and LEVEL."""
        inc = Incumbent(self.head, {"LEVEL": 0})
        patch = ""
        if mode is not None:
            patch = (f"--- a/mode.txt\n+++ b/mode.txt\n@@ -1 +1 @@\n-ok\n+{mode}\n")
        cand = Candidate(self.head, patch, {"LEVEL": level} if level else {})
        return Block(bid, f"e-{bid}", BlockKind.COMPARE, order, inc, cand, prefer, avoid)

    def intervals(self) -> dict[str, list[tuple[float, float]]]:
        """Per slot, the (start, end) of every benchmark run, in order."""
        out: dict[str, list[tuple[float, float]]] = {}
        for f in self.marks.glob("slot-*.log"):
            rows = [line.split() for line in f.read_text().splitlines() if line.strip()]
            out[f.name[5:-4]] = sorted((float(a), float(b)) for a, b, _ in rows)
        return out


def make_kit_repo(base: Path, executor: str = "local", slots: int = 2, work_s: float = 0.05,
                  extra: str = "") -> KitRepo:
    root = base / "repo"
    marks = base / "marks"
    root.mkdir(parents=True)
    marks.mkdir()
    git(["init", "-q", "-b", "main"], root, env=IDENT)
    (root / "bench.py").write_text(BENCH)
    (root / "mode.txt").write_text("ok\n")
    (root / "assay.toml").write_text(config_text(marks, work_s, slots, executor, extra))
    git(["add", "-A"], root, env=IDENT)
    git(["commit", "-qm", "init"], root, env=IDENT)
    target = config.load(root)
    ws = Workspace(target, "main")
    return KitRepo(root, marks, target, ws, ws.head())


def drain(ex: Executor, n: int, timeout: float = 60.0) -> list[BlockResult]:
    """Results until ``n`` came back or ``timeout`` passed."""
    out: list[BlockResult] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out += ex.wait(0.2)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class ExecutorContract:
    """What every executor owes the loop (two slots; see :meth:`make_executor`)."""

    executor_kind = "local"  # the [run] executor the kit repository is configured with
    executor_config = ""  # more assay.toml for it (e.g. an [executor.skypilot] section)

    def make_executor(self, repo: KitRepo, request: pytest.FixtureRequest) -> Executor:
        raise NotImplementedError

    @pytest.fixture
    def kit(self, request: pytest.FixtureRequest,
            tmp_path: Path) -> Iterator[tuple[KitRepo, Executor]]:
        repo = make_kit_repo(tmp_path, executor=self.executor_kind, extra=self.executor_config)
        ex = self.make_executor(repo, request)
        try:
            yield repo, ex
        finally:
            ex.close()

    def test_submit_then_wait_returns_the_result(self, kit: tuple[KitRepo, Executor]) -> None:
        repo, ex = kit
        slot = ex.submit(repo.block("b1", level=1))
        assert slot in {s.name for s in ex.slots}
        assert ex.running() == {"b1"}
        [res] = drain(ex, 1)
        assert (res.block_id, res.slot, res.error) == ("b1", slot, "")
        assert [r.role.value for r in res.runs] == ["A", "B"]
        assert all(r.status is RunStatus.OK for r in res.runs)
        a, b = (r.metrics["score"] for r in res.runs)
        assert 99 < a < 101 and 89 < b < 91
        assert ex.running() == set()

    def test_submit_is_idempotent(self, kit: tuple[KitRepo, Executor]) -> None:
        repo, ex = kit
        block = repo.block("b1")
        slot = ex.submit(block)
        assert ex.submit(block) == slot
        assert len(drain(ex, 1)) == 1
        ex.submit(block)  # finished: still ignored
        assert ex.wait(1.5) == []
        assert ex.running() == set()

    def test_a_busy_slot_is_not_free(self, kit: tuple[KitRepo, Executor]) -> None:
        repo, ex = kit
        free = ex.free_slot_names()
        assert len(free) == 2
        slot = ex.submit(repo.block("b1", order="ABBA"))
        assert slot not in ex.free_slot_names()
        [res] = drain(ex, 1)
        assert {r.slot for r in res.runs} == {slot}  # a block stays on its slot
        deadline = time.monotonic() + 30
        while len(ex.free_slot_names()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(ex.free_slot_names()) == sorted(free)

    def test_prefer_and_avoid_slot(self, kit: tuple[KitRepo, Executor]) -> None:
        repo, ex = kit
        free = ex.free_slot_names()
        assert len(free) == 2
        assert ex.submit(repo.block("p", prefer=free[1])) == free[1]
        [res] = drain(ex, 1)
        assert res.slot == free[1]
        deadline = time.monotonic() + 30
        while len(ex.free_slot_names()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ex.submit(repo.block("a", avoid=free[0])) == free[1]
        [res] = drain(ex, 1)
        assert res.slot == free[1]

    def test_a_cancelled_block_never_comes_back(self, kit: tuple[KitRepo, Executor]) -> None:
        repo, ex = kit
        ex.submit(repo.block("gone", order="ABBA"))
        ex.cancel("gone")
        results: list[BlockResult] = []
        deadline = time.monotonic() + 30
        while ex.running() and time.monotonic() < deadline:
            results += ex.wait(0.2)
        assert [r for r in results if r.block_id == "gone"] == []
        assert ex.running() == set()


class BenchmarkExecutorContract(ExecutorContract):
    """What executors that run the benchmark in processes owe, on top."""

    def test_logs_are_kept_where_the_journal_points(self,
                                                   kit: tuple[KitRepo, Executor]) -> None:
        repo, ex = kit
        ex.submit(repo.block("b1"))
        [res] = drain(ex, 1)
        for r in res.runs:
            assert Path(r.stdout_path).is_file()
            assert "METRIC score=" in Path(r.stdout_path).read_text()
            assert Path(r.stdout_path).is_relative_to(repo.target.state_dir)

    def test_one_block_per_slot_and_every_slot_used(self,
                                                    kit: tuple[KitRepo, Executor]) -> None:
        repo, ex = kit
        pending = [repo.block(f"b{i}", order="ABBA") for i in range(6)]
        results: list[BlockResult] = []
        deadline = time.monotonic() + 120
        while len(results) < 6 and time.monotonic() < deadline:
            for _ in ex.free_slot_names():
                if pending:
                    ex.submit(pending.pop(0))
            results += ex.wait(0.1)
        assert sorted(r.block_id for r in results) == [f"b{i}" for i in range(6)]
        assert all(r.error == "" and len(r.runs) == 4 for r in results)
        spans = repo.intervals()
        assert set(spans) == {s.name for s in ex.slots}  # every slot measured
        assert sum(len(v) for v in spans.values()) == 24
        for slot, iv in spans.items():
            for (_, end), (start, _) in itertools.pairwise(iv):
                assert start >= end, f"two runs overlapped on {slot}"
        by_block = {r.block_id: {run.slot for run in r.runs} for r in results}
        assert all(len(w) == 1 for w in by_block.values())  # a block stays on its slot

    def test_failing_benchmark_is_a_result_not_a_retry(self,
                                                       kit: tuple[KitRepo, Executor]) -> None:
        repo, ex = kit
        ex.submit(repo.block("bad", mode="fail"))
        [res] = drain(ex, 1)
        assert res.error_kind == "" and res.error == ""
        a, b = res.runs
        assert a.status is RunStatus.OK
        assert b.status is RunStatus.CRASHED and "exit 3" in b.reason
        assert "boom" in Path(b.stderr_path).read_text()
        assert ex.wait(1.5) == []  # not run again
        assert len(list(repo.marks.glob("start-*"))) == 2

    def test_cancel_kills_the_processes(self, kit: tuple[KitRepo, Executor]) -> None:
        repo, ex = kit
        ex.submit(repo.block("slow", mode="sleep", order="B"))
        pid_file = repo.marks / "sleep.pid"
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            ex.wait(0.1)
        pid = int(pid_file.read_text())
        assert _alive(pid)
        ex.cancel("slow")
        deadline = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid)
        results = []
        deadline = time.monotonic() + 15
        while ex.running() and time.monotonic() < deadline:
            results += ex.wait(0.2)
        assert results == [] and ex.running() == set()
        assert len(ex.free_slot_names()) == 2
