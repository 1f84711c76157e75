"""decide_next: every branch of the triage and the rule call, from scripted runs alone.

No repository, no journal, no process: the evidence is built by hand, as a simulator or a
resumed run would hand it over.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from assay.config.spec import DecisionSpec, MetricSpec
from assay.decision.next_step import (
    MAX_EXECUTOR_RETRIES,
    MAX_RERUNS,
    BlockEvidence,
    Discard,
    Evidence,
    Invalid,
    Keep,
    Measure,
    Rerun,
    decide_next,
    run_limit,
)
from assay.decision.rule import DecisionContext, FixedPairs
from assay.decision.stats import SequentialRule
from assay.model import BlockKind, Direction, Incumbent, Role, RunResult, RunStatus, Verdict

INC = Incumbent("a" * 40)
MOVED = Incumbent("b" * 40, experiment_id="e0002")


def ctx(spec: DecisionSpec | None = None, direction: Direction = Direction.MAXIMIZE
        ) -> DecisionContext:
    spec = spec or DecisionSpec(rule="fixed", max_pairs=4, pairs_per_block=2, delta=0.02)
    return DecisionContext(direction=direction, spec=spec, delta=spec.delta, slots=("s0", "s1"))


def block(bid: str, values: Sequence[tuple[float, float]], *, kind: BlockKind = BlockKind.COMPARE,
          commit: str = INC.commit, slot: str = "s0",
          status: RunStatus = RunStatus.OK, a_status: RunStatus = RunStatus.OK,
          guard: Sequence[tuple[float, float]] = (), holdout: Sequence[tuple[float, float]] = (),
          error: str = "", error_kind: str = "") -> BlockEvidence:
    """An ABBA-ordered block from (incumbent, candidate) values per pair."""
    runs: list[RunResult] = []
    for i, (a, b) in enumerate(values):
        order = (Role.INCUMBENT, Role.CANDIDATE) if i % 2 == 0 else (Role.CANDIDATE,
                                                                     Role.INCUMBENT)
        for role in order:
            ok = (a_status if role is Role.INCUMBENT else status)
            v = a if role is Role.INCUMBENT else b
            metrics = {"speed": v} if ok in (RunStatus.OK, RunStatus.SUSPICIOUS) else {}
            side = 0 if role is Role.INCUMBENT else 1
            if guard:
                metrics["mem"] = guard[i][side]
            held = {"score": holdout[i][side]} if holdout else {}
            runs.append(RunResult(f"{bid}-r{len(runs) + 1}", bid, "e0001", role, len(runs) + 1,
                                  ok, metrics, "" if ok is RunStatus.OK else f"{ok.value} run",
                                  slot=slot, holdout=held))
    return BlockEvidence(bid, kind, commit, slot, tuple(runs), error, error_kind)


def evidence(*blocks: BlockEvidence, inc: Incumbent = INC, context: DecisionContext | None = None,
             guards: tuple[MetricSpec, ...] = (), holdout: MetricSpec | None = None) -> Evidence:
    return Evidence("e0001", tuple(blocks), inc, context or ctx(), "speed", guards, holdout)


CLEAN_WIN = [(100.0, 120.0), (100.2, 120.1)]
SAME = [(100.0, 100.0), (100.0, 100.0)]


def test_no_block_yet_asks_for_the_first_one() -> None:
    act = decide_next(evidence(), FixedPairs())
    assert isinstance(act, Measure) and act.block.pairs == 2 and act.decision is None


def test_a_large_clean_effect_is_kept() -> None:
    act = decide_next(evidence(block("b1", CLEAN_WIN), block("b2", CLEAN_WIN)), FixedPairs())
    assert isinstance(act, Keep)
    assert act.decision.effect is not None and act.decision.effect > 0.15
    assert act.decision.details["incumbent_value"] == pytest.approx(100.1)
    assert act.decision.details["runs_total"] == 8


def test_the_rule_asks_for_more_until_its_pairs_are_in() -> None:
    act = decide_next(evidence(block("b1", CLEAN_WIN)), FixedPairs())
    assert isinstance(act, Measure) and act.event == "measure"
    assert act.decision is not None and act.decision.verdict is Verdict.CONTINUE
    assert act.message.startswith("e0001: 2 of 4 pairs")


def test_identical_values_are_discarded() -> None:
    act = decide_next(evidence(block("b1", SAME), block("b2", SAME)), FixedPairs())
    assert isinstance(act, Discard) and act.decision is not None
    assert act.decision.verdict is Verdict.DISCARD


def test_a_keep_against_a_moved_incumbent_is_measured_again() -> None:
    act = decide_next(evidence(block("b1", CLEAN_WIN), block("b2", CLEAN_WIN), inc=MOVED),
                      FixedPairs())
    assert isinstance(act, Measure) and act.event == "rebase"
    assert MOVED.commit[:12] in act.message
    assert act.decision is not None and act.decision.verdict is Verdict.KEEP


def test_only_blocks_against_the_latest_incumbent_count() -> None:
    # Two losing blocks against the old incumbent, two winning ones against the new one.
    old = [block(f"b{i}", SAME, commit="c" * 40) for i in (1, 2)]
    new = [block(f"b{i}", CLEAN_WIN) for i in (3, 4)]
    act = decide_next(evidence(*old, *new), FixedPairs())
    assert isinstance(act, Keep) and act.decision.pairs_used == 4


def test_a_regressed_guard_turns_a_keep_into_a_discard() -> None:
    mem = MetricSpec("mem", Direction.MINIMIZE, tolerance=0.10)
    blocks = [block(f"b{i}", CLEAN_WIN, guard=[(100.0, 150.0)] * 2) for i in (1, 2)]
    act = decide_next(evidence(*blocks, guards=(mem,)), FixedPairs())
    assert isinstance(act, Discard) and act.reason.startswith("the effect is real but guard mem")
    held = [block(f"b{i}", CLEAN_WIN, guard=[(100.0, 101.0)] * 2) for i in (1, 2)]
    assert isinstance(decide_next(evidence(*held, guards=(mem,)), FixedPairs()), Keep)


def test_the_holdout_is_checked_after_the_guards() -> None:
    score = MetricSpec("score", Direction.MAXIMIZE, tolerance=0.01)
    worse = [block(f"b{i}", CLEAN_WIN, holdout=[(0.9, 0.5)] * 2) for i in (1, 2)]
    act = decide_next(evidence(*worse, holdout=score), FixedPairs())
    assert isinstance(act, Discard) and "the holdout regressed" in act.reason
    same = [block(f"b{i}", CLEAN_WIN, holdout=[(0.9, 0.9)] * 2) for i in (1, 2)]
    assert isinstance(decide_next(evidence(*same, holdout=score), FixedPairs()), Keep)


def test_a_lost_slot_is_retried_elsewhere_then_given_up() -> None:
    lost = block("b1", [], slot="s1", error="node died", error_kind="executor")
    act = decide_next(evidence(lost), FixedPairs())
    assert isinstance(act, Rerun) and act.event == "retry" and act.avoid_slot == "s1"
    assert act.block.kind is BlockKind.RERUN and not act.fail
    many = [block(f"b{i}", [], error="node died", error_kind="executor")
            for i in range(MAX_EXECUTOR_RETRIES + 1)]
    gave_up = decide_next(evidence(*many), FixedPairs())
    assert isinstance(gave_up, Invalid) and gave_up.crashed
    assert f"failed {MAX_EXECUTOR_RETRIES + 1} times" in gave_up.reason


def test_a_block_the_candidate_broke_is_invalid() -> None:
    act = decide_next(evidence(block("b1", [], error="does not apply", error_kind="patch")),
                      FixedPairs())
    assert isinstance(act, Invalid) and not act.crashed and act.reason == "patch: does not apply"


@pytest.mark.parametrize(("status", "crashed"), [(RunStatus.CRASHED, True),
                                                 (RunStatus.TIMEOUT, True),
                                                 (RunStatus.INVALID, False)])
def test_a_candidate_with_no_usable_run_is_finished(status: RunStatus, crashed: bool) -> None:
    act = decide_next(evidence(block("b1", CLEAN_WIN, status=status)), FixedPairs())
    assert isinstance(act, Invalid) and act.crashed is crashed
    assert act.reason.startswith(status.value)


def test_a_run_a_watch_condition_stopped_ends_the_experiment_as_crashed() -> None:
    # an ordinary crash after good runs is measured again; an early stop is not: the
    # candidate was seen doing something useless, and each retry costs a run
    from assay.bench.worker import early_stop_reason

    good = block("b1", CLEAN_WIN)
    crash = RunResult("b2-r1", "b2", "e0001", Role.CANDIDATE, 1, RunStatus.CRASHED, {},
                      "exit 1: Killed")
    act = decide_next(evidence(good, BlockEvidence("b2", BlockKind.COMPARE, INC.commit, "s0",
                                                   (crash,))), FixedPairs())
    assert not isinstance(act, Invalid)
    why = early_stop_reason("loss is not finite (loss = nan)", 4.0, 45.0, 300.0)
    stopped = RunResult("b2-r1", "b2", "e0001", Role.CANDIDATE, 1, RunStatus.CRASHED, {}, why)
    act = decide_next(evidence(good, BlockEvidence("b2", BlockKind.COMPARE, INC.commit, "s0",
                                                   (stopped,))), FixedPairs())
    assert isinstance(act, Invalid) and act.crashed
    assert act.reason == f"crashed: {why}"


def test_a_slow_stop_against_an_older_incumbent_run_is_measured_again_once() -> None:
    # "slower than the incumbent" compares with the incumbent's latest run on the slot: when
    # that run is from an earlier block the machine may have got busier since, so the
    # candidate is measured again right after a fresh incumbent run; slow again: crashed
    from assay.bench.worker import early_stop_reason

    why = early_stop_reason("tokens_per_second < 0.2 * incumbent (tokens_per_second = 150, "
                            "limit 200, 3 lines in a row)", 4.0, 45.0, 300.0)
    good = block("b1", CLEAN_WIN)
    alone = RunResult("b2-r1", "b2", "e0001", Role.CANDIDATE, 1, RunStatus.CRASHED, {}, why)
    act = decide_next(evidence(good, BlockEvidence("b2", BlockKind.COMPARE, INC.commit, "s0",
                                                   (alone,))), FixedPairs())
    assert isinstance(act, Rerun) and act.block.run_order() == "AB"
    assert act.block.kind is BlockKind.RERUN and "fresh incumbent run" in act.message
    inc = RunResult("b3-r1", "b3", "e0001", Role.INCUMBENT, 1, RunStatus.OK, {"speed": 100.0},
                    "")
    again = dataclasses.replace(alone, run_id="b3-r2", block_id="b3", index=2)
    act = decide_next(evidence(good, BlockEvidence("b2", BlockKind.COMPARE, INC.commit, "s0",
                                                   (alone,)),
                               BlockEvidence("b3", BlockKind.RERUN, INC.commit, "s0",
                                             (inc, again))), FixedPairs())
    assert isinstance(act, Invalid) and act.crashed and act.reason == f"crashed: {why}"


def test_a_changed_harness_is_invalid_even_with_good_values() -> None:
    b = block("b1", CLEAN_WIN)
    bad = RunResult("b1-r9", "b1", "e0001", Role.CANDIDATE, 9, RunStatus.HARNESS_CHANGED, {},
                    "bench.py changed")
    act = decide_next(evidence(BlockEvidence("b1", b.kind, b.inc_commit, "s0",
                                             (*b.runs, bad))), FixedPairs())
    assert isinstance(act, Invalid) and act.reason == "harness_changed: bench.py changed"


def test_suspicious_values_are_measured_again_a_bounded_number_of_times() -> None:
    act = decide_next(evidence(block("b1", CLEAN_WIN, status=RunStatus.SUSPICIOUS)),
                      FixedPairs())
    assert isinstance(act, Rerun) and act.event == "rerun"
    assert act.block.kind is BlockKind.RERUN and act.block.reason == "suspicious"
    # The re-measurement goes to the rule (suspicious runs make no pairs): 2 of 4 pairs.
    after = decide_next(evidence(block("b1", CLEAN_WIN, status=RunStatus.SUSPICIOUS),
                                 block("b2", CLEAN_WIN, kind=BlockKind.RERUN)), FixedPairs())
    assert isinstance(after, Measure) and after.decision is not None
    assert after.decision.pairs_used == 2
    persist = [block("b1", CLEAN_WIN, status=RunStatus.SUSPICIOUS)]
    persist += [block(f"r{i}", CLEAN_WIN, kind=BlockKind.RERUN) for i in range(MAX_RERUNS)]
    persist += [block("b9", CLEAN_WIN, status=RunStatus.SUSPICIOUS)]
    gave_up = decide_next(evidence(*persist), FixedPairs())
    assert isinstance(gave_up, Invalid) and "persist after" in gave_up.reason


def test_a_failing_incumbent_stops_the_run_and_is_measured_again() -> None:
    act = decide_next(evidence(block("b1", CLEAN_WIN, a_status=RunStatus.CRASHED)),
                      FixedPairs())
    assert isinstance(act, Rerun) and act.event == "error"
    assert act.fail.startswith("the incumbent's benchmark fails on slot s0")
    assert act.block.reason == "incumbent failed"


def test_an_experiment_that_never_gets_pairs_hits_the_run_limit() -> None:
    c = ctx()
    # Runs whose incumbent side is fine but whose pairs never line up (B side missing).
    half = [block(f"b{i}", [(100.0, 100.0)] * 2, kind=BlockKind.RERUN) for i in range(12)]
    runs = sum(len(b.runs) for b in half)
    assert runs > run_limit(c)
    act = decide_next(evidence(*half, context=c), FixedPairs())
    assert isinstance(act, Invalid) and f"no decision after {runs} runs" in act.reason


def test_the_same_evidence_gives_the_same_action() -> None:
    ev = evidence(block("b1", [(100.0, 103.0), (101.0, 104.5)]),
                  block("b2", [(99.0, 102.0), (100.5, 103.0)]))
    spec = DecisionSpec(rule="sequential", max_pairs=12, delta=0.01)
    c = ctx(spec)
    ev = Evidence(ev.experiment_id, ev.blocks, ev.incumbent, c, ev.metric)
    first = decide_next(ev, SequentialRule())
    assert decide_next(ev, SequentialRule()) == first
    assert decide_next(ev) == first  # the default rule is the one the spec names


def test_minimize_reads_a_drop_as_a_gain() -> None:
    c = ctx(direction=Direction.MINIMIZE)
    faster = [(100.0, 80.0), (100.1, 80.2)]
    act = decide_next(evidence(block("b1", faster), block("b2", faster), context=c),
                      FixedPairs())
    assert isinstance(act, Keep) and act.decision.effect is not None and act.decision.effect > 0


def test_measuring_on_after_the_incumbent_moved_says_so() -> None:
    act = decide_next(evidence(block("b1", CLEAN_WIN), inc=MOVED), FixedPairs())
    assert isinstance(act, Measure) and act.event == "measure"
    assert act.notice.startswith(f"e0001: the incumbent moved to {MOVED.commit[:12]} (e0002)")
    assert "2 pair(s) against the old one" in act.notice
    same = decide_next(evidence(block("b1", CLEAN_WIN)), FixedPairs())
    assert isinstance(same, Measure) and same.notice == ""
