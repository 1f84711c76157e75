"""The journal's blocks (queued, leased, recorded), the runs they measured, and the slots
that ran them."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from ..errors import JournalError
from ..model import (
    BlockKind,
    BlockResult,
    BlockRow,
    BlockState,
    Incumbent,
    IncumbentSample,
    RunResult,
    SlotRow,
)
from .connection import Store
from .rows import block_of, dumps, run_of


class BlockStore(Store):
    """Blocks and their leases, runs, and slots."""

    def add_block(self, exp_id: str, kind: BlockKind, order: str, incumbent: Incumbent,
                  prefer_slot: str | None = None, avoid_slot: str | None = None,
                  platform: str = "", level: int = 0) -> str:
        with self.tx():
            row = self.conn.execute("SELECT COUNT(*) FROM blocks WHERE experiment_id = ?",
                                    (exp_id,)).fetchone()
            seq = int(row[0]) + 1
            block_id = f"{exp_id}-b{seq}"
            self.conn.execute(
                "INSERT INTO blocks (id, experiment_id, seq, kind, run_order, inc_commit,"
                " inc_params, state, prefer_slot, avoid_slot, created_at, platform, level)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (block_id, exp_id, seq, kind.value, order, incumbent.commit,
                 dumps(dict(incumbent.params)), BlockState.QUEUED.value, prefer_slot,
                 avoid_slot, time.time(), platform, level))
        return block_id

    def blocks(self, exp_id: str | None = None,
               states: Sequence[BlockState] = ()) -> list[BlockRow]:
        """Blocks (of one experiment, in some states), in the order they were queued."""
        sql, args = "SELECT * FROM blocks WHERE 1=1", []
        if exp_id is not None:
            sql += " AND experiment_id = ?"
            args.append(exp_id)
        if states:
            # With an experiment, its index finds its few blocks; `+state` keeps SQLite from
            # choosing the state index instead (every done block of the journal).
            column = "+state" if exp_id is not None else "state"
            sql += f" AND {column} IN ({','.join('?' * len(states))})"
            args.extend(BlockState(s).value for s in states)
        sql += " ORDER BY created_at, seq"
        return [block_of(r) for r in self.conn.execute(sql, args)]

    def run_pace(self, limit: int = 12, level: int | None = None) -> list[float]:
        """Seconds per run of the last ``limit`` finished blocks (at a fidelity ``level``
        when given): each block's wall time (its build, checks and warm-up included) over
        the runs in its order."""
        at = "" if level is None else " AND level = ?"
        rows = self.conn.execute(
            f"SELECT wall_s, run_order FROM blocks WHERE state = ? AND wall_s > 0{at}"
            " ORDER BY finished_at DESC LIMIT ?",
            (BlockState.DONE.value, *(() if level is None else (level,)), limit)).fetchall()
        return [float(w) / len(order) for w, order in rows if order]

    def block_level(self, block_id: str) -> int:
        """The fidelity level a block runs at (0 for one not in the journal)."""
        row = self.conn.execute("SELECT level FROM blocks WHERE id = ?", (block_id,)).fetchone()
        return int(row[0]) if row else 0

    def deepest_level(self) -> int | None:
        """The highest fidelity level of any block (None when the journal has none)."""
        row = self.conn.execute("SELECT MAX(level) FROM blocks").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def count_blocks(self, states: Sequence[BlockState]) -> int:
        marks = ",".join("?" * len(states))
        row = self.conn.execute(f"SELECT COUNT(*) FROM blocks WHERE state IN ({marks})",
                                [BlockState(s).value for s in states]).fetchone()
        return int(row[0])

    def drop_blocks(self, exp_id: str, level: int | None = None) -> None:
        """Forget every block of ``exp_id`` (at a fidelity ``level`` when given) and its runs
        (a failed calibration is redone)."""
        at, args = ("", (exp_id,)) if level is None else (" AND level = ?", (exp_id, level))
        with self.tx():
            self.conn.execute("DELETE FROM runs WHERE block_id IN "
                              f"(SELECT id FROM blocks WHERE experiment_id = ?{at})", args)
            self.conn.execute(f"DELETE FROM blocks WHERE experiment_id = ?{at}", args)

    def lease_block(self, block_id: str, slot: str, owner: str, ttl_s: float) -> bool:
        """Mark a queued block running on ``slot``; False when it is not queued (no double run)."""
        with self.tx():
            cur = self.conn.execute(
                "UPDATE blocks SET state = 'running', slot = ?, lease_owner = ?, lease_expires = ?,"
                " started_at = ?, attempts = attempts + 1 WHERE id = ? AND state = 'queued'",
                (slot, owner, time.time() + ttl_s, time.time(), block_id))
            return cur.rowcount == 1

    def heartbeat(self, block_ids: Sequence[str], owner: str, ttl_s: float) -> None:
        if not block_ids:
            return
        with self.tx():
            self.conn.executemany(
                "UPDATE blocks SET lease_expires = ? WHERE id = ? AND lease_owner = ?",
                [(time.time() + ttl_s, b, owner) for b in block_ids])

    def requeue_stale(self, owner: str | None = None) -> list[str]:
        """Put back running blocks whose lease expired (or that belong to a dead owner)."""
        with self.tx():
            now = time.time()
            rows = self.conn.execute(
                "SELECT id FROM blocks WHERE state = 'running' AND (lease_expires < ? OR "
                "(? IS NOT NULL AND lease_owner != ?))", (now, owner, owner)).fetchall()
            ids = [r[0] for r in rows]
            self.requeue(ids)
        return ids

    def set_block_slot(self, block_id: str, slot: str) -> None:
        with self.tx():
            self.conn.execute("UPDATE blocks SET slot = ? WHERE id = ?", (slot, block_id))

    def requeue(self, block_ids: Sequence[str]) -> None:
        """Put running blocks back in the queue (their partial runs are dropped)."""
        with self.tx():
            for bid in block_ids:
                self.conn.execute("DELETE FROM runs WHERE block_id = ?", (bid,))
                self.conn.execute("UPDATE blocks SET state = 'queued', slot = NULL, lease_owner ="
                                  " NULL, lease_expires = NULL WHERE id = ? AND state = 'running'",
                                  (bid,))

    def cancel_block(self, block_id: str, reason: str) -> None:
        with self.tx():
            self.conn.execute("UPDATE blocks SET state = 'cancelled', error = ?, finished_at = ?"
                              " WHERE id = ? AND state IN ('queued', 'running')",
                              (reason, time.time(), block_id))

    def record_block(self, res: BlockResult) -> bool:
        """Store a block's runs; False (and nothing written) when it was already recorded."""
        with self.tx():
            row = self.conn.execute("SELECT state FROM blocks WHERE id = ?",
                                    (res.block_id,)).fetchone()
            if row is None:
                raise JournalError(f"block {res.block_id} is not in the journal")
            if row[0] == "done":
                return False
            now = time.time()
            for r in res.runs:
                self.conn.execute(
                    "INSERT OR IGNORE INTO runs (id, block_id, experiment_id, role, idx, status,"
                    " metrics, holdout, reason, exit_code, wall_s, stdout_path, stderr_path,"
                    " slot, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (r.run_id, r.block_id, r.experiment_id, r.role.value, r.index, r.status.value,
                     dumps(dict(r.metrics)), dumps(dict(r.holdout)), r.reason, r.exit_code,
                     r.wall_s, r.stdout_path, r.stderr_path, r.slot, now))
            checks = None if res.checks_passed is None else int(res.checks_passed)
            self.conn.execute(
                "UPDATE blocks SET state = 'done', finished_at = ?, checks_passed = ?, error = ?,"
                " error_kind = ?, wall_s = ?, slot = COALESCE(NULLIF(?, ''), slot),"
                " build_s = ?, checks_runs = ?, checks_outcome = ?, checks_detail = ?"
                " WHERE id = ?",
                (now, checks, res.error, res.error_kind, res.wall_s, res.slot, res.build_s,
                 res.checks_runs, res.checks_outcome, res.checks_detail, res.block_id))
        return True

    def runs(self, exp_id: str | None = None, block_id: str | None = None) -> list[RunResult]:
        sql, args = "SELECT * FROM runs WHERE 1=1", []
        if exp_id is not None:
            sql += " AND experiment_id = ?"
            args.append(exp_id)
        if block_id is not None:
            sql += " AND block_id = ?"
            args.append(block_id)
        sql += " ORDER BY created_at, block_id, idx"
        return [run_of(r, self.logs_home) for r in self.conn.execute(sql, args)]

    def recent_incumbent_values(self, slot: str, metric: str, commit: str, limit: int = 8,
                                exclude_experiment: str | None = None,
                                level: int | None = None) -> tuple[float, ...]:
        """The slot's latest measurements of the tree at ``commit`` (newest last): its A
        runs, both sides of its A/A calibration blocks, and, when ``commit`` was kept from a
        candidate, that candidate's own runs (the same tree, measured before the keep).

        ``exclude_experiment`` leaves out that experiment's own A runs (they are already in
        its pairs). With [fidelity], ``level`` keeps the runs made at that level only.
        """
        at = "" if level is None else " AND b.level = ?"
        rows = self.conn.execute(
            "SELECT r.metrics FROM runs r JOIN blocks b ON r.block_id = b.id"
            f" WHERE r.status = 'ok' AND r.slot = ? AND r.experiment_id != ?{at}"
            " AND ((b.inc_commit = ? AND (r.role = 'A' OR b.kind = 'aa'))"
            "      OR (r.role = 'B' AND r.experiment_id IN (SELECT id FROM experiments"
            "          WHERE commit_sha = ? AND state = 'kept')))"
            " ORDER BY r.created_at DESC, r.id DESC LIMIT ?",
            (slot, exclude_experiment or "", *(() if level is None else (level,)), commit,
             commit, limit)).fetchall()
        vals = [json.loads(r[0]).get(metric) for r in rows]
        return tuple(float(v) for v in reversed(vals) if v is not None)

    def incumbent_samples(self, metric: str) -> list[IncumbentSample]:
        """Every good incumbent run of every finished block (both sides of an A/A block),
        in the order the blocks finished."""
        rows = self.conn.execute(
            "SELECT b.id, b.slot, b.kind, b.finished_at, b.experiment_id, r.metrics "
            "FROM blocks b JOIN runs r ON r.block_id = b.id WHERE b.state = 'done' "
            "AND r.status = 'ok' AND (r.role = 'A' OR b.kind = 'aa') "
            "ORDER BY b.finished_at, b.id")
        return [IncumbentSample(bid, slot or "", BlockKind(kind), fin, exp_id,
                                json.loads(metrics).get(metric))
                for bid, slot, kind, fin, exp_id, metrics in rows]

    # -- slots ---------------------------------------------------------------------
    def set_block_noise(self, block_id: str, noise: float) -> None:
        """The noise of the slot that measured this block, when it was measured."""
        with self.tx():
            self.conn.execute("UPDATE blocks SET noise = ? WHERE id = ?", (noise, block_id))

    def set_slot(self, name: str, host: str, gpus: Sequence[int], noise: float | None,
                 quarantined: bool = False, reason: str = "") -> None:
        with self.tx():
            self.conn.execute(
                "INSERT OR REPLACE INTO slots VALUES (?,?,?,?,?,?,?)",
                (name, host, dumps(list(gpus)), noise, int(quarantined), reason, time.time()))

    def slots(self) -> list[SlotRow]:
        return [SlotRow(r["name"], r["host"], tuple(json.loads(r["gpus"])), r["noise"],
                        bool(r["quarantined"]), r["reason"], r["updated_at"])
                for r in self.conn.execute("SELECT * FROM slots ORDER BY name")]
