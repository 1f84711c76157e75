"""The noise regime: a minority of wild pairs, or a machine disturbed throughout."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from assay.config import DecisionSpec
from assay.stats.noise import changes, describe, robust_scale, track
from assay.stats.regime import DISTURBED, MINORITY, QUIET, classify, limit

SPEC = DecisionSpec(rule="sequential", pairs_per_block=2, max_pairs=12, min_pairs=2,
                    confidence=0.90, delta=0.01, confirm=True, aa_blocks=2)


def _loaded(rng: np.random.Generator, n: int) -> np.ndarray:
    """Pair log-ratios of a machine busy throughout: 1% noise, and every run slowed by its
    own gamma-distributed share (shape 0.5, sd 4%)."""
    def run() -> np.ndarray:
        return 0.01 * rng.standard_normal(n) + rng.gamma(0.5, 0.04 / math.sqrt(0.5), n)
    return run() - run()


def _regime(xs: np.ndarray) -> str:
    vals = [float(v) for v in xs]
    return classify(vals, robust_scale(vals, len(vals))).name


def test_quiet_noise_is_called_disturbed_about_once_in_a_hundred() -> None:
    rng = np.random.default_rng(21)
    for n in (12, 24, 96):
        calls = [_regime(0.02 * rng.standard_normal(n)) for _ in range(400)]
        assert calls.count(DISTURBED) <= 12, (n, calls.count(DISTURBED))
        assert calls.count(QUIET) >= 300, n
    assert limit(3) == math.inf and limit(96) < limit(24) < limit(12)


def test_a_wild_minority_keeps_the_quiet_core_as_the_noise() -> None:
    # a noisy neighbour slowing a quarter of all runs by 20-50%: 44% of samples wild
    rng = np.random.default_rng(22)
    runs = 0.015 * rng.standard_normal((2, 96)) - (rng.random((2, 96)) < 0.25) * np.log1p(
        rng.uniform(0.2, 0.5, (2, 96)))
    xs = [float(v) for v in runs[0] - runs[1]]
    st = track({"s0": xs}, SPEC, recent=[("s0", v) for v in xs])
    assert st.regime is not None and st.regime.name == MINORITY
    assert st.regime.far > 0.3
    # the quiet core's scale, as without the regime, far below the plain sd of 19%
    assert st.pooled == robust_scale(xs)
    assert st.pooled < 0.2 * float(np.sqrt(np.mean(np.square(xs))))
    assert "a minority of wild pairs" in describe(st, SPEC)


def test_a_machine_loaded_throughout_reports_the_whole_spread() -> None:
    rng = np.random.default_rng(23)
    xs = _loaded(rng, 96)
    plain = float(np.sqrt(np.mean(xs**2)))
    recent = [("s0", float(v)) for v in xs]
    st = track({"s0": [v for _, v in recent[-24:]]}, SPEC, recent=recent)
    assert st.regime is not None and st.regime.name == DISTURBED
    core = robust_scale([v for _, v in recent])
    assert st.pooled > 1.3 * core  # the quiet quarter alone is the luckiest pairs
    assert 0.6 * plain < st.pooled < 1.3 * plain
    line = describe(st, SPEC)
    assert "disturbed throughout" in line and "quiet quarter" in line
    # over many runs of this machine the regime is found in most of them
    found = sum(_regime(_loaded(rng, 96)) == DISTURBED for _ in range(100))
    assert found >= 70


def test_every_change_of_delta_is_said_with_its_old_and_new_value() -> None:
    spec = replace(SPEC, delta=0.002)
    rng = np.random.default_rng(24)
    base = list(0.01 * rng.standard_normal(24))
    before = track({"s0": base}, spec)
    assert before.delta > spec.delta
    # a 5% rise of the noise: a small step of δ, said all the same
    after = track({"s0": [1.05 * v for v in base]}, spec)
    lines = changes(before, after, spec)
    step = [line for line in lines if line.startswith("δ ")]
    assert step == [f"δ {before.delta:.2%} -> {after.delta:.2%}: pooled pair noise rose to "
                    f"{after.pooled:.2%} ({after.regime.name if after.regime else ''}): "
                    f"{spec.max_pairs} pairs resolve no finer band than {after.delta:.2%}"]
    # a change too small to show in the printed value says nothing
    same = track({"s0": [1.0001 * v for v in base]}, spec)
    assert not [line for line in changes(before, same, spec) if line.startswith("δ ")]
