"""Noise tracked all along: a robust, windowed estimate of each slot's pair noise.

Every block carries noise information. An A/A block compares the incumbent with itself;
an ABBA compare block holds two incumbent runs and two candidate runs, and the log-ratio of
the two runs of one side has a true mean of zero and the variance of one pair's log-ratio
(two run variances), so each compare block adds two noise samples for free.

Each slot's estimate is a trimmed root mean square of its last :data:`WINDOW` samples,
started from a low quantile (:func:`robust_scale`): robust (a noisy neighbour slowing a
quarter of all runs, which spoils about 44% of the samples, moves it little) and windowed
(a noisy spell leaves the window after at most :data:`WINDOW` samples, and the trim lets
go of it sooner). Each block also gets its own scale, its slot's estimate updated with the
block's own samples (:func:`block_scale`): pairs are weighted by it, so a block hit by a
noisy neighbour weighs little at once. The band δ's floor and quarantine follow the
current estimate, never a frozen one:

* δ is ``max(spec.delta, resolvable(pooled))``, the pooled noise being the same robust
  scale over the last :data:`WINDOW` samples of all slots in use; once a noisy spell is
  over, δ falls back; every change of δ that shows in its printed value is said, with its
  old and new value and its reason (:func:`changes`);
* on a machine disturbed throughout (:mod:`assay.decision.stats.regime`: the quiet quarter's scale
  and the whole spread of the latest samples disagree beyond what quiet noise allows) the
  pooled noise, and so δ's floor, is the whole spread of the latest samples, not their
  quiet core;
* a slot is quarantined when its estimate is over :data:`QUARANTINE_RATIO` times the median
  of its peers (three slots or more); its estimate is released below :data:`RELEASE_RATIO`
  times (the gap keeps a slot near the limit from flapping while its blocks in flight come
  in). A slot with few samples of its own must be further off (:data:`QUARANTINE_LIMITS`):
  a scale from four samples swings widely, and with three slots of equal noise the plain
  3x limit, checked after every block, quarantined a healthy slot in about one run in
  twelve (simulated with normal noise, 2,000 runs); the stepped limits, with the
  small-sample start of :func:`robust_scale`, do so in about one in three hundred and still
  catch a slot 4x noisier than its peers by its twelfth sample in 96% of runs, one 10x
  noisier at once. A quarantined slot measures nothing more in the
  journal; on a provisioned pool its node is replaced by a fresh one, which is calibrated
  before it measures anything.

Start-up calibration measures :data:`CALIBRATION_PAIRS` A/A pairs over all slots (at least
one block per slot): with twelve pairs the pooled estimate has a relative standard error of
about ``1/sqrt(2·12)`` ≈ 20% for normal noise, so the δ floor set from it is within a fifth
of the truth; every compare block then adds two samples, so the window is soon full.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ...config.spec import DecisionSpec
from ...model import Direction, Pair, Role, RunResult, RunStatus
from .regime import Regime, classify, whole_scale

WINDOW = 24  # samples per slot in the windowed estimate
TRIM_K = 3.5  # samples beyond this many start scales are left out
MIN_OWN = 4  # below this many samples a slot borrows the pooled estimate
MAD_TO_SD = 1.4826
SMALL = 12  # below this many samples the start scale is held to half the median-based one
START_Q = 0.25  # the quantile of |sample| the robust scale starts from
_START_Z = 0.3186  # that quantile of |Z| for standard normal Z
_TRIM_RMS = 0.9969  # root mean square of Z given |Z| <= TRIM_K
TIGHT_K = 2.0  # the first trims, from SMALL samples on
TIGHT_STEPS = 3
_TIGHT_RMS = 0.8796  # root mean square of Z given |Z| <= TIGHT_K
QUARANTINE_RATIO = 3.0
# (own samples, limit): the ratio to its peers' median a slot's noise must pass to be
# quarantined, by how many samples of its own it has; QUARANTINE_RATIO from the last step
QUARANTINE_LIMITS = ((MIN_OWN, 10.0), (8, 5.0), (12, QUARANTINE_RATIO))
RELEASE_RATIO = 2.0
CALIBRATION_PAIRS = 12
BLOCK_PRIOR_DF = 6  # samples the slot's estimate is worth in one block's scale


def sample(a: float, b: float) -> float | None:
    """The log-ratio of two runs of the same code (None where it cannot be formed)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return None
    if a > 0 and b > 0:
        return math.log(b / a)
    scale = abs(a) if a != 0 else 1.0
    return (b - a) / scale


def block_samples(runs: Sequence[RunResult], metric: str) -> list[float]:
    """Noise samples of one compare block: the two incumbent runs, the two candidate runs."""
    def side(role: Role) -> list[float]:
        return [r.metrics[metric] for r in sorted(runs, key=lambda r: r.index)
                if r.role is role and r.status is RunStatus.OK and metric in r.metrics]

    return side_samples(side(Role.INCUMBENT), side(Role.CANDIDATE))


def side_samples(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Noise samples from the runs of each side of a block, in run order (1st vs 2nd,
    3rd vs 4th ...)."""
    out: list[float] = []
    for vals in (a, b):
        for x, y in zip(vals[0::2], vals[1::2], strict=False):
            s = sample(x, y)
            if s is not None:
                out.append(s)
    return out


def aa_samples(pairs: Sequence[Pair], direction: Direction) -> list[float]:
    """Noise samples of A/A pairs (the sign does not matter)."""
    del direction
    return [s for p in pairs if (s := sample(p.a, p.b)) is not None]


def robust_scale(samples: Sequence[float], window: int = WINDOW) -> float:
    """The root mean square of the last ``window`` samples (:data:`WINDOW`), leaving out
    those beyond :data:`TRIM_K` start scales; NaN if none.

    The samples have a true centre of zero, so the start scale is a low quantile of their
    sizes: the :data:`START_Q` quantile of ``|s|`` over its value for normal noise (0.319σ
    at 25%), which stays on the clean part of the data while up to three quarters of the
    samples are wild (a noisy neighbour slowing a quarter of all runs spoils about 44% of
    the samples, enough to break a median-based start in a small window). One step of
    trimming follows (a one-step reweighted scale; Rousseeuw & Croux 1993, "Alternatives
    to the median absolute deviation", JASA 88, on high-breakdown scales): the root mean
    square of the samples within :data:`TRIM_K` start scales, corrected for the trim,
    about 90% efficient for normal noise and blind to a share of wild samples. From
    :data:`SMALL` samples on, :data:`TIGHT_STEPS` trims at :data:`TIGHT_K` scales come
    first: with 44% of the samples wild the low quantile sits in the upper half of the clean
    ones and starts about twice too high, and one trim at 3.5 such scales let the nearest
    wild samples in (one estimate in twenty over five times the truth from 24 samples, now
    under 1.7 times; for normal noise the spread of the estimate is unchanged). A genuine
    rise of the noise moves it once the noisier samples pass about a quarter of the
    window; each block's own scale (:func:`block_scale`) follows at once.

    Below :data:`SMALL` samples the start is at least half the median-based scale: the
    low quantile of four or six samples is the second smallest, which can be tiny, and the
    trim then kept only the smallest samples (one estimate in a hundred came out below a
    twentieth of the truth for normal noise; held, about a sixth). The price: when half a
    short window is wild, the held start lets some of it in; from :data:`SMALL` samples on
    the start is the low quantile alone."""
    tail = sorted(abs(s) for s in samples[-window:] if math.isfinite(s))
    if not tail:
        return math.nan
    q = tail[min(len(tail) - 1, int(START_Q * len(tail)))]
    scale = q / _START_Z if q > 0 else MAD_TO_SD * statistics.median(tail)
    if len(tail) < SMALL:
        scale = max(scale, 0.5 * MAD_TO_SD * statistics.median(tail))
    if not scale > 0:
        return math.sqrt(math.fsum(v * v for v in tail) / len(tail))
    if len(tail) >= SMALL:
        for _ in range(TIGHT_STEPS):
            scale = _trimmed(tail, scale, TIGHT_K, _TIGHT_RMS)
    return _trimmed(tail, scale, TRIM_K, _TRIM_RMS)


def _trimmed(sizes: Sequence[float], scale: float, k: float, rms: float) -> float:
    """The root mean square of the sizes within ``k`` scales, over its value for normal
    noise (``rms``); ``scale`` itself if none is."""
    kept = [v for v in sizes if v <= k * scale]
    if not kept:
        return scale
    return math.sqrt(math.fsum(v * v for v in kept) / len(kept)) / rms


def block_scale(slot_noise: float, own: Sequence[float]) -> float:
    """The pair noise of one block: its slot's windowed estimate updated with the block's
    own noise samples (the log-ratios of the two runs of each side).

    The slot's estimate is the prior, worth :data:`BLOCK_PRIOR_DF` samples, and the
    block's samples are pooled with it (the conjugate scaled-inverse-χ² update of a normal
    variance): ``s_b² = (ν₀ σ² + Σ s_j²) / (ν₀ + m)``. A block hit by a noisy neighbour,
    whose runs of one side disagree by many noise units, gets a large scale at once (and so
    little weight in the estimate), rather than waiting for the windowed estimate to move.

    The weight stays fair: within an ABBA block the mean of the pair log-ratios is
    ``(B₁ + B₂ − A₁ − A₂)/2`` and the samples are ``A₂ − A₁`` and ``B₂ − B₁``, which are
    uncorrelated with it (independent for normal noise); and as the samples are exchanged
    with each other when A and B are, the weight cannot favour either side (Cochran 1954,
    "The combination of estimates from different experiments", Biometrics 10)."""
    vals = [v for v in own if math.isfinite(v)]
    if not (math.isfinite(slot_noise) and slot_noise > 0):
        return math.sqrt(math.fsum(v * v for v in vals) / len(vals)) if vals else math.nan
    if not vals:
        return slot_noise
    var = ((BLOCK_PRIOR_DF * slot_noise**2 + math.fsum(v * v for v in vals))
           / (BLOCK_PRIOR_DF + len(vals)))
    return math.sqrt(var)


def resolvable(noise: float, spec: DecisionSpec) -> float:
    """The smallest band (as a fraction) the pair budget can resolve at this noise.

    With pair noise σ and a budget of N pairs the mean at the budget has a standard error
    of ``σ / sqrt(N)``; a band narrower than that cannot be told apart from no effect, so a
    no-op candidate could never be stopped for futility before the budget."""
    if not math.isfinite(noise) or noise <= 0:
        return 0.0
    return math.expm1(noise / math.sqrt(max(spec.max_pairs, 1)))


@dataclass(frozen=True)
class NoiseState:
    """The current noise picture: what decisions use now."""

    noise: Mapping[str, float]  # sd of one pair's log-ratio, per slot in use
    pooled: float  # root mean square over the slots in use
    samples: Mapping[str, int]  # samples behind each slot's estimate (window-capped)
    delta: float  # the effective band, as a fraction
    quarantined: Mapping[str, str] = field(default_factory=dict)  # slot -> reason
    raw: Mapping[str, float] = field(default_factory=dict)  # every slot's estimate
    regime: Regime | None = None  # which noise the run is in (None: no sample yet)

    @property
    def pooled_df(self) -> int:
        return sum(self.samples.values())

    def as_meta(self) -> dict[str, object]:
        return {"noise": dict(self.noise), "pooled": self.pooled, "delta": self.delta,
                "quarantined": dict(self.quarantined), "samples": dict(self.samples),
                "raw_noise": dict(self.raw),
                "regime": self.regime.as_meta() if self.regime is not None else None}


def track(samples: Mapping[str, Sequence[float]], spec: DecisionSpec,
          was_quarantined: Mapping[str, str] | None = None,
          recent: Sequence[tuple[str, float]] = ()) -> NoiseState:
    """The current per-slot noise, quarantine and δ from each slot's samples (oldest first).

    ``recent`` holds the latest samples of every slot in the order measured, as
    ``(slot, sample)``: where given, the pooled noise (and so δ) is the robust scale of the
    last :data:`WINDOW` of them on slots in use, so a slot that sits idle after a noisy
    spell cannot hold δ up.

    The regime (:mod:`assay.decision.stats.regime`) is judged on all of ``recent`` on slots in use
    (every slot's samples where none are given); on a machine disturbed throughout the
    pooled noise (what is reported, and what δ's floor follows) is the whole spread of the
    latest samples rather than their quiet core. Each slot's own estimate stays its quiet
    core's scale: it is the scale the rule's robust estimate weighs pairs by (a wider one
    cost the 3% scenario of ``benchmarks/decisions.py`` about four runs a decision, 43.8 ->
    47.5 at seed 1, 100 trials a cell, for no gain in keeps), and quarantine compares slots
    with each other."""
    was = dict(was_quarantined or {})
    pool = [v for _, v in recent] or [v for vs in samples.values() for v in vs]
    regime = _regime(pool)
    raw = {s: robust_scale(v) for s, v in samples.items() if v}
    counts = window_counts(samples)
    quarantined: dict[str, str] = {}
    if len(raw) >= 3:
        for s, sd in raw.items():
            ref = statistics.median(v for t, v in raw.items() if t != s)
            limit = RELEASE_RATIO if s in was else quarantine_limit(counts[s])
            if ref > 0 and counts[s] >= MIN_OWN and sd > limit * ref:
                quarantined[s] = (f"pair noise {sd:.2%} is {sd / ref:.1f}x the median of the "
                                  f"other slots ({ref:.2%}); limit {limit:g}x")
            elif s in was and counts[s] < MIN_OWN:
                quarantined[s] = was[s]  # too few fresh samples to release it yet
    used = {s: v for s, v in raw.items() if s not in quarantined and v > 0}
    pooled = (math.sqrt(math.fsum(v * v for v in used.values()) / len(used)) if used
              else math.nan)
    latest = [v for s, v in recent if s not in quarantined]
    if quarantined and latest:
        regime = _regime(latest)
    if len(latest) >= MIN_OWN:
        pooled = scale_in(regime, latest)
    noise = {s: (v if counts[s] >= MIN_OWN or not math.isfinite(pooled) else pooled)
             for s, v in used.items()}
    delta = max(spec.delta, resolvable(pooled, spec))
    return NoiseState(noise=noise, pooled=pooled, samples=counts, delta=delta,
                      quarantined=quarantined, raw=raw, regime=regime)


def _regime(pool: Sequence[float]) -> Regime | None:
    vals = [v for v in pool if math.isfinite(v)]
    if not vals:
        return None
    spread = MAD_TO_SD * statistics.median(abs(v) for v in vals)
    return classify(vals, robust_scale(vals, len(vals)), spread)


def scale_in(regime: Regime | None, samples: Sequence[float]) -> float:
    """The noise of ``samples`` (their last :data:`WINDOW`) in ``regime``: the robust
    scale of their quiet core, or on a machine disturbed throughout their whole spread
    within :data:`assay.decision.stats.regime.FAR_K` core scales (the larger of theirs and the
    machine's: a window's own core, from few samples, can be far too small)."""
    core = robust_scale(samples)
    if regime is None or not regime.disturbed:
        return core
    whole = whole_scale(samples[-WINDOW:], max(core, regime.reference))
    return whole if math.isfinite(whole) else core


def window_counts(samples: Mapping[str, Sequence[float]]) -> dict[str, int]:
    """The samples behind each slot's estimate: its own, at most :data:`WINDOW`."""
    return {s: min(len(v), WINDOW) for s, v in samples.items() if v}


def quarantine_limit(count: int) -> float:
    """How many times its peers' median noise a slot with ``count`` samples of its own
    must show to be quarantined (infinite below :data:`MIN_OWN`)."""
    limit = math.inf
    for own, ratio in QUARANTINE_LIMITS:
        if count >= own:
            limit = ratio
    return limit


def changes(before: NoiseState | None, after: NoiseState, spec: DecisionSpec) -> list[str]:
    """What changed between two states, in words: every move of δ that shows in its printed
    value (old and new, and why), a change of regime, quarantines and releases."""
    out: list[str] = []
    old_delta = before.delta if before is not None else spec.delta
    old_regime = before.regime.name if before is not None and before.regime else ""
    if after.regime is not None and old_regime and after.regime.name != old_regime:
        out.append(f"noise regime {old_regime} -> {after.regime.words()}")
    if delta_moved(old_delta, after.delta):
        why = delta_reason(old_delta, after, spec)
        out.append(f"δ {old_delta:.2%} -> {after.delta:.2%}: {why}")
    old_q = before.quarantined if before is not None else {}
    for s, why in sorted(after.quarantined.items()):
        if s not in old_q:
            out.append(f"slot {s} quarantined: {why}")
    for s in sorted(old_q):
        if s not in after.quarantined:
            sd = after.raw.get(s, math.nan)
            out.append(f"slot {s} released from quarantine: its pair noise is back to {sd:.2%}")
    return out


def delta_moved(old: float, new: float) -> bool:
    """Whether δ moved as printed (to a hundredth of a percent): every such move is said."""
    return f"{old:.2%}" != f"{new:.2%}"


def delta_reason(old: float, after: NoiseState, spec: DecisionSpec) -> str:
    """Why δ moved from ``old`` to ``after.delta``, in words."""
    regime = f" ({after.regime.name})" if after.regime is not None else ""
    if after.delta <= spec.delta:
        return (f"pooled pair noise fell to {after.pooled:.2%}{regime}; back to the configured "
                "band")
    moved = "fell to" if after.delta < old else "rose to"
    return (f"pooled pair noise {moved} {after.pooled:.2%}{regime}: {spec.max_pairs} pairs "
            f"resolve no finer band than {after.delta:.2%}")


def describe(state: NoiseState, spec: DecisionSpec) -> str:
    """One line for the journal and the terminal."""
    if not math.isfinite(state.pooled):
        # no slot has a nonzero sample: no A/A pair yet, or every pair's runs agreed exactly
        parts = [f"pair noise not known yet: no A/A pair has differed so far; δ "
                 f"{state.delta:.2%} as configured"]
    else:
        parts = [f"pair noise {state.pooled:.2%} (sd of one pair's log-ratio, robust over "
                 f"the last {WINDOW} samples, on {len(state.noise)} "
                 f"slot{'' if len(state.noise) == 1 else 's'})"]
        if state.delta > spec.delta:
            parts.append(f"δ raised from {spec.delta:.2%} to {state.delta:.2%}: at this "
                         f"noise {spec.max_pairs} pairs resolve no finer band")
        else:
            parts.append(f"δ {state.delta:.2%} (the budget resolves "
                         f"{resolvable(state.pooled, spec):.2%})")
    if state.regime is not None and math.isfinite(state.pooled):
        parts.append(f"noise regime {state.regime.words()}")
    for s, why in sorted(state.quarantined.items()):
        parts.append(f"slot {s} quarantined: {why}")
    return "; ".join(parts)
