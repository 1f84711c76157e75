"""Exports of the journal in the formats other tools read.

- ``tsv``: karpathy/autoresearch's ``results.tsv`` -- columns ``commit``, the metric's name,
  ``memory_gb``, ``status`` (keep / discard / crash) and ``description``; a baseline row
  first. A discarded candidate's value is its decided effect applied to the incumbent's
  value (what it would have scored next to the same incumbent), never a raw block mean. A
  queued patch in conflict with the incumbent (:mod:`assay.repo.merge`) is a discard whose
  description names the conflicting files.
- ``jsonl``: pi-autoresearch's ``log.jsonl`` -- a ``{"type": "config", ...}`` header line,
  then one line per run with a numeric ``run`` (1 is the baseline), ``commit``, ``metric``,
  ``metrics`` (the guards), ``status`` (keep / discard / crash / checks_failed),
  ``description``, ``timestamp`` (ms), ``segment`` and ``confidence`` (the best kept
  improvement so far over the noise floor, as pi means it); assay's own fields
  (id, effect, interval, reason) ride in ``asi``, the loader's free-form field.
- ``csv``: one row per experiment with every decision field.

``for_proposers=True`` (``assay export --for-proposers``) makes an export a proposer may
read (pi-autoresearch's agent reads its ``log.jsonl``): an experiment whose reason holds
held-out results (``Experiment.withheld``) shows only that it was withheld.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from typing import Any

from .config.fidelity import last_level
from .config.spec import MetricSpec, Target
from .journal.store import Journal
from .loop.progress import progress
from .model import (
    LEVEL,
    Direction,
    Experiment,
    ExperimentState,
    Role,
    RunResult,
    RunStatus,
    decided_runs,
    for_proposer,
)

FORMATS = ("tsv", "jsonl", "csv")
_STATUS = {ExperimentState.KEPT: "keep", ExperimentState.DISCARDED: "discard",
           ExperimentState.CRASHED: "crash", ExperimentState.INVALID: "crash",
           ExperimentState.CONFLICT: "discard"}  # a conflict's description says so
# Bytes per unit, for memory guards: the guard's unit, else its name's last word.
_BYTES = {"b": 1, "byte": 1, "bytes": 1, "kb": 1024, "kib": 1024, "k": 1024,
          "mb": 1024 ** 2, "mib": 1024 ** 2, "m": 1024 ** 2,
          "gb": 1024 ** 3, "gib": 1024 ** 3, "g": 1024 ** 3}
_NAME_UNITS = ("bytes", "kb", "kib", "mb", "mib", "gb", "gib")  # peak_kb, peak_vram_mb


def memory_unit(spec: MetricSpec) -> str:
    """The memory unit a metric is counted in ('' when it is not a memory): its ``unit``
    (kb, MiB, bytes ...), else the last word of its name (``peak_kb``, ``peak_vram_mb``)."""
    unit = spec.unit.strip().lower()
    if unit in _BYTES:
        return unit
    last = spec.name.lower().rsplit("_", 1)[-1]
    return last if "_" in spec.name and last in _NAME_UNITS else ""


def memory_guard(target: Target) -> MetricSpec | None:
    """The first guard counted in a memory unit (the ``memory_gb`` of the exports)."""
    return next((g for g in target.guards if memory_unit(g)), None)


def to_gb(value: float, spec: MetricSpec) -> float:
    """A memory value in GiB, converted by the guard's unit."""
    return value * _BYTES[memory_unit(spec)] / 1024 ** 3


def gb_text(value: float | None) -> str:
    """``memory_gb`` as results.tsv writes it: one decimal, more digits below 1 GB (a few
    hundred MB must not read as 0.0)."""
    if value is None:
        return "0.0"
    return f"{value:.1f}" if value >= 1 else f"{value:.3g}"


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def _side(runs: Sequence[RunResult], name: str, role: Role) -> float | None:
    return _median([r.metrics[name] for r in runs if r.role is role and
                    r.status is RunStatus.OK and name in r.metrics])


def decided(journal: Journal, e: Experiment) -> list[RunResult]:
    """``e``'s runs at the level its decision was made at (:func:`assay.model.decided_runs`)."""
    return decided_runs(e, journal.blocks(e.id), journal.runs(e.id))


def _baseline_side(journal: Journal, first: Experiment, name: str, level: int
                   ) -> float | None:
    """The baseline's value of ``name`` at ``level`` (the last): the first experiment decided
    there, its incumbent runs at that level; else (a candidate measured alone, as the
    expensive rule does) the calibration runs at that level of the commit it started from."""
    v = _side(decided(journal, first), name, Role.INCUMBENT)
    if v is not None:
        return v
    base = first.candidate.base_commit
    cal = {b.id for b in journal.blocks("cal") if b.incumbent.commit == base
           and b.level == level}
    return _median([r.metrics[name] for r in journal.runs("cal") if r.block_id in cal and
                    r.status is RunStatus.OK and name in r.metrics])


def shown_value(e: Experiment, direction: Direction) -> float | None:
    """The value a row shows, in the exports and the report's table alike: kept -> its
    measured median; discarded -> the decided effect applied to the incumbent's median (what
    it would have scored next to the same incumbent)."""
    d = e.decision
    if d is None:
        return None
    inc = d.details.get("incumbent_value")
    if e.state is ExperimentState.KEPT:
        cand = d.details.get("candidate_value")
        return float(cand) if cand is not None else None
    if e.state is ExperimentState.DISCARDED and inc is not None and d.effect is not None:
        if d.effect <= -1.0:
            return None
        # effect = B/A - 1 (maximize) or A/B - 1 (minimize)
        return float(inc) * (1 + d.effect) if direction is Direction.MAXIMIZE \
            else float(inc) / (1 + d.effect)
    return None


def pi_status(e: Experiment) -> str:
    if e.state is ExperimentState.INVALID and e.note.startswith(("checks_failed", "checks:",
                                                                 "compare")):
        return "checks_failed"
    return status(e)


def status(e: Experiment) -> str:
    """keep / discard / crash; a patch in conflict with the incumbent is a discard."""
    return "discard" if is_conflict(e) else _STATUS.get(e.state, "crash")


def is_conflict(e: Experiment) -> bool:
    """A patch in conflict with the incumbent (journals written before the ``conflict``
    state kept it as invalid with a ``conflict:`` note)."""
    return e.state is ExperimentState.CONFLICT or (
        e.state is ExperimentState.INVALID and e.note.startswith("conflict:"))


def rows(journal: Journal, target: Target, *, for_proposers: bool = False
         ) -> list[dict[str, Any]]:
    """One row per experiment, after a baseline row for the incumbent it started from.

    ``for_proposers``: held-out reasons are replaced (see :func:`assay.model.for_proposer`).
    """
    mem = memory_guard(target)
    direction = target.metric.direction
    exps = journal.experiments()
    if for_proposers:
        exps = [for_proposer(e) for e in exps]
    out: list[dict[str, Any]] = []
    last = last_level(target.fidelity)  # where keeps are decided
    first = next((e for e in exps if e.decision and "incumbent_value" in e.decision.details
                  and int(e.decision.details.get(LEVEL, 0)) == last), None)
    cal = journal.calibration(last)
    # the baseline `assay status`, the summary and the report show: one number, one place
    baseline = progress(exps, cal.baseline if cal else None, last).baseline
    if first is not None and first.decision is not None and baseline is not None:
        base_mem = _baseline_side(journal, first, mem.name, last) if mem else None
        base_metrics = {g.name: v for g in target.guards
                        if (v := _baseline_side(journal, first, g.name, last)) is not None}
        out.append({
            "id": "baseline", "commit": (journal.base_commit() or "")[:7],
            "state": "baseline", "status": "keep", "pi_status": "keep",
            "metric": baseline, "incumbent": baseline, "effect": None,
            "lo": None, "hi": None, "runs": 0, "memory": base_mem,
            "memory_gb": to_gb(base_mem, mem) if mem and base_mem is not None else None,
            "metrics": base_metrics, "proposer": "", "description": "baseline", "reason": "",
            "params": {}, "timestamp": first.created_at})
    for e in exps:
        if not e.state.is_finished():
            continue
        d = e.decision
        det = d.details if d else {}
        runs = decided(journal, e)  # the runs at the level its decision was made at
        m = _side(runs, mem.name, Role.CANDIDATE) if mem else None
        metrics = {g.name: v for g in target.guards
                   if (v := _side(runs, g.name, Role.CANDIDATE)) is not None}
        out.append({
            "id": e.id, "commit": (e.commit or "")[:7], "state": e.state.value,
            "status": status(e), "pi_status": pi_status(e),
            "metric": shown_value(e, direction), "incumbent": det.get("incumbent_value"),
            "effect": d.effect if d else None, "lo": d.lo if d else None,
            "hi": d.hi if d else None, "runs": d.runs_used if d else 0, "memory": m,
            "memory_gb": to_gb(m, mem) if mem and m is not None else None,
            "metrics": metrics, "proposer": e.candidate.proposer,
            "description": e.candidate.hypothesis
            + (f" ({e.note})" if is_conflict(e) else ""),
            "reason": e.note or (d.reason if d else ""),
            "params": dict(e.candidate.params), "timestamp": e.updated_at})
    return out


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _confidences(data: list[dict[str, Any]], noise: float | None) -> list[float | None]:
    """pi-autoresearch's ``confidence`` on each row: the improvement over the baseline so
    far (the kept effects compounded) in multiples of the noise floor, which is what its
    "likely real" reads; never a row's own effect. None before anything was kept, or
    without a measured noise."""
    out: list[float | None] = []
    gain: float | None = None
    for r in data:
        if r["state"] == ExperimentState.KEPT.value and r["effect"] is not None:
            gain = (1.0 + (gain or 0.0)) * (1.0 + float(r["effect"])) - 1.0
        known = gain is not None and noise is not None and noise > 0 and math.isfinite(noise)
        out.append(round(gain / noise, 3) if known and gain is not None and noise else None)
    return out


def render(journal: Journal, target: Target, fmt: str, *, for_proposers: bool = False) -> str:
    data = rows(journal, target, for_proposers=for_proposers)
    if fmt == "tsv":
        lines = [f"commit\t{target.metric.name}\tmemory_gb\tstatus\tdescription"]
        for r in data:
            metric = f"{r['metric']:.6f}" if r["metric"] is not None else "0.000000"
            mem = gb_text(r["memory_gb"])
            lines.append(f"{r['commit'] or '-'}\t{metric}\t{mem}\t{r['status']}\t"
                         f"{_one_line(r['description'])}")
        return "\n".join(lines) + "\n"
    if fmt == "jsonl":
        # the kept effects are measured at the last level: so is the noise they are read in
        cal = journal.calibration(last_level(target.fidelity))
        noise = cal.pooled if cal else None
        header = {"type": "config", "name": journal.run_name() or "assay",
                  "metricName": target.metric.name, "metricUnit": target.metric.unit,
                  "bestDirection": "higher" if target.metric.direction is Direction.MAXIMIZE
                  else "lower"}
        out = [json.dumps(header)]
        confidence = _confidences(data, noise)
        for n, r in enumerate(data, start=1):
            out.append(json.dumps({
                "run": n, "commit": r["commit"],
                "metric": r["metric"] if r["metric"] is not None else 0,
                "metrics": r["metrics"], "status": r["pi_status"],
                "description": _one_line(r["description"]),
                "timestamp": int(float(r["timestamp"]) * 1000), "segment": 0,
                "confidence": confidence[n - 1],
                "asi": {"assay_id": r["id"], "state": r["state"], "effect": r["effect"],
                        "interval": [r["lo"], r["hi"]], "runs": r["runs"],
                        "reason": r["reason"], "proposer": r["proposer"],
                        "params": r["params"]}}))
        return "\n".join(out) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        fields = ["id", "commit", "state", "metric", "incumbent", "effect", "lo", "hi", "runs",
                  "memory", "proposer", "description", "reason"]
        w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in data:
            w.writerow(r)
        return buf.getvalue()
    raise ValueError(f"unknown export format {fmt!r}; valid: {', '.join(FORMATS)}")


# What older journals' llm and agent candidates wrote into meta: a call's tokens and dollars
# are read from the journal's model_calls only, so these are left out where meta is shown.
_SPEND_IN_META = frozenset({"tokens_in", "tokens_out", "tokens_cached", "cost_usd", "priced"})


def experiment_dict(journal: Journal, e: Experiment) -> dict[str, Any]:
    d = e.decision
    return {
        "id": e.id, "seq": e.seq, "state": e.state.value, "commit": e.commit, "note": e.note,
        "hypothesis": e.candidate.hypothesis, "proposer": e.candidate.proposer,
        "params": dict(e.candidate.params), "sources": list(e.candidate.sources),
        "hypothesis_id": e.candidate.hypothesis_id, "meta": {
            k: v for k, v in e.candidate.meta.items() if k not in _SPEND_IN_META},
        # a listing leaves the patch in the journal: None here, `assay show` has it
        "patch": e.candidate.patch if e.patch_loaded else None,
        "patch_chars": len(e.candidate.patch) if e.patch_loaded else e.patch_chars,
        "base_commit": e.candidate.base_commit,
        "created_at": e.created_at, "updated_at": e.updated_at,
        "decision": None if d is None else {
            "verdict": d.verdict.value, "reason": d.reason, "effect": d.effect, "lo": d.lo,
            "hi": d.hi, "pairs_used": d.pairs_used, "runs_used": d.runs_used, "delta": d.delta,
            "rule": d.rule, "details": dict(d.details)},
    }
