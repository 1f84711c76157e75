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
from typing import Any

from ..decision import (
    DecisionContext,
    digits_stall,
    rounding_bound,
    rounding_words,
    to_fraction,
)
from ..model import BlockKind, Decision, Direction, NextBlock, Pair, Verdict
from .bounds import bound_at, t_quantile_for
from .screen import SUSPICIOUS_K, screen
from .sequential import (
    MAX_CONFIRMATIONS,
    Estimate,
    _agrees,
    confirmation_state,
    futility_words,
    prior_noise,
)

MIN_HISTORY = 2
CALIBRATION_PAIRS = 1  # A/A pairs per slot under this rule: two incumbent runs, kept as history
PLAUSIBLE = 0.5  # a one-run change up to this log-ratio (about +/-40 %) is not "implausible"


def _alog(v: float) -> float | None:
    return math.log(v) if math.isfinite(v) and v > 0 else None


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
        runs_used = len(pairs) + n_new_a
        # The screen's unit is max(noise, δ, PLAUSIBLE / its factor): against the near-zero
        # noise of a seeded GPU run, a clean gain of several δ is not implausible.
        noise_unit = max(run0 * math.sqrt(2), math.log1p(ctx.delta), PLAUSIBLE / SUSPICIOUS_K)
        sc = screen(sub, x, noise_unit, ctx.bounds, spec.max_pairs)
        n_compare = sum(1 for p in pairs if p.kind is BlockKind.COMPARE)
        details: dict[str, Any] = {
            "reruns": sc.reruns, "outliers": sc.outliers, "suspicious": sc.suspicious,
            "unreproduced": sc.unreproduced, "over_cap": sc.over_cap,
            "set_aside": list(sc.set_aside), "incumbent_runs_reused": {
                s: len(v) for s, v in ctx.incumbent_history.items()},
            "fresh_incumbent_runs": n_new_a}
        order = self._order(ctx, slot)
        d_log = math.log1p(ctx.delta)
        band = f"{ctx.delta:+.2%}"

        def out(verdict: Verdict, reason: str, est: Estimate | None = None,
                nxt: NextBlock | None = None, extra: dict[str, Any] | None = None) -> Decision:
            det = dict(details, **(extra or {}))
            kw: dict[str, Any] = {}
            if est is not None:
                det.update(sd=round(est.sd, 6), df=est.df, n_used=est.n)
                kw = {"effect": to_fraction(est.mean), "lo": to_fraction(est.lo),
                      "hi": to_fraction(est.hi)}
            return Decision(verdict, reason, pairs_used=len(pairs), runs_used=runs_used,
                            delta=ctx.delta, next_block=nxt, rule=self.name, details=det, **kw)

        if sc.pending:
            return out(Verdict.CONTINUE, f"re-measuring {sc.pending} candidate run(s) flagged "
                       "as outlier or implausible",
                       nxt=NextBlock(sc.pending, BlockKind.RERUN, order="B" * sc.pending,
                                     reason="re-run of flagged runs"))
        idx = list(sc.index)
        vals = [x[i] for i in idx]
        if not vals:
            if n_compare >= spec.max_pairs:
                return out(Verdict.DISCARD, "no usable candidate run within the budget")
            return out(Verdict.CONTINUE, "no usable candidate run yet",
                       nxt=NextBlock(1, order=order, reason="a usable run"))
        # run sd: prior, incumbent history spread, candidate spread per slot
        ss, df = (df0 * run0**2, float(df0)) if run0 > 0 else (0.0, 0.0)
        for s, v in alogs.items():
            if len(v) >= 2:
                m = amean[s]
                ss += math.fsum((u - m) ** 2 for u in v)
                df += len(v) - 1
        by_slot: dict[str, list[float]] = {}
        for i in idx:
            by_slot.setdefault(sub[i].slot, []).append(x[i])
        for v in by_slot.values():
            if len(v) >= 2:
                m = math.fsum(v) / len(v)
                ss += math.fsum((u - m) ** 2 for u in v)
                df += len(v) - 1
        n = len(vals)
        mean = math.fsum(vals) / n
        alpha = (1.0 - spec.confidence) / 2.0
        z_keep = bound_at(n, 1, spec.max_pairs, alpha, self.rho)
        z_fut = self.futility / math.sqrt(n)
        if df <= 0:
            return out(Verdict.CONTINUE, "run noise unknown yet: one more candidate run",
                       nxt=NextBlock(1, order=order, reason="noise unknown"))
        run_sd = math.sqrt(ss / df)
        factor = 1.0 / n + sum((len(v) / n) ** 2 / len(alogs[s]) for s, v in by_slot.items())
        se = run_sd * math.sqrt(factor)
        # The interval is two-sided at this look's spending bound (a repeated confidence
        # interval); the futility threshold is its own, narrower, upper bound.
        # widened on each side by what the printed digits leave open (see rounding_bound)
        rounding = rounding_bound(
            [r for s in by_slot for r in ctx.incumbent_history.get(s, ())]
            + [p.a for p in sub if _alog(p.a) is not None], [p.b for p in sub])
        half = t_quantile_for(z_keep, df) * se + rounding
        est = Estimate(mean, run_sd, df, n, mean - half, mean + half, z_keep, z_fut)
        fut_hi = mean + t_quantile_for(z_fut, df) * se + rounding
        details["futility_bound"] = to_fraction(fut_hi)
        details["rounding_bound"] = rounding
        summary = (f"effect {to_fraction(mean):+.2%}, interval [{to_fraction(est.lo):+.2%}, "
                   f"{to_fraction(est.hi):+.2%}] over {n} candidate run(s)"
                   + rounding_words(rounding, d_log))
        confirm_ids, awaiting = confirmation_state(pairs)
        if awaiting:
            cid = confirm_ids[-1]
            # The confirmation run against the incumbent run beside it (paired: a machine
            # that got quieter or busier since the history moves both), else the history.
            confirming = [i for i in idx if sub[i].block_id == cid
                          and sub[i].kind is BlockKind.CONFIRM]
            paired = [sub[i] for i in confirming if _alog(sub[i].a) is not None]
            if paired:
                cvals = [sign * (math.log(p.b) - math.log(p.a)) for p in paired]
                c_sd = run_sd * math.sqrt(2)
            else:
                cvals = [x[i] for i in confirming]
                c_sd = run_sd * math.sqrt(1 + 1 / max(
                    len(alogs.get(_slot_of(pairs, cid), [])), 1))
            cest = Estimate(mean, c_sd, df, n, est.lo, est.hi, z_keep, z_fut)
            agree, why = _agrees(cvals, cest, d_log, 1.0)
            if agree and est.lo <= d_log:  # the keep must still hold with the new run(s)
                agree, why = False, (f"with the confirmation run the interval's lower end "
                                     f"{to_fraction(est.lo):+.2%} is no longer above {band}")
            conf = {"confirm_blocks": len(confirm_ids), "confirm_agreed": agree}
            if agree:
                return out(Verdict.KEEP, f"kept: the sequential lower bound cleared {band} and "
                           f"a confirmation run agreed ({why}); {summary}", est, extra=conf)
            if len(confirm_ids) >= MAX_CONFIRMATIONS or n_compare >= spec.max_pairs:
                return out(Verdict.DISCARD, f"discarded: the confirmation disagreed ({why}); "
                           f"{summary}", est, extra=conf)
            return out(Verdict.CONTINUE, f"the confirmation disagreed ({why}); measuring "
                       f"more; {summary}", est,
                       nxt=NextBlock(1, order=order, reason="confirmation disagreed"), extra=conf)
        if est.lo > d_log:
            if spec.confirm:
                return out(Verdict.CONTINUE, f"provisional keep: the sequential lower bound "
                           f"lies above {band}; asking for a confirmation run beside a "
                           f"fresh incumbent run; {summary}", est,
                           nxt=NextBlock(1, BlockKind.CONFIRM, other_slot=True, order="AB",
                                         reason="confirm a provisional keep"))
            return out(Verdict.KEEP, f"kept: the sequential lower bound lies wholly above "
                       f"{band}; {summary}", est)
        if fut_hi < d_log:
            words = futility_words(est.hi < d_log, band, f"{spec.confidence:.0%}",
                                   f"{spec.max_pairs} runs")
            return out(Verdict.DISCARD, f"discarded early (futility): {words}: even the "
                       f"futility bound {to_fraction(fut_hi):+.2%} lies short of {band}; "
                       f"{summary}", est)
        stall = digits_stall(vals, rounding, d_log)
        if stall:
            return out(Verdict.DISCARD, f"discarded as inconclusive: {stall}; {summary}", est)
        if n_compare >= spec.max_pairs:
            return out(Verdict.DISCARD, f"discarded as inconclusive at the budget of "
                       f"{spec.max_pairs} runs: the interval straddles {band}; {summary}", est)
        return out(Verdict.CONTINUE, f"undecided near {band}: one more candidate run; "
                   f"{summary}", est, nxt=NextBlock(1, order=order, reason="near the band"))


def _slot_of(pairs: Sequence[Pair], block_id: str) -> str:
    return next((p.slot for p in pairs if p.block_id == block_id), "")
