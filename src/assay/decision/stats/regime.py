"""Which noise a run is in: a minority of wild pairs, or a machine disturbed throughout.

The tracker's scale (:func:`assay.decision.stats.noise.robust_scale`) starts from the quiet
quarter of the samples. That is right when a minority of pairs is wild (a noisy
neighbour slowing some runs by 20-50%: they lie far out, beyond a gap, and are left out),
and too low when every pair is disturbed (a machine loaded from start to end: each run
slowed by its own random share, so the samples spread continuously and the quiet quarter
is only the luckiest pairs; on ggml's soft_max with two CPU hogs the quiet-quarter scale
was 2.8% where the A/A pairs' plain sd was 12.8%).

The test is the agreement of the two: the **core** scale (the quiet-quarter start, trimmed)
and the **whole** scale, the root mean square of every sample within :data:`FAR_K` core
scales (what is left out then is far out: a wild minority). For normal noise the two agree;
their ratio exceeds :func:`limit` in 1% of samples (simulated, 20,000 samples of each size,
normal noise: the false-alarm rate of calling a quiet run disturbed). Above it the run is
**disturbed throughout** and the whole scale is its noise.

A sizeable share of samples far out (:data:`FAR_SHARE` or more) comes from either world,
and what lies between tells them apart. A wild minority lies beyond a gap: a noisy
neighbour slowing a run by 20-50% puts its samples many core scales out and next to none
in the **shoulder** between :data:`SHOULDER_K` and :data:`FAR_K` core scales (the clean
samples' normal tail holds about 1%; a quarter of all runs slowed: about 0.07 of the far
share); the run has **a minority of wild pairs** and its noise is the core scale. A machine
disturbed throughout spreads its samples continuously from the quiet quarter outwards, so
the shoulder holds a good part of them as well (at least :data:`GAP_SHARE` of the far
share): the quiet quarter is then only the luckiest pairs (two CPU hogs on two cores:
only the pairs whose runs both got a core agree closely; ggml's soft_max, 12 A/A pairs:
plain sd 12.8%, median-based 7.4%, quiet quarter 2.8%), the run is disturbed throughout,
and its whole scale is taken within :data:`FAR_K` median-based scales. So is a run with
half its samples or more far out, whatever the shoulder. Simulated over 1,000 draws of
each, runs slowed by their own gamma share (shape 0.3, sd 9%) are called a minority in 35%
of 12 samples (53% without the shoulder), 28% of 24 (63%) and 0.4% of 96 (55%); a quarter
of all runs slowed by 20-50% stays a minority in 57%, 75% and 98% (65%, 80%, 98%), and
quiet normal noise is called disturbed as before, about once in a hundred.

The test pools the latest samples of all slots in use (up to four windows): the regime is
the machine's, and 96 samples tell a loaded machine from a quiet one in about nine runs of
ten where a single window of 24 does so in one of six (simulated, gamma-loaded runs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

FAR_K = 5.0  # samples beyond this many core scales are far out: wild, in any regime
FAR_SHARE = 0.10  # at least this share far out: a wild minority, not a spread ...
SHOULDER_K = 2.5  # ... unless the shoulder, from this many core scales to FAR_K, holds
GAP_SHARE = 0.25  # at least this share of the far ones: no gap, a spread
QUIET = "quiet"
MINORITY = "a minority of wild pairs"
DISTURBED = "disturbed throughout"
# (samples, ratio): the whole-to-core ratio that normal noise exceeds in 1% of samples of
# at least that many (20,000 simulated samples per size, seed 123)
LIMITS = ((4, 1.95), (8, 1.87), (12, 2.03), (16, 1.88), (24, 1.61), (36, 1.35), (48, 1.24),
          (72, 1.14), (96, 1.10))


def limit(count: int) -> float:
    """The largest whole-to-core ratio that normal noise gives ``count`` samples (1% false
    alarm); infinite below the first tabled size."""
    out = math.inf
    for n, ratio in LIMITS:
        if count >= n:
            out = ratio
    return out


def whole_scale(samples: Sequence[float], core: float) -> float:
    """The root mean square of the samples within :data:`FAR_K` core scales (NaN if none)."""
    if not (math.isfinite(core) and core > 0):
        return math.nan
    kept = [s * s for s in samples if math.isfinite(s) and abs(s) <= FAR_K * core]
    return math.sqrt(math.fsum(kept) / len(kept)) if kept else math.nan


@dataclass(frozen=True)
class Regime:
    """The run's noise regime, from ``n`` samples, and the evidence for it."""

    name: str  # QUIET, MINORITY or DISTURBED
    n: int
    core: float
    whole: float
    far: float  # share of samples beyond FAR_K core scales
    limit: float
    reference: float = math.nan  # the whole scale keeps samples within FAR_K of these
    shoulder: float = 0.0  # share of samples between SHOULDER_K and FAR_K core scales

    @property
    def ratio(self) -> float:
        return self.whole / self.core if self.core > 0 else math.nan

    @property
    def disturbed(self) -> bool:
        return self.name == DISTURBED

    def words(self) -> str:
        """Why, in one clause."""
        if not math.isfinite(self.ratio):
            return f"{self.name} (too few samples to tell)"
        if self.disturbed and self.far >= 0.5:
            return (f"{self.name}: {self.far:.0%} of {self.n} samples lie beyond {FAR_K:g} "
                    f"scales of the quiet quarter ({self.core:.2%}), which is only the "
                    f"luckiest pairs; the whole spread ({self.whole:.2%}) is the noise")
        if self.disturbed and self.far >= FAR_SHARE:
            return (f"{self.name}: {self.far:.0%} of {self.n} samples lie beyond {FAR_K:g} "
                    f"scales of the quiet quarter ({self.core:.2%}) and {self.shoulder:.0%} "
                    f"between {SHOULDER_K:g} and {FAR_K:g}: no gap parts them from the rest, "
                    f"so the quiet quarter is only the luckiest pairs; the whole spread "
                    f"({self.whole:.2%}) is the noise")
        if self.far >= FAR_SHARE:
            return (f"{self.name}: {self.far:.0%} of {self.n} samples lie beyond {FAR_K:g} "
                    f"core scales; the core's {self.core:.2%} is the noise")
        if self.disturbed:
            return (f"{self.name}: over {self.n} samples the spread of the whole ("
                    f"{self.whole:.2%}) is {self.ratio:.1f}x that of the quiet quarter "
                    f"({self.core:.2%}), beyond the {self.limit:.2f}x that quiet noise "
                    "exceeds once in a hundred; the whole spread is the noise")
        return (f"{self.name}: over {self.n} samples the whole and the quiet quarter agree "
                f"({self.ratio:.2f}x, limit {self.limit:.2f}x)")

    def as_meta(self) -> dict[str, object]:
        return {"name": self.name, "samples": self.n, "core": self.core, "whole": self.whole,
                "ratio": self.ratio, "limit": self.limit, "far": self.far,
                "reference": self.reference, "shoulder": self.shoulder, "words": self.words()}


def classify(samples: Sequence[float], core: float, spread: float) -> Regime:
    """The regime of ``samples`` (log-ratios with a true centre of zero) whose core scale
    is ``core`` (:func:`assay.decision.stats.noise.robust_scale` over all of them) and whose
    median-based scale is ``spread``."""
    vals = [s for s in samples if math.isfinite(s)]
    whole = whole_scale(vals, core)
    n = len(vals)
    known = math.isfinite(core) and core > 0
    far = share_between(vals, FAR_K * core, math.inf) if known else 0.0
    shoulder = share_between(vals, SHOULDER_K * core, FAR_K * core) if known else 0.0
    lim = limit(n)
    if not (math.isfinite(whole) and core > 0):
        return Regime(QUIET, n, core, whole, far, lim, core, shoulder)
    spread_out = far >= 0.5 or (far >= FAR_SHARE and shoulder >= GAP_SHARE * far)
    if spread_out and math.isfinite(spread) and spread > core:
        return Regime(DISTURBED, n, core, whole_scale(vals, spread), far, lim, spread,
                      shoulder)
    if far >= FAR_SHARE:
        name = MINORITY
    elif whole > lim * core:
        name = DISTURBED
    elif far > 0:
        name = MINORITY
    else:
        name = QUIET
    return Regime(name, n, core, whole, far, lim, core, shoulder)


def share_between(samples: Sequence[float], low: float, high: float) -> float:
    """The share of ``samples`` whose size lies in ``(low, high]`` (0 for none)."""
    if not samples:
        return 0.0
    return sum(1 for s in samples if low < abs(s) <= high) / len(samples)
