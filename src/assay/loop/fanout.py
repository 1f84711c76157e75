"""An experiment measured on several platforms ([[platforms]]): each platform's blocks are
decided on their own, then :func:`assay.decision.combine.combine` decides across them; and a keep
measured on several slots (GPUs) says whether its effect depends on them."""

from __future__ import annotations

import dataclasses

from ..config.spec import Target, primary_platform
from ..decision.combine import Combined
from ..decision.combine import combine as combine_actions
from ..decision.next_step import Action, Evidence, Invalid, decide_next
from ..decision.rule import DecisionRule
from ..decision.stats.heterogeneity import heterogeneity
from ..executors.base import Executor
from ..model import Decision, Verdict, as_pairs


def combine(ev: Evidence, pending: set[str], target: Target, executor: Executor,
            rule: DecisionRule) -> Combined:
    """Decide on each platform's own blocks (none where a block is still out), then across
    the platforms."""
    actions: dict[str, Action | None] = {}
    for p in target.platforms:
        if p.name in pending:
            actions[p.name] = None  # a block is still out on it
            continue
        slots = tuple(s.name for s in executor.slots if s.platform == p.name)
        mine = dataclasses.replace(
            ev, blocks=tuple(b for b in ev.blocks if b.platform == p.name),
            context=dataclasses.replace(ev.context, slots=slots))
        actions[p.name] = decide_next(mine, rule)
    return combine_actions(actions, primary_platform(target), target.decision.keep_on,
                           target.decision.platform_tolerance)


def final_action(c: Combined, ev: Evidence, target: Target) -> Action:
    """The experiment's end across platforms, its decision holding each platform's row (and
    for an invalid one, where each platform's logs are)."""
    table = [r.as_dict() for r in c.table]
    final = c.final  # Keep | Discard | Invalid
    if isinstance(final, Invalid):  # what happened on each platform, with its logs
        last = {b.platform: b.id for b in ev.blocks}
        where = (target.state_dir / "logs" / ev.experiment_id).relative_to(target.root)
        logs = "; ".join(f"{p} {where / bid}" for p, bid in last.items())
        final = dataclasses.replace(final, reason=f"{final.reason}; logs: {logs}")
    d = final.decision or Decision(
        Verdict.INVALID if isinstance(final, Invalid) else Verdict.DISCARD, final.reason)
    d = dataclasses.replace(d, details={**d.details, "platforms": table})
    action: Action = dataclasses.replace(final, decision=d)
    return action


def per_slot(ev: Evidence, decision: Decision, target: Target) -> Decision:
    """A keep measured on several slots (GPUs) says whether its effect depends on them."""
    if not ev.blocks:
        return decision
    now = ev.blocks[-1].inc_commit
    # With [[platforms]] the platforms have their own table: compare the slots of the
    # platform that decided, not one platform's slots with another's.
    platform = str(decision.details.get("decided_on", ""))
    pairs = [p for b in ev.blocks if b.inc_commit == now
             and (not platform or b.platform == platform)
             for p in as_pairs(b.runs, target.metric.name, b.slot, b.id, b.kind)]
    h = heterogeneity(pairs, target.metric.direction)
    if len(h.per_slot) < 2:
        return decision
    rows = [{"slot": e.slot, "pairs": e.pairs, "effect": e.effect} for e in h.per_slot]
    return dataclasses.replace(
        decision, reason=f"{decision.reason}; {h.words()}",
        details={**decision.details, "per_slot": rows, "slot_dependent": h.dependent,
                 "slot_dependence_p": h.p})
