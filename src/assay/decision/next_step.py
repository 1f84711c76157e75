"""What to do next with one experiment: a pure function of its evidence.

:func:`decide_next` reads a frozen :class:`Evidence` snapshot (the experiment's finished
blocks with their runs, the current incumbent, the decision context) and returns one
:class:`Action` from a small closed set:

- :class:`Measure`: queue this block (the first one, another one the rule asks for, or the
  first one again against an incumbent that moved while this experiment was measured);
- :class:`Rerun`: measure again (suspicious values, a lost slot, a failing incumbent);
- :class:`Keep`: commit the candidate as the new incumbent;
- :class:`Discard`: not an improvement (or an improvement that breaks a guard or the
  holdout);
- :class:`Invalid`: the candidate cannot be judged (or its benchmark crashed), with why.

It does no I/O: no git, no SQLite, no clock. The loop gathers the evidence from the journal,
calls it, and carries the action out, so a decision can be tested (and simulated) without
a repository. The order it looks at things is the triage order::

    block error → harness changed → crashed/invalid candidate → suspicious → failing
    incumbent → run limit → the rule → (keep) incumbent moved? → guards → holdout
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..config.spec import MetricSpec
from ..config.watch import EARLY_STOP, against_incumbent
from ..model import (
    BlockKind,
    Decision,
    Incumbent,
    NextBlock,
    Pair,
    Role,
    RunResult,
    RunStatus,
    Verdict,
    as_pairs,
)
from .rule import DecisionContext, DecisionRule, guards_hold, regression
from .stats import make_rule

MAX_RERUNS = 2  # re-measurements of suspicious values before the candidate is invalid
MAX_EXECUTOR_RETRIES = 3  # slot failures of one experiment before it is crashed


@dataclass(frozen=True)
class BlockEvidence:
    """One finished block of the experiment, with its runs (in run order)."""

    id: str
    kind: BlockKind
    inc_commit: str  # the incumbent it was measured against
    slot: str = ""
    runs: tuple[RunResult, ...] = ()
    error: str = ""
    error_kind: str = ""  # 'patch', 'build', 'checks', 'harness_changed', 'tampered', 'executor'
    platform: str = ""  # with [[platforms]]: the platform it ran on


@dataclass(frozen=True)
class Evidence:
    """Everything :func:`decide_next` may look at, frozen."""

    experiment_id: str
    blocks: tuple[BlockEvidence, ...]  # the experiment's finished blocks, oldest first
    incumbent: Incumbent  # the incumbent now
    context: DecisionContext
    metric: str  # the primary metric's name
    guards: tuple[MetricSpec, ...] = ()
    holdout: MetricSpec | None = None

    @property
    def runs(self) -> tuple[RunResult, ...]:
        return tuple(r for b in self.blocks for r in b.runs)


@dataclass(frozen=True)
class Measure:
    """Queue ``block`` for this experiment (against the incumbent now)."""

    block: NextBlock
    message: str = ""  # what the loop says about it ('' for the first block)
    event: str = "measure"  # 'measure', or 'rebase' when the incumbent moved
    avoid_slot: str | None = None
    decision: Decision | None = None  # the rule's decision that asked for it
    notice: str = ""  # said after the message: the incumbent moved under this experiment


@dataclass(frozen=True)
class Rerun:
    """Measure again: ``block`` is a re-measurement (its kind is ``rerun``)."""

    block: NextBlock
    message: str
    event: str = "rerun"  # 'rerun', 'retry' (a slot failed) or 'error'
    avoid_slot: str | None = None
    fail: str = ""  # non-empty: the target itself is broken; the run stops with this


@dataclass(frozen=True)
class Keep:
    decision: Decision


@dataclass(frozen=True)
class Discard:
    reason: str
    decision: Decision | None = None
    withheld: bool = False  # the reason holds held-out results: never shown to proposers


@dataclass(frozen=True)
class Invalid:
    """The candidate cannot be judged; ``crashed`` when its benchmark failed to run."""

    reason: str
    crashed: bool = False
    decision: Decision | None = None


Action = Measure | Rerun | Keep | Discard | Invalid


@dataclass(frozen=True)
class _Current:
    """The blocks and runs measured against the latest incumbent the experiment saw."""

    blocks: tuple[BlockEvidence, ...] = ()
    runs: tuple[RunResult, ...] = ()
    pairs: tuple[Pair, ...] = field(default_factory=tuple)


def decide_next(evidence: Evidence, rule: DecisionRule | None = None) -> Action:
    """The next action for one experiment (``rule`` defaults to the one the spec names)."""
    rule = rule or make_rule_for(evidence.context)
    ctx = evidence.context
    blocks = evidence.blocks
    if not blocks:
        return Measure(rule.first_block(ctx))
    triaged = _triage(evidence)
    if triaged is not None:
        return triaged
    cur = _current(evidence)
    decision = with_values(rule.decide(cur.pairs, ctx), cur.runs, evidence.metric,
                           ctx.incumbent_history)
    if decision.verdict is Verdict.CONTINUE:
        nb = decision.next_block or NextBlock(ctx.spec.pairs_per_block)
        # A confirmation avoids the slot (the GPU) the first block ran on.
        avoid = (cur.blocks[0].slot if cur.blocks else blocks[-1].slot) if nb.other_slot \
            else None
        notice = ""
        inc = evidence.incumbent
        if blocks[-1].inc_commit != inc.commit:
            so_far = "" if decision.effect is None else f", {decision.effect:+.2%}"
            notice = (f"{evidence.experiment_id}: the incumbent moved to {inc.commit[:12]} "
                      f"({inc.experiment_id or 'a keep'}); its {decision.pairs_used} pair(s) "
                      f"against the old one{so_far} are set aside and it is measured again "
                      "against the new one")
        return Measure(nb, f"{evidence.experiment_id}: {decision.reason}", avoid_slot=avoid,
                       decision=decision, notice=notice)
    if decision.verdict is Verdict.KEEP:
        if blocks[-1].inc_commit != evidence.incumbent.commit:
            return Measure(rule.first_block(ctx), event="rebase", decision=decision,
                           message=f"{evidence.experiment_id} would be kept, but the incumbent "
                                   f"moved to {evidence.incumbent.commit[:12]}: measuring it "
                                   "again against the new one")
        good, why = guards_hold(cur.runs, evidence.guards)
        held_out = False
        if good and evidence.holdout is not None:
            why = regression(cur.runs, evidence.holdout, holdout=True)
            good, held_out = not why, bool(why)
        if not good:
            return Discard(f"the effect is real but {why}", decision, withheld=held_out)
        return Keep(decision)
    if decision.verdict is Verdict.INVALID:
        return Invalid(decision.reason, decision=decision)
    return Discard(decision.reason, decision)


def _triage(ev: Evidence) -> Action | None:
    """Runs that say the experiment cannot be decided by the rule (yet): None if none."""
    spec = ev.context.spec
    last = ev.blocks[-1]
    if last.error_kind == "executor":
        failures = sum(1 for b in ev.blocks if b.error_kind == "executor")
        if failures > MAX_EXECUTOR_RETRIES:  # a failure that follows it everywhere
            return Invalid(f"executor: {last.error} (failed {failures} times on every slot "
                           "tried; not retried again)", crashed=True)
        # The machine failed, not the candidate: measure this block again elsewhere.
        pairs = max(1, len(last.runs) // 2) if last.runs else spec.pairs_per_block
        return Rerun(NextBlock(pairs, BlockKind.RERUN, reason="executor failure"),
                     f"{ev.experiment_id}: block {last.id} failed on {last.slot} "
                     f"({last.error}); queued again", event="retry", avoid_slot=last.slot)
    if last.error:
        return Invalid(f"{last.error_kind}: {last.error}")
    cur = _current(ev)
    cand_runs = [r for r in cur.runs if r.role is Role.CANDIDATE]
    harness = [r for r in cand_runs if r.status is RunStatus.HARNESS_CHANGED]
    if harness:
        return Invalid(f"harness_changed: {harness[0].reason}")
    stopped = next((i for i, r in enumerate(last.runs) if r.role is Role.CANDIDATE and
                    r.status is RunStatus.CRASHED and r.reason.startswith(EARLY_STOP)), None)
    if stopped is not None:  # a watch condition held: the candidate does something useless
        run = last.runs[stopped]
        fresh = any(r.role is Role.INCUMBENT and r.status is RunStatus.OK
                    for r in last.runs[:stopped])
        if against_incumbent(run.reason) and not fresh:
            # slower than an incumbent run of an earlier block: the machine may be busier
            # now; measure both again, the incumbent first, before blaming the candidate
            return Rerun(NextBlock(1, BlockKind.RERUN, reason="early stop", order="AB"),
                         f"{ev.experiment_id}: {run.reason}; measured again beside a fresh "
                         "incumbent run before it counts", event="retry")
        return Invalid(f"{run.status.value}: {run.reason}", crashed=True)
    if cand_runs and not any(r.status is RunStatus.OK for r in cand_runs):
        bad = cand_runs[-1]
        if bad.status is RunStatus.INVALID:
            return Invalid(f"{bad.status.value}: {bad.reason}")
        if bad.status in (RunStatus.CRASHED, RunStatus.TIMEOUT):
            return Invalid(f"{bad.status.value}: {bad.reason}", crashed=True)
    suspicious = [r for r in cand_runs if r.status is RunStatus.SUSPICIOUS]
    if suspicious and last.kind is not BlockKind.RERUN:
        reruns = sum(1 for b in ev.blocks if b.kind is BlockKind.RERUN)
        if reruns >= MAX_RERUNS:
            return Invalid(f"suspicious results persist after {reruns} re-measurements: "
                           f"{suspicious[-1].reason}")
        return Rerun(NextBlock(spec.pairs_per_block, BlockKind.RERUN, reason="suspicious"),
                     f"{ev.experiment_id}: suspicious result re-measured "
                     f"({suspicious[-1].reason})")
    a_runs = [r for r in last.runs if r.role is Role.INCUMBENT]
    if a_runs and not any(r.status is RunStatus.OK for r in a_runs):
        why = (f"the incumbent's benchmark fails on slot {last.slot}: "
               f"{a_runs[-1].status.value}: {a_runs[-1].reason} (logs: "
               f"{a_runs[-1].stderr_path}); fix the target, then `assay run` resumes")
        return Rerun(NextBlock(spec.pairs_per_block, BlockKind.RERUN, reason="incumbent failed"),
                     why, event="error", fail=why)
    total = len(ev.runs)
    limit = run_limit(ev.context)
    if total > limit:
        return Invalid(f"no decision after {total} runs (limit {limit}): too few usable "
                       "pairs; see `assay show` for the failing runs")
    return None


def run_limit(ctx: DecisionContext) -> int:
    """Runs one experiment may use before it is given up as undecidable."""
    return 4 * ctx.spec.max_pairs + 8


def _current(ev: Evidence) -> _Current:
    current = ev.blocks[-1].inc_commit
    blocks = tuple(b for b in ev.blocks if b.inc_commit == current)
    pairs: list[Pair] = []
    for b in blocks:
        pairs += as_pairs(b.runs, ev.metric, b.slot, b.id, b.kind)
    return _Current(blocks, tuple(r for b in blocks for r in b.runs), tuple(pairs))


def with_values(d: Decision, runs: Sequence[RunResult], metric: str,
                history: Mapping[str, Sequence[float]] | None = None) -> Decision:
    """``d`` with the medians of both sides and the number of runs in its details.

    A candidate measured alone (the expensive rule's ``B`` blocks) is judged against its
    slots' recent incumbent runs (``history``): their median is its incumbent value."""
    a = [r.metrics[metric] for r in runs if r.role is Role.INCUMBENT and
         r.status is RunStatus.OK and metric in r.metrics]
    if not a and history:
        slots = sorted({r.slot for r in runs if r.role is Role.CANDIDATE})
        a = [v for s in slots for v in history.get(s, ())]
    b = [r.metrics[metric] for r in runs if r.role is Role.CANDIDATE and
         r.status is RunStatus.OK and metric in r.metrics]
    details = dict(d.details)
    if a:
        details["incumbent_value"] = statistics.median(a)
    if b:
        details["candidate_value"] = statistics.median(b)
    details["runs_total"] = len(runs)
    return dataclasses.replace(d, details=details)


def make_rule_for(ctx: DecisionContext) -> DecisionRule:
    return make_rule(ctx.spec)
