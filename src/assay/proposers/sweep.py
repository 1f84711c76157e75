"""`sweep`: Optuna over the declared parameters, through ask/tell.

Each candidate is one Optuna trial: ``study.ask()`` gives the parameter values, and the
decided metric (the candidate's median measured value) is told back when its experiment
finishes. Invalid and crashed experiments are told as failed trials. On a resumed run the
study is rebuilt from the journal's finished experiments, so nothing is sampled twice.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Sequence
from typing import Any

from ..config.spec import ParamSpec, Target
from ..errors import ProposerError
from ..extras import need
from ..journal.store import Journal
from ..model import Candidate, Direction, Experiment, ExperimentState, ParamValue, patch_digest
from ..registry import SAMPLERS
from ..repo.workspace import held_params
from .base import ProposalContext, Proposer


def _distribution(p: ParamSpec) -> Any:
    import optuna.distributions as d

    if p.choices:
        return d.CategoricalDistribution(list(p.choices))
    if p.type == "bool":
        return d.CategoricalDistribution([False, True])
    if p.type == "int":
        assert p.low is not None and p.high is not None
        step = int(p.step) if p.step and not p.log else 1
        return d.IntDistribution(int(p.low), int(p.high), log=p.log, step=step)
    if p.type == "float":
        assert p.low is not None and p.high is not None
        return d.FloatDistribution(float(p.low), float(p.high), log=p.log,
                                   step=p.step if p.step and not p.log else None)
    raise ProposerError(f"parameter {p.name}: type {p.type!r} cannot be swept")


def tpe_sampler(seed: int, n_startup: int) -> Any:
    """Optuna's tree-structured Parzen estimator."""
    import optuna

    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup)


def random_sampler(seed: int, n_startup: int) -> Any:
    """Uniform random draws (and the filler of a grid walk)."""
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


def gp_sampler(seed: int, n_startup: int) -> Any:
    """Gaussian-process Bayesian optimisation."""
    import optuna

    return optuna.samplers.GPSampler(seed=seed)


def make_proposer(target: Target, journal: Journal) -> SweepProposer:
    """The sweep of ``target``, told what the journal's experiments already measured."""
    sweep = SweepProposer.from_target(target)
    sweep.replay(journal.experiments(patches=False))
    return sweep


class SweepProposer(Proposer):
    name = "sweep"

    def __init__(self, params: Sequence[ParamSpec], direction: Direction, sampler: str = "tpe",
                 seed: int = 0, n_startup: int = 6) -> None:
        import optuna

        if not params:
            raise ProposerError("the sweep proposer needs at least one [[params]] entry in "
                                "assay.toml; or choose another proposer with [run] proposer")
        optuna.logging.set_verbosity(logging.WARNING)
        self.params = list(params)
        self.dists = {p.name: _distribution(p) for p in self.params}
        self.sampler_name = sampler
        self._grid: list[dict[str, ParamValue]] | None = None
        try:
            smp: Any = SAMPLERS.get(sampler)(seed, n_startup)
        except KeyError as exc:
            raise ProposerError(exc.args[0]) from None
        if sampler == "grid":
            # A plain walk of the grid in a seeded order; Optuna's GridSampler stops the study
            # from inside tell(), which only works within study.optimize().
            try:
                space = [[(p.name, v) for v in p.grid()] for p in self.params]
            except ValueError as exc:
                raise ProposerError(f"grid sampler: {exc}") from None
            points = [dict(combo) for combo in itertools.product(*space)]
            random.Random(seed).shuffle(points)
            self._grid = points
        self.direction = direction
        self.study = optuna.create_study(
            direction="maximize" if direction is Direction.MAXIMIZE else "minimize", sampler=smp)
        self._open: dict[int, Any] = {}  # trial number -> trial
        self._exhausted = False
        self._held_at: tuple[str, dict[str, ParamValue], dict[str, ParamValue]] | None = None

    @classmethod
    def from_target(cls, target: Target) -> SweepProposer:
        sec = target.section("proposer.sweep")
        sampler = sec.choice("sampler", SAMPLERS.names, "tpe")
        n_startup = sec.number("n_startup", 6, low=1, integer=True)
        sec.reject_unknown()
        if sampler == "gp":  # checked here, before the first trial, not at trial n_startup
            need("torch", "gp", '[proposer.sweep] sampler = "gp" (Optuna\'s GPSampler)')
        # [fidelity]'s parameter is assay's to set, level by level: never a trial's
        fid = target.fidelity
        params = [p for p in target.params if fid is None or p.name != fid.param]
        if fid is not None and not params:
            raise ProposerError(f"the sweep proposer has nothing to search: the only "
                                f"[[params]] entry, {fid.param}, is [fidelity]'s parameter; "
                                "declare the parameters to tune, or choose another proposer")
        return cls(params, target.metric.direction, sampler, target.run.seed, n_startup)

    def replay(self, experiments: Sequence[Experiment]) -> None:
        """Tell the study what earlier sessions already measured."""
        import optuna

        for exp in experiments:
            if exp.candidate.proposer != self.name or not exp.state.is_finished():
                continue
            params = {k: v for k, v in exp.candidate.params.items() if k in self.dists}
            if len(params) != len(self.dists):
                continue
            value = _value(exp)
            try:
                trial = optuna.trial.create_trial(
                    params=params, distributions=self.dists, value=value,
                    state=(optuna.trial.TrialState.COMPLETE if value is not None
                           else optuna.trial.TrialState.FAIL))
                self.study.add_trial(trial)
            except ValueError:
                continue

    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        import optuna

        out: list[Candidate] = []
        tried = context.tried_digests  # a view of the journal's: not copied per ask
        added: set[str] = set()  # this call's own
        attempts = 0
        held = self._held(context)
        while len(out) < n and attempts < 20 * max(n, 1) and not self._exhausted:
            attempts += 1
            if self._grid is not None:
                if not self._grid:
                    self._exhausted = True
                    break
                point = self._grid.pop(0)
                if patch_digest("", point) in tried or patch_digest("", point) in added:
                    continue
                if all(held.get(k) == v for k, v in point.items()):
                    continue  # the incumbent's own values: nothing to measure
                added.add(patch_digest("", point))
                out.append(self._candidate(context, point, None, held))
                continue
            trial = self.study.ask(self.dists)
            params: dict[str, ParamValue] = dict(trial.params)
            digest = patch_digest("", params)
            if digest in tried or digest in added:  # sampled before: the sampler moves on
                self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                continue
            added.add(digest)
            self._open[trial.number] = trial
            out.append(self._candidate(context, params, trial.number, held))
        return out

    def _held(self, context: ProposalContext) -> dict[str, ParamValue]:
        """The incumbent's values: what assay applies to it, else its files' own lines (a
        base commit without declared defaults still holds values); read once a commit."""
        inc = context.incumbent
        if self._held_at is None or self._held_at[0] != inc.commit \
                or self._held_at[1] != dict(inc.params):
            held = held_params(self.params, inc.params, context.files.get)
            self._held_at = (inc.commit, dict(inc.params), held)
        return self._held_at[2]

    def _candidate(self, context: ProposalContext, params: dict[str, ParamValue],
                   trial: int | None, held: dict[str, ParamValue]) -> Candidate:
        changed = {k: v for k, v in params.items() if held.get(k) != v}
        hyp = ", ".join(f"{k}={v}" for k, v in changed.items()) or "incumbent values"
        return Candidate(base_commit=context.incumbent.commit, params=params,
                         hypothesis=f"sweep ({self.sampler_name}): {hyp}", proposer=self.name,
                         meta={"trial": trial} if trial is not None else {"grid": True})

    def tell(self, experiment: Experiment) -> None:
        import optuna

        if experiment.candidate.meta.get("grid"):  # grid points: recorded for the record
            self.replay([experiment])
            return
        number = experiment.candidate.meta.get("trial")
        trial = self._open.pop(int(number), None) if number is not None else None
        if trial is None:
            return
        value = _value(experiment)
        if value is None:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, value)


def _value(exp: Experiment) -> float | None:
    if exp.state not in (ExperimentState.KEPT, ExperimentState.DISCARDED):
        return None
    if exp.decision is None:
        return None
    v = exp.decision.details.get("candidate_value")
    return float(v) if v is not None else None
