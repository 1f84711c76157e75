"""Decision v3: a group-sequential paired test with a real interval and an unbiased effect.

The unit is the signed log-ratio of one A/B pair measured back to back (positive means the
candidate is better). After every block the rule forms a robust estimate of the mean
effect (:mod:`assay.decision.stats.robust`: a Tukey biweight M-estimate weighted by each block's
noise, with its sandwich variance) and a two-sided **repeated confidence interval** at the planned
looks (Jennison & Turnbull 1989, "Interim analyses: the repeated confidence interval
approach", JRSS B 51; Jennison & Turnbull 2000, *Group Sequential Methods*, ch. 9):
``mean ± c_k · se`` where ``c_k`` is the group-sequential boundary of look ``k`` spending
``(1 − confidence)/2`` on each side over the planned looks (alpha spending after Lan &
DeMets 1983, power family of Kim & DeMets 1987, boundaries from the recursion of Armitage,
McPherson & Rowe 1969). The spending is ``alpha · t³``, close to O'Brien & Fleming's shape:
little error is spent at the first looks, so a keep after a few pairs needs a large
effect, and the early keeps of a modest one (the lucky draws whose effect the rule would
overstate most) are rare; against ``alpha · t`` (Pocock's shape) this costs a few more
pairs for a clear win and gives a narrower interval at the budget. The intervals of all
planned looks cover the true effect together with probability at least ``confidence``,
so the interval printed when the rule stops is a valid confidence interval whatever made
it stop. Where it stops it covers more than ``confidence`` (96.8-99.0% at 90% in every
scenario of ``benchmarks/decisions.py``, 1,000 trials a cell, seed 1): its multiplier
``c_k`` is the one all planned looks need together (about 3 to 4.3 at the looks where
decisions stop, against 1.645 for one look), and the pairs' own standard error is not
too large (``mean ± 1.645·se`` there covers 77-90%). That width is not what limits the
keeps: the keep test spends its error as planned (keeps at exactly +δ: 2.9-4.9% against
its 5%), so a narrower interval could only keep more candidates at +δ. The keeps missed
at +4δ are mostly early futility stops (3% scenario, 200 decisions: 16 of 21 misses).

Two thresholds decide, reported separately in words:

* **keep**: the interval's lower end lies above +δ (from ``keep_after`` pairs on). This
  holds the keep rate of any candidate whose true effect is at most δ to
  ``(1 − confidence)/2`` however many looks are taken. A keep is confirmed by a fresh
  block, on another slot where there is one (and always for an implausibly large effect):
  the confirmation is the same test at the next planned look over all pairs, so it is
  inside the error budget; if the lower end falls back to δ or below the candidate goes
  back to measuring, and a second failure discards it;
* **futility** (non-binding: it can only lower the keep rate): discard once the mean plus a
  margin ``F·σ/n`` falls short of +δ, after enough pairs for a standard error of 2δ; or,
  from a quarter of the budget on, once the chance of a keep at the budget (conditional
  power, the pairs to come projected from the estimate plus :data:`HOPE_SE` standard
  errors) is below :data:`HOPELESS`. The second stops the candidates a little above δ
  that would otherwise run to the budget without a keep (3% scenario of
  ``benchmarks/decisions.py``, one experiment per calibration: mean runs 47.8 -> 44.5,
  keeps at +4δ unchanged at 90%). With the noise model worth its tracked samples (see
  :func:`prior_noise`) keeps at +4δ came out at 91–92%, and projecting from 0.35 standard errors
  instead of 0.5 spends part of that on fewer runs (whole sessions, 1,000 trials a cell,
  seeds 1, 2, 3: mean runs 43.2, 43.7, 43.6 -> 42.8, 43.3, 43.0; keeps at +4δ 91.4, 92.1,
  91.2 % -> 91.0, 91.8, 90.3 %).

Both wait while many pairs are wild (from a noisy block, down-weighted by the estimate, or
farther from the median of their slot's pairs than the slot's noise allows, the pool's
where that is lower): a robust estimate over a few pairs, most of them hit by a noisy
neighbour on one side, sits on the wild ones, so no keep and no futility stop before a
majority on one side is unlikely.

Every look the rule takes is a planned one: the plan runs from the first block to the pair
budget plus room for :data:`MAX_CONFIRMATIONS` confirmation blocks; re-runs after a
failed machine are ordinary pairs at ordinary looks, and a resumed run re-derives the same
decisions from the same pairs. The effect reported for a keep is the estimate over all
pairs less the selection bias of the provisional look among keeps
(:mod:`assay.decision.stats.unbiased`); for other verdicts it is the robust estimate. Reaching the
pair budget without a decision discards the candidate as inconclusive. The interval is
widened on each side by what the printed digits leave open
(:func:`assay.decision.rule.rounding_bound`); once every pair gives exactly the same log-ratio
and those digits straddle δ, more pairs add nothing and the candidate is discarded as
inconclusive then (:func:`assay.decision.rule.digits_stall`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scipy.special import ndtr
from scipy.stats import binom

from ...model import BlockKind, Decision, NextBlock, Pair, Verdict
from ..rule import (
    DecisionContext,
    digits_stall,
    rounding_bound,
    rounding_words,
    signed_log_ratios,
    to_fraction,
)
from .bounds import bound_at, efficacy_bounds, planned_looks, t_quantile_for
from .robust import BIWEIGHT_K, Robust, biweight
from .unbiased import bias_adjusted

MAX_CONFIRMATIONS = 2
WILD_BLOCK = 3.0  # a block whose own noise is this many times its slot's is wild
WILD_RISK = 0.01  # the chance of a wild majority on one side that a keep accepts
IMPLAUSIBLE_K = 20.0  # an effect beyond this many max(noise, δ) must be reproduced
AGREE_Z = 1.96  # a confirmation this many standard errors below the rest disagrees
SCALE_FLOOR = 0.25  # a block's scale is at least this share of the pool's noise
HOPELESS = 0.05  # futility: below this chance of a keep at the budget, stop
HOPE_SE = 0.35  # ... projected from the estimate plus this many standard errors
HOPE_FROM = 0.25  # ... from this share of the pair budget on


ESTIMATE = "bias-adjusted among keeps (conditional mean at the stopping look)"


def prior_noise(ctx: DecisionContext) -> tuple[float, int]:
    """The pooled pair noise of the slots in use, and the degrees of freedom it is worth:
    the samples behind it in the noise tracker's windows (calibration's A/A pairs, then
    two from every block, at most :data:`assay.decision.stats.noise.WINDOW` a slot), or without
    them the calibration's A/A pairs. The variance of a look pools the pairs' own spread
    with the noise model by these weights, so once the windows are full a few pairs no
    longer pay a small-sample t quantile for a noise the tracker has measured on dozens
    (3% scenario of ``benchmarks/decisions.py``, whole sessions, seed 1, 300 trials a cell:
    mean runs 44.8 -> 43.2 against 16 degrees of freedom at most)."""
    vals = [v for v in ctx.noise.values() if math.isfinite(v) and v > 0]
    if not vals:
        return 0.0, 0
    sd = math.sqrt(math.fsum(v * v for v in vals) / len(vals))
    counts = [ctx.noise_samples.get(s, 0) for s, v in ctx.noise.items()
              if math.isfinite(v) and v > 0]
    if any(counts):
        return sd, sum(counts)
    return sd, len(vals) * ctx.spec.aa_blocks * ctx.spec.pairs_per_block


@dataclass(frozen=True)
class Look:
    """The robust estimate and the repeated confidence interval at one look."""

    est: Robust
    c: float  # the two-sided RCI multiplier (t-corrected)
    lo: float  # log scale
    hi: float
    futility_hi: float  # mean + F·σ/n: the futility threshold's statistic
    rounding: float  # the printed digits' bound, in lo, hi and futility_hi


@dataclass(frozen=True)
class _Case:
    """One call of :meth:`SequentialRule.decide`: its pairs, the usable ones (indices into
    ``pairs``, their log-ratios and scales) and the details every decision reports."""

    rule: str
    pairs: Sequence[Pair]
    ctx: DecisionContext
    x: list[float]  # every pair's signed log-ratio
    used: list[int]
    vals: list[float]
    scales: list[float]
    prior_df: int
    n_compare: int
    d_log: float
    conf: str  # the confidence, in words
    band: str  # δ, in words
    details: dict[str, Any]

    def out(self, verdict: Verdict, reason: str, lk: Look | None = None,
            nxt: NextBlock | None = None, effect: float | None = None,
            extra: dict[str, Any] | None = None) -> Decision:
        """The decision, with the look's estimate and interval where there is one."""
        ctx, pairs = self.ctx, self.pairs
        det = dict(self.details, **(extra or {}))
        if lk is None:
            return Decision(verdict, reason, pairs_used=len(pairs), runs_used=2 * len(pairs),
                            delta=ctx.delta, next_block=nxt, rule=self.rule, details=det)
        down = [{"block": pairs[self.used[k]].block_id, "log_ratio": round(self.vals[k], 6),
                 "weight": round(w, 3)} for k, w in enumerate(lk.est.weights) if w < 0.5]
        det.update(sd=round(lk.est.sd, 6), df=lk.est.df, n_used=lk.est.n,
                   z_keep=round(lk.c, 4), downweighted=down,
                   robust_effect=to_fraction(lk.est.mean))
        mean = lk.est.mean if effect is None else effect
        return Decision(verdict, reason, effect=to_fraction(mean), lo=to_fraction(lk.lo),
                        hi=to_fraction(lk.hi), pairs_used=len(pairs),
                        runs_used=2 * len(pairs), delta=ctx.delta, next_block=nxt,
                        rule=self.rule, details=det)


@dataclass(frozen=True)
class _Gates:
    """What a look allows: futility stops from ``fut_after`` pairs, keeps from
    ``keep_from``; with the look's summary in words."""

    fut_after: int
    keep_from: int
    summary: str
    implausible: bool


class SequentialRule:
    """Sequential paired decisions; see the module docstring."""

    name = "sequential"

    def __init__(self, rho: float = 3.0, futility: float = 1.0,
                 futility_after: int | None = None, keep_after: int = 4,
                 confirm_z: float = 1.0) -> None:
        self.rho = rho  # spending shape: alpha * t**rho
        self.futility = futility  # futility margin F: discard when mean + F·σ/n < δ
        self.futility_after = futility_after  # pairs before futility may stop (None: adaptive)
        self.keep_after = keep_after  # no keep before this many pairs
        self.confirm_z = confirm_z  # kept for configuration compatibility

    def _futility_after(self, ctx: DecisionContext, sd: float) -> int:
        """Pairs before futility may stop: enough for a standard error of at most 2δ."""
        if self.futility_after is not None:
            return self.futility_after
        block = ctx.spec.pairs_per_block
        d_log = math.log1p(max(ctx.delta, 1e-9))
        want = math.ceil((sd / (2 * d_log)) ** 2) if math.isfinite(sd) else ctx.spec.max_pairs
        return max(2 * block, min(want, ctx.spec.max_pairs // 4))

    def alpha(self, ctx: DecisionContext) -> float:
        """The error spent on each side of the interval."""
        return (1.0 - ctx.spec.confidence) / 2.0

    def horizon(self, ctx: DecisionContext) -> int:
        """The last planned look, in pairs: the budget plus the confirmation blocks."""
        return ctx.spec.max_pairs + MAX_CONFIRMATIONS * ctx.spec.pairs_per_block

    def first_look(self, ctx: DecisionContext) -> int:
        """The first planned look: no keep (and no error spent) before it."""
        return max(self.keep_after, ctx.spec.min_pairs)

    def looks(self, ctx: DecisionContext) -> tuple[int, ...]:
        return planned_looks(ctx.spec.pairs_per_block, self.horizon(ctx),
                             first=self.first_look(ctx))

    def first_block(self, ctx: DecisionContext) -> NextBlock:
        return NextBlock(pairs=min(ctx.spec.pairs_per_block, ctx.spec.max_pairs),
                         reason="first block")

    def look(self, vals: Sequence[float], scales: Sequence[float], ctx: DecisionContext,
             prior_df: int, rounding: float) -> Look:
        """The estimate and the interval over ``vals`` at the look of ``len(vals)`` pairs,
        widened on each side by ``rounding`` (:func:`assay.decision.rule.rounding_bound`)."""
        block = ctx.spec.pairs_per_block
        est = biweight(vals, scales, prior_df)
        n = est.n
        first = self.first_look(ctx)
        # before the first look the interval uses the first look's multiplier
        z = bound_at(max(n, first), block, self.horizon(ctx), self.alpha(ctx), self.rho,
                     first=first)
        c = t_quantile_for(z, est.df) if math.isfinite(est.se) else math.inf
        if not math.isfinite(est.se):
            return Look(est, c, -math.inf, math.inf, math.inf, rounding)
        fut = est.mean + t_quantile_for(self.futility / math.sqrt(n), est.df) * est.se
        return Look(est, c, est.mean - c * est.se - rounding, est.mean + c * est.se + rounding,
                    fut + rounding, rounding)

    def decide(self, pairs: Sequence[Pair], ctx: DecisionContext) -> Decision:
        case = self._case(pairs, ctx)
        spec = ctx.spec
        need = max(2, spec.min_pairs)
        if len(case.vals) < need and case.n_compare < spec.max_pairs:
            more = min(spec.pairs_per_block, max(need - len(case.vals), 1))
            return case.out(Verdict.CONTINUE,
                            f"{len(case.vals)} usable pair(s); at least {need} needed",
                            nxt=NextBlock(more, reason="minimum pairs"))
        if not case.vals:
            return case.out(Verdict.DISCARD, "no usable pair within the budget")
        rounding = rounding_bound([pairs[i].a for i in case.used],
                                  [pairs[i].b for i in case.used])
        lk = self.look(case.vals, case.scales, ctx, case.prior_df, rounding)
        gates = self._gates(case, lk, need)
        confirm_ids, awaiting = confirmation_state(pairs)
        if awaiting:
            return self._judge_confirmation(case, lk, gates, confirm_ids)
        return self._judge(case, lk, gates)

    def _case(self, pairs: Sequence[Pair], ctx: DecisionContext) -> _Case:
        """The usable pairs of one call (the others set aside, with why), their scales and
        the details every decision of the call reports."""
        spec = ctx.spec
        x = signed_log_ratios(pairs, ctx.direction)
        sd0, prior_df = prior_noise(ctx)
        set_aside: list[dict[str, Any]] = []
        used: list[int] = []
        for i, (p, v) in enumerate(zip(pairs, x, strict=True)):
            if not math.isfinite(v):
                set_aside.append({"block": p.block_id, "why": "not a finite log-ratio"})
            elif ctx.bounds is not None and not (ctx.bounds[0] <= p.b <= ctx.bounds[1]
                                                 and ctx.bounds[0] <= p.a <= ctx.bounds[1]):
                set_aside.append({"block": p.block_id, "log_ratio": round(v, 6),
                                  "why": f"a value outside the declared bounds "
                                         f"[{ctx.bounds[0]:g}, {ctx.bounds[1]:g}]"})
            else:
                used.append(i)
        conf = f"{spec.confidence:.0%}"
        band = f"{ctx.delta:+.2%}"
        keep_rule = (f"keep when the lower end of the {conf} interval lies above {band}, "
                     f"from {max(self.keep_after, spec.min_pairs)} pairs on"
                     + (", confirmed by a fresh block" if spec.confirm else ""))
        details: dict[str, Any] = {
            "set_aside": set_aside, "interval": f"{conf} repeated confidence interval",
            "estimator": "Tukey biweight M-estimate, weighted by block noise",
            "keep_threshold": keep_rule, "spending": f"alpha*t^{self.rho:g}",
            "futility_margin": self.futility}
        return _Case(
            rule=self.name, pairs=pairs, ctx=ctx, x=x, used=used, vals=[x[i] for i in used],
            scales=[_scale(pairs[i], ctx, sd0) for i in used], prior_df=prior_df,
            n_compare=sum(1 for p in pairs if p.kind is BlockKind.COMPARE),
            d_log=math.log1p(ctx.delta), conf=conf, band=band, details=details)

    def _gates(self, case: _Case, lk: Look, need: int) -> _Gates:
        """When futility may stop and a keep may be taken at this look, the summary of the
        look, and whether its effect is implausibly large; noted in the call's details."""
        ctx, details = case.ctx, case.details
        spec = ctx.spec
        fut_after = max(need, self._futility_after(ctx, lk.est.sd))
        details["futility_threshold"] = (
            f"discard when the mean plus {self.futility:g}·σ/n falls short of {case.band}, "
            f"from {fut_after} pairs on")
        wild = self._wild_share(case.pairs, case.used, case.vals, lk, ctx)
        keep_from = max(self.keep_after, spec.min_pairs,
                        min_pairs_for(wild, spec.max_pairs // 2))
        if keep_from > max(self.keep_after, spec.min_pairs):
            details["wild_share"] = round(wild, 3)
            details["keep_from"] = (
                f"{wild:.0%} of the pairs are wild (noisy blocks, or far from the rest): no "
                f"keep before {keep_from} pairs, when a majority of them on one side is "
                f"unlikely (below {WILD_RISK:.0%})")
        summary = (f"effect {to_fraction(lk.est.mean):+.2%}, {case.conf} interval "
                   f"[{to_fraction(lk.lo):+.2%}, {to_fraction(lk.hi):+.2%}] over "
                   f"{lk.est.n} pairs" + rounding_words(lk.rounding, case.d_log))
        details["rounding_bound"] = lk.rounding
        noise = max((v for v in ctx.noise.values() if math.isfinite(v)), default=0.0)
        implausible = abs(lk.est.mean) > IMPLAUSIBLE_K * max(noise, case.d_log)
        if implausible:
            details["implausible"] = (
                f"the effect is over {IMPLAUSIBLE_K:g}x max(noise, δ): a fresh block must "
                "reproduce it")
        return _Gates(fut_after, keep_from, summary, implausible)

    def _judge_confirmation(self, case: _Case, lk: Look, gates: _Gates,
                            confirm_ids: Sequence[str]) -> Decision:
        """The decision once the latest confirmation block is in: keep when it agrees, else
        measure more or discard."""
        pairs, used, spec = case.pairs, case.used, case.ctx.spec
        conf, band, summary = case.conf, case.band, gates.summary
        cid = confirm_ids[-1]
        start = min(i for i, p in enumerate(pairs) if p.block_id == cid)
        cvals = [case.x[i] for i in used if i >= start]
        cslot = slot_of(pairs, cid)
        conf_x = {"confirm_blocks": len(confirm_ids), "confirm_slot": cslot,
                  "confirm_effect": to_fraction(math.fsum(cvals) / len(cvals)) if cvals
                  else None}
        fresh = [k for k, i in enumerate(used) if i >= start]
        elsewhere = cslot not in {pairs[i].slot for i in used if i < start}
        agree, why = self._agrees(case.vals, case.scales, fresh, lk, case.d_log, case.prior_df,
                                  cslot, band, elsewhere)
        if agree:
            eff = self._unbiased(pairs, used, case.vals, case.scales, start, case.ctx,
                                 case.prior_df, case.d_log)
            conf_x.update(confirm_agreed=True,
                          effect_estimate=ESTIMATE)
            return case.out(Verdict.KEEP, f"kept: the {conf} interval "
                            f"[{to_fraction(lk.lo):+.2%}, {to_fraction(lk.hi):+.2%}] lies "
                            f"above {band} over {lk.est.n} pairs, a fresh confirmation block on "
                            f"slot {cslot} included ({why}); effect {to_fraction(eff):+.2%} "
                            "(bias-adjusted)", lk, effect=eff, extra=conf_x)
        conf_x["confirm_agreed"] = False
        if len(confirm_ids) >= MAX_CONFIRMATIONS:
            return case.out(Verdict.DISCARD, f"discarded: {len(confirm_ids)} confirmation "
                            f"blocks disagreed ({why}); {summary}", lk, extra=conf_x)
        if case.n_compare >= spec.max_pairs:
            return case.out(Verdict.DISCARD, f"discarded: the confirmation block disagreed "
                            f"({why}) and the pair budget is spent; {summary}", lk,
                            extra=conf_x)
        return case.out(Verdict.CONTINUE, f"the confirmation block disagreed ({why}); "
                        f"measuring more; {summary}", lk,
                        nxt=NextBlock(min(spec.pairs_per_block, spec.max_pairs - case.n_compare),
                                      reason="confirmation disagreed"), extra=conf_x)

    def _judge(self, case: _Case, lk: Look, gates: _Gates) -> Decision:
        """The decision at a look with no confirmation pending: a keep (or a confirmation
        block asked for), a futility or inconclusive discard, or more pairs."""
        spec, d_log = case.ctx.spec, case.d_log
        conf, band, summary = case.conf, case.band, gates.summary
        block = spec.pairs_per_block
        n, n_compare = lk.est.n, case.n_compare
        if lk.lo > d_log and n >= gates.keep_from:
            if spec.confirm or gates.implausible:
                why = "" if spec.confirm else " (the effect is implausibly large)"
                return case.out(Verdict.CONTINUE, f"provisional keep: the {conf} interval lies "
                                f"above {band}; asking for a confirmation block{why}; {summary}",
                                lk, nxt=NextBlock(block, BlockKind.CONFIRM, other_slot=True,
                                                  reason="confirm a provisional keep"))
            eff = self._unbiased(case.pairs, case.used, case.vals, case.scales, len(case.pairs),
                                 case.ctx, case.prior_df, d_log)
            return case.out(Verdict.KEEP, f"kept: the {conf} interval lies above {band}; "
                            f"{summary}; effect {to_fraction(eff):+.2%} (bias-adjusted)", lk,
                            effect=eff, extra={"effect_estimate": ESTIMATE})
        if n >= max(gates.fut_after, gates.keep_from):
            budget = f"{spec.max_pairs} pairs"
            if lk.futility_hi < d_log:
                return case.out(Verdict.DISCARD, f"discarded early (futility): "
                                f"{futility_words(lk.hi < d_log, band, conf, budget)}: the "
                                f"effect plus the futility margin falls short of {band}; "
                                f"{summary}", lk)
            hope = self._hope(lk, n, n_compare, case.ctx, d_log)
            if hope < HOPELESS and n >= HOPE_FROM * spec.max_pairs:
                return case.out(Verdict.DISCARD, f"discarded early (futility): "
                                f"{futility_words(lk.hi < d_log, band, conf, budget)}: at this "
                                f"effect the chance of a keep by then is {hope:.1%}; {summary}",
                                lk, extra={"keep_chance": round(hope, 4)})
        stall = digits_stall(case.vals, lk.rounding, d_log) if n >= self.first_look(case.ctx) \
            else ""
        if stall:
            return case.out(Verdict.DISCARD, f"discarded as inconclusive: {stall}; {summary}", lk)
        if n_compare >= spec.max_pairs:
            return case.out(Verdict.DISCARD, f"discarded as inconclusive at the budget of "
                            f"{spec.max_pairs} pairs: {_where(lk, d_log, band, conf)}; "
                            f"{summary}", lk)
        if lk.lo > d_log:
            why = f"the {conf} interval lies above {band}, but no keep before " \
                  f"{max(self.keep_after, spec.min_pairs)} pairs"
        elif lk.futility_hi < d_log:
            why = (f"{_where(lk, d_log, band, conf)}; the effect is short of {band} by the "
                   f"futility margin, but futility stopping starts at {gates.fut_after} pairs")
        else:
            why = _where(lk, d_log, band, conf)
        return case.out(Verdict.CONTINUE, f"undecided: {why}; {summary}", lk,
                        nxt=NextBlock(min(block, spec.max_pairs - n_compare),
                                      reason="undecided"))

    def _hope(self, lk: Look, n: int, n_compare: int, ctx: DecisionContext,
              d_log: float) -> float:
        """The chance of a keep at the pair budget (conditional power; Lan, Simon &
        Halperin 1982, "Stochastically curtailed tests in long-term clinical trials",
        Sequential Analysis 1), projecting the pairs still to come from the estimate plus
        :data:`HOPE_SE` standard errors, a mildly hopeful view, since the estimate itself
        is noisy early; 1 when nothing is left to project."""
        spec = ctx.spec
        total = spec.max_pairs
        left = total - n_compare
        sd = lk.est.sd
        if left <= 0 or not (math.isfinite(sd) and sd > 0):
            return 1.0
        z = bound_at(total, spec.pairs_per_block, self.horizon(ctx), self.alpha(ctx),
                     self.rho, first=self.first_look(ctx))
        need = d_log + lk.rounding + t_quantile_for(z, lk.est.df) * sd / math.sqrt(total)
        ahead = lk.est.mean + HOPE_SE * lk.est.se
        final = (n * lk.est.mean + left * ahead) / (n + left)
        spread = sd * math.sqrt(left) / (n + left)
        return float(1.0 - ndtr((need - final) / spread))

    def _wild_share(self, pairs: Sequence[Pair], used: Sequence[int], vals: Sequence[float],
                    lk: Look, ctx: DecisionContext) -> float:
        """The share of pairs that are wild: set aside by the estimate (weight below ½),
        from a block whose own noise is over :data:`WILD_BLOCK` times its slot's, or
        farther from the median of its slot's pairs than :data:`BIWEIGHT_K` times the
        slot's noise (the pool's where that is lower)."""
        if not used:
            return 0.0
        pooled = ctx.pooled

        def ref(slot: float) -> float:
            # a slot's noise from a few samples of its own can be inflated by wild ones: the
            # pool's (the latest samples of every slot) is the reference where it is lower
            if math.isfinite(pooled) and pooled > 0:
                return min(slot, pooled)
            return slot

        # the centre of each slot's own pairs: an effect may differ between slots (GPUs)
        by_slot: dict[str, list[float]] = {}
        for k, i in enumerate(used):
            by_slot.setdefault(pairs[i].slot, []).append(vals[k])
        centre = {slot: statistics.median(v) for slot, v in by_slot.items()}
        count = 0
        for k, i in enumerate(used):
            p = pairs[i]
            slot = ctx.noise.get(p.slot, math.nan)
            own = ctx.block_noise.get(p.block_id, math.nan)
            known = math.isfinite(slot) and slot > 0
            noisy = known and own > WILD_BLOCK * slot
            # far from its slot's pairs by the slot's noise: when most of a few pairs are
            # wild the estimate (and every block's scale) sits on them, and the clean pairs
            # are the ones it leaves out
            far = known and abs(vals[k] - centre[p.slot]) > BIWEIGHT_K * ref(slot)
            if noisy or far or lk.est.weights[k] < 0.5:
                count += 1
        return count / len(used)

    def _agrees(self, vals: Sequence[float], scales: Sequence[float], fresh: Sequence[int],
                lk: Look, d_log: float, prior_df: int, slot: str, band: str,
                elsewhere: bool = False) -> tuple[bool, str]:
        """The confirmation test: over all pairs the interval still lies above δ at this
        (planned) look, and the fresh block on its own is not significantly worse than the
        pairs before it (a one-sided test of agreement at :data:`AGREE_Z`).

        ``elsewhere``: the fresh block ran on a slot (a GPU, a machine) none of the earlier
        pairs ran on. A smaller effect there that still clears δ on its own (its one-sided
        bound at :data:`AGREE_Z` above δ) confirms the keep: the effect depends on the slot,
        which the keep then reports, rather than being noise."""
        if not fresh:
            return False, "no usable confirmation pair"
        if lk.lo <= d_log:
            return False, (f"with the confirmation block on slot {slot} the interval's lower "
                           f"end {to_fraction(lk.lo):+.2%} is no longer above {band}")
        old = [k for k in range(len(vals)) if k not in set(fresh)]
        new = biweight([vals[k] for k in fresh], [scales[k] for k in fresh], prior_df)
        if not old:
            return True, f"its effect {to_fraction(new.mean):+.2%}"
        prev = biweight([vals[k] for k in old], [scales[k] for k in old], prior_df)
        se = math.hypot(new.se, prev.se)
        z = (new.mean - prev.mean) / se if se > 0 else 0.0
        if z < -AGREE_Z and elsewhere and new.mean - AGREE_Z * new.se > d_log:
            return True, (f"its effect {to_fraction(new.mean):+.2%} on slot {slot} clears "
                          f"{band} on its own, below the {to_fraction(prev.mean):+.2%} "
                          f"before it elsewhere (z = {z:.1f}): the effect depends on the slot")
        if z < -AGREE_Z:
            return False, (f"the confirmation block's effect {to_fraction(new.mean):+.2%} is "
                           f"significantly below the {to_fraction(prev.mean):+.2%} before it "
                           f"(z = {z:.1f})")
        if z > AGREE_Z:
            # the interval over all pairs (robust: a wild fresh pair weighs nothing) is the
            # test; a fresh block far above the rest adds to it but is not taken at its word
            return True, (f"its effect {to_fraction(new.mean):+.2%}, above the "
                          f"{to_fraction(prev.mean):+.2%} before it (z = {z:+.1f})")
        return True, f"its effect {to_fraction(new.mean):+.2%}, in agreement (z = {z:+.1f})"

    def _unbiased(self, pairs: Sequence[Pair], used: Sequence[int], vals: Sequence[float],
                  scales: Sequence[float], start: int, ctx: DecisionContext, prior_df: int,
                  d_log: float) -> float:
        """The bias-adjusted effect (log scale) of a keep whose provisional look ended at
        pair ``start``; pairs from ``start`` on are fresh and averaged in."""
        k_used = [k for k, i in enumerate(used) if i < start]
        rest = [k for k, i in enumerate(used) if i >= start]
        if not k_used:
            return biweight(vals, scales, prior_df).mean
        prov = biweight([vals[k] for k in k_used], [scales[k] for k in k_used], prior_df)
        sd = prov.sd
        looks = self.looks(ctx)
        n = prov.n
        k = next((j for j, lk in enumerate(looks) if lk >= n), len(looks) - 1)
        if not (math.isfinite(sd) and sd > 0):
            theta = prov.mean
        else:
            z = efficacy_bounds(looks, self.alpha(ctx), self.rho)
            first = self.first_look(ctx)
            d = round(d_log / sd, 2)
            upper = tuple(round(lk * d + zk * math.sqrt(lk), 3) if lk >= first else math.inf
                          for lk, zk in zip(looks, z, strict=True))
            x_obs = max(prov.mean / sd, upper[k] / looks[k])
            theta = bias_adjusted(looks, upper, k, x_obs) * sd
        if not rest:
            return theta
        # the fresh pairs were not selected by the provisional look: the estimate over all
        # pairs (robust, so a wild confirmation pair carries no weight) less the selection
        # bias of the provisional pairs, in their share of the information
        every = biweight(vals, scales, prior_df)
        return every.mean - (prov.mean - theta) * n / every.n


def min_pairs_for(wild: float, cap: int) -> int:
    """Pairs before a keep when a share ``wild`` of the pairs is wild.

    Wild pairs fall on either side (a slowed incumbent run, a slowed candidate run), about
    half each. A robust estimate started from the median stays on the clean pairs while
    the wild ones of one side are fewer than half of all pairs; with few pairs that can
    fail by chance. A keep waits for the smallest ``n`` at which ``n/2`` or more wild
    pairs on one side have a binomial probability below :data:`WILD_RISK` (at most
    ``cap``). Holding back a keep at a planned look only lowers the keep rate, so the
    interval and its error budget are unchanged."""
    p = min(max(wild, 0.0), 1.0) / 2
    if p <= 0:
        return 0
    n = 2
    while n < cap:
        if float(binom.sf(math.ceil(n / 2) - 1, n, p)) <= WILD_RISK:
            return n
        n += 2
    return cap


def _scale(p: Pair, ctx: DecisionContext, pooled: float) -> float:
    """The pair noise of the block a pair belongs to (its slot's, then the pooled), at
    least :data:`SCALE_FLOOR` of the pool's current noise.

    A block's scale is its slot's estimate updated with the block's two samples; from a
    few samples either can come out several times too small, and a pair weighted by
    ``1/s²`` with a tiny ``s`` acts as an exact measurement: the estimate sits on it and
    its standard error collapses (a no-op candidate kept with a pair sd of 0.26% where the
    pool's was 4.5%)."""
    floor = SCALE_FLOOR * ctx.pooled if math.isfinite(ctx.pooled) else 0.0
    for v in (ctx.block_noise.get(p.block_id), ctx.noise.get(p.slot), pooled):
        if v is not None and math.isfinite(v) and v > 0:
            return max(v, floor)
    return floor if floor > 0 else math.nan


def futility_words(below: bool, band: str, conf: str, budget: str) -> str:
    """What a futility stop found, in words that fit its interval: shown short of δ only
    when the whole interval lies below it, else too noisy to show δ within the budget."""
    if below:
        return f"the {conf} interval lies below {band}"
    return (f"too noisy to show {band} within the budget of {budget} (the {conf} interval "
            f"still includes it)")


def _where(lk: Look, d_log: float, band: str, conf: str) -> str:
    if lk.lo > d_log:
        return f"the {conf} interval lies above {band}"
    if lk.hi < d_log:
        return f"the {conf} interval lies below {band}"
    return f"the {conf} interval includes {band}"


def confirmation_state(pairs: Sequence[Pair]) -> tuple[list[str], bool]:
    """(ids of the confirmation blocks so far, whether the last one awaits judgement)."""
    confirm_ids = list(dict.fromkeys(p.block_id for p in pairs if p.kind is BlockKind.CONFIRM))
    last = max((i for i, p in enumerate(pairs) if p.kind is BlockKind.CONFIRM), default=-1)
    awaiting = last >= 0 and not any(p.kind is BlockKind.COMPARE for p in pairs[last + 1:])
    return confirm_ids, awaiting


def slot_of(pairs: Sequence[Pair], block_id: str) -> str:
    """The slot the block ``block_id`` ran on ('' when no pair is of it)."""
    return next((p.slot for p in pairs if p.block_id == block_id), "")
