"""The decision interface, and decision v1 (a fixed number of paired runs).

A :class:`DecisionRule` is a pure policy: ``decide(pairs, ctx)`` looks at every pair of the
primary metric measured so far for one experiment (in the order measured) and returns a
:class:`~assay.model.Decision`: keep, discard, or continue with the block it wants next.
Because it is a pure function of the evidence, a resumed run re-derives the same decision.
The loop is dumb: it measures what the rule asks for and stops when it says so.

Guards (metrics that must not regress) and checks are judged outside the rule, by
:func:`guards_hold`, so every rule gets them for free.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..config.spec import DecisionSpec, MetricSpec
from ..model import Decision, Direction, NextBlock, Pair, Role, RunResult, RunStatus, Verdict


@dataclass(frozen=True)
class DecisionContext:
    direction: Direction
    spec: DecisionSpec
    delta: float  # the effective minimum effect (spec.delta, raised by calibration)
    slots: tuple[str, ...] = ()
    noise: Mapping[str, float] = field(default_factory=dict)  # sd of the pair log-ratio
    incumbent_history: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    bounds: tuple[float, float] | None = None
    block_noise: Mapping[str, float] = field(default_factory=dict)  # block id -> pair noise
    pooled: float = math.nan  # the pooled pair noise of the latest samples on every slot
    noise_samples: Mapping[str, int] = field(default_factory=dict)  # behind each slot's noise


class DecisionRule(Protocol):
    """One small policy. ``first_block`` starts an experiment; ``decide`` does the rest."""

    name: str

    def first_block(self, ctx: DecisionContext) -> NextBlock: ...

    def decide(self, pairs: Sequence[Pair], ctx: DecisionContext) -> Decision: ...


def signed_log_ratios(pairs: Sequence[Pair], direction: Direction) -> list[float]:
    """Per-pair log(B/A), signed so that positive always means the candidate is better."""
    sign = 1.0 if direction is Direction.MAXIMIZE else -1.0
    out = []
    for p in pairs:
        if p.a > 0 and p.b > 0:
            out.append(sign * math.log(p.b / p.a))
        else:  # metrics that can be zero or negative: a relative difference instead
            scale = abs(p.a) if p.a != 0 else 1.0
            out.append(sign * (p.b - p.a) / scale)
    return out


STALL_AFTER = 3  # equal measured effects before more runs are taken to add nothing


def printed_step(value: float) -> float:
    """The place value of the last digit of ``value`` written in its shortest form
    (``0.9134`` -> 1e-4, ``1.25e-05`` -> 1e-7, ``120.0`` -> 1): a benchmark that printed the
    value told nothing finer apart. 0 for zero and non-finite values."""
    if not math.isfinite(value) or value == 0:
        return 0.0
    mantissa, _, exponent = repr(abs(value)).partition("e")
    digits = mantissa.partition(".")[2].rstrip("0")  # repr writes 120.0 for 120
    return 10.0 ** ((int(exponent) if exponent else 0) - len(digits))


def rounding_bound(incumbent: Iterable[float], candidate: Iterable[float]) -> float:
    """The largest error, as a log-ratio, that rounding to the printed digits can put in an
    effect, summed over both sides.

    Averaging runs shrinks noise, and rounding too once the noise spreads a side's values
    over several printed steps: then the rounding averages out, and the bias left is at
    most ``(h/π) Σₖ exp(−2π²k²σ²/h²)/k`` for a step ``h`` and a noise ``σ`` (the Fourier
    series of rounding under Gaussian noise), 0.23 % of ``h`` at ``σ = h/2``. Values that
    repeat exactly are not averaged at all: a benchmark that prints ``3.3`` every time may
    be running 3.25 or 3.35, half a step either way. Every interval is widened by this, so
    exact repeats get an interval as wide as their digits allow, not a zero-width one; for
    values printed to six digits it is below 1e-5 and changes nothing a user reads.
    """
    total = 0.0
    for side in (incumbent, candidate):
        vals = [abs(v) for v in side if math.isfinite(v) and v != 0]
        if not vals:
            continue
        step = min(printed_step(v) for v in vals)
        # the noise under the rounding: the values' variance less a step's h²/12
        # (Sheppard's correction), so values that only flicker across one boundary, true
        # noise far below a step, are not taken for noise that averages the rounding out
        var = statistics.variance(vals) if len(vals) > 1 else 0.0
        spread = math.sqrt(max(var - step * step / 12, 0.0))
        # at most 0.5: no value's last digit has a place above the value itself
        half = min(_rounding_bias(step, spread) / statistics.median(vals), 0.5)
        total += -math.log1p(-half)
    return total


def _rounding_bias(step: float, spread: float) -> float:
    """The largest bias of a mean of values rounded to ``step`` whose noise has sd
    ``spread``: half a step without noise, vanishing once the noise spans a step."""
    if spread <= 0 or step <= 0:
        return 0.5 * step
    r = (spread / step) ** 2
    terms = (math.exp(-2 * math.pi**2 * k * k * r) / k for k in range(1, 200))
    return min(0.5 * step, step / math.pi * math.fsum(terms))


def rounding_words(rounding: float, d_log: float) -> str:
    """What a reason says of a rounding bound that matters (a tenth of δ or more)."""
    if not rounding >= 0.1 * d_log:
        return ""
    return (f"; widened by {to_fraction(rounding):.2%} on each side for the printed digits, "
            "which repeat runs do not refine")


def digits_stall(values: Sequence[float], rounding: float, d_log: float) -> str:
    """Why more runs cannot decide, when they cannot: at least :data:`STALL_AFTER` measured
    effects (log-ratios), all exactly equal (the benchmark prints the same numbers every
    run), whose printed digits leave the effect on both sides of δ. '' otherwise."""
    if len(values) < STALL_AFTER or max(values) != min(values):
        return ""
    if not values[0] - rounding <= d_log <= values[0] + rounding:
        return ""
    return (f"all {len(values)} measured effects are exactly equal, so more runs add "
            f"nothing, and the printed digits leave the effect anywhere within "
            f"{to_fraction(rounding):.2%} of {to_fraction(values[0]):+.2%}, on both sides of "
            "δ: print the metric with more digits")


def to_fraction(log_effect: float) -> float:
    """A log-ratio effect as a fraction: 0.0296 -> about 3% better."""
    return math.expm1(log_effect)


class FixedPairs:
    """Decision v1: measure ``max_pairs`` pairs in ABBA blocks, then one t interval.

    Keep only when the whole interval on the mean signed log-ratio clears ``+delta``.
    """

    name = "fixed"

    def first_block(self, ctx: DecisionContext) -> NextBlock:
        return NextBlock(pairs=min(ctx.spec.pairs_per_block, ctx.spec.max_pairs),
                         reason="first block")

    def decide(self, pairs: Sequence[Pair], ctx: DecisionContext) -> Decision:
        from scipy import stats as sst

        n = len(pairs)
        want = ctx.spec.max_pairs
        if n < want:
            return Decision(Verdict.CONTINUE, f"{n} of {want} pairs measured", pairs_used=n,
                            runs_used=2 * n, delta=ctx.delta, rule=self.name,
                            next_block=NextBlock(min(ctx.spec.pairs_per_block, want - n)))
        x = signed_log_ratios(pairs, ctx.direction)
        mean = sum(x) / n
        sd = float("inf") if n < 2 else math.sqrt(sum((v - mean) ** 2 for v in x) / (n - 1))
        if sd == 0:
            half = 0.0
        else:
            t = float(sst.t.ppf(0.5 + ctx.spec.confidence / 2, max(n - 1, 1)))
            half = t * sd / math.sqrt(n)
        rounding = rounding_bound([p.a for p in pairs], [p.b for p in pairs])
        lo, hi = mean - half - rounding, mean + half + rounding
        eff, flo, fhi = to_fraction(mean), to_fraction(lo), to_fraction(hi)
        band = f"{ctx.delta:+.2%}"
        conf = f"{ctx.spec.confidence:.0%}"
        if flo > ctx.delta:
            verdict, why = Verdict.KEEP, f"the {conf} interval lies wholly above {band}"
        elif fhi < ctx.delta:
            verdict, why = Verdict.DISCARD, f"the {conf} interval lies wholly below {band}"
        else:
            verdict, why = Verdict.DISCARD, (f"inconclusive at the budget: the {conf} interval "
                                             f"straddles {band}")
        reason = (f"{why}: effect {eff:+.2%} [{flo:+.2%}, {fhi:+.2%}] over {n} pairs"
                  + rounding_words(rounding, math.log1p(ctx.delta)))
        return Decision(verdict, reason, effect=eff, lo=flo, hi=fhi, pairs_used=n,
                        runs_used=2 * n, delta=ctx.delta, rule=self.name)


def median_of(runs: Sequence[RunResult], role: Role, name: str,
              holdout: bool = False) -> float | None:
    """The median of ``name`` over the ok runs of one side (the holdout values if asked)."""
    vals = sorted((r.holdout if holdout else r.metrics)[name] for r in runs
                  if r.role is role and r.status is RunStatus.OK
                  and name in (r.holdout if holdout else r.metrics))
    return vals[len(vals) // 2] if vals else None


@dataclass(frozen=True)
class GuardChange:
    """A guard metric over one experiment's runs: each side's median and the relative
    change of the candidate's (``better``: positive is better, by the guard's direction)."""

    name: str
    unit: str
    incumbent: float | None
    candidate: float | None
    better: float | None
    tolerance: float

    @property
    def regressed(self) -> bool:
        return self.better is not None and -self.better > self.tolerance

    def describe(self) -> str:
        """``pp512 1000 -> 901.3 tok/s (-9.87%, tolerance 2.00%): regressed``."""
        if self.incumbent is None or self.candidate is None:
            side = "candidate" if self.candidate is None else "incumbent"
            return f"{self.name}: not measured on the {side}"
        unit = f" {self.unit}" if self.unit else ""
        return (f"{self.name} {self.incumbent:.4g} -> {self.candidate:.4g}{unit} "
                f"({self.better:+.2%}, tolerance {self.tolerance:.2%}): "
                f"{'regressed' if self.regressed else 'holds'}")

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "unit": self.unit, "incumbent": self.incumbent,
                "candidate": self.candidate, "better": self.better,
                "tolerance": self.tolerance, "regressed": self.regressed}


def guard_change(runs: Sequence[RunResult], spec: MetricSpec,
                 holdout: bool = False) -> GuardChange:
    """The medians of ``spec`` on both sides and the candidate's relative change."""
    mb = median_of(runs, Role.CANDIDATE, spec.name, holdout)
    ma = median_of(runs, Role.INCUMBENT, spec.name, holdout)
    better = None
    if ma is not None and mb is not None:
        change = (mb - ma) / (abs(ma) if ma != 0 else 1.0)
        better = change if spec.direction is Direction.MAXIMIZE else -change
    return GuardChange(spec.name, spec.unit, ma, mb, better, spec.tolerance)


def regression(runs: Sequence[RunResult], spec: MetricSpec, holdout: bool = False) -> str:
    """Why the candidate's median of ``spec`` regressed beyond its tolerance ('' if it did not).

    A metric missing on the candidate's side is a regression; missing on the incumbent's
    side, there is nothing to compare against and none is reported.
    """
    label = "the holdout" if holdout else f"guard {spec.name}"
    g = guard_change(runs, spec, holdout)
    if g.candidate is None:
        return f"{label} was not measured on the candidate"
    if g.incumbent is None:
        return f"{label} was not measured on the incumbent" if holdout else ""
    if g.regressed and g.better is not None:
        return (f"{label} regressed by {-g.better:.2%} (tolerance {spec.tolerance:.2%}): "
                f"{g.incumbent:g} -> {g.candidate:g}")
    return ""


def guards_hold(runs: Sequence[RunResult], guards: Sequence[MetricSpec]) -> tuple[bool, str]:
    """Check that no guard metric regresses beyond its tolerance (median B vs median A)."""
    problems = [why for g in guards if (why := regression(runs, g))]
    return (not problems, "; ".join(problems) or "all guards hold")
