"""The journal's events (what a run said, in order) and its hook firings."""

from __future__ import annotations

import time
from typing import Any

from ..model import EventRow, HookRow
from .connection import Store
from .rows import dumps, event_of


class EventStore(Store):
    """Events, and hook firings (each run at most once)."""

    def event(self, kind: str, message: str, experiment_id: str | None = None,
              **data: Any) -> None:
        with self.tx():
            self.conn.execute(
                "INSERT INTO events (ts, kind, experiment_id, message, data) VALUES (?,?,?,?,?)",
                (time.time(), kind, experiment_id, message, dumps(data)))

    def events(self, since_id: int = 0, limit: int = 1000) -> list[EventRow]:
        """Events after ``since_id``, oldest first."""
        rows = self.conn.execute(
            "SELECT * FROM events WHERE id > ? ORDER BY id LIMIT ?", (since_id, limit))
        return [event_of(r) for r in rows]

    def events_of_kind(self, kind: str) -> list[EventRow]:
        """Every event of one kind, oldest first (the noise chart's quarantines)."""
        rows = self.conn.execute("SELECT * FROM events WHERE kind = ? ORDER BY id", (kind,))
        return [event_of(r) for r in rows]

    def recent_events(self, limit: int = 12) -> list[EventRow]:
        """The latest ``limit`` events, newest first."""
        rows = self.conn.execute("SELECT * FROM events ORDER BY id DESC LIMIT ?", (limit,))
        return [event_of(r) for r in rows]

    def last_event_id(self) -> int:
        row = self.conn.execute("SELECT MAX(id) FROM events").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    # -- hooks ---------------------------------------------------------------------
    def hook_begin(self, key: str, event: str, exp_id: str | None) -> bool:
        """Register a hook firing; False when this key already finished (run at most once)."""
        with self.tx():
            row = self.conn.execute("SELECT status FROM hooks WHERE key = ?", (key,)).fetchone()
            if row and row[0] in ("ok", "failed", "timeout"):
                return False
            if row is None:
                self.conn.execute("INSERT INTO hooks (key, event, experiment_id, status,"
                                  " created_at) VALUES (?,?,?,?,?)",
                                  (key, event, exp_id, "pending", time.time()))
            self.conn.execute("UPDATE hooks SET attempts = attempts + 1 WHERE key = ?", (key,))
        return True

    def hook_end(self, key: str, status: str, exit_code: int | None, output: str) -> None:
        with self.tx():
            self.conn.execute("UPDATE hooks SET status = ?, exit_code = ?, output = ?,"
                              " finished_at = ? WHERE key = ?",
                              (status, exit_code, output[-4000:], time.time(), key))

    def hooks(self, status: str | None = None) -> list[HookRow]:
        """Hook firings (only those with ``status``, e.g. ``pending``), oldest first."""
        sql, args = "SELECT * FROM hooks", []
        if status is not None:
            sql += " WHERE status = ?"
            args.append(status)
        return [HookRow(r["key"], r["event"], r["experiment_id"], r["status"], r["exit_code"],
                        r["output"], r["attempts"], r["created_at"], r["finished_at"])
                for r in self.conn.execute(sql + " ORDER BY created_at", args)]

