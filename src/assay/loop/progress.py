"""What a run reached, read from the journal: its progress, and the summary a run returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model import LEVEL, Experiment, ExperimentState


@dataclass(frozen=True)
class Summary:
    """How a run ended: built whole by :meth:`~assay.loop.driver.Loop.summary`, completed with the
    verification and the spend by :func:`assay.api.run` as a new value
    (``dataclasses.replace``), never changed in place."""

    baseline: float | None = None
    best: float | None = None
    kept: list[Experiment] = field(default_factory=list)
    finished: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    stopped: str = ""
    branch: str = ""
    failed: str = ""
    verified: dict[str, Any] | None = None  # the paired baseline-vs-best measurement
    verify_note: str = ""  # why the run did not verify its final best ('' when it did)
    # experiments measured but not decided when the run stopped (a provisional keep waiting
    # for its confirmation, say): their latest look; the next `assay run` goes on with them
    open: list[Experiment] = field(default_factory=list)
    # model calls: what they cost and bought (assay.measure.spend)
    spend: dict[str, Any] | None = None
    # [fidelity]: candidates still to measure at a level, with what it would cost
    awaiting: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Progress:
    counts: dict[str, int]
    finished: int
    kept: list[Experiment]
    baseline: float | None  # the base commit's median: its calibration runs, else the
    # incumbent's median in the first decided experiment
    best: float | None  # the last kept candidate's median (the baseline if none was kept)


def progress(exps: Sequence[Experiment], calibrated: float | None = None,
             level: int = 0) -> Progress:
    """Counts by state, the kept experiments, the baseline and the best, from the journal.

    ``calibrated`` is the base commit's median over its calibration runs at ``level`` (the
    level keeps are decided at: the last of ``[fidelity]``, else 0): when given it is the
    baseline (under the expensive rule the first decided experiment may come after a keep,
    so its incumbent is not the base commit). Else the first decision at ``level`` gives it:
    a screen at a cheaper level measured another quantity (a 30 s run's val_bpb is not a
    300 s run's), so before anything is measured at ``level`` there is no baseline."""
    counts: dict[str, int] = {}
    for e in exps:
        counts[e.state.value] = counts.get(e.state.value, 0) + 1
    kept = [e for e in exps if e.state is ExperimentState.KEPT]
    first = next((e.decision for e in exps
                  if e.decision and "incumbent_value" in e.decision.details
                  and int(e.decision.details.get(LEVEL, 0)) == level), None)
    baseline = float(first.details["incumbent_value"]) if first else None
    if calibrated is not None:
        baseline = float(calibrated)
    best = baseline
    if kept and kept[-1].decision and "candidate_value" in kept[-1].decision.details:
        best = float(kept[-1].decision.details["candidate_value"])
    return Progress(counts, sum(1 for e in exps if e.state.is_finished()), kept, baseline, best)
