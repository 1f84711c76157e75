"""Does an effect depend on the slot (the GPU, the machine) it was measured on?

Same-model GPUs differ in speed by several percent, and a change can help on one and not
another (a kernel that only pays where clocks throttle, say). After a keep, the pairs are
grouped by slot and a one-way analysis of variance on the per-pair log-ratios asks
whether the slots' mean effects differ by more than the within-slot noise explains
(F test, ``k - 1`` and ``N - k`` degrees of freedom). Effects are reported as
improvements (positive means better), per slot, with the test's p-value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ...model import Direction, Pair


@dataclass(frozen=True)
class SlotEffect:
    slot: str
    pairs: int
    effect: float  # relative improvement, +0.05 = 5% better


@dataclass(frozen=True)
class Heterogeneity:
    per_slot: tuple[SlotEffect, ...]
    f: float | None  # the F statistic (None: not enough pairs to test)
    p: float | None
    dependent: bool  # the effect differs between slots at the given level

    def words(self) -> str:
        each = ", ".join(f"{e.effect:+.2%} on {e.slot} ({e.pairs} pairs)" for e in self.per_slot)
        if self.p is None:
            return f"per slot: {each}"
        if self.dependent:
            return f"slot-dependent effect: {each} (F test p = {self.p:.3g})"
        return f"consistent across slots: {each} (F test p = {self.p:.2g})"


def _log_ratio(p: Pair, direction: Direction) -> float | None:
    if not (p.a > 0 and p.b > 0) or math.isnan(p.a):
        return None
    r = math.log(p.b / p.a)
    return r if direction is Direction.MAXIMIZE else -r


def heterogeneity(pairs: Sequence[Pair], direction: Direction,
                  alpha: float = 0.05) -> Heterogeneity:
    """Per-slot improvements and a test of whether they differ (needs 2+ slots, 2+ pairs each)."""
    by_slot: dict[str, list[float]] = {}
    for pair in pairs:
        x = _log_ratio(pair, direction)
        if x is not None:
            by_slot.setdefault(pair.slot, []).append(x)
    per = tuple(SlotEffect(s, len(xs), math.expm1(sum(xs) / len(xs)))
                for s, xs in sorted(by_slot.items()))
    groups = [xs for xs in by_slot.values() if len(xs) >= 2]
    k = len(groups)
    n = sum(len(g) for g in groups)
    if k < 2 or n - k < 1:
        return Heterogeneity(per, None, None, False)
    grand = sum(sum(g) for g in groups) / n
    between = sum(len(g) * (sum(g) / len(g) - grand) ** 2 for g in groups)
    within = sum(sum((x - sum(g) / len(g)) ** 2 for x in g) for g in groups)
    if within <= 0:
        f = math.inf if between > 0 else 0.0
        pval = 0.0 if between > 0 else 1.0
    else:
        from scipy import stats as sps

        f = (between / (k - 1)) / (within / (n - k))
        pval = float(sps.f.sf(f, k - 1, n - k))
    return Heterogeneity(per, f, pval, pval < alpha)
