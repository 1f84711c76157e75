"""The journal's seals: a digest of every row of the tables a decision rests on.

Tables sealed (:data:`SEALED`): ``experiments``, ``runs``, ``decisions``, ``events`` and
``meta`` (the incumbent). SQLite triggers keep ``seals`` (one digest per row, keyed by the
row's primary key) in step with every insert, update and delete; the digest is computed by a
function only assay's own connections define (:func:`install`), so a write made with any
other SQLite client fails (``no such function: assay_seal``). :func:`verify` recomputes every
digest when the journal is opened and names the first row that does not match, a row
without a seal, a seal without its row, and a missing trigger.

What it detects: edits of the journal file made outside assay (an SQLite shell, a script,
an agent that found the file), rows added or removed behind its back, dropped triggers. What
it does not: someone who reads this module and recomputes the seals with the same function
(the digest is not keyed); keeping proposers away from the file at all is the job of the
agent's private checkout and mount namespace (:mod:`assay.proposers.agent`).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path

FUNCTION = "assay_seal"

# table -> (primary key, sealed columns); columns added later are simply not sealed
SEALED: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "experiments": ("id", ("id", "seq", "state", "base_commit", "patch", "params",
                           "hypothesis", "proposer", "sources", "hypothesis_id", "meta",
                           "digest", "created_at", "decision", "commit_sha", "note",
                           "withheld")),
    "runs": ("id", ("id", "block_id", "experiment_id", "role", "idx", "status", "metrics",
                    "holdout", "reason", "exit_code", "wall_s", "slot")),
    "decisions": ("id", ("id", "experiment_id", "verdict", "reason", "effect", "lo", "hi",
                         "pairs_used", "runs_used", "delta", "rule", "details")),
    "events": ("id", ("id", "ts", "kind", "experiment_id", "message", "data")),
    "meta": ("key", ("key", "value")),
}


def digest(*values: object) -> str:
    """The digest of one row: its table name, then its sealed columns, in order."""
    h = hashlib.blake2b(digest_size=16)
    for v in values:
        h.update(b"\x1f" if v is None else b"\x1e" + repr(v).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def install(conn: sqlite3.Connection) -> None:
    """Define the digest function on an assay connection (before any write or check)."""
    conn.create_function(FUNCTION, -1, digest, deterministic=True)


def _row_expr(table: str, alias: str) -> str:
    _, cols = SEALED[table]
    return f"{FUNCTION}('{table}', " + ", ".join(f"{alias}.{c}" for c in cols) + ")"


def migration_sql() -> str:
    """The statements of the migration that creates ``seals``, its triggers and first seals."""
    out = ["CREATE TABLE seals (tbl TEXT NOT NULL, k TEXT NOT NULL, digest TEXT NOT NULL,"
           " PRIMARY KEY (tbl, k))"]
    for table, (pk, _cols) in SEALED.items():
        for event, alias in (("INSERT", "new"), ("UPDATE", "new")):
            out.append(
                f"CREATE TRIGGER seal_{table}_{event.lower()} AFTER {event} ON {table} BEGIN "
                f"INSERT OR REPLACE INTO seals (tbl, k, digest) VALUES ('{table}', "
                f"CAST({alias}.{pk} AS TEXT), {_row_expr(table, alias)}); END")
        out.append(
            f"CREATE TRIGGER seal_{table}_delete AFTER DELETE ON {table} BEGIN "
            f"DELETE FROM seals WHERE tbl = '{table}' AND k = CAST(old.{pk} AS TEXT) "
            f"AND {FUNCTION}('delete') IS NOT NULL; END")
        out.append(f"INSERT INTO seals (tbl, k, digest) SELECT '{table}', CAST(t.{pk} AS TEXT),"
                   f" {_row_expr(table, 't')} FROM {table} t")
    return ";\n".join(out)


def triggers() -> set[str]:
    return {f"seal_{t}_{e}" for t in SEALED for e in ("insert", "update", "delete")}


_VERIFIED: dict[str, tuple[object, ...]] = {}  # journal path -> file state last verified


def _state(path: Path) -> tuple[object, ...]:
    out: list[object] = []
    for p in (path, Path(f"{path}-wal")):
        try:
            st = os.stat(p)
            out += [st.st_ino, st.st_size, st.st_mtime_ns]
        except OSError:
            out += [None]
    return tuple(out)


def verify(conn: sqlite3.Connection, path: Path) -> str:
    """'' when every sealed row matches its seal, else what does not (for the error)."""
    state = _state(path)
    if _VERIFIED.get(str(path)) == state:
        return ""
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    missing = sorted(triggers() - have)
    if missing:
        return f"its seal triggers were removed ({', '.join(missing[:3])})"
    for table, (pk, _cols) in SEALED.items():
        bad = conn.execute(
            f"SELECT CAST(t.{pk} AS TEXT), s.digest IS NULL FROM {table} t LEFT JOIN seals s"
            f" ON s.tbl = '{table}' AND s.k = CAST(t.{pk} AS TEXT)"
            f" WHERE s.digest IS NULL OR s.digest != {_row_expr(table, 't')} LIMIT 1").fetchone()
        if bad is not None:
            what = "has no seal (added outside assay)" if bad[1] else \
                "does not match its seal (changed outside assay)"
            return f"{table} row {bad[0]!r} {what}"
        gone = conn.execute(
            f"SELECT s.k FROM seals s WHERE s.tbl = '{table}' AND NOT EXISTS"
            f" (SELECT 1 FROM {table} t WHERE CAST(t.{pk} AS TEXT) = s.k) LIMIT 1").fetchone()
        if gone is not None:
            return f"{table} row {gone[0]!r} was deleted outside assay"
    _VERIFIED[str(path)] = state
    return ""
