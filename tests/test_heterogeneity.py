"""Slot-dependent effects: per-slot improvements and the F test between slots."""

from __future__ import annotations

import random

from assay.decision.stats.heterogeneity import heterogeneity
from assay.model import Direction, Pair


def _pairs(effects: dict[str, float], n: int, noise: float, rng: random.Random,
           direction: Direction = Direction.MAXIMIZE) -> list[Pair]:
    out = []
    for slot, eff in effects.items():
        for _ in range(n):
            a = 100.0 * (1 + rng.gauss(0, noise))
            better = a * (1 + eff) * (1 + rng.gauss(0, noise))
            b = better if direction is Direction.MAXIMIZE else a * a / better
            out.append(Pair(a, b, slot, "b"))
    return out


def test_same_effect_everywhere_is_rarely_called_slot_dependent() -> None:
    rng = random.Random(7)
    flagged = sum(heterogeneity(_pairs({"gpu0": 0.05, "gpu1": 0.05, "gpu2": 0.05}, 6, 0.01,
                                       rng), Direction.MAXIMIZE).dependent
                  for _ in range(300))
    assert flagged / 300 < 0.10  # the test's level is 5%


def test_an_effect_on_one_gpu_only_is_reported_as_such() -> None:
    rng = random.Random(3)
    h = heterogeneity(_pairs({"gpu0": 0.08, "gpu1": 0.0}, 8, 0.01, rng), Direction.MAXIMIZE)
    assert h.dependent and h.p is not None and h.p < 0.01
    per = {e.slot: e.effect for e in h.per_slot}
    assert 0.06 < per["gpu0"] < 0.10 and abs(per["gpu1"]) < 0.02
    assert "slot-dependent" in h.words() and "gpu0" in h.words()


def test_minimize_reports_improvements_as_positive() -> None:
    rng = random.Random(5)
    h = heterogeneity(_pairs({"gpu0": 0.10, "gpu1": 0.10}, 6, 0.005, rng,
                             Direction.MINIMIZE), Direction.MINIMIZE)
    assert all(0.08 < e.effect < 0.12 for e in h.per_slot)
    assert not h.dependent


def test_too_few_pairs_make_no_claim() -> None:
    h = heterogeneity([Pair(1.0, 1.1, "gpu0", "b"), Pair(1.0, 1.0, "gpu1", "b")],
                      Direction.MAXIMIZE)
    assert h.p is None and not h.dependent and "per slot" in h.words()
