"""The decision across platforms: one experiment's next step from each platform's own.

A candidate measured on several ``[[platforms]]`` is decided on each platform's own blocks
(:func:`assay.decision.next_step.decide_next`); :func:`combine` turns those actions into
what the loop does next: queue more blocks on some platforms, or end the experiment (keep, discard,
invalid), with one row per platform to store and show.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .next_step import Discard, Invalid, Keep, Measure, Rerun


@dataclass(frozen=True)
class Combined:
    """What the loop does next for an experiment measured on several platforms.

    ``queue`` holds the blocks to queue now, each on its platform; ``final`` is the
    experiment's end (keep, discard, invalid) once it is known, else None.
    """

    queue: tuple[tuple[str, Any], ...] = ()  # (platform, Measure | Rerun)
    final: Any = None  # Keep | Discard | Invalid | None
    table: tuple[PlatformRow, ...] = ()


@dataclass(frozen=True)
class PlatformRow:
    """One platform's part in a decision, as stored and shown."""

    platform: str
    state: str  # 'keep', 'discard', 'invalid', 'measuring', 'waiting'
    effect: float | None = None
    lo: float | None = None
    hi: float | None = None
    pairs: int = 0
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _row(platform: str, action: Any) -> PlatformRow:
    if action is None:
        return PlatformRow(platform, "waiting")
    d = getattr(action, "decision", None)
    eff = (d.effect, d.lo, d.hi, d.pairs_used) if d is not None else (None, None, None, 0)
    state = ("keep" if isinstance(action, Keep) else "discard" if isinstance(action, Discard)
             else "invalid" if isinstance(action, Invalid) else "measuring")
    reason = getattr(action, "reason", "") or (d.reason if d is not None else "")
    return PlatformRow(platform, state, eff[0], eff[1], eff[2], eff[3], reason)


def combine(actions: Mapping[str, Any], primary_name: str, keep_on: str,
            tolerance: float) -> Combined:
    """One experiment's next step from each platform's own action (None: a block pending).

    A candidate is kept when it clears delta on the primary platform (``keep_on =
    "primary"``) or on any (``"any"``), and no platform shows a regression beyond
    ``tolerance`` (its effect estimate below ``-tolerance``, the test a guard gets). A
    candidate that cannot be judged on one platform (it does not build, its checks fail,
    its benchmark crashes there) is invalid, with what happened on each platform.
    """
    table = tuple(_row(p, a) for p, a in actions.items())
    invalid = [(p, a) for p, a in actions.items() if isinstance(a, Invalid)]
    if invalid and any(a is None for a in actions.values()):
        return Combined(table=table)  # hear from every platform first: both sides are told
    if invalid:
        p, a = invalid[0]
        others = "; ".join(f"{r.platform}: {r.state}" if r.state == "invalid" else
                           f"{r.platform}: ran and measured ({r.state})"
                           for r in table if r.platform != p)
        return Combined(final=Invalid(f"on platform {p}: {a.reason}" +
                                      (f" (elsewhere: {others})" if others else ""),
                                      crashed=a.crashed, decision=a.decision), table=table)
    guard_fail = [(p, a) for p, a in actions.items() if isinstance(a, Discard)
                  and a.reason.startswith("the effect is real but")]
    if guard_fail:
        where, why = guard_fail[0]
        return Combined(final=Discard(f"on platform {where}: {why.reason}", why.decision),
                        table=table)
    prim = actions.get(primary_name)
    if keep_on == "primary" and isinstance(prim, Discard):
        return Combined(final=Discard(f"not an improvement on the primary platform "
                                      f"{primary_name}: {prim.reason}", prim.decision),
                        table=table)
    if keep_on == "any" and actions and all(isinstance(a, Discard) for a in actions.values()):
        return Combined(final=Discard("not an improvement on any platform: " + "; ".join(
            f"{p}: {a.reason}" for p, a in actions.items()), None), table=table)
    todo = tuple((p, a) for p, a in actions.items() if isinstance(a, Measure | Rerun))
    if todo or any(a is None for a in actions.values()):
        return Combined(queue=todo, table=table)
    worse = [r for r in table if r.effect is not None and r.effect < -tolerance]
    if worse:
        r = worse[0]
        return Combined(final=Discard(
            f"regresses on platform {r.platform}: {r.effect:+.2%} (tolerance "
            f"{tolerance:.2%})", getattr(actions[r.platform], "decision", None)), table=table)
    winners = [p for p, a in actions.items() if isinstance(a, Keep)]
    chosen = primary_name if keep_on == "primary" else (winners[0] if winners else "")
    won = actions.get(chosen)
    if isinstance(won, Keep):
        summary = "; ".join(f"{r.platform} {r.effect:+.2%}" if r.effect is not None
                            else f"{r.platform} -" for r in table)
        d = dataclasses.replace(
            won.decision, reason=f"{won.decision.reason} (per platform: {summary})",
            details={**won.decision.details, "platforms": [r.as_dict() for r in table],
                     "decided_on": chosen})
        return Combined(final=Keep(d), table=table)
    return Combined(final=Discard("no platform cleared delta", None), table=table)
