"""The loop on its twins: an in-memory journal, a function-backed executor, a repository in
memory. Same Loop, same decisions, no git and no processes."""

from __future__ import annotations

import itertools
import random
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from assay.config.spec import Target, parse
from assay.decision.next_step import MAX_EXECUTOR_RETRIES
from assay.executors.function import FunctionExecutor, values
from assay.journal.store import Journal
from assay.loop.driver import Loop
from assay.model import Block, BlockResult, BlockState, Candidate, ExperimentState, Slot
from assay.proposers.base import ProposalContext, Proposer
from assay.repo.repository import Repository
from assay.testing import ROOT_COMMIT, MemoryRepository, memory_loop

CONFIG = """\
[metric]
name = "speed"
direction = "maximize"

[commands]
bench = "true"

[scope]
editable = ["work.py"]

[[params]]
name = "GAIN"
type = "float"
low = 0.5
high = 2.0

[run]
slots = 2

[decision]
delta = 0.02
aa_blocks = 2
"""


def target(tmp: Path, aa_blocks: int = 2) -> Target:
    return parse(CONFIG.replace("aa_blocks = 2", f"aa_blocks = {aa_blocks}"), tmp)


def noisy(seed: int = 1) -> tuple[dict[str, float], Callable[[str, str], float]]:
    """A benchmark whose candidate speed is 100 * GAIN, with 1% noise."""
    rng = random.Random(seed)
    state = {"gain": 1.0}

    def value(role: str, slot: str) -> float:
        base = 100.0 * (state["gain"] if role == "B" else 1.0)
        return base * (1.0 + rng.gauss(0.0, 0.01))

    return state, value


def test_the_twins_implement_the_protocols(tmp_path: Path) -> None:
    assert isinstance(MemoryRepository(), Repository)
    journal = Journal.memory()
    assert journal.migrate() == []  # already at the latest schema
    journal.close()


def test_a_memory_loop_calibrates_keeps_a_win_and_discards_a_null(tmp_path: Path) -> None:
    state, value = noisy()
    gains = {"e0001": 1.25, "e0002": 1.0}
    fn = values("speed", value)

    def per_block(block: Block, slot: Slot) -> BlockResult:
        state["gain"] = gains.get(block.experiment_id, 1.0)
        return fn(block, slot)

    exe = FunctionExecutor(per_block, slots=[Slot("s0"), Slot("s1")])
    repo = MemoryRepository()
    loop = memory_loop(target(tmp_path), exe, repository=repo, candidates=[
        Candidate(ROOT_COMMIT, params={"GAIN": 1.25}, hypothesis="faster"),
        Candidate(ROOT_COMMIT, params={"GAIN": 1.0}, hypothesis="a no-op")])
    summary = loop.run(budget=2)
    exps = {e.id: e for e in loop.journal.experiments()}
    assert exps["e0001"].state is ExperimentState.KEPT
    assert exps["e0002"].state is ExperimentState.DISCARDED
    cal = loop.journal.get_meta("calibration")
    assert cal is not None and set(cal["noise"]) == {"s0", "s1"}
    assert summary.kept[0].id == "e0001" and summary.branch == "assay/main"
    [commit] = repo.commits.values()
    assert commit.parent == ROOT_COMMIT and commit.params == {"GAIN": 1.25}
    assert loop.journal.incumbent().commit == commit.sha  # type: ignore[union-attr]
    # Both were queued at once on two slots: e0002 was measured against the root commit.
    assert {b.incumbent.commit for b in loop.journal.blocks("e0002")} == {ROOT_COMMIT}
    assert {b.slot for b in loop.journal.blocks("e0001")} | {
        b.slot for b in loop.journal.blocks("e0002")} == {"s0", "s1"}
    assert not loop.journal.blocks(states=(BlockState.QUEUED, BlockState.RUNNING))
    assert exe.calls == len(loop.journal.blocks())


def test_a_memory_loop_runs_many_decisions(tmp_path: Path) -> None:
    _state, value = noisy(seed=7)
    exe = FunctionExecutor(values("speed", value))
    loop = memory_loop(target(tmp_path), exe, candidates=[
        Candidate(ROOT_COMMIT, params={"GAIN": 1.0 + i / 1000}, hypothesis=f"null {i}")
        for i in range(60)])
    loop.run(budget=60)
    exps = loop.journal.experiments()
    assert len(exps) == 60 and all(e.state.is_finished() for e in exps)
    kept = [e for e in exps if e.state is ExperimentState.KEPT]
    assert len(kept) <= 3  # gains of at most 6% never shown; a false keep at 2% δ is rare


def test_a_failing_function_is_a_lost_slot_retried_then_crashed(tmp_path: Path) -> None:
    def broken(block: Block, slot: Slot) -> BlockResult:
        raise OSError("the node went away")

    loop = memory_loop(target(tmp_path, aa_blocks=0),
                       FunctionExecutor(broken, slots=[Slot("s0"), Slot("s1")]),
        candidates=[Candidate(ROOT_COMMIT, params={"GAIN": 1.5}, hypothesis="x")])
    loop.run(budget=1)
    [exp] = loop.journal.experiments()
    assert exp.state is ExperimentState.CRASHED and "the node went away" in exp.note
    assert [b.error_kind for b in loop.journal.blocks(exp.id)] == ["executor"] * (
        MAX_EXECUTOR_RETRIES + 1)
    # Each retry avoided the slot that had just failed.
    slots = [b.slot for b in loop.journal.blocks(exp.id)]
    assert all(x != y for x, y in itertools.pairwise(slots))


def test_two_sessions_in_one_second_of_one_process_have_their_own_ids(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session id keys the session's fingerprint and its on_finish hook: two loops made
    by one process within the same second (the MCP server, the Python API) must not share
    it, or the second session's fingerprint and on_finish are taken as already done."""
    import time as real

    import assay.loop.driver

    frozen = types.SimpleNamespace(time=lambda: 1_800_000_000.25, monotonic=real.monotonic,
                                   sleep=real.sleep)
    monkeypatch.setattr(assay.loop.driver, "time", frozen)  # the loop's clock stops in one second
    t = target(tmp_path)
    _, value = noisy()
    loops = [memory_loop(t, FunctionExecutor(values("speed", value))) for _ in range(2)]
    assert loops[0].session_id != loops[1].session_id


def test_the_loop_runs_its_before_ask_hook_before_each_proposal(tmp_path: Path) -> None:
    """The driver knows no research: what runs before a proposal (api passes research's
    re-rank of its brief) is given to the loop at construction, and runs once per ask."""
    seen: list[int] = []

    class Two(Proposer):
        name = "two"

        def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
            if len(seen) > 3:
                return []
            return [Candidate(ROOT_COMMIT, params={"GAIN": 1.0 + len(seen) / 100},
                              hypothesis=f"null {len(seen)}")]

    _state, value = noisy(seed=3)
    t = target(tmp_path, aa_blocks=0)
    loop = Loop(t, Journal.memory(), MemoryRepository(), FunctionExecutor(values("speed", value)),
                Two(), before_ask=lambda: seen.append(loop.journal.count_experiments()))
    summary = loop.run(budget=5)
    assert seen == [0, 1, 2, 3]  # before each ask, with what the journal held then
    assert summary.finished == 3 and "nothing more to propose" in summary.stopped
