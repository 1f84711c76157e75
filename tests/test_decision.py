"""Decision v1 (fixed pairs, one t interval) and the guards check."""

from __future__ import annotations

import math

from assay.config.spec import DecisionSpec, MetricSpec
from assay.decision.rule import (
    DecisionContext,
    FixedPairs,
    guard_change,
    guards_hold,
    signed_log_ratios,
)
from assay.model import Direction, Pair, Role, RunResult, RunStatus, Verdict


def _ctx(direction: Direction = Direction.MAXIMIZE, delta: float = 0.02,
         pairs: int = 6) -> DecisionContext:
    return DecisionContext(direction=direction, delta=delta,
                           spec=DecisionSpec(rule="fixed", max_pairs=pairs, delta=delta))


def _pairs(ratios: list[float], a: float = 100.0) -> list[Pair]:
    return [Pair(a, a * r, "s0", f"b{i // 2}") for i, r in enumerate(ratios)]


def test_log_ratio_is_direction_aware() -> None:
    p = [Pair(100.0, 110.0, "s0", "b")]
    assert signed_log_ratios(p, Direction.MAXIMIZE)[0] == math.log(1.1)
    assert signed_log_ratios(p, Direction.MINIMIZE)[0] == -math.log(1.1)


def test_waits_for_its_fixed_number_of_pairs() -> None:
    d = FixedPairs().decide(_pairs([1.1, 1.1]), _ctx())
    assert d.verdict is Verdict.CONTINUE and d.next_block is not None
    assert d.next_block.pairs == 2 and "2 of 6 pairs" in d.reason


def test_keeps_only_when_the_whole_interval_clears_delta() -> None:
    d = FixedPairs().decide(_pairs([1.10, 1.11, 1.09, 1.10, 1.12, 1.08]), _ctx())
    assert d.verdict is Verdict.KEEP
    assert d.lo is not None and d.lo > 0.02 and d.effect is not None
    assert abs(d.effect - 0.10) < 0.01 and d.runs_used == 12
    assert "wholly above +2.00%" in d.reason


def test_a_real_but_small_gain_is_not_kept() -> None:
    d = FixedPairs().decide(_pairs([1.01, 1.012, 1.008, 1.01, 1.011, 1.009]), _ctx())
    assert d.verdict is Verdict.DISCARD and "wholly below +2.00%" in d.reason


def test_noise_gives_an_inconclusive_discard() -> None:
    d = FixedPairs().decide(_pairs([1.3, 0.8, 1.2, 0.9, 1.25, 0.85]), _ctx())
    assert d.verdict is Verdict.DISCARD and d.reason.startswith("inconclusive at the budget")
    assert d.lo is not None and d.hi is not None and d.lo < 0.02 < d.hi


def test_minimize_keeps_a_faster_time() -> None:
    d = FixedPairs().decide(_pairs([0.8] * 6), _ctx(Direction.MINIMIZE))
    assert d.verdict is Verdict.KEEP and d.effect is not None and d.effect > 0.2


def _run(role: Role, mem: float, i: int) -> RunResult:
    return RunResult(f"r{i}", "b", "e", role, i, RunStatus.OK, {"mem": mem})


def test_guards_hold_within_tolerance_and_fail_beyond() -> None:
    g = MetricSpec(name="mem", direction=Direction.MINIMIZE, tolerance=0.10)
    ok_runs = [_run(Role.INCUMBENT, 100, 1), _run(Role.CANDIDATE, 105, 2)]
    assert guards_hold(ok_runs, [g]) == (True, "all guards hold")
    bad = [_run(Role.INCUMBENT, 100, 1), _run(Role.CANDIDATE, 150, 2)]
    good, why = guards_hold(bad, [g])
    assert not good and "guard mem regressed by 50.00%" in why
    missing = [_run(Role.INCUMBENT, 100, 1)]
    assert guards_hold(missing, [g])[0] is False


def test_guard_change_gives_both_medians_and_the_change_by_direction() -> None:
    runs = [_run(Role.INCUMBENT, 100, 1), _run(Role.INCUMBENT, 104, 2),
            _run(Role.CANDIDATE, 120, 3), _run(Role.CANDIDATE, 118, 4)]
    smaller = MetricSpec(name="mem", direction=Direction.MINIMIZE, unit="kB", tolerance=0.10)
    g = guard_change(runs, smaller)
    assert (g.incumbent, g.candidate) == (104, 120)  # the upper median of two
    assert g.better is not None and abs(g.better + 16 / 104) < 1e-12 and g.regressed
    assert g.describe() == "mem 104 -> 120 kB (-15.38%, tolerance 10.00%): regressed"
    larger = MetricSpec(name="mem", direction=Direction.MAXIMIZE, tolerance=0.10)
    up = guard_change(runs, larger)
    assert up.better is not None and up.better > 0 and not up.regressed
    assert up.describe().endswith("(+15.38%, tolerance 10.00%): holds")
    # regression() words come from the same change
    assert "guard mem regressed by 15.38% (tolerance 10.00%): 104 -> 120" in \
        guards_hold(runs, [smaller])[1]
    none = guard_change(runs[:2], smaller)
    assert none.better is None and not none.regressed
    assert none.describe() == "mem: not measured on the candidate"
