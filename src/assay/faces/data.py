"""The data behind every page: one JSON-able dict per page, read from the journal.

The static report, the live dashboard and its JSON twins all draw from these functions, so
a page and its ``.json`` always agree. Nothing here writes: the journal is opened
read-only and may be written by a running loop at the same time (WAL).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config.fidelity import last_level
from ..config.spec import Target
from ..decision.agreement import agreement
from ..decision.rule import guard_change
from ..export import experiment_dict, shown_value
from ..journal import lock as lock_mod
from ..journal.store import JOURNAL_NAME, Journal
from ..loop.progress import progress as run_progress
from ..loop.sessions import holding_branch
from ..measure import spend, verify
from ..model import (
    BlockRow,
    Decision,
    Direction,
    Experiment,
    ExperimentState,
    RunResult,
    decided_level,
    decided_runs,
)
from ..records import CalibrationRecord
from ..usage import Spent
from .terminal import improvement, paired_words, pct, ratio_words

FINISHED = ("kept", "discarded", "invalid", "crashed", "conflict")
LOG_TAIL_BYTES = 4000  # per log file on a live experiment page
REPORT_TAIL_BYTES = 1500  # per log file in the static report (it holds every experiment)
REPORT_LOGS_LIMIT = 2000  # above this many experiments the report leaves log text out
REPORT_PATCH_CHARS = 4000  # and cuts each patch to this many characters
NOISE_SIGMAS = 2.0


def journal_file(target: Target) -> Path:
    return target.state_dir / JOURNAL_NAME


def open_readonly(target: Target) -> Journal | None:
    """The journal opened read-only, or None when no run has written one yet."""
    path = journal_file(target)
    if not path.exists():
        return None
    journal = Journal.open(path, readonly=True)
    if not journal.is_ready():  # a run is creating it right now
        journal.close()
        return None
    return journal


def lock_state(target: Target) -> dict[str, Any]:
    """Whether a live run holds ``.assay/run.lock`` (and whose it is)."""
    path = target.state_dir / "run.lock"
    if not path.exists():
        return {"running": False, "holder": None}
    info = lock_mod.read(path)
    stale, why = lock_mod.is_stale(info)
    holder = None if info is None else {"pid": info.pid, "host": info.host,
                                        "heartbeat": info.heartbeat, "started": info.started}
    return {"running": not stale, "holder": holder, "stale": why if stale else ""}


def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


# -- cost --------------------------------------------------------------------------------
def slot_gpus(target: Target, journal: Journal) -> dict[str, int]:
    """GPUs per slot name: from the journal's slots, else from ``[run] gpus``."""
    out = {f"s{i}": len(g) for i, g in enumerate(target.run.gpus)}
    for slot in journal.slots():
        out[slot.name] = len(slot.gpus)
    return out


def run_cost(runs: Iterable[RunResult], gpus: Mapping[str, int]) -> dict[str, float]:
    """Benchmark wall time: GPU-hours on slots with GPUs, CPU-seconds on slots without."""
    wall = 0.0
    gpu_s = 0.0
    cpu_s = 0.0
    for r in runs:
        w = r.wall_s or 0.0
        wall += w
        g = gpus.get(r.slot, 0)
        gpu_s += w * g
        if not g:
            cpu_s += w
    return {"run_hours": wall / 3600.0, "gpu_hours": gpu_s / 3600.0, "cpu_seconds": cpu_s}


def totals_cost(per_slot: Mapping[str, tuple[int, float]], gpus: Mapping[str, int]
                ) -> dict[str, float]:
    """:func:`run_cost` from runs summed per slot (``Journal.run_totals``)."""
    wall = sum(w for _, w in per_slot.values())
    gpu_s = sum(w * gpus.get(slot, 0) for slot, (_, w) in per_slot.items())
    cpu_s = sum(w for slot, (_, w) in per_slot.items() if not gpus.get(slot, 0))
    return {"run_hours": wall / 3600.0, "gpu_hours": gpu_s / 3600.0, "cpu_seconds": cpu_s}


def _all_cost(totals: Mapping[str, Mapping[str, tuple[int, float]]],
              gpus: Mapping[str, int]) -> dict[str, float]:
    out = {"run_hours": 0.0, "gpu_hours": 0.0, "cpu_seconds": 0.0}
    for per in totals.values():
        for k, v in totals_cost(per, gpus).items():
            out[k] += v
    return out


def resources(cost: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The resources a run used, each with its total and its cost per kept change; a
    resource that is zero (no GPU on a CPU project, no LLM tokens for a sweep) is left out."""
    kept = int(cost.get("kept") or 0)
    out = []
    for key, name, unit in (("gpu_hours", "GPU time", "GPU-h"), ("cpu_seconds", "CPU time",
                                                                 "CPU-s"),
                            ("tokens", "LLM tokens", "tokens"), ("cost_usd", "LLM cost", "USD")):
        total = float(cost.get(key) or 0.0)
        if total > 0:
            out.append({"key": key, "name": name, "unit": unit, "total": total,
                        "per_kept": total / kept if kept else None})
    return out


# -- the overview ------------------------------------------------------------------------
def _source_kind(e: Experiment, kinds: Mapping[int, str]) -> str:
    hid = e.candidate.hypothesis_id
    if hid is not None and hid in kinds:
        return kinds[hid]
    return "none"


def _row(e: Experiment, direction: Direction, kinds: Mapping[int, str],
         cost: Mapping[str, float], n_runs: int, spent: Spent | None) -> dict[str, Any]:
    """One experiment's row; ``spent``: its model calls added up (None: it made none)."""
    d = e.decision
    det = d.details if d else {}
    return {
        "id": e.id, "seq": e.seq, "state": e.state.value,
        "proposer": e.candidate.proposer or "-", "hypothesis": e.candidate.hypothesis,
        "source_kind": _source_kind(e, kinds),
        "params": dict(e.candidate.params), "has_patch": e.has_patch,
        "value": _finite(shown_value(e, direction)),
        "incumbent_value": _finite(det.get("incumbent_value")),
        "effect": _finite(d.effect) if d else None, "lo": _finite(d.lo) if d else None,
        "hi": _finite(d.hi) if d else None,
        "runs": d.runs_used if d else n_runs, "pairs": d.pairs_used if d else 0,
        "verdict": d.verdict.value if d else None,
        "reason": e.note or (d.reason if d else ""),
        "commit": e.commit, "created_at": e.created_at, "updated_at": e.updated_at,
        **model_cost(spent),
        "gpu_hours": cost.get("gpu_hours", 0.0), "run_hours": cost.get("run_hours", 0.0),
        "cpu_seconds": cost.get("cpu_seconds", 0.0),
        "unconfined": bool(e.candidate.meta.get("unconfined")),  # ran without a sandbox
    }


def _projected(best: float, effect: float, direction: str) -> float:
    """The value an effect against ``best`` stands for (effects are positive when better)."""
    return best * (1.0 + effect) if direction != "minimize" else best / (1.0 + effect)


def progress(rows: Sequence[Mapping[str, Any]], baseline: float | None,
             noise: float | None, direction: str = "maximize") -> dict[str, Any]:
    """The progress chart's series: points per experiment and the running best (a step line).

    A kept experiment is drawn at its measured value and moves the running best there.
    Every other decided experiment is drawn at the running best of its time moved by its
    decided effect against the incumbent it was compared with, so a point is never on the
    better side of the line unless its effect was positive (those are marked ``within_noise``:
    positive but not clear of δ). Crashed, invalid and conflict experiments have no value:
    they are drawn at the running best of their time, marked. The noise band is the
    incumbent's value × exp(±2σ), σ the pooled pair noise from calibration.
    """
    best = baseline
    steps_x: list[int] = [0] if baseline is not None else []
    steps_y: list[float] = [baseline] if baseline is not None else []
    points: list[dict[str, Any]] = []
    for r in rows:
        value = r["value"]
        if best is None and r["incumbent_value"] is not None:
            best = r["incumbent_value"]
            steps_x, steps_y = [0], [best]
        state = r["state"]
        effect = r["effect"]
        within = False
        if state in ("invalid", "crashed", "conflict") or (value is None and effect is None):
            y, measured = best, False
        elif state == "kept" and value is not None:
            y, measured = value, True
        elif best is not None and effect is not None and effect > -1.0:
            y, measured = _projected(best, effect, direction), True
            within = effect > 0
        else:
            y, measured = value if value is not None else best, value is not None
        points.append({"id": r["id"], "seq": r["seq"], "state": state, "y": y,
                       "measured": measured, "hypothesis": r["hypothesis"],
                       "effect": effect, "lo": r["lo"], "hi": r["hi"], "within_noise": within,
                       "value": value})
        if state == "kept" and value is not None:
            best = value
            steps_x.append(r["seq"])
            steps_y.append(value)
    last = rows[-1]["seq"] if rows else 0
    if steps_x and steps_x[-1] < last:
        steps_x.append(last)
        steps_y.append(steps_y[-1])
    band = None
    if noise is not None and noise > 0 and steps_y:
        k = math.exp(NOISE_SIGMAS * noise)
        band = {"sigmas": NOISE_SIGMAS, "noise": noise,
                "upper": [y * k for y in steps_y], "lower": [y / k for y in steps_y]}
    return {"points": points, "best": {"x": steps_x, "y": steps_y}, "band": band}


def win_rates(rows: Sequence[Mapping[str, Any]], key: str) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for r in rows:
        g = groups.setdefault(str(r[key]), {"name": str(r[key]), "total": 0, "finished": 0,
                                            "kept": 0, "discarded": 0, "invalid": 0,
                                            "crashed": 0, "conflict": 0})
        g["total"] += 1
        if r["state"] in FINISHED:
            g["finished"] += 1
            g[r["state"]] += 1
    out = []
    for g in groups.values():
        g["win_rate"] = g["kept"] / g["finished"] if g["finished"] else None
        out.append(g)
    return sorted(out, key=lambda g: (-(g["win_rate"] or 0.0), g["name"]))


def model_cost(spent: Spent | None) -> dict[str, float]:
    """Tokens and dollars of model calls as the faces show them, from the journal's sums
    over its ``model_calls`` (:meth:`Journal.spent`, :meth:`Journal.spent_by_experiment`)."""
    s = spent or Spent()
    return {"tokens_in": float(s.tokens_in), "tokens_out": float(s.tokens_out),
            "cost_usd": s.usd}


def cost_of(kept: int, spent: Spent, total_runs: Mapping[str, float]) -> dict[str, Any]:
    """The cost card: the runs' time and the model calls (every call of the journal, those
    that gave no experiment included), each per kept change."""
    out: dict[str, Any] = {
        "kept": kept, "gpu_hours": total_runs.get("gpu_hours", 0.0),
        "run_hours": total_runs.get("run_hours", 0.0),
        "cpu_seconds": total_runs.get("cpu_seconds", 0.0), **model_cost(spent),
    }
    out["tokens"] = out["tokens_in"] + out["tokens_out"]
    for name in ("gpu_hours", "run_hours", "cpu_seconds", "tokens", "cost_usd"):
        out[f"{name}_per_kept"] = out[name] / kept if kept else None
    out["resources"] = resources(out)
    return out


def status_data(target: Target, journal: Journal | None,
                exps: Sequence[Experiment] | None = None) -> dict[str, Any]:
    """Everything the overview page shows (the ``/api/status.json`` twin); ``exps``: the
    journal's experiments when the caller has read them already."""
    base: dict[str, Any] = {
        "generated_at": time.time(), "root": target.root.name,
        "metric": {"name": target.metric.name, "direction": target.metric.direction.value,
                   "unit": target.metric.unit},
        "lock": lock_state(target), "journal": journal is not None,
    }
    if journal is None:
        base.update(experiments=[], counts={}, incumbent=None, baseline=None, best=None,
                    verification=None,
                    calibration=None, slots=[], progress=progress([], None, None),
                    win_rates={"proposer": [], "source_kind": []},
                    cost=cost_of(0, Spent(), {}), version="none", last_event=None, branch="",
                    noise={"slots": [], "delta": target.decision.delta, "calibrated": {},
                           "quarantined": [], "blocks": 0}, spend=None, fidelity=None)
        return base
    if exps is None:
        exps = journal.experiments(patches=False)
    kinds = {h.id: h.source_kind for h in journal.hypotheses()}
    gpus = slot_gpus(target, journal)
    totals = journal.run_totals()  # per experiment and slot, summed in SQL
    spent = journal.spent_by_experiment()  # the same, of the model calls
    rows = [_row(e, target.metric.direction, kinds, totals_cost(totals.get(e.id, {}), gpus),
                 sum(n for n, _ in totals.get(e.id, {}).values()), spent.get(e.id))
            for e in exps]
    cal = journal.calibration()
    # counts, baseline and best as `assay status` and the run's summary give them: at the
    # level keeps are decided at
    last = last_level(target.fidelity)
    at_last = journal.calibration(last)
    head = run_progress(exps, _finite(at_last.baseline) if at_last else None, last)
    counts, baseline, best = head.counts, head.baseline, head.best
    noise = _finite(cal.pooled) if cal else None
    inc = journal.incumbent()
    last_event = journal.last_event_id()
    recent = journal.recent_events(12)
    base.update(
        experiments=rows, counts=counts,
        incumbent=None if inc is None else {"commit": inc.commit, "params": dict(inc.params),
                                            "experiment": inc.experiment_id},
        baseline=baseline, best=best,
        improvement=improvement(baseline, best, target.metric.direction),
        verification=verification_data(
            target, journal, [e for e in exps if e.state is ExperimentState.KEPT]),
        calibration=None if cal is None else cal.as_dict(),
        slots=[dataclasses.asdict(s) for s in journal.slots()],
        progress=progress(rows, baseline, noise, target.metric.direction.value),
        win_rates={"proposer": win_rates(rows, "proposer"),
                   "source_kind": win_rates(rows, "source_kind")},
        cost=cost_of(counts.get(ExperimentState.KEPT.value, 0), journal.spent(),
                     _all_cost(totals, gpus)),
        version=version_of(journal), last_event=last_event,
        events=[{"id": ev.id, "ts": ev.ts, "kind": ev.kind,
                 "experiment_id": ev.experiment_id, "message": ev.message}
                for ev in recent],
        branch=holding_branch(target.root, inc.commit if inc and inc.experiment_id else None,
                         f"assay/{journal.run_name() or 'main'}"),
        noise=noise_data(target, journal),
        spend=spend.of_journal(journal, target),
        fidelity=None if target.fidelity is None else agreement(
            target.fidelity, journal.level_results(), exps).as_dict(),
    )
    return base


def verification_data(target: Target, journal: Journal, kept: Sequence[Experiment]
                      ) -> dict[str, Any] | None:
    """The headline: the paired baseline-vs-final-best measurement (``assay verify``, or the
    end of a run) with its interval, in words, and the kept effects (``kept``: the kept
    experiments, in order) compounded beside it."""
    v = journal.verification()
    effects = verify.kept_effects(kept)
    comp = verify.compounded(effects)
    if v is None and comp is None:
        return None
    m = target.metric
    out: dict[str, Any] = {
        "measured": v.as_dict() if v else None,
        "current": verify.current(journal) is not None,
        "compounded": comp, "kept": sum(1 for e in effects if e is not None),
        "compounded_words": "" if comp is None else
        pct(comp) + (f" ({r})" if (r := ratio_words(comp, m.direction, m.name, m.unit)) else ""),
        "words": paired_words(v.as_dict(), m.direction, m.name, m.unit) if v else "",
        "unreproduced": verify.unreproduced(
            v.as_dict() if v and verify.current(journal) else None, kept),
    }
    return out


def noise_data(target: Target, journal: Journal) -> dict[str, Any]:
    """Each slot's measured noise per block, δ, and quarantines (the noise chart).

    A block's noise is the spread of its incumbent runs: sd of log(A) × √2, the sd of one
    pair's log-ratio it implies (comparable with calibration's pair noise). Blocks with fewer
    than two good incumbent runs have no value.
    """
    name = target.metric.name
    blocks: dict[str, dict[str, Any]] = {}
    for x in journal.incumbent_samples(name):
        v = _finite(x.value)
        if v is None or v <= 0:
            continue
        b = blocks.setdefault(x.block_id, {"block": x.block_id, "slot": x.slot,
                                           "kind": x.kind.value, "finished_at": x.finished_at,
                                           "experiment": x.experiment_id, "logs": []})
        b["logs"].append(math.log(v))
    series: dict[str, dict[str, list[Any]]] = {}
    order = {b: i for i, b in enumerate(blocks, start=1)}
    for i, b in enumerate(blocks.values(), start=1):
        logs = b.pop("logs")
        if len(logs) < 2:
            continue
        mean = sum(logs) / len(logs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
        s = series.setdefault(b["slot"], {"x": [], "noise": [], "block": [], "t": []})
        s["x"].append(i)
        s["noise"].append(sd * math.sqrt(2.0))
        s["block"].append(b["block"])
        s["t"].append(b["finished_at"])
    cal = journal.calibration() or CalibrationRecord()
    workers = journal.slots()
    quarantined = [{"slot": s.name, "reason": s.reason} for s in workers if s.quarantined]
    delta = _finite(cal.delta) or target.decision.delta
    ends = [float(b["finished_at"] or 0.0) for b in blocks.values()]
    return {"slots": [{"slot": k, **v} for k, v in sorted(series.items())],
            "delta": delta, "deltas": _delta_per_block(ends, journal.delta_history(), delta),
            "calibrated": {k: _finite(v) for k, v in cal.noise.items()},
            "quarantined": quarantined, "blocks": len(blocks),
            "quarantines": _quarantines(journal, [w.name for w in workers], ends, series),
            "steps": delta_steps(journal, order),
            "regime": (cal.regime or {}).get("words", "")}


def delta_steps(journal: Journal, order: Mapping[str, int]) -> list[dict[str, Any]]:
    """Every change of δ with its reason, placed at the block after which it was made
    (``order``: block id -> its place on the chart; calibration at 0)."""
    out = []
    for step in journal.delta_steps():
        old, new = _finite(step.old), _finite(step.new)
        if old is None or new is None:
            continue
        out.append({"x": order.get(step.block, 0), "block": step.block, "old": old, "new": new,
                    "why": step.why})
    return out


def _delta_per_block(ends: Sequence[float], history: Sequence[tuple[float, float]],
                     current: float) -> dict[str, list[Any]]:
    """δ in force at each block (in the order they finished): that of the first decision
    made after the block ended (the one its pairs fed), else the current δ."""
    xs: list[int] = []
    ys: list[float] = []
    j = 0
    for i, end in enumerate(ends, start=1):
        while j < len(history) and history[j][0] < end:
            j += 1
        xs.append(i)
        ys.append(history[j][1] if j < len(history) else current)
    return {"x": xs, "y": ys}


def _quarantines(journal: Journal, names: Sequence[str], ends: Sequence[float],
                 series: dict[str, dict[str, list[Any]]]) -> list[dict[str, Any]]:
    """Each quarantine, placed after the last block that ended before it, at its slot's
    last measured noise."""
    out = []
    for ev in journal.events_of_kind("quarantine"):
        slot = next((n for n in names if ev.message.startswith(f"slot {n} ")), None)
        if slot is None:
            continue
        x = sum(1 for end in ends if end <= ev.ts)
        s = series.get(slot, {"x": [], "noise": []})
        before = [v for bx, v in zip(s["x"], s["noise"], strict=True) if bx <= x]
        out.append({"slot": slot, "x": x, "y": before[-1] if before else None,
                    "reason": ev.message.partition(": ")[2] or ev.message, "ts": ev.ts})
    return out


def version_of(journal: Journal) -> str:
    """What the dashboard asks changes since: the last write to an experiment, the last
    event and the last model call (index lookups, whatever the journal's size)."""
    upd, ev, call = journal.version()
    return f"{upd!r}:{ev}:{call}"  # repr: the float reads back exactly


def parse_version(text: str) -> float | None:
    try:
        return float(text.split(":", 1)[0])
    except ValueError:
        return None


def changes(target: Target, journal: Journal, since: float,
            kept_steps: Sequence[tuple[int, float]], baseline: float | None,
            ) -> dict[str, Any]:
    """The rows (and chart points) of experiments written after ``since``: the dashboard's
    update, costing a few index lookups plus the changed rows."""
    exps = journal.changed_since(since)
    ids = [e.id for e in exps]
    kinds = {h.id: h.source_kind for h in journal.hypotheses()}
    gpus = slot_gpus(target, journal)
    totals = journal.run_totals(ids) if ids else {}
    spent = journal.spent_by_experiment(ids)
    rows = [_row(e, target.metric.direction, kinds, totals_cost(totals.get(e.id, {}), gpus),
                 sum(n for n, _ in totals.get(e.id, {}).values()), spent.get(e.id))
            for e in exps]
    points = []
    direction = target.metric.direction.value
    seqs = [seq for seq, _ in kept_steps]
    for r in rows:  # each point against the running best of its own time
        i = bisect.bisect_left(seqs, r["seq"])
        best = kept_steps[i - 1][1] if i else baseline
        points += progress([r], best, None, direction)["points"]
    return {"rows": rows, "points": points}


_DECISION_FIELDS = tuple(f.name for f in dataclasses.fields(Decision) if f.name != "next_block")
_SUMS = ("run_hours", "gpu_hours", "cpu_seconds")


class Overview:
    """The dashboard's overview (``status_data``'s answer), kept current by folding in the
    rows that changed: an update costs the changed rows and the kept ones, not the
    journal's size. Not thread-safe: the server folds under its lock."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        rows: list[dict[str, Any]] = data["experiments"]
        self._pos = {r["id"]: i for i, r in enumerate(rows)}
        self._kept = {r["seq"]: r["value"] for r in rows
                      if r["state"] == "kept" and r["value"] is not None}
        self._counts = dict(data["counts"])
        cost = data["cost"]
        self._sums = {k: float(cost.get(k) or 0.0) for k in _SUMS}
        self._n_kept = sum(1 for r in rows if r["state"] == "kept")

    def kept_steps(self) -> list[tuple[int, float]]:
        """(seq, value) of the kept experiments, in order: the running best's steps."""
        return sorted(self._kept.items())

    def fold(self, changed: Sequence[dict[str, Any]], version: str,
             events: list[dict[str, Any]], spent: Spent) -> dict[str, Any]:
        """The overview with ``changed`` rows put in (replaced or appended) and the journal's
        model calls added up (``spent``); returns it."""
        rows = list(self.data["experiments"])  # a copy: earlier answers may still be sent
        for r in changed:
            i = self._pos.get(r["id"])
            if i is not None:
                self._account(rows[i], -1)
                rows[i] = r
            else:
                self._pos[r["id"]] = len(rows)
                rows.append(r)
            self._account(r, +1)
        steps = self.kept_steps()
        best = steps[-1][1] if steps else self.data["baseline"]
        cost = cost_of(self._n_kept, spent, self._sums)
        self.data = dict(self.data)
        self.data.update(experiments=rows, counts={k: v for k, v in self._counts.items() if v},
                         best=best, version=version, events=events, cost=cost)
        return self.data

    def _account(self, r: Mapping[str, Any], sign: int) -> None:
        state = r["state"]
        self._counts[state] = self._counts.get(state, 0) + sign
        for k in _SUMS:
            self._sums[k] += sign * float(r[k] or 0.0)
        if state == "kept":
            self._n_kept += sign
            if sign > 0 and r["value"] is not None:
                self._kept[r["seq"]] = r["value"]
            elif sign < 0:
                self._kept.pop(r["seq"], None)


# -- one experiment ----------------------------------------------------------------------
def tail(path: str | Path, limit: int = LOG_TAIL_BYTES) -> str | None:
    """The last ``limit`` bytes of a text file (None when it is not there)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        with p.open("rb") as f:
            if size > limit:
                f.seek(size - limit)
            data = f.read()
    except OSError:
        return None
    text = data.decode("utf-8", errors="replace")
    return ("…" + text) if size > limit else text


def experiment_data(target: Target, journal: Journal, exp_id: str,
                    tail_bytes: int = LOG_TAIL_BYTES,
                    order: Sequence[str] | None = None) -> dict[str, Any] | None:
    """One experiment: decisions, blocks, runs and log tails (``/experiments/<id>.json``)."""
    exp = journal.experiment(exp_id)
    if exp is None:
        return None
    hyps = {h.id: dataclasses.asdict(h) for h in journal.hypotheses()}
    out = _detail(target, journal, exp, journal.decisions(exp_id), journal.blocks(exp_id),
                  journal.runs(exp_id), slot_gpus(target, journal), hyps,
                  journal.spent_by_experiment([exp_id]).get(exp_id), tail_bytes, True)
    if order is not None:
        seqs = list(order)
        i = seqs.index(exp_id)
        out["prev"] = seqs[i - 1] if i > 0 else None
        out["next"] = seqs[i + 1] if i + 1 < len(seqs) else None
    else:
        out["prev"], out["next"] = journal.neighbours(exp.seq)
    out["generated_at"] = time.time()
    return out


def _detail(target: Target, journal: Journal, exp: Experiment, decisions: Sequence[Any],
            blocks: Sequence[BlockRow], runs: Sequence[RunResult],
            gpus: Mapping[str, int], hyps: Mapping[int, dict[str, Any]],
            spent: Spent | None, tail_bytes: int | None,
            block_logs: bool, patch_limit: int | None = None) -> dict[str, Any]:
    """One experiment's details from rows already loaded (``tail_bytes`` None: no log text)."""
    exp_id = exp.id
    out = experiment_dict(journal, exp)
    if patch_limit is not None and len(out["patch"]) > patch_limit:
        out["patch"] = (out["patch"][:patch_limit] + f"\n… cut at {patch_limit} characters; "
                        f"the whole patch: assay show {exp_id}\n")
    hyp = hyps.get(exp.candidate.hypothesis_id) if exp.candidate.hypothesis_id else None
    out["source_kind"] = hyp["source_kind"] if hyp else "none"
    out["hypothesis_record"] = hyp
    out["decisions"] = [{k: getattr(d, k) for k in _DECISION_FIELDS}
                        | {"verdict": d.verdict.value, "details": dict(d.details)}
                        for d in decisions]
    root = os.path.join(str(target.root), "")
    out["cost"] = run_cost(runs, gpus) | model_cost(spent)
    out["runs"] = []
    for r in runs:
        out["runs"].append({
            "run_id": r.run_id, "block_id": r.block_id, "role": r.role.value,
            "index": r.index, "status": r.status.value, "metrics": dict(r.metrics),
            "reason": r.reason, "exit_code": r.exit_code, "wall_s": r.wall_s,
            "slot": r.slot, "gpus": gpus.get(r.slot, 0),
            "stdout_path": _rel(root, r.stdout_path), "stderr_path": _rel(root, r.stderr_path),
            "stdout": tail(r.stdout_path, tail_bytes) if r.stdout_path and tail_bytes else None,
            "stderr": tail(r.stderr_path, tail_bytes) if r.stderr_path and tail_bytes else None,
        })
    out["blocks"] = []
    for b in blocks:
        extra = []
        if block_logs and tail_bytes:
            logs = target.state_dir / "logs" / exp_id / b.id
            known = {Path(r.stdout_path).name for r in runs if r.block_id == b.id} | \
                    {Path(r.stderr_path).name for r in runs if r.block_id == b.id}
            if logs.is_dir():
                for f in sorted(logs.iterdir()):
                    if f.is_file() and f.name not in known:
                        extra.append({"name": f.name, "text": tail(f, tail_bytes)})
        out["blocks"].append({
            "id": b.id, "kind": b.kind.value, "order": b.order, "state": b.state.value,
            "slot": b.slot, "inc_commit": b.incumbent.commit, "wall_s": b.wall_s,
            "build_s": b.build_s, "checks_runs": b.checks_runs,
            "checks_outcome": b.checks_outcome,
            "error": b.error, "error_kind": b.error_kind,
            "checks_passed": None if b.checks_passed is None else int(b.checks_passed),
            "logs": extra})
    out["metric"] = {"name": target.metric.name, "direction": target.metric.direction.value,
                     "unit": target.metric.unit}
    # each guard's medians over the experiment's runs at the level its decision was made at
    # (all of them there: a moved incumbent's too), as `assay show` gives them
    out["guards"] = [guard_change(decided_runs(exp, blocks, runs), g).as_dict()
                     for g in target.guards]
    fid = target.fidelity
    out["guards_level"] = "" if fid is None else fid.label(decided_level(exp, blocks))
    out["finished"] = exp.state.is_finished()
    out["logs_note"] = "" if tail_bytes else (
        f"log text is left out of reports of more than {REPORT_LOGS_LIMIT:,d} experiments: "
        f"`assay show {exp_id}` or the files named here hold it")
    return out


def _rel(root: str, path: str) -> str:
    """``path`` relative to the repository (``root``, ending in a separator) when it lies
    inside it (a string test: the report asks this for every log file of every run)."""
    return path[len(root):] if path and path.startswith(root) else path


def report_data(target: Target, journal: Journal | None) -> dict[str, Any]:
    """The static report's data: the overview plus every experiment's details, loaded in
    bulk (one query per table). Large journals keep their log text out (the paths stay)
    and cut long patches."""
    exps = journal.experiments() if journal is not None else []
    data = status_data(target, journal, exps)
    details: dict[str, Any] = {}
    if journal is not None:
        large = len(exps) > REPORT_LOGS_LIMIT
        decisions = journal.decisions_of(None)
        blocks = journal.blocks_of(None)
        runs = journal.runs_of(None)
        gpus = slot_gpus(target, journal)
        hyps = {h.id: dataclasses.asdict(h) for h in journal.hypotheses()}  # shared by rows
        spent = journal.spent_by_experiment()
        for e in exps:
            details[e.id] = _detail(target, journal, e, decisions.get(e.id, []),
                                    blocks.get(e.id, []), runs.get(e.id, []), gpus, hyps,
                                    spent.get(e.id),
                                    None if large else REPORT_TAIL_BYTES, not large,
                                    REPORT_PATCH_CHARS if large else None)
    data["details"] = details
    return data
