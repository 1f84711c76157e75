"""Decision v2: a group-sequential paired test with a practical band δ.

The unit is the signed log-ratio of one A/B pair measured back to back (positive means the
candidate is better). After every block the rule forms an interval for the mean effect:

* the lower end is an efficacy bound with alpha spending over the planned looks
  (Lan & DeMets 1983, "Discrete sequential boundaries for clinical trials", Biometrika 70;
  power-family spending of Kim & DeMets 1987). Keeping only when it lies wholly above +δ
  holds the keep rate of any candidate whose true effect is at most δ to
  ``(1 - confidence) / 2`` however many looks are taken (far less at no effect). No alpha
  is spent before ``keep_after`` pairs: with heavy tails two pairs are too few to trust;
* the upper end is a futility bound shaped like the lower boundary of Wald's sequential
  probability ratio test (margin ``F·σ/n``). When it falls short of +δ the candidate is
  discarded early. Futility stopping is non-binding: it can only lower the false-keep rate.

The sd of one pair is estimated, never assumed: the sample variance is pooled with the
noise calibrated from A/A blocks, pooled over the slots in use (a prior worth one degree
of freedom per A/A pair), and every bound uses the t quantile with the pooled degrees of
freedom.

A keep is provisional until a fresh confirmation block, on another slot where there is
one, agrees (selection bias, the winner's curse): the fresh block's one-sided upper bound
(``confirm_z`` standard errors) must reach δ and the estimate over all pairs must stay
above δ. A disagreement sends the candidate back to measuring; a second one discards it.
Reaching the pair budget without a decision discards the candidate as inconclusive.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..decision import DecisionContext, signed_log_ratios, to_fraction
from ..model import BlockKind, Decision, NextBlock, Pair, Verdict
from .bounds import bound_at, planned_looks, t_quantile_for
from .screen import Screened, pooled_sd, screen

MAX_CONFIRMATIONS = 2


@dataclass(frozen=True)
class Estimate:
    mean: float  # log scale
    sd: float  # of one value
    df: float
    n: int
    lo: float  # log scale
    hi: float
    z_keep: float
    z_futility: float


def prior_noise(ctx: DecisionContext) -> tuple[float, int]:
    """Pooled pair noise from calibration and the A/A pairs behind it."""
    vals = [v for v in ctx.noise.values() if math.isfinite(v) and v > 0]
    if not vals:
        return 0.0, 0
    sd = math.sqrt(math.fsum(v * v for v in vals) / len(vals))
    return sd, len(vals) * ctx.spec.aa_blocks * ctx.spec.pairs_per_block


def estimate(values: Sequence[float], prior_sd: float, prior_df: int, z_keep: float,
             z_futility: float) -> Estimate:
    n = len(values)
    mean = math.fsum(values) / n
    sd, df = pooled_sd(values, prior_sd, prior_df)
    if not math.isfinite(sd):
        return Estimate(mean, sd, df, n, -math.inf, math.inf, z_keep, z_futility)
    se = sd / math.sqrt(n)
    lo = mean - t_quantile_for(z_keep, df) * se
    hi = mean + t_quantile_for(z_futility, df) * se
    return Estimate(mean, sd, df, n, lo, hi, z_keep, z_futility)


class SequentialRule:
    """Sequential paired decisions; see the module docstring."""

    name = "sequential"

    def __init__(self, rho: float = 1.0, futility: float = 1.0,
                 futility_after: int | None = None, keep_after: int = 4,
                 confirm_z: float = 1.0) -> None:
        self.rho = rho  # spending shape: alpha * t**rho
        self.futility = futility  # futility margin F: discard when mean + F·σ/n < δ
        self.futility_after = futility_after  # pairs before futility may stop (None: adaptive)
        self.keep_after = keep_after  # no keep (and no alpha spent) before this many pairs
        self.confirm_z = confirm_z  # a confirmation disagrees when mean + z·se <= δ

    def _futility_after(self, ctx: DecisionContext, sd: float) -> int:
        """Pairs before futility may stop: enough for a standard error of at most 2δ."""
        if self.futility_after is not None:
            return self.futility_after
        block = ctx.spec.pairs_per_block
        d_log = math.log1p(max(ctx.delta, 1e-9))
        want = math.ceil((sd / (2 * d_log)) ** 2) if math.isfinite(sd) else ctx.spec.max_pairs
        return max(2 * block, min(want, ctx.spec.max_pairs // 4))

    def alpha(self, ctx: DecisionContext) -> float:
        return (1.0 - ctx.spec.confidence) / 2.0

    def first_block(self, ctx: DecisionContext) -> NextBlock:
        return NextBlock(pairs=min(ctx.spec.pairs_per_block, ctx.spec.max_pairs),
                         reason="first block")

    def decide(self, pairs: Sequence[Pair], ctx: DecisionContext) -> Decision:
        spec = ctx.spec
        block = spec.pairs_per_block
        x = signed_log_ratios(pairs, ctx.direction)
        sd0, df0 = prior_noise(ctx)
        slot_sd = ctx.noise.get(pairs[0].slot, sd0) if pairs else sd0
        sc = screen(pairs, x, slot_sd, ctx.bounds, spec.max_pairs)
        n_compare = sum(1 for p in pairs if p.kind is BlockKind.COMPARE)
        details = _details(sc, self)
        d_log = math.log1p(ctx.delta)

        def out(verdict: Verdict, reason: str, est: Estimate | None = None,
                nxt: NextBlock | None = None, extra: dict[str, Any] | None = None) -> Decision:
            det = dict(details, **(extra or {}))
            if est is None:
                return Decision(verdict, reason, pairs_used=len(pairs), runs_used=2 * len(pairs),
                                delta=ctx.delta, next_block=nxt, rule=self.name, details=det)
            det.update(sd=round(est.sd, 6), df=est.df, n_used=est.n,
                       z_keep=round(est.z_keep, 4), z_futility=round(est.z_futility, 4))
            return Decision(verdict, reason, effect=to_fraction(est.mean),
                            lo=to_fraction(est.lo), hi=to_fraction(est.hi),
                            pairs_used=len(pairs), runs_used=2 * len(pairs), delta=ctx.delta,
                            next_block=nxt, rule=self.name, details=det)

        if sc.pending:
            return out(Verdict.CONTINUE, f"re-measuring {sc.pending} pair(s) flagged as "
                       f"outlier or implausible ({sc.outliers} outlier, {sc.suspicious} "
                       "implausible so far)",
                       nxt=NextBlock(sc.pending, BlockKind.RERUN,
                                     reason="re-run of flagged pairs"))
        vals = sc.values
        need = max(2, spec.min_pairs)
        if len(vals) < need and n_compare < spec.max_pairs:
            more = min(block, max(need - len(vals), 1))
            return out(Verdict.CONTINUE, f"{len(vals)} usable pair(s); at least {need} needed",
                       nxt=NextBlock(more, reason="minimum pairs"))
        if not vals:
            return out(Verdict.DISCARD, "no usable pair within the budget")
        alpha = self.alpha(ctx)
        n = len(vals)
        first = max(self.keep_after, spec.min_pairs)
        can_keep = n >= planned_looks(block, spec.max_pairs, first)[0]
        z_keep = bound_at(max(n, first), block, spec.max_pairs, alpha, self.rho, first=first)
        z_fut = self.futility / math.sqrt(n)
        est = estimate(vals, sd0, df0, z_keep, z_fut)
        band = f"{ctx.delta:+.2%}"
        summary = (f"effect {to_fraction(est.mean):+.2%}, interval [{to_fraction(est.lo):+.2%}, "
                   f"{to_fraction(est.hi):+.2%}] over {n} pairs")

        confirm_ids, awaiting = confirmation_state(pairs)
        if awaiting:
            cid = confirm_ids[-1]
            cvals = [x[i] for i in sc.index
                     if pairs[i].block_id == cid and pairs[i].kind is BlockKind.CONFIRM]
            agree, why = _agrees(cvals, est, d_log, self.confirm_z)
            conf = {"confirm_blocks": len(confirm_ids), "confirm_slot": _slot(pairs, cid),
                    "confirm_effect": to_fraction(math.fsum(cvals) / len(cvals)) if cvals
                    else None, "confirm_agreed": agree}
            if agree:
                # Report the interval of the look that cleared δ (the provisional keep); the
                # confirmation is a check of agreement, reported beside it.
                start = min(i for i, p in enumerate(pairs) if p.block_id == cid)
                prov = self.decide(pairs[:start], ctx)
                kept = out(Verdict.KEEP, f"kept: the sequential lower bound cleared {band} "
                           f"({prov.reason.rsplit('; ', 1)[-1]}) and a fresh confirmation block "
                           f"agreed ({why}); over all {n} pairs: effect "
                           f"{to_fraction(est.mean):+.2%}", est, extra=conf)
                if prov.lo is not None and prov.lo > ctx.delta:
                    return dataclasses.replace(kept, lo=prov.lo, hi=prov.hi, effect=prov.effect)
                return kept
            if len(confirm_ids) >= MAX_CONFIRMATIONS:
                return out(Verdict.DISCARD, f"discarded: {len(confirm_ids)} confirmation "
                           f"blocks disagreed ({why}); {summary}", est, extra=conf)
            if n_compare >= spec.max_pairs:
                return out(Verdict.DISCARD, f"discarded: the confirmation block disagreed "
                           f"({why}) and the pair budget is spent; {summary}", est, extra=conf)
            return out(Verdict.CONTINUE, f"the confirmation block disagreed ({why}); "
                       f"measuring more; {summary}", est,
                       nxt=NextBlock(min(block, spec.max_pairs - n_compare),
                                     reason="confirmation disagreed"), extra=conf)

        if est.lo > d_log and can_keep:
            if spec.confirm:
                return out(Verdict.CONTINUE, f"provisional keep: the sequential lower bound "
                           f"lies above {band}; asking for a confirmation block; {summary}",
                           est, nxt=NextBlock(block, BlockKind.CONFIRM, other_slot=True,
                                              reason="confirm a provisional keep"))
            return out(Verdict.KEEP, f"kept: the sequential lower bound lies wholly above "
                       f"{band}; {summary}", est)
        if est.hi < d_log and n >= max(need, self._futility_after(ctx, est.sd)):
            return out(Verdict.DISCARD, f"discarded early (futility): the interval lies "
                       f"wholly short of {band}; {summary}", est)
        if n_compare >= spec.max_pairs:
            return out(Verdict.DISCARD, f"discarded as inconclusive at the budget of "
                       f"{spec.max_pairs} pairs: the interval straddles {band}; {summary}", est)
        return out(Verdict.CONTINUE, f"undecided: the interval straddles {band}; {summary}",
                   est, nxt=NextBlock(min(block, spec.max_pairs - n_compare),
                                      reason="interval straddles the band"))


def confirmation_state(pairs: Sequence[Pair]) -> tuple[list[str], bool]:
    """(ids of the confirmation blocks so far, whether the last one awaits judgement)."""
    confirm_ids = list(dict.fromkeys(p.block_id for p in pairs if p.kind is BlockKind.CONFIRM))
    last = max((i for i, p in enumerate(pairs) if p.kind is BlockKind.CONFIRM), default=-1)
    awaiting = last >= 0 and not any(p.kind is BlockKind.COMPARE for p in pairs[last + 1:])
    return confirm_ids, awaiting


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


def _slot(pairs: Sequence[Pair], block_id: str) -> str:
    return next((p.slot for p in pairs if p.block_id == block_id), "")


def _details(sc: Screened, rule: SequentialRule) -> dict[str, Any]:
    return {"reruns": sc.reruns, "outliers": sc.outliers, "suspicious": sc.suspicious,
            "unreproduced": sc.unreproduced, "over_cap": sc.over_cap,
            "set_aside": list(sc.set_aside), "spending": f"alpha*t^{rule.rho:g}",
            "futility_margin": rule.futility}
