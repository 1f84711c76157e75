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
**disturbed throughout** and the whole scale is its noise. A run whose far samples are a
sizeable share (:data:`FAR_SHARE`) but fewer than half has **a minority of wild pairs**,
whatever the ratio: a continuous spread puts few samples that far (a gamma-loaded machine
about 2%, a noisy neighbour slowing a quarter of all runs 36%); its noise is the core
scale. Where half the samples or more are far out, the quiet quarter is a lucky minority
(two CPU hogs on two cores: only the pairs whose runs both got a core agree closely): the
run is disturbed throughout, and its whole scale is taken within :data:`FAR_K` median-based
scales instead.

The test pools the latest samples of all slots in use (up to four windows): the regime is
the machine's, and 96 samples tell a loaded machine from a quiet one in about nine runs of
ten where a single window of 24 does so in one of six (simulated, gamma-loaded runs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

FAR_K = 5.0  # samples beyond this many core scales are far out: wild, in any regime
FAR_SHARE = 0.10  # at least this share far out: a wild minority, not a spread
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
                "reference": self.reference, "words": self.words()}


def classify(samples: Sequence[float], core: float, spread: float) -> Regime:
    """The regime of ``samples`` (log-ratios with a true centre of zero) whose core scale
    is ``core`` (:func:`assay.decision.stats.noise.robust_scale` over all of them) and whose
    median-based scale is ``spread``."""
    vals = [s for s in samples if math.isfinite(s)]
    whole = whole_scale(vals, core)
    n = len(vals)
    far = sum(1 for s in vals if abs(s) > FAR_K * core) / n if n and core > 0 else 0.0
    lim = limit(n)
    if not (math.isfinite(whole) and core > 0):
        return Regime(QUIET, n, core, whole, far, lim, core)
    if far >= 0.5 and math.isfinite(spread) and spread > core:
        return Regime(DISTURBED, n, core, whole_scale(vals, spread), far, lim, spread)
    if far >= FAR_SHARE:
        name = MINORITY
    elif whole > lim * core:
        name = DISTURBED
    elif any(abs(s) > FAR_K * core for s in vals):
        name = MINORITY
    else:
        name = QUIET
    return Regime(name, n, core, whole, far, lim, core)
