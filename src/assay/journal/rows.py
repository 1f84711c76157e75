"""How the journal's rows and the model's records turn into each other: JSON columns, and
one reader per table (an experiment, a run, a block, a decision, an event)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..model import (
    BlockKind,
    BlockRow,
    BlockState,
    Candidate,
    Decision,
    EventRow,
    Experiment,
    ExperimentState,
    Incumbent,
    NextBlock,
    Role,
    RunResult,
    RunStatus,
    Verdict,
)


def dumps(value: Any) -> str:
    """A value as the journal stores JSON: keys sorted, anything else as its text."""
    return json.dumps(value, sort_keys=True, default=str)


def decision_dict(d: Decision) -> dict[str, Any]:
    out = asdict(d)
    out["verdict"] = d.verdict.value
    if d.next_block is not None:
        out["next_block"] = {**asdict(d.next_block), "kind": d.next_block.kind.value}
    return out


def decision_from_dict(raw: Mapping[str, Any]) -> Decision:
    nb = raw.get("next_block")
    next_block = None
    if nb:
        next_block = NextBlock(nb["pairs"], BlockKind(nb["kind"]), nb.get("other_slot", False),
                               nb.get("reason", ""), nb.get("order"))
    return Decision(Verdict(raw["verdict"]), raw["reason"], raw.get("effect"), raw.get("lo"),
                    raw.get("hi"), raw.get("pairs_used", 0), raw.get("runs_used", 0),
                    raw.get("delta", 0.0), next_block, raw.get("rule", ""),
                    raw.get("details", {}))


def decision_of(r: sqlite3.Row) -> Decision:
    return Decision(Verdict(r["verdict"]), r["reason"], r["effect"], r["lo"], r["hi"],
                    r["pairs_used"], r["runs_used"], r["delta"], rule=r["rule"],
                    details=json.loads(r["details"]))


_EXPERIMENT_COLUMNS = ("id, seq, state, base_commit, params, hypothesis, proposer, sources, "
                       "hypothesis_id, meta, digest, created_at, updated_at, decision, "
                       "commit_sha, note, withheld, length(patch) AS patch_chars")


def columns(patches: bool) -> str:
    """The experiments' columns a query reads: with the patch text, or only its length."""
    return _EXPERIMENT_COLUMNS + (", patch" if patches else ", NULL AS patch")


def experiment_of(r: sqlite3.Row) -> Experiment:
    loaded = r["patch"] is not None
    cand = Candidate(base_commit=r["base_commit"], patch=r["patch"] if loaded else "",
                     params=json.loads(r["params"]), hypothesis=r["hypothesis"],
                     proposer=r["proposer"], sources=tuple(json.loads(r["sources"])),
                     hypothesis_id=r["hypothesis_id"], meta=json.loads(r["meta"]))
    dec = decision_from_dict(json.loads(r["decision"])) if r["decision"] else None
    return Experiment(id=r["id"], seq=r["seq"], state=ExperimentState(r["state"]), candidate=cand,
                      created_at=r["created_at"], updated_at=r["updated_at"], decision=dec,
                      commit=r["commit_sha"], note=r["note"], digest=r["digest"],
                      withheld=bool(r["withheld"]), patch_chars=int(r["patch_chars"]),
                      patch_loaded=loaded)


def moved_log(path: str, state: Path | None) -> str:
    """A run's log as recorded, or, when that file is gone and its path runs through a
    folder named as the journal's (``.assay``), the same file in the journal's own folder
    ``state``: a journal copied from another clone or machine finds its logs beside it."""
    if not path or state is None or os.path.exists(path):
        return path
    parts = Path(path).parts
    if state.name not in parts:
        return path
    i = len(parts) - 1 - parts[::-1].index(state.name)
    moved = state.joinpath(*parts[i + 1:])
    return str(moved) if moved.exists() else path


def run_of(r: sqlite3.Row, state: Path | None = None) -> RunResult:
    """A run; ``state``: the journal's folder, where a copied journal's logs are found."""
    return RunResult(run_id=r["id"], block_id=r["block_id"], experiment_id=r["experiment_id"],
                     role=Role(r["role"]), index=r["idx"], status=RunStatus(r["status"]),
                     metrics=json.loads(r["metrics"]), reason=r["reason"],
                     exit_code=r["exit_code"], wall_s=r["wall_s"],
                     stdout_path=moved_log(r["stdout_path"], state),
                     stderr_path=moved_log(r["stderr_path"], state), slot=r["slot"],
                     holdout=json.loads(r["holdout"]))


def block_of(r: sqlite3.Row) -> BlockRow:
    return BlockRow(
        id=r["id"], experiment_id=r["experiment_id"], seq=r["seq"], kind=BlockKind(r["kind"]),
        order=r["run_order"], incumbent=Incumbent(r["inc_commit"], json.loads(r["inc_params"])),
        state=BlockState(r["state"]), created_at=r["created_at"], slot=r["slot"],
        prefer_slot=r["prefer_slot"], avoid_slot=r["avoid_slot"], lease_owner=r["lease_owner"],
        lease_expires=r["lease_expires"], attempts=r["attempts"], started_at=r["started_at"],
        finished_at=r["finished_at"],
        checks_passed=None if r["checks_passed"] is None else bool(r["checks_passed"]),
        error=r["error"], error_kind=r["error_kind"], wall_s=r["wall_s"],
        build_s=r["build_s"], checks_runs=r["checks_runs"], checks_outcome=r["checks_outcome"],
        checks_detail=r["checks_detail"], platform=r["platform"], noise=r["noise"],
        level=r["level"])


def event_of(r: sqlite3.Row) -> EventRow:
    return EventRow(r["id"], r["ts"], r["kind"], r["experiment_id"], r["message"],
                    json.loads(r["data"]))
