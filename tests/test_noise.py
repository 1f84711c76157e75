"""Noise tracked all along, the repeated confidence interval and the unbiased effect."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from assay.config.spec import DecisionSpec
from assay.decision.rule import DecisionContext
from assay.decision.stats import SequentialRule
from assay.decision.stats.bounds import efficacy_bounds, planned_looks
from assay.decision.stats.noise import (
    MIN_OWN,
    WINDOW,
    block_samples,
    changes,
    describe,
    quarantine_limit,
    resolvable,
    track,
)
from assay.decision.stats.unbiased import bias_adjusted
from assay.model import BlockKind, Direction, Pair, Role, RunResult, RunStatus, Verdict

SPEC = DecisionSpec(rule="sequential", pairs_per_block=2, max_pairs=40, min_pairs=2,
                    confidence=0.90, delta=0.01, confirm=True, aa_blocks=2)


def test_a_noisy_window_raises_delta_and_a_quiet_slot_brings_it_back() -> None:
    rng = np.random.default_rng(4)
    spec = replace(SPEC, delta=0.002)
    samples: list[float] = []
    quiet = track({"s0": list(0.005 * rng.standard_normal(WINDOW))}, spec)
    assert quiet.delta == spec.delta
    samples += list(0.005 * rng.standard_normal(WINDOW))
    samples += list(0.08 * rng.standard_normal(WINDOW))  # a CPU hog
    noisy = track({"s0": samples}, spec)
    assert noisy.delta > 3 * spec.delta
    assert any("δ 0.20% ->" in c for c in changes(quiet, noisy, spec))
    back = None
    for block in range(10):  # two samples per ABBA block
        samples += list(0.005 * rng.standard_normal(2))
        state = track({"s0": samples}, spec)
        if state.delta <= 1.2 * quiet.delta:
            back = block + 1
            break
    assert back is not None and back <= 10
    assert any("fell to" in c for c in changes(noisy, state, spec))


def test_identical_aa_runs_leave_the_noise_unknown_not_nan() -> None:
    # a deterministic bench: the A/A pair's two runs agree exactly, so no slot has a
    # nonzero sample; the line says so instead of printing "nan%"
    st = track({"s0": [0.0]}, SPEC)
    assert math.isnan(st.pooled)
    line = describe(st, SPEC)
    assert "nan" not in line.lower() and "not known yet" in line
    assert "δ 1.00%" in line
    assert "nan" not in describe(track({"s0": [0.01, -0.02]}, SPEC), SPEC).lower()


def test_quarantine_follows_the_current_estimate_and_releases() -> None:
    rng = np.random.default_rng(5)
    base = {s: list(0.01 * rng.standard_normal(WINDOW)) for s in ("s0", "s1", "s2")}
    loud = dict(base, s3=list(0.08 * rng.standard_normal(WINDOW)))
    st = track(loud, SPEC)
    assert set(st.quarantined) == {"s3"} and "s3" not in st.noise
    assert ["slot s3 quarantined" in c for c in changes(None, st, SPEC)].count(True) == 1
    # 2.5x its peers: under the 3x limit, but a quarantined slot needs to fall below 2x
    mid = dict(base, s3=list(0.025 * rng.standard_normal(WINDOW)))
    assert "s3" in track(mid, SPEC, st.quarantined).quarantined
    assert "s3" not in track(mid, SPEC).quarantined
    calm = dict(base, s3=list(0.01 * rng.standard_normal(WINDOW)))
    released = track(calm, SPEC, st.quarantined)
    assert not released.quarantined
    assert any("released from quarantine" in c for c in changes(st, released, SPEC))


def test_few_samples_need_a_wider_gap_to_quarantine_a_slot() -> None:
    """Three slots of equal noise, checked after every block as the loop does: a slot's
    scale from a handful of samples swings widely, so a plain 3x limit quarantined a
    healthy slot in several runs of a hundred; a slot far noisier is still caught at once."""
    assert quarantine_limit(MIN_OWN - 1) == math.inf
    assert quarantine_limit(MIN_OWN) > quarantine_limit(8) > quarantine_limit(12) == 3.0
    rng = np.random.default_rng(11)
    healthy = 0
    for _ in range(200):
        samples = {s: list(0.004 * rng.standard_normal(MIN_OWN)) for s in ("s0", "s1", "s2")}
        for block in range(24):
            if track(samples, SPEC).quarantined:
                healthy += 1
                break
            samples[f"s{block % 3}"] += list(0.004 * rng.standard_normal(2))
    assert healthy <= 4, f"{healthy} of 200 runs quarantined a slot as noisy as its peers"
    loud = {s: list(0.004 * rng.standard_normal(MIN_OWN)) for s in ("s0", "s1")}
    loud["s2"] = list(0.1 * rng.standard_normal(MIN_OWN))  # 25x: no need to wait
    assert set(track(loud, SPEC).quarantined) == {"s2"}


def test_a_few_samples_do_not_collapse_the_scale() -> None:
    """From four or six samples the low-quantile start can be tiny (two small samples
    among six), and trimming at a few start scales then drops the rest: the scale came out
    below a twentieth of the truth in one slot of a hundred, and that slot's pairs weighed
    hundreds of times more than they should. The start is held to half the median-based
    one below a dozen samples."""
    from assay.decision.stats.noise import SMALL, robust_scale

    rng = np.random.default_rng(8)
    for n in (4, 6, SMALL - 1):
        got = np.array([robust_scale(list(rng.standard_normal(n))) for _ in range(4000)])
        assert np.quantile(got, 0.01) > 0.15, n
        assert 0.8 < np.median(got) < 1.1, n


def test_a_share_of_slow_runs_does_not_move_the_estimate() -> None:
    rng = np.random.default_rng(6)
    clean = 0.01 * rng.standard_normal(WINDOW)
    hit = rng.random(WINDOW) < 0.15
    dirty = clean + hit * rng.choice([-1.0, 1.0], WINDOW) * rng.uniform(0.2, 0.4, WINDOW)
    a = track({"s0": list(clean)}, SPEC).pooled
    b = track({"s0": list(dirty)}, SPEC).pooled
    assert b == pytest.approx(a, rel=0.35)
    assert b < 0.03  # a plain root mean square would be over 0.1


def test_every_compare_block_carries_two_noise_samples() -> None:
    vals = {0: ("A", 100.0), 1: ("B", 90.0), 2: ("B", 91.0), 3: ("A", 102.0)}
    runs = [RunResult(f"r{i}", "b1", "e1", Role(role), i, RunStatus.OK, {"t": v})
            for i, (role, v) in vals.items()]
    got = block_samples(runs, "t")
    assert got == pytest.approx([math.log(102 / 100), math.log(91 / 90)])
    crashed = [*runs[:3], RunResult("r3", "b1", "e1", Role.INCUMBENT, 3, RunStatus.CRASHED, {})]
    assert block_samples(crashed, "t") == pytest.approx([math.log(91 / 90)])


def test_resolvable_floor() -> None:
    assert resolvable(0.04, SPEC) == pytest.approx(math.expm1(0.04 / math.sqrt(40)))
    assert resolvable(math.nan, SPEC) == 0.0


def drive(rule: SequentialRule, ctx: DecisionContext, effect: float, sd: float,
          rng: np.random.Generator) -> tuple[Verdict, float, float, float]:
    nb = rule.first_block(ctx)
    pairs: list[Pair] = []
    for step in range(200):
        slot = "s1" if nb.other_slot else "s0"
        xs = effect + sd * rng.standard_normal(nb.pairs)
        pairs += [Pair(100.0, 100.0 * math.exp(x), slot, f"b{step}", nb.kind) for x in xs]
        d = rule.decide(pairs, ctx)
        if d.verdict is not Verdict.CONTINUE:
            assert d.lo is not None and d.hi is not None and d.effect is not None
            return d.verdict, d.lo, d.hi, d.effect
        assert d.next_block is not None
        nb = d.next_block
    raise AssertionError("no decision")


@pytest.mark.parametrize("effect", [0.0, 0.02, 0.04])
def test_the_interval_covers_the_true_effect_where_the_rule_stopped(effect: float) -> None:
    """The interval reported at the stop is a 90% confidence interval, optional stopping,
    confirmation and futility included (it is conservative: a repeated interval)."""
    rule = SequentialRule()
    ctx = DecisionContext(Direction.MAXIMIZE, SPEC, SPEC.delta, slots=("s0", "s1"),
                          noise={"s0": 0.03, "s1": 0.03})
    rng = np.random.default_rng(12)
    truth = math.expm1(math.log1p(effect))
    got = [drive(rule, ctx, math.log1p(effect), 0.03, rng) for _ in range(200)]
    cover = np.mean([lo <= truth <= hi for _, lo, hi, _ in got])
    assert cover >= 0.88


def test_the_effect_of_keeps_is_bias_adjusted() -> None:
    """Among keeps of a true effect the reported effect averages about the truth, early
    keeps and late ones alike; the mean at the stopping look overstates it."""
    looks = planned_looks(2, 24, first=2)
    z = efficacy_bounds(looks, 0.05, SequentialRule().rho)
    d = 0.25
    upper = tuple(n * d + c * math.sqrt(n) if n >= 4 else math.inf
                  for n, c in zip(looks, z, strict=True))
    theta = 0.6
    rng = np.random.default_rng(3)
    paths = np.cumsum(theta + rng.standard_normal((400, looks[-1])), axis=1)
    sums = paths[:, np.array(looks) - 1]
    crossed = sums > np.array(upper)
    reported: list[float] = []
    naive: list[float] = []
    for row, hits in zip(sums, crossed, strict=True):
        if not hits.any():
            continue
        k = int(hits.argmax())
        naive.append(float(row[k]) / looks[k])
        reported.append(bias_adjusted(looks, upper, k, naive[-1]))
    assert len(reported) > 150
    assert np.mean(naive) > 1.3 * theta
    assert abs(np.mean(reported) / theta - 1) < 0.15
    # the adjustment only ever lowers the mean at the stopping look
    assert all(r <= n + 1e-9 for r, n in zip(reported, naive, strict=True))


def test_a_block_s_noise_weighs_its_pairs() -> None:
    """A pair from a noisy block moves the estimate less than one from a quiet block."""
    rule = SequentialRule()
    pairs = [Pair(100.0, 100.0 * math.exp(x), "s0", b, BlockKind.COMPARE)
             for x, b in ((0.02, "q"), (0.02, "q"), (0.0, "n"), (0.0, "n"))]
    ctx = DecisionContext(Direction.MAXIMIZE, SPEC, SPEC.delta, slots=("s0",),
                          noise={"s0": 0.01}, block_noise={"q": 0.01, "n": 0.05})
    d = rule.decide(pairs, ctx)
    assert d.details["robust_effect"] > math.expm1(0.015)


def test_robust_scale_ignores_a_noisy_neighbour() -> None:
    """A quarter of runs slowed by 20-50% spoils about 44% of the noise samples; the scale
    still follows the clean part."""
    from assay.decision.stats.noise import robust_scale

    rng = np.random.default_rng(3)
    out = []
    for _ in range(200):
        a = rng.normal(0, 0.015, 48) - (rng.random(48) < 0.25) * np.log1p(
            rng.uniform(0.2, 0.5, 48))
        out.append(robust_scale(list(a[1::2] - a[0::2])))
    clean = 0.015 * math.sqrt(2)
    assert 0.8 * clean < float(np.median(out)) < 1.5 * clean
    assert float(np.mean(out)) < 2.5 * clean  # a median-based start: about 3.5x
    # the tail too: δ's floor follows this scale, and one trim from the low quantile was
    # over five times the truth in one window in twenty
    assert float(np.quantile(out, 0.95)) < 2.5 * clean


def test_robust_scale_of_normal_noise_is_unbiased_and_as_steady() -> None:
    from assay.decision.stats.noise import robust_scale

    rng = np.random.default_rng(8)
    out = np.array([robust_scale(list(rng.normal(0, 0.02, WINDOW))) for _ in range(400)])
    assert abs(float(np.median(out)) / 0.02 - 1) < 0.05
    assert float(np.std(out) / np.mean(out)) < 0.2


def test_a_pair_with_a_tiny_scale_does_not_make_the_estimate_exact() -> None:
    """A block whose scale came out far too small (a few quiet samples) would act as an
    exact measurement; its scale is held to a share of the pool's noise."""
    rule = SequentialRule()
    rng = np.random.default_rng(2)
    xs = list(rng.normal(0.0, 0.03, 8))
    xs[1] = xs[0]  # the tiny block's two pairs agree
    pairs = [Pair(100.0, 100.0 * math.exp(x), "s0", f"b{i // 2}", BlockKind.COMPARE)
             for i, x in enumerate(xs)]
    base = DecisionContext(Direction.MAXIMIZE, SPEC, SPEC.delta, slots=("s0",),
                           noise={"s0": 0.03}, pooled=0.03,
                           block_noise={"b0": 1e-5, "b1": 0.03, "b2": 0.03, "b3": 0.03})
    d = rule.decide(pairs, base)
    assert d.details["sd"] > 0.005
    assert d.lo is not None and d.hi is not None and d.lo < 0.0 < d.hi  # a no-op
    # without the pool's noise to hold it, the tiny block decides alone
    bare = rule.decide(pairs, replace(base, pooled=math.nan))
    assert bare.details["sd"] < 0.01 * d.details["sd"]
    assert bare.lo is not None and bare.lo > 0.0


def test_a_majority_of_wild_pairs_holds_the_keep_back() -> None:
    """Most of six pairs have a slowed incumbent run (+30-40%); the block scales and the
    slot's noise, from four samples, sit on them, but against the pool's noise the clean
    pairs are far from the slot's median: no keep yet."""
    rule = SequentialRule()
    xs = [0.378, 0.319, 0.041, 0.121, 0.372, 0.335]
    pairs = [Pair(100.0, 100.0 * math.exp(x), "s0", f"b{i // 2}", BlockKind.COMPARE)
             for i, x in enumerate(xs)]
    ctx = DecisionContext(Direction.MAXIMIZE, replace(SPEC, confirm=False), 0.0075,
                          slots=("s0",), noise={"s0": 0.22},
                          block_noise={"b0": 0.04, "b1": 0.28, "b2": 0.05})
    fooled = rule.decide(pairs, ctx)
    assert fooled.verdict is Verdict.KEEP  # the slot's inflated noise hides the wild pairs
    held = rule.decide(pairs, replace(ctx, pooled=0.028))
    assert held.verdict is Verdict.CONTINUE
    assert "are wild" in held.details["keep_from"]


def test_block_scale_follows_the_blocks_own_samples() -> None:
    from assay.decision.stats.noise import BLOCK_PRIOR_DF, block_scale

    assert block_scale(0.02, []) == 0.02
    assert math.isnan(block_scale(math.nan, []))
    quiet = block_scale(0.02, [0.02, -0.02])
    assert quiet == pytest.approx(0.02)
    hit = block_scale(0.02, [0.3, 0.0])
    assert hit == pytest.approx(math.sqrt((BLOCK_PRIOR_DF * 0.02**2 + 0.09)
                                          / (BLOCK_PRIOR_DF + 2)))
    assert hit > 5 * 0.02


def test_biweight_gives_a_far_block_no_weight_on_either_side() -> None:
    from assay.decision.stats.robust import biweight

    base = [0.01, -0.005, 0.004, 0.0, 0.006, -0.002, 0.003, 0.001]
    for far in (0.3, -0.3):
        est = biweight([*base, far, far * 0.9], [0.01] * 8 + [0.002, 0.002], 8)
        assert abs(est.mean - float(np.mean(base))) < 0.005
        assert est.weights[-1] == 0.0 and est.weights[-2] == 0.0
    clean = biweight(base, [0.01] * 8, 8)
    assert math.isfinite(clean.se) and clean.se > 0


def test_a_candidate_with_no_chance_of_a_keep_by_the_budget_stops_early() -> None:
    """Just above δ with the noise of a busy machine, a keep at the budget is out of reach:
    from a quarter of the budget on the rule stops, and says the chance; a candidate whose
    effect could still clear δ goes on, and so does the same one before a quarter."""
    rule = SequentialRule()
    ctx = DecisionContext(Direction.MAXIMIZE, SPEC, SPEC.delta, slots=("s0",),
                          noise={"s0": 0.04}, pooled=0.04)

    def pairs_at(mean: float, n: int) -> list[Pair]:
        xs = [mean + (0.04 if i % 2 else -0.04) for i in range(n)]
        return [Pair(100.0, 100.0 * math.exp(x), "s0", f"b{i // 2}", BlockKind.COMPARE)
                for i, x in enumerate(xs)]

    low = rule.decide(pairs_at(0.012, 16), ctx)
    assert low.verdict is Verdict.DISCARD
    assert "within the budget of 40 pairs" in low.reason
    assert "the chance of a keep by then is" in low.reason
    assert low.details["keep_chance"] < 0.05
    assert rule.decide(pairs_at(0.012, 8), ctx).verdict is Verdict.CONTINUE  # under 10
    assert rule.decide(pairs_at(0.03, 16), ctx).verdict is Verdict.CONTINUE
