"""Stop rules: the run ends by itself when going on is not worth it.

Three rules, each announced with its reason and kept in the journal's meta
(``stop_rule``), so that ``assay run`` again does not simply carry on:

- **cap**: a spending cap on model calls (``[run] max_usd``, ``max_tokens`` and their
  ``session_`` twins; see :mod:`assay.bench.meter`) would be passed by the next call;
- **discards**: ``[run] stop_after_discards = N`` decided experiments in a row ended
  without a keep (invalid, crashed and conflict ones are not decisions on the metric: they
  neither count nor break the run of discards);
- **target**: the best value reached ``[metric] target``, or the bound of
  ``[metric] bounds`` the metric's direction points to (a maximized metric's high bound).

Reaching one stops proposing; the blocks in flight are measured and decided. The next
``assay run`` refuses to start (:class:`~assay.errors.StoppedRun`, exit 2) unless it is
given ``--continue``, which clears the rule's record and counts discards afresh.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..config.spec import MetricSpec
from ..errors import StoppedRun
from ..model import Direction, Experiment, ExperimentState
from ..records import StopRecord


def discard_streak(decided: Iterable[Experiment]) -> int:
    """Discards at the end of ``decided`` (kept and discarded experiments, oldest first)
    since the last keep."""
    streak = 0
    for e in decided:
        streak = 0 if e.state is ExperimentState.KEPT else streak + 1
    return streak


def discards_reason(streak: int, limit: int) -> str:
    return (f"{streak} decided experiments in a row were not kept ([run] stop_after_discards "
            f"= {limit}): the metric looks saturated for this proposer")


def goal(metric: MetricSpec) -> tuple[float, str] | None:
    """The value that ends the run and what declares it: ``[metric] target``, else the
    bound the direction points to; None without either."""
    if metric.target is not None:
        return metric.target, "[metric] target"
    if metric.bounds is not None:
        if metric.direction is Direction.MAXIMIZE:
            return metric.bounds[1], "the high bound of [metric] bounds"
        return metric.bounds[0], "the low bound of [metric] bounds"
    return None


def target_reason(metric: MetricSpec, best: float | None) -> str:
    """Why the run ends at ``best`` ('' when it does not)."""
    g = goal(metric)
    if g is None or best is None:
        return ""
    value, what = g
    up = metric.direction is Direction.MAXIMIZE
    if (up and best >= value) or (not up and best <= value):
        unit = f" {metric.unit}" if metric.unit else ""
        return (f"the best {metric.name} {best:.6g}{unit} reached {what} = {value:g}{unit}")
    return ""


def refuse_resume(stop: StopRecord | None, carry_on: bool) -> None:
    """Raise :class:`StoppedRun` when the last run ended at a stop rule and ``--continue``
    was not given."""
    if not stop or carry_on:
        return
    hint = {"cap": "raise the cap in assay.toml first, or the next call stops it again",
            "discards": "the run of discards counts afresh",
            "target": "raise [metric] target first, or the run stops at the next keep"
            }.get(stop.kind, "")
    raise StoppedRun(f"the last run stopped: {stop.reason}. `assay run "
                     f"--continue` goes on ({hint})" if hint else
                     f"the last run stopped: {stop.reason}. `assay run "
                     "--continue` goes on")
