"""Calibration from A/A blocks: per-slot noise, quarantine, and the effective band δ.

An A/A pair compares the incumbent with itself, so its log-ratio has a true mean of zero
and its root mean square estimates the sd of one pair's log-ratio with one degree of
freedom per pair. A slot whose noise is far above its peers is quarantined, with the
reason. The band δ is raised to what the pair budget can resolve: with pooled pair noise
σ and a budget of N pairs, the mean at the budget has a standard error of ``σ / sqrt(N)``;
a band narrower than one standard error cannot be told apart from no effect, so a no-op
candidate could never be stopped for futility before the budget.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..config import DecisionSpec
from ..decision import signed_log_ratios
from ..model import Direction, Pair
from .screen import MAD_TO_SD, OUTLIER_K

QUARANTINE_RATIO = 3.0  # a slot this many times noisier than the median of its peers


@dataclass(frozen=True)
class Calibration:
    noise: Mapping[str, float]  # sd of one pair's log-ratio, per slot still in use
    pooled: float  # pooled over the slots in use
    pooled_df: int  # A/A pairs behind ``pooled``
    delta_effective: float  # as a fraction
    quarantined: Mapping[str, str] = field(default_factory=dict)  # slot -> reason
    message: str = ""
    raw_noise: Mapping[str, float] = field(default_factory=dict)  # every slot, as measured


def _rms(values: Sequence[float]) -> float:
    return math.sqrt(math.fsum(v * v for v in values) / len(values)) if values else math.nan


def resolvable(noise: float, spec: DecisionSpec) -> float:
    """The smallest band (as a fraction) the pair budget can resolve at this noise."""
    if not math.isfinite(noise) or noise <= 0:
        return 0.0
    return math.expm1(noise / math.sqrt(max(spec.max_pairs, 1)))


def calibrate(aa_pairs: Mapping[str, Sequence[Pair]], spec: DecisionSpec,
              direction: Direction) -> Calibration:
    """Per-slot noise from A/A pairs, quarantine of noisy slots, and the effective δ."""
    per_slot = {s: signed_log_ratios(list(ps), direction) for s, ps in aa_pairs.items()}
    if not any(per_slot.values()):
        return Calibration({}, math.nan, 0, spec.delta, {},
                           f"no A/A pairs measured: noise unknown, δ stays {spec.delta:.2%}")
    # quarantine on a robust per-slot scale, so one wild pair does not decide it alone
    scale = {s: statistics.median(abs(v) for v in vs) * MAD_TO_SD
             for s, vs in per_slot.items() if vs}
    quarantined: dict[str, str] = {s: "no A/A pair measured" for s, vs in per_slot.items()
                                   if not vs}
    if len(scale) >= 3:
        for s, sd in scale.items():
            ref = statistics.median(v for t, v in scale.items() if t != s)
            if ref > 0 and sd > QUARANTINE_RATIO * ref:
                quarantined[s] = (f"robust pair noise {sd:.2%} is {sd / ref:.1f}x the median "
                                  f"of the other slots ({ref:.2%}); limit "
                                  f"{QUARANTINE_RATIO:g}x")
    # single wild A/A pairs on the remaining slots must not set the noise
    kept = [abs(v) for s, vs in per_slot.items() if s not in quarantined for v in vs]
    robust = statistics.median(kept) * MAD_TO_SD if kept else 0.0
    limit = OUTLIER_K * robust if robust > 0 else math.inf
    clean = {s: [v for v in vs if abs(v) <= limit] for s, vs in per_slot.items()
             if s not in quarantined}
    wild = sum(len(per_slot[s]) - len(clean[s]) for s in clean)
    for s, vs in clean.items():
        if not vs:
            quarantined[s] = f"every A/A pair beyond {OUTLIER_K:g} robust sd of the pool"
    raw = {s: _rms(vs) for s, vs in per_slot.items() if vs}
    noise = {s: _rms(vs) for s, vs in clean.items() if vs}
    used = [v for vs in clean.values() for v in vs]
    pooled = _rms(used) if used else math.nan
    res = resolvable(pooled, spec)
    delta = max(spec.delta, res)
    parts = [f"pair noise {pooled:.2%} (sd of one pair's log-ratio, {len(used)} A/A pairs "
             f"on {len(noise)} slot{'' if len(noise) == 1 else 's'})"]
    if wild:
        parts.append(f"{wild} wild A/A pair(s) beyond {OUTLIER_K:g} robust sd left out of "
                     "the noise estimate")
    if delta > spec.delta:
        parts.append(f"δ raised from {spec.delta:.2%} to {delta:.2%}: at this noise "
                     f"{spec.max_pairs} pairs resolve no finer band")
    else:
        parts.append(f"δ {delta:.2%} (the budget resolves {res:.2%})")
    for s, why in sorted(quarantined.items()):
        parts.append(f"slot {s} quarantined: {why}")
    return Calibration(noise=noise, pooled=pooled, pooled_df=len(used), delta_effective=delta,
                       quarantined=quarantined, message="; ".join(parts), raw_noise=raw)
