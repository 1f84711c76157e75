"""Carrying out what :func:`~assay.decision.next_step.decide_next` says about an experiment: another
block (its patch merged onto the incumbent when that moved), a keep (committed, the new
incumbent), a discard, an invalid, crashed or conflict end; and
recording the outcome where it is read (the journal, the hooks, the proposer, the stop rules).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from ..config.spec import Target
from ..decision.next_step import (
    Action,
    BlockEvidence,
    Discard,
    Evidence,
    Invalid,
    Keep,
    Measure,
    Rerun,
    decide_next,
)
from ..decision.rule import DecisionContext, DecisionRule
from ..errors import AssayError, PatchError, WorkspaceError
from ..executors.base import Executor
from ..journal.store import Journal
from ..model import (
    SCREEN,
    BlockState,
    Decision,
    Experiment,
    ExperimentState,
    Incumbent,
    NextBlock,
    RunResult,
    Verdict,
    for_proposer,
)
from ..proposers.base import Proposer
from ..records import CalibrationRecord
from ..repo.merge import merge_onto
from ..repo.repository import Repository
from . import fanout as loop_platforms
from .hooks import Hooks
from .levels import LevelNoise, interval, level_of, screen, tagged
from .stopping import Stopping


class Outcomes:
    """Decides each experiment's next step with the loop's rule and carries it out."""

    def __init__(self, target: Target, journal: Journal, ws: Repository, executor: Executor,
                 proposer: Proposer, rule: DecisionRule, hooks: Hooks, noise: LevelNoise,
                 stopping: Stopping,
                 emit: Callable[[str, str, Experiment | None], None]) -> None:
        self.target = target
        self.journal = journal
        self.ws = ws
        self.executor = executor
        self.proposer = proposer
        self.rule = rule
        self.hooks = hooks
        self.noise = noise
        self.stopping = stopping
        self.emit = emit

    @property
    def incumbent(self) -> Incumbent:
        inc = self.journal.incumbent()
        if inc is None:
            raise AssayError("the journal has no incumbent; call start() first")
        return inc

    def decision_context(self, exp_id: str | None = None, level: int = 0) -> DecisionContext:
        """What a decision rule sees (for ``exp_id``: the history without its own runs), at
        a fidelity ``level``: that level's noise and δ, its runs only."""
        cal = self.journal.calibration(level) or CalibrationRecord()
        inc = self.journal.incumbent()
        slots = tuple(s.name for s in self.executor.slots)
        history: dict[str, tuple[float, ...]] = {}
        if inc is not None and self.target.decision.rule == "expensive":
            at = None if self.target.fidelity is None else level
            for s in slots:
                history[s] = self.journal.recent_incumbent_values(
                    s, self.target.metric.name, inc.commit, exclude_experiment=exp_id,
                    level=at)
        block_noise: dict[str, float] = {}
        if exp_id is not None:
            block_noise = {b.id: b.noise for b in self.journal.blocks(exp_id)
                           if b.noise is not None}
        return DecisionContext(direction=self.target.metric.direction, spec=self.target.decision,
                               delta=self.noise.delta_at(level), slots=slots,
                               noise=cal.noise,
                               incumbent_history=history, bounds=self.target.metric.bounds,
                               block_noise=block_noise,
                               pooled=float(cal.pooled or math.nan),
                               noise_samples=cal.samples)

    def evidence(self, exp_id: str, level: int = 0) -> Evidence:
        """A frozen snapshot of what is known about ``exp_id``, for :func:`decide_next`: its
        blocks at fidelity ``level`` (all of them without [fidelity], where all are at 0)."""
        runs: dict[str, list[RunResult]] = {}
        for r in self.journal.runs(exp_id):
            runs.setdefault(r.block_id, []).append(r)
        blocks = tuple(
            BlockEvidence(b.id, b.kind, b.incumbent.commit, b.slot or "",
                          tuple(sorted(runs.get(b.id, ()), key=lambda r: r.index)),
                          b.error, b.error_kind, b.platform)
            for b in self.journal.blocks(exp_id, states=(BlockState.DONE,)) if b.level == level)
        return Evidence(exp_id, blocks, self.incumbent, self.decision_context(exp_id, level),
                        self.target.metric.name, tuple(self.target.guards),
                        self.target.holdout_metric)

    def queue_first(self, exp: Experiment) -> None:
        """Queue an experiment's first block (one on each declared platform)."""
        nb = self.rule.first_block(self.decision_context())
        for platform in [p.name for p in self.target.platforms] or [""]:
            self.journal.add_block(exp.id, nb.kind, nb.run_order(), self.incumbent,
                                   platform=platform)

    def advance(self, exp: Experiment) -> Experiment:
        """Decide what comes next for ``exp`` and do it: with [fidelity], on its pairs at
        the level it is measured at, and below the last level through the level's screen."""
        if self.target.platforms:
            return self._advance_platforms(exp)
        fid = self.target.fidelity
        level = level_of(self.journal, exp.id, fid)
        action = decide_next(self.evidence(exp.id, level), self.rule)
        if fid is not None and level < fid.last:
            decision = action.decision if isinstance(action, Keep | Discard) else None
            if decision is not None and decision.verdict in (Verdict.KEEP, Verdict.DISCARD):
                if isinstance(action, Discard) and decision.verdict is Verdict.KEEP:
                    return self._regressed(exp, action, decision, level)
                return self._screen(exp, decision, level)
        return self._act(exp, action, level=level)

    def _regressed(self, exp: Experiment, action: Discard, decision: Decision,
                   level: int) -> Experiment:
        """Below the last level, the rule would keep it but a guard (or the holdout)
        regressed at this level: stopped here, never promoted (the screen does not look at
        guards, and a regression at a cheap level is one the next level need not confirm)."""
        fid = self.target.fidelity
        assert fid is not None
        decision = tagged(decision, level) or decision
        decision = dataclasses.replace(decision, details={**decision.details, SCREEN: "stopped"})
        self.journal.set_decision(exp.id, decision)
        return self._finish(exp, ExperimentState.DISCARDED,
                            f"stopped at {fid.label(level)}: {action.reason}; not measured at "
                            f"{fid.label(level + 1)}", withheld=action.withheld)

    def _screen(self, exp: Experiment, decision: Decision, level: int) -> Experiment:
        """The rule reached a verdict below the last level: promote or stop (the screen of
        :func:`assay.loop.levels.screen`); a promoted candidate's first block at the next
        level is queued against the incumbent at that level."""
        fid = self.target.fidelity
        assert fid is not None
        s = screen(fid, level, exp.id, decision, self.journal.level_results())
        outcome = "promoted" if s.promoted else "stopped"
        decision = tagged(decision, level) or decision
        decision = dataclasses.replace(decision, details={**decision.details, SCREEN: outcome})
        self.journal.set_decision(exp.id, decision)
        words = f"at {fid.label(level)}: {interval(decision)}; {s.why}"
        if not s.promoted:
            return self._finish(exp, ExperimentState.DISCARDED,
                                f"stopped {words}; not measured at {fid.label(level + 1)}")
        conflict = self._rebase(exp)
        if conflict:
            return self._finish(exp, ExperimentState.CONFLICT, conflict)
        self.emit("promote", f"{exp.id} promoted to {fid.label(level + 1)}: {words}", exp)
        nb = self.rule.first_block(self.decision_context(level=level + 1))
        self.journal.add_block(exp.id, nb.kind, nb.run_order(), self.incumbent, level=level + 1)
        self.noise.need(level + 1)
        return exp

    def _advance_platforms(self, exp: Experiment) -> Experiment:
        """With [[platforms]]: decide on each platform's own blocks, then across them."""
        ev = self.evidence(exp.id)
        pending = {b.platform for b in self.journal.blocks(
            exp.id, states=(BlockState.QUEUED, BlockState.RUNNING))}
        c = loop_platforms.combine(ev, pending, self.target, self.executor, self.rule)
        for name, action in c.queue:
            exp = self._act(exp, action, platform=name)
            if exp.state.is_finished():  # its patch conflicts with the incumbent
                return exp
        if c.final is None:
            return exp
        return self._act(exp, loop_platforms.final_action(c, ev, self.target))

    def _act(self, exp: Experiment, action: Action, platform: str = "",
             level: int = 0) -> Experiment:
        if isinstance(action, Keep):
            action = Keep(loop_platforms.per_slot(self.evidence(exp.id, level), action.decision,
                                                  self.target))
        decision = action.decision if not isinstance(action, Rerun) else None
        if self.target.fidelity is not None:
            decision = tagged(decision, level)
        if decision is not None:
            self.journal.set_decision(exp.id, decision)
        if isinstance(action, Measure | Rerun):
            conflict = self._rebase(exp)
            if conflict:
                return self._finish(exp, ExperimentState.CONFLICT, conflict, decision)
            if action.message:
                self.emit(action.event, action.message, exp)
            if isinstance(action, Measure) and action.notice:
                self.emit("rebase", action.notice, exp)
            if isinstance(action, Rerun) and action.fail:
                fid = self.target.fidelity  # which level's runs failed: a cheaper one passed
                self.stopping.fail(action.fail if fid is None
                                   else f"at {fid.label(level)}: {action.fail}")
            self._add_block(exp, action.block, avoid=action.avoid_slot, platform=platform,
                            level=level)
            return exp
        if isinstance(action, Keep):
            assert decision is not None
            return self._keep(exp, decision)
        if isinstance(action, Invalid):
            state = ExperimentState.CRASHED if action.crashed else ExperimentState.INVALID
            return self._finish(exp, state, action.reason, decision)
        assert isinstance(action, Discard)
        return self._finish(exp, ExperimentState.DISCARDED, action.reason, decision,
                            withheld=action.withheld)

    def _rebase(self, exp: Experiment) -> str:
        """Merge the patch onto the incumbent when it moved since the experiment's last block
        (:mod:`assay.repo.merge`): its next blocks measure the merged patch. On a real
        conflict, the reason it ends (``conflict: <files> ...``); '' otherwise. Left as it
        is while a block against an older incumbent is pending (it measures the patch)."""
        blocks = self.journal.blocks(exp.id)
        inc = self.incumbent
        current = self.journal.experiment(exp.id)
        if not blocks or blocks[-1].incumbent.commit == inc.commit or current is None \
                or not current.candidate.patch.strip():
            return ""
        if any(b.state in (BlockState.QUEUED, BlockState.RUNNING)
               and b.incumbent.commit != inc.commit for b in blocks):
            return ""
        try:
            merged = merge_onto(self.target.root, current.candidate.patch, inc.commit)
        except WorkspaceError:
            return ""  # not a git repository here: applied as it stands
        if merged is None:
            return ""
        if merged.conflicts:
            return merged.conflict_note(inc.commit)
        self.journal.set_patch(exp.id, merged.patch)
        return ""

    def _add_block(self, exp: Experiment, nb: NextBlock, avoid: str | None = None,
                   platform: str = "", level: int = 0) -> None:
        self.journal.add_block(exp.id, nb.kind, nb.run_order(), self.incumbent, avoid_slot=avoid,
                               platform=platform, level=level)

    def _keep(self, exp: Experiment, decision: Decision) -> Experiment:
        inc = self.incumbent
        params = {**inc.params, **exp.candidate.params}
        msg = (f"assay {exp.id}: {exp.candidate.hypothesis}\n\n{decision.reason}\n"
               f"proposer: {exp.candidate.proposer}")
        try:
            sha = self.ws.commit_candidate(inc.commit, exp.candidate.patch, params, msg)
        except PatchError as exc:
            return self._finish(exp, ExperimentState.INVALID, f"cannot commit: {exc}", decision)
        new = Incumbent(commit=sha, params=params, experiment_id=exp.id)
        with self.journal.tx():
            self.journal.set_incumbent(new)
            self.journal.set_state(exp.id, ExperimentState.KEPT, note=decision.reason, commit=sha)
        done = self.journal.experiment(exp.id)
        assert done is not None
        self.emit("keep", f"{exp.id} KEPT ({sha[:12]}): {decision.reason}", done)
        self.hooks.fire("on_keep", exp.id, {"ASSAY_COMMIT": sha})
        self.told(done)
        value = decision.details.get("candidate_value")
        self.stopping.kept(None if value is None else float(value))
        return done

    def _finish(self, exp: Experiment, state: ExperimentState, reason: str,
                decision: Decision | None = None, withheld: bool = False) -> Experiment:
        for b in self.journal.blocks(exp.id, states=(BlockState.QUEUED,)):
            self.journal.cancel_block(b.id, f"experiment {state.value}")
        self.journal.set_state(exp.id, state, note=reason, withheld=withheld)
        done = self.journal.experiment(exp.id)
        assert done is not None
        self.emit(state.value, f"{exp.id} {state.value}: {reason}", done)
        if state in (ExperimentState.CRASHED,):
            self.hooks.fire("on_error", exp.id, {"ASSAY_ERROR": reason})
        self.told(done)
        if state is ExperimentState.DISCARDED:
            self.stopping.discarded()
        return done

    def told(self, exp: Experiment) -> None:
        """A finished experiment told to the hooks, its hypothesis and the proposer."""
        self.hooks.fire("on_experiment", exp.id, {"ASSAY_STATE": exp.state.value})
        if exp.candidate.hypothesis_id is not None:
            status = "supported" if exp.state is ExperimentState.KEPT else "refuted"
            self.journal.set_hypothesis_status(exp.candidate.hypothesis_id, status)
        try:
            self.proposer.tell(for_proposer(exp))
        except Exception as exc:  # a proposer bug must not lose the result
            self.emit("warn", f"proposer {self.proposer.name} could not learn from {exp.id}: {exc}",
                      None)
