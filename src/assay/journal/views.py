"""The journal's reads for views (reports, the dashboard, exports): pages, bulk reads by
experiment, totals and change markers, each one query whatever the journal's size."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from ..model import (
    LEVEL,
    SCREEN,
    BlockRow,
    Decision,
    Experiment,
    ExperimentState,
    LevelResult,
    RunResult,
)
from .connection import Store
from .rows import block_of, columns, decision_of, experiment_of, run_of


class ViewQueries(Store):
    """Reads for views: pages, experiments' blocks/runs/decisions at once, totals."""

    def change_key(self) -> tuple[Any, ...]:
        """A value that changes whenever anything a report or dashboard shows changes."""
        q = self.conn.execute
        return (tuple(q("SELECT COUNT(*), MAX(updated_at) FROM experiments").fetchone()),
                q("SELECT MAX(id) FROM events").fetchone()[0],
                q("SELECT COUNT(*) FROM runs").fetchone()[0],
                q("SELECT COUNT(*) FROM decisions").fetchone()[0],
                q("SELECT value FROM meta WHERE key = 'calibration'").fetchone() is not None,
                q("SELECT MAX(id) FROM model_calls").fetchone()[0])

    def version(self) -> tuple[float, int, int]:
        """(the last write to an experiment, the last event id, the last model call's id):
        three index lookups."""
        upd = self.conn.execute("SELECT MAX(updated_at) FROM experiments").fetchone()[0]
        event = self.conn.execute("SELECT MAX(id) FROM events").fetchone()[0]
        call = self.conn.execute("SELECT MAX(id) FROM model_calls").fetchone()[0]
        return float(upd or 0.0), int(event or 0), int(call or 0)

    def delta_history(self) -> list[tuple[float, float]]:
        """(time, δ) of every decision, oldest first: the δ in force when it was made."""
        rows = self.conn.execute(
            "SELECT created_at, delta FROM decisions ORDER BY created_at, id")
        return [(float(r[0]), float(r[1])) for r in rows]

    def experiment_page(self, limit: int | None = None, offset: int = 0,
                        newest_first: bool = False) -> list[Experiment]:
        """A page of experiments in ``seq`` order (newest first when asked), a listing: the
        patches' text stays in the journal (``assay show`` reads it)."""
        order = "DESC" if newest_first else "ASC"
        rows = self.conn.execute(f"SELECT {columns(False)} FROM experiments ORDER BY seq {order}"
                                 " LIMIT ? "
                                 "OFFSET ?", (-1 if limit is None else limit, max(0, offset)))
        return [experiment_of(r) for r in rows]

    def blocks_of(self, exp_ids: Sequence[str] | None = None) -> dict[str, list[BlockRow]]:
        """Every block of these experiments (all when None), by experiment, in order."""
        out: dict[str, list[BlockRow]] = {}
        for r in self._many("blocks", exp_ids, "created_at, seq"):
            out.setdefault(r["experiment_id"], []).append(block_of(r))
        return out

    def runs_of(self, exp_ids: Sequence[str] | None = None) -> dict[str, list[RunResult]]:
        """Every run of these experiments (all when None), by experiment, in order."""
        out: dict[str, list[RunResult]] = {}
        for r in self._many("runs", exp_ids, "created_at, block_id, idx"):
            out.setdefault(r["experiment_id"], []).append(run_of(r, self.logs_home))
        return out

    def decisions_of(self, exp_ids: Sequence[str] | None = None) -> dict[str, list[Decision]]:
        """Every decision of these experiments (all when None), by experiment, in order."""
        out: dict[str, list[Decision]] = {}
        for r in self._many("decisions", exp_ids, "id"):
            out.setdefault(r["experiment_id"], []).append(decision_of(r))
        return out

    def _many(self, table: str, exp_ids: Sequence[str] | None, order: str) -> list[sqlite3.Row]:
        if exp_ids is None:
            return self.conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
        rows: list[sqlite3.Row] = []
        ids = list(exp_ids)
        for i in range(0, len(ids), 500):  # SQLite caps the number of bound parameters
            chunk = ids[i:i + 500]
            rows += self.conn.execute(
                f"SELECT * FROM {table} WHERE experiment_id IN ({','.join('?' * len(chunk))})"
                f" ORDER BY {order}", chunk).fetchall()
        return rows

    def level_results(self) -> list[LevelResult]:
        """Each candidate's outcome at every fidelity level it reached, in experiment and
        level order, with the effect and interval of the last decision made at that level
        (``Decision.details["level"]``).

        The outcome is what happened, never the decision's verdict alone (a rule's keep
        whose guard or holdout regressed is discarded; one whose commit failed is invalid;
        one re-measured after the incumbent moved is still measuring): below the level an
        experiment ended or is measured at, its screen there (``promoted``, ``stopped``);
        at that level, its final state (``kept``, ``discarded``, ``invalid`` ...), or
        ``measuring`` while it is not finished."""
        rows = self.conn.execute(
            "SELECT d.experiment_id, CAST(json_extract(d.details, '$.' || ?) AS INTEGER) AS lv,"
            " json_extract(d.details, '$.' || ?) AS screen, d.effect, d.lo, d.hi,"
            " d.pairs_used, d.delta, e.state, e.seq FROM decisions d"
            " JOIN experiments e ON e.id = d.experiment_id"
            " WHERE d.id IN (SELECT MAX(id) FROM decisions"
            "  WHERE json_extract(details, '$.' || ?) IS NOT NULL"
            "  GROUP BY experiment_id, json_extract(details, '$.' || ?))"
            " ORDER BY e.seq, lv", (LEVEL, SCREEN, LEVEL, LEVEL)).fetchall()
        out = []
        for r in rows:
            state = ExperimentState(str(r["state"]))
            outcome = str(r["screen"]) if r["screen"] else \
                state.value if state.is_finished() else "measuring"
            out.append(LevelResult(str(r["experiment_id"]), int(r["lv"]), outcome, r["effect"],
                                   r["lo"], r["hi"], int(r["pairs_used"]), float(r["delta"])))
        return out

    def state_counts(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.conn.execute(
            "SELECT state, COUNT(*) FROM experiments GROUP BY state")}

    def first_decided(self, level: int = 0) -> Experiment | None:
        """The first experiment (by seq) whose decision holds the incumbent's value, made at
        ``level`` (a decision without one: level 0)."""
        row = self.conn.execute(
            f"SELECT {columns(False)} FROM experiments WHERE decision LIKE "
            "'%\"incumbent_value\"%' "
            "AND COALESCE(json_extract(decision, '$.details.level'), 0) = ? "
            "ORDER BY seq LIMIT 1", (level,)).fetchone()
        return experiment_of(row) if row else None

    def changed_since(self, updated_at: float) -> list[Experiment]:
        """Experiments written after ``updated_at`` (the dashboard's updates; a listing,
        without the patches' text)."""
        # Sorted here: an ORDER BY seq makes SQLite walk the seq index over every row
        # instead of searching the updated_at index for the few that changed.
        rows = self.conn.execute(f"SELECT {columns(False)} FROM experiments WHERE updated_at > ?",
                                 (updated_at,))
        return sorted((experiment_of(r) for r in rows), key=lambda e: e.seq)

    def run_totals(self, ids: Sequence[str] | None = None
                   ) -> dict[str, dict[str, tuple[int, float]]]:
        """Per experiment (all, or those in ``ids``) and slot: how many runs and their summed
        wall seconds."""
        sql = ("SELECT experiment_id, slot, COUNT(*), COALESCE(SUM(wall_s), 0) FROM runs"
               "{where} GROUP BY experiment_id, slot")
        chunks: list[list[str]] = [[]] if ids is None else \
            [list(ids[i:i + 500]) for i in range(0, len(ids), 500)]
        out: dict[str, dict[str, tuple[int, float]]] = {}
        for chunk in chunks:
            where = f" WHERE experiment_id IN ({','.join('?' * len(chunk))})" if ids else ""
            for exp_id, slot, n, wall in self.conn.execute(sql.format(where=where), chunk):
                out.setdefault(exp_id, {})[slot] = (int(n), float(wall))
        return out

    def setup_seconds(self) -> dict[str, float]:
        """Per experiment: seconds its blocks spent outside timed runs (build, checks)."""
        blocks = dict(self.conn.execute(
            "SELECT experiment_id, SUM(wall_s) FROM blocks WHERE wall_s IS NOT NULL "
            "GROUP BY experiment_id").fetchall())
        runs = dict(self.conn.execute(
            "SELECT experiment_id, SUM(wall_s) FROM runs GROUP BY experiment_id").fetchall())
        return {k: max(0.0, float(v) - float(runs.get(k) or 0.0)) for k, v in blocks.items()}


