"""Start-up calibration from A/A blocks: per-slot noise, quarantine and the band δ.

An A/A pair compares the incumbent with itself, so its log-ratio has a true mean of zero
and estimates the noise of one pair's log-ratio. Calibration is the first state of the
noise tracker (:mod:`assay.decision.stats.noise`): the same robust, windowed estimate, the same
quarantine rule and the same δ floor, which later blocks keep moving.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ...config.spec import DecisionSpec
from ...model import Direction, Pair
from .noise import NoiseState, aa_samples, describe, resolvable, track
from .regime import Regime

__all__ = ["NoiseEstimate", "calibrate", "resolvable", "state_of"]

WILD_K = 4.5  # robust sds: A/A pairs beyond this are named in the message


@dataclass(frozen=True)
class NoiseEstimate:
    """What the A/A blocks say: each slot's pair noise, the slots quarantined and δ."""

    noise: Mapping[str, float]  # sd of one pair's log-ratio, per slot still in use
    pooled: float  # pooled over the slots in use
    pooled_df: int  # A/A pairs behind ``pooled``
    delta_effective: float  # as a fraction
    quarantined: Mapping[str, str] = field(default_factory=dict)  # slot -> reason
    message: str = ""
    raw_noise: Mapping[str, float] = field(default_factory=dict)  # every slot, as measured
    samples: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    regime: Regime | None = None  # which noise the run is in (assay.decision.stats.regime)


def state_of(cal: NoiseEstimate) -> NoiseState:
    return NoiseState(noise=cal.noise, pooled=cal.pooled,
                      samples={s: len(v) for s, v in cal.samples.items()},
                      delta=cal.delta_effective, quarantined=cal.quarantined, raw=cal.raw_noise,
                      regime=cal.regime)


def calibrate(aa_pairs: Mapping[str, Sequence[Pair]], spec: DecisionSpec,
              direction: Direction) -> NoiseEstimate:
    """Per-slot noise from A/A pairs, quarantine of noisy slots, and the effective δ."""
    samples = {s: aa_samples(list(ps), direction) for s, ps in aa_pairs.items()}
    if not any(samples.values()):
        return NoiseEstimate({}, math.nan, 0, spec.delta, {},
                             f"no A/A pairs measured: noise unknown, δ stays {spec.delta:.2%}")
    state = track(samples, spec, recent=[(s, v) for s, vs in samples.items() for v in vs])
    quarantined = dict(state.quarantined)
    for s, v in samples.items():
        if not v:
            quarantined[s] = "no A/A pair measured"
    message = describe(state, spec)
    used = [v for s, vs in samples.items() if s not in quarantined for v in vs]
    wild = sum(1 for v in used if math.isfinite(state.pooled)
               and abs(v) > WILD_K * state.pooled)
    if wild:
        message += (f"; {wild} wild A/A pair(s) beyond {WILD_K:g} robust sd: the median-based "
                    "estimate gives them no more weight than any other pair")
    return NoiseEstimate(noise=dict(state.noise), pooled=state.pooled, pooled_df=len(used),
                         delta_effective=state.delta, quarantined=quarantined, message=message,
                         raw_noise=dict(state.raw),
                         samples={s: tuple(v) for s, v in samples.items()},
                         regime=state.regime)
