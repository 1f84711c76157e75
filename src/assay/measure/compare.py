"""One comparison of two trees with the run's own loop and decision engine.

A :class:`Comparison` names an incumbent (A) and a candidate (B) commit. :func:`compare`
measures it with an ordinary :class:`~assay.loop.driver.Loop` in a journal of its own
(``.assay/finalize/<run>/<label>.sqlite``): the candidate is built and checked, then ABBA
blocks run on the run's slots until the decision rule keeps, stops or gives up, exactly as
during the run (confirmation block included). The run's calibration is reused, so δ and
the slot noise are the ones the run measured; a run without one calibrates first.

The loop records the candidate's commit on a scratch branch ``assay/<run>-pr/measuring``,
which is deleted when the comparison ends. The target's hooks do not fire.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.spec import MetricSpec, Target
from ..decision.rule import guard_change
from ..errors import FinalizeError
from ..executors.platforms import build_executor
from ..journal.store import Journal
from ..loop.driver import Loop
from ..model import Candidate, Experiment, ExperimentState, Incumbent
from ..proposers.base import ProposalContext, Proposer
from ..records import CalibrationRecord
from ..repo import plumbing as branches
from ..repo.workspace import Workspace

Report = Callable[[str], None]


@dataclass(frozen=True)
class Comparison:
    label: str  # file-safe: names the journal
    incumbent: str  # commit
    candidate: str  # commit
    incumbent_params: Mapping[str, Any]  # env-applied parameters only
    candidate_params: Mapping[str, Any]
    hypothesis: str


@dataclass(frozen=True)
class Measured:
    label: str
    state: str  # kept / discarded / invalid / crashed / conflict
    effect: float | None
    lo: float | None
    hi: float | None
    reason: str
    pairs: int
    runs: int
    checks_passed: bool | None
    journal: str
    # with [[platforms]]: each platform's row (platform, state, effect, lo, hi, pairs, reason)
    platforms: tuple[Mapping[str, Any], ...] = ()
    # each guard's medians and change over the comparison's runs (GuardChange.as_dict)
    guards: tuple[Mapping[str, Any], ...] = ()

    @property
    def distinguishable(self) -> bool:
        """True when the interval excludes zero."""
        return (self.lo is not None and self.hi is not None
                and (self.lo > 0 or self.hi < 0))

    @property
    def valid(self) -> bool:
        return self.state in (ExperimentState.KEPT.value, ExperimentState.DISCARDED.value)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _One(Proposer):
    """Proposes one candidate, once."""

    name = "finalize"

    def __init__(self, cand: Candidate) -> None:
        self.cand: Candidate | None = cand

    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        cand, self.cand = self.cand, None
        return [cand] if cand is not None else []


def env_params(target: Target, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters applied through the environment (assignments live in the files)."""
    env = {p.name for p in target.params if p.apply == "env"}
    return {k: v for k, v in params.items() if k in env}


def compare(target: Target, run: str, cmp: Comparison, folder: Path,
            calibration: CalibrationRecord | None, report: Report,
            scratch: str | None = None) -> Measured:
    """Measure ``cmp.candidate`` against ``cmp.incumbent`` with the run's decision rule.

    ``scratch`` names the scratch run (its branch is ``assay/<scratch>``); by default
    ``<run>-pr/measuring``."""
    fid = target.fidelity
    # [fidelity]: measured at the last level only (its value set on both sides), with that
    # level's calibration; the parameter is assay's, never a side's own
    quiet = dataclasses.replace(target, hooks={},
                                fidelity=None if fid is None else fid.at_last())
    if fid is not None:
        cmp = dataclasses.replace(
            cmp, incumbent_params={k: v for k, v in cmp.incumbent_params.items()
                                   if k != fid.param},
            candidate_params={k: v for k, v in cmp.candidate_params.items() if k != fid.param})
    root = target.root
    scratch = scratch or f"{run}-pr/measuring"
    refs = branches.Refs(root)
    if branches.rev(root, f"refs/heads/assay/{scratch}") is not None:
        refs.delete(f"assay/{scratch}")  # left by an interrupted finalize
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{cmp.label}.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    journal = Journal.open(path)
    try:
        journal.set_incumbent(Incumbent(cmp.incumbent, dict(cmp.incumbent_params)))
        journal.set_run_name(scratch)
        journal.set_base_commit(cmp.incumbent)
        if calibration is not None:
            journal.set_calibration(calibration)
        patch = branches.diff(root, cmp.incumbent, cmp.candidate)
        cand = Candidate(base_commit=cmp.incumbent, patch=patch,
                         params=dict(cmp.candidate_params), hypothesis=cmp.hypothesis,
                         proposer="finalize")
        ws = Workspace(quiet, scratch)
        exe = build_executor(quiet, ws)
        loop = Loop(quiet, journal, ws, exe, _One(cand),
                    on_event=lambda kind, msg, exp: report(own_words(cmp.label, kind, msg, exp))
                    if kind in ("keep", "discarded", "invalid", "crashed", "conflict", "calibrated",
                                "error", "reject") else None)
        summary = loop.run(budget=1)
        exps = journal.experiments()
        if summary.failed or not exps:
            raise FinalizeError(f"measuring {cmp.label} failed: {summary.failed or 'no result'}"
                                f" (journal: {path})")
        return _measured(cmp.label, exps[0], journal, path, target.guards)
    finally:
        journal.close()
        refs.delete(f"assay/{scratch}")


def own_words(label: str, kind: str, message: str, exp: Experiment | None) -> str:
    """A line of a comparison's loop, without that loop's experiment id and the commit it
    made on its scratch branch: neither is the run's (its e0001 is not the run's e0001)."""
    if exp is not None and exp.state.is_finished():
        d = exp.decision
        message = f"{exp.state.value}: {d.reason if d is not None else exp.note}"
    return f"  [{label}] {message}"


def _measured(label: str, exp: Experiment, journal: Journal, path: Path,
              guards: Sequence[MetricSpec] = ()) -> Measured:
    d = exp.decision
    blocks = journal.blocks(exp.id)
    runs = journal.runs(exp.id)
    checks = [b.checks_passed for b in blocks if b.checks_passed is not None]
    return Measured(
        label=label, state=exp.state.value, effect=d.effect if d else None,
        lo=d.lo if d else None, hi=d.hi if d else None,
        reason=exp.note or (d.reason if d else ""), pairs=d.pairs_used if d else 0,
        runs=len(runs), checks_passed=(all(bool(c) for c in checks) if checks else None),
        journal=str(path),
        platforms=tuple(d.details.get("platforms") or ()) if d else (),
        guards=tuple(guard_change(runs, g).as_dict() for g in guards))
