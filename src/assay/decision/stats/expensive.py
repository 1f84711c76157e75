"""Expensive mode: candidate-only runs judged against the slot's recent incumbent runs.

When one run costs hours, re-measuring the incumbent beside every candidate run doubles
the bill. This rule reuses ``ctx.incumbent_history[slot]`` (recent incumbent runs on the
same slot) as the A side and asks for candidate runs only (order ``"B"``); a slot with
fewer than two incumbent runs on record gets an ``"AB"`` block instead, which adds a fresh
incumbent run. Candidate-only runs reach the rule as pairs whose ``a`` is NaN.

Each candidate run's log-ratio is taken against the mean log of its slot's incumbent runs.
Its variance counts both sides: ``s² (1/n + Σ (n_s/n)² / m_s)`` with ``m_s`` incumbent runs
on slot ``s``; the run sd pools the incumbent history, the candidate runs and the
calibrated noise. The same alpha-spending keep bound and futility margin as the
sequential rule are applied with one look per run, so a candidate far from δ is decided
from one or two runs and more are asked for only near δ. The interval reported is the
two-sided repeated confidence interval at the look's spending bound (Jennison & Turnbull
1989); the futility bound is a separate threshold. A provisional keep is confirmed by one
candidate run beside a fresh incumbent run (on another slot where there is one): the keep
stands when the interval's lower end, with that run, is still above δ and the run itself is
not clearly short of δ, so a machine that got quieter since the history was measured does
not pass for a gain. Calibration costs one A/A pair per slot (two incumbent runs, which become
the slot's first history), and a kept candidate's own runs are its slot's history for the
new incumbent (``Journal.recent_incumbent_values``). The history is shared by every
look, which makes successive looks more correlated than the independent increments the
boundaries assume; the boundaries then err on the conservative side. As under the
sequential rule, the interval is widened by the printed digits' bound, and runs that repeat
exactly with digits straddling δ end the experiment as inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...model import BlockKind, Decision, Direction, NextBlock, Pair, Verdict
from ..rule import DecisionContext, digits_stall, rounding_bound, rounding_words, to_fraction
from .bounds import bound_at, t_quantile_for
from .screen import SUSPICIOUS_K, Screened, screen
from .sequential import MAX_CONFIRMATIONS, confirmation_state, futility_words, prior_noise, slot_of

MIN_HISTORY = 2
CALIBRATION_PAIRS = 1  # A/A pairs per slot under this rule: two incumbent runs, kept as history
PLAUSIBLE = 0.5  # a one-run change up to this log-ratio (about +/-40 %) is not "implausible"


def _alog(v: float) -> float | None:
    return math.log(v) if math.isfinite(v) and v > 0 else None


@dataclass(frozen=True)
class Estimate:
    """The effect over the candidate runs and its interval at one look."""

    mean: float  # log scale
    sd: float  # of one value
    df: float
    n: int
    lo: float  # log scale
    hi: float
    z_keep: float
    z_futility: float


@dataclass(frozen=True)
class _Case:
    """One call of :meth:`ExpensiveRule.decide`: the incumbent's logs by slot (history and
    fresh runs), the candidate runs that have them, their signed log-ratios, the screen's
    verdict on them and the details every decision reports."""

    rule: str
    pairs: Sequence[Pair]
    ctx: DecisionContext
    sign: float
    alogs: dict[str, list[float]]
    amean: dict[str, float]
    sub: list[Pair]  # the pairs whose candidate run can be judged
    x: list[float]  # their signed log-ratios
    run0: float  # the calibrated noise of one run
    df0: int  # the degrees of freedom it is worth
    runs_used: int
    n_compare: int
    order: str  # of the next candidate run
    d_log: float
    band: str  # δ, in words
    screened: Screened
    details: dict[str, Any]

    def out(self, verdict: Verdict, reason: str, est: Estimate | None = None,
            nxt: NextBlock | None = None, extra: dict[str, Any] | None = None) -> Decision:
        """The decision, with the estimate and its interval where there is one."""
        det = dict(self.details, **(extra or {}))
        kw: dict[str, Any] = {}
        if est is not None:
            det.update(sd=round(est.sd, 6), df=est.df, n_used=est.n)
            kw = {"effect": to_fraction(est.mean), "lo": to_fraction(est.lo),
                  "hi": to_fraction(est.hi)}
        return Decision(verdict, reason, pairs_used=len(self.pairs), runs_used=self.runs_used,
                        delta=self.ctx.delta, next_block=nxt, rule=self.rule, details=det, **kw)


@dataclass(frozen=True)
class _Interval:
    """The estimate at a look, the futility bound, the printed digits' bound and the
    summary in words."""

    est: Estimate
    fut_hi: float
    rounding: float
    summary: str


class ExpensiveRule:
    name = "expensive"

    def __init__(self, rho: float = 1.0, futility: float = 1.4) -> None:
        self.rho = rho
        self.futility = futility

    def _order(self, ctx: DecisionContext, slot: str | None) -> str:
        hist = ctx.incumbent_history
        if slot is None:
            ok = any(len(v) >= MIN_HISTORY for v in hist.values())
        else:
            ok = len(hist.get(slot, ())) >= MIN_HISTORY
        return "B" if ok else "AB"

    def first_block(self, ctx: DecisionContext) -> NextBlock:
        order = self._order(ctx, None)
        return NextBlock(1, order=order, reason="first candidate run" if order == "B"
                         else "first candidate run, beside a fresh incumbent run")

    def decide(self, pairs: Sequence[Pair], ctx: DecisionContext) -> Decision:
        case = self._case(pairs, ctx)
        spec = ctx.spec
        sc = case.screened
        if sc.pending:
            return case.out(Verdict.CONTINUE, f"re-measuring {sc.pending} candidate run(s) "
                            "flagged as outlier or implausible",
                            nxt=NextBlock(sc.pending, BlockKind.RERUN, order="B" * sc.pending,
                                          reason="re-run of flagged runs"))
        idx = list(sc.index)
        vals = [case.x[i] for i in idx]
        if not vals:
            if case.n_compare >= spec.max_pairs:
                return case.out(Verdict.DISCARD, "no usable candidate run within the budget")
            return case.out(Verdict.CONTINUE, "no usable candidate run yet",
                            nxt=NextBlock(1, order=case.order, reason="a usable run"))
        by_slot: dict[str, list[float]] = {}
        for i in idx:
            by_slot.setdefault(case.sub[i].slot, []).append(case.x[i])
        ss, df = _spread(case, by_slot)
        n = len(vals)
        alpha = (1.0 - spec.confidence) / 2.0
        z_keep = bound_at(n, 1, spec.max_pairs, alpha, self.rho)
        z_fut = self.futility / math.sqrt(n)
        if df <= 0:
            return case.out(Verdict.CONTINUE, "run noise unknown yet: one more candidate run",
                            nxt=NextBlock(1, order=case.order, reason="noise unknown"))
        iv = _interval(case, vals, by_slot, math.sqrt(ss / df), df, z_keep, z_fut)
        confirm_ids, awaiting = confirmation_state(pairs)
        if awaiting:
            return _judge_confirmation(case, idx, iv, confirm_ids)
        return _judge(case, vals, iv)

    def _case(self, pairs: Sequence[Pair], ctx: DecisionContext) -> _Case:
        """The candidate runs of one call against their slots' incumbent runs, screened,
        and the details every decision of the call reports."""
        spec = ctx.spec
        sign = 1.0 if ctx.direction is Direction.MAXIMIZE else -1.0
        alogs: dict[str, list[float]] = {}
        for s, runs in ctx.incumbent_history.items():
            alogs[s] = [v for v in (_alog(r) for r in runs) if v is not None]
        for p in pairs:
            a = _alog(p.a)
            if a is not None:
                alogs.setdefault(p.slot, []).append(a)
        usable = [i for i, p in enumerate(pairs)
                  if _alog(p.b) is not None and alogs.get(p.slot)]
        sub = [pairs[i] for i in usable]
        amean = {s: math.fsum(v) / len(v) for s, v in alogs.items() if v}
        x = [sign * (math.log(p.b) - amean[p.slot]) for p in sub]
        sd0, _ = prior_noise(ctx)
        df0 = sum(1 for v in ctx.noise.values() if math.isfinite(v) and v > 0) * CALIBRATION_PAIRS
        run0 = sd0 / math.sqrt(2)
        slot = pairs[-1].slot if pairs else None
        n_new_a = sum(1 for p in pairs if _alog(p.a) is not None)
        # The screen's unit is max(noise, δ, PLAUSIBLE / its factor): against the near-zero
        # noise of a seeded GPU run, a clean gain of several δ is not implausible.
        noise_unit = max(run0 * math.sqrt(2), math.log1p(ctx.delta), PLAUSIBLE / SUSPICIOUS_K)
        sc = screen(sub, x, noise_unit, ctx.bounds, spec.max_pairs)
        details: dict[str, Any] = {
            "reruns": sc.reruns, "outliers": sc.outliers, "suspicious": sc.suspicious,
            "unreproduced": sc.unreproduced, "over_cap": sc.over_cap,
            "set_aside": list(sc.set_aside), "incumbent_runs_reused": {
                s: len(v) for s, v in ctx.incumbent_history.items()},
            "fresh_incumbent_runs": n_new_a}
        return _Case(
            rule=self.name, pairs=pairs, ctx=ctx, sign=sign, alogs=alogs, amean=amean, sub=sub,
            x=x, run0=run0, df0=df0, runs_used=len(pairs) + n_new_a,
            n_compare=sum(1 for p in pairs if p.kind is BlockKind.COMPARE),
            order=self._order(ctx, slot), d_log=math.log1p(ctx.delta),
            band=f"{ctx.delta:+.2%}", screened=sc, details=details)


def _spread(case: _Case, by_slot: dict[str, list[float]]) -> tuple[float, float]:
    """The sum of squares and degrees of freedom of the run sd: the prior, the incumbent
    history's spread and the candidate runs' spread on each slot."""
    ss, df = (case.df0 * case.run0**2, float(case.df0)) if case.run0 > 0 else (0.0, 0.0)
    for s, v in case.alogs.items():
        if len(v) >= 2:
            m = case.amean[s]
            ss += math.fsum((u - m) ** 2 for u in v)
            df += len(v) - 1
    for v in by_slot.values():
        if len(v) >= 2:
            m = math.fsum(v) / len(v)
            ss += math.fsum((u - m) ** 2 for u in v)
            df += len(v) - 1
    return ss, df


def _interval(case: _Case, vals: Sequence[float], by_slot: dict[str, list[float]],
              run_sd: float, df: float, z_keep: float, z_fut: float) -> _Interval:
    """The estimate and its repeated confidence interval at this look, and the futility
    bound; both noted in the call's details."""
    n = len(vals)
    mean = math.fsum(vals) / n
    factor = 1.0 / n + sum((len(v) / n) ** 2 / len(case.alogs[s]) for s, v in by_slot.items())
    se = run_sd * math.sqrt(factor)
    # The interval is two-sided at this look's spending bound (a repeated confidence
    # interval); the futility threshold is its own, narrower, upper bound.
    # widened on each side by what the printed digits leave open (see rounding_bound)
    rounding = rounding_bound(
        [r for s in by_slot for r in case.ctx.incumbent_history.get(s, ())]
        + [p.a for p in case.sub if _alog(p.a) is not None], [p.b for p in case.sub])
    half = t_quantile_for(z_keep, df) * se + rounding
    est = Estimate(mean, run_sd, df, n, mean - half, mean + half, z_keep, z_fut)
    fut_hi = mean + t_quantile_for(z_fut, df) * se + rounding
    case.details["futility_bound"] = to_fraction(fut_hi)
    case.details["rounding_bound"] = rounding
    summary = (f"effect {to_fraction(mean):+.2%}, interval [{to_fraction(est.lo):+.2%}, "
               f"{to_fraction(est.hi):+.2%}] over {n} candidate run(s)"
               + rounding_words(rounding, case.d_log))
    return _Interval(est, fut_hi, rounding, summary)


def _judge_confirmation(case: _Case, idx: Sequence[int], iv: _Interval,
                        confirm_ids: Sequence[str]) -> Decision:
    """The decision once the latest confirmation run is in: keep when it agrees, else
    measure more or discard."""
    est, summary, band, sub = iv.est, iv.summary, case.band, case.sub
    cid = confirm_ids[-1]
    # The confirmation run against the incumbent run beside it (paired: a machine
    # that got quieter or busier since the history moves both), else the history.
    confirming = [i for i in idx if sub[i].block_id == cid
                  and sub[i].kind is BlockKind.CONFIRM]
    paired = [sub[i] for i in confirming if _alog(sub[i].a) is not None]
    if paired:
        cvals = [case.sign * (math.log(p.b) - math.log(p.a)) for p in paired]
        c_sd = est.sd * math.sqrt(2)
    else:
        cvals = [case.x[i] for i in confirming]
        c_sd = est.sd * math.sqrt(1 + 1 / max(
            len(case.alogs.get(slot_of(case.pairs, cid), [])), 1))
    cest = Estimate(est.mean, c_sd, est.df, est.n, est.lo, est.hi, est.z_keep, est.z_futility)
    agree, why = _agrees(cvals, cest, case.d_log, 1.0)
    if agree and est.lo <= case.d_log:  # the keep must still hold with the new run(s)
        agree, why = False, (f"with the confirmation run the interval's lower end "
                             f"{to_fraction(est.lo):+.2%} is no longer above {band}")
    conf = {"confirm_blocks": len(confirm_ids), "confirm_agreed": agree}
    if agree:
        return case.out(Verdict.KEEP, f"kept: the sequential lower bound cleared {band} and "
                        f"a confirmation run agreed ({why}); {summary}", est, extra=conf)
    if len(confirm_ids) >= MAX_CONFIRMATIONS or case.n_compare >= case.ctx.spec.max_pairs:
        return case.out(Verdict.DISCARD, f"discarded: the confirmation disagreed ({why}); "
                        f"{summary}", est, extra=conf)
    return case.out(Verdict.CONTINUE, f"the confirmation disagreed ({why}); measuring "
                    f"more; {summary}", est,
                    nxt=NextBlock(1, order=case.order, reason="confirmation disagreed"),
                    extra=conf)


def _judge(case: _Case, vals: Sequence[float], iv: _Interval) -> Decision:
    """The decision with no confirmation pending: a keep (or a confirmation run asked
    for), a futility or inconclusive discard, or one more candidate run."""
    spec, d_log, band = case.ctx.spec, case.d_log, case.band
    est, fut_hi, summary = iv.est, iv.fut_hi, iv.summary
    if est.lo > d_log:
        if spec.confirm:
            return case.out(Verdict.CONTINUE, f"provisional keep: the sequential lower bound "
                            f"lies above {band}; asking for a confirmation run beside a "
                            f"fresh incumbent run; {summary}", est,
                            nxt=NextBlock(1, BlockKind.CONFIRM, other_slot=True, order="AB",
                                          reason="confirm a provisional keep"))
        return case.out(Verdict.KEEP, f"kept: the sequential lower bound lies wholly above "
                        f"{band}; {summary}", est)
    if fut_hi < d_log:
        words = futility_words(est.hi < d_log, band, f"{spec.confidence:.0%}",
                               f"{spec.max_pairs} runs")
        return case.out(Verdict.DISCARD, f"discarded early (futility): {words}: even the "
                        f"futility bound {to_fraction(fut_hi):+.2%} lies short of {band}; "
                        f"{summary}", est)
    stall = digits_stall(vals, iv.rounding, d_log)
    if stall:
        return case.out(Verdict.DISCARD, f"discarded as inconclusive: {stall}; {summary}", est)
    if case.n_compare >= spec.max_pairs:
        return case.out(Verdict.DISCARD, f"discarded as inconclusive at the budget of "
                        f"{spec.max_pairs} runs: the interval straddles {band}; {summary}", est)
    return case.out(Verdict.CONTINUE, f"undecided near {band}: one more candidate run; "
                    f"{summary}", est, nxt=NextBlock(1, order=case.order, reason="near the band"))


def _agrees(cvals: Sequence[float], est: Estimate, d_log: float, z: float
            ) -> tuple[bool, str]:
    """A confirmation agrees unless it lies significantly short of δ, or pulls the
    estimate over all pairs below δ."""
    if not cvals:
        return False, "no usable confirmation pair"
    cm = math.fsum(cvals) / len(cvals)
    upper = cm + t_quantile_for(z, est.df) * est.sd / math.sqrt(len(cvals))
    if upper <= d_log:
        return False, (f"its effect {to_fraction(cm):+.2%} has upper bound "
                       f"{to_fraction(upper):+.2%}, short of δ")
    if est.mean <= d_log:
        return False, f"the estimate over all pairs fell to {to_fraction(est.mean):+.2%}"
    return True, f"its effect {to_fraction(cm):+.2%}, upper bound {to_fraction(upper):+.2%}"
