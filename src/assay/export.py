"""Exports of the journal: results.tsv (karpathy's columns), JSONL (pi-autoresearch), CSV."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from .config import Target
from .journal import Journal
from .model import Experiment, ExperimentState

FORMATS = ("tsv", "jsonl", "csv")
_KARPATHY_STATUS = {ExperimentState.KEPT: "keep", ExperimentState.DISCARDED: "discard",
                    ExperimentState.CRASHED: "crash", ExperimentState.INVALID: "crash"}


def rows(journal: Journal, target: Target) -> list[dict[str, Any]]:
    memory = next((g.name for g in target.guards if "mem" in g.name or "vram" in g.name), None)
    out = []
    for e in journal.experiments():
        d = e.decision
        det = d.details if d else {}
        mem = None
        if memory:
            vals = [r.metrics.get(memory) for r in journal.runs(e.id)
                    if r.role.value == "B" and memory in r.metrics]
            mem = sorted(v for v in vals if v is not None)[len(vals) // 2] if vals else None
        out.append({
            "id": e.id, "commit": (e.commit or "")[:7], "state": e.state.value,
            "metric": det.get("candidate_value"), "incumbent": det.get("incumbent_value"),
            "effect": d.effect if d else None, "lo": d.lo if d else None,
            "hi": d.hi if d else None, "runs": d.runs_used if d else 0,
            "memory": mem, "proposer": e.candidate.proposer,
            "description": e.candidate.hypothesis, "reason": e.note or (d.reason if d else ""),
            "params": dict(e.candidate.params),
        })
    return out


def _status(e_state: str) -> str:
    return _KARPATHY_STATUS.get(ExperimentState(e_state), e_state)


def render(journal: Journal, target: Target, fmt: str) -> str:
    data = rows(journal, target)
    if fmt == "tsv":
        lines = ["commit\t" + target.metric.name + "\tmemory\tstatus\tdescription"]
        for r in data:
            metric = f"{r['metric']:.6f}" if r["metric"] is not None else "0.000000"
            mem = f"{r['memory']:.1f}" if r["memory"] is not None else "0.0"
            desc = str(r["description"]).replace("\t", " ").replace("\n", " ")
            lines.append(f"{r['commit'] or '-'}\t{metric}\t{mem}\t{_status(r['state'])}\t{desc}")
        return "\n".join(lines) + "\n"
    if fmt == "jsonl":
        out = []
        for r in data:
            out.append(json.dumps({
                "run": r["id"], "commit": r["commit"], "metric": r["metric"],
                "metric_name": target.metric.name, "status": _status(r["state"]),
                "description": r["description"], "effect": r["effect"],
                "interval": [r["lo"], r["hi"]], "runs": r["runs"], "reason": r["reason"],
                "proposer": r["proposer"], "params": r["params"]}, sort_keys=True))
        return "\n".join(out) + ("\n" if out else "")
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


def experiment_dict(journal: Journal, e: Experiment) -> dict[str, Any]:
    d = e.decision
    return {
        "id": e.id, "seq": e.seq, "state": e.state.value, "commit": e.commit, "note": e.note,
        "hypothesis": e.candidate.hypothesis, "proposer": e.candidate.proposer,
        "params": dict(e.candidate.params), "sources": list(e.candidate.sources),
        "hypothesis_id": e.candidate.hypothesis_id, "meta": dict(e.candidate.meta),
        "patch": e.candidate.patch, "base_commit": e.candidate.base_commit,
        "created_at": e.created_at, "updated_at": e.updated_at,
        "decision": None if d is None else {
            "verdict": d.verdict.value, "reason": d.reason, "effect": d.effect, "lo": d.lo,
            "hi": d.hi, "pairs_used": d.pairs_used, "runs_used": d.runs_used, "delta": d.delta,
            "rule": d.rule, "details": dict(d.details)},
    }
