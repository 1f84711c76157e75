"""The journal: everything a run did, in SQLite (WAL) under ``.assay/journal.sqlite``.

Contract:

- One writer: the orchestrator process. Readers (``assay status``, the dashboard) open
  their own connections; WAL lets them read while the loop writes.
- Every write happens inside :meth:`Journal.tx` (``BEGIN IMMEDIATE``), so a process
  killed at any instant leaves either the whole change or none of it.
- Results are idempotent: a run or block result recorded twice is stored once
  (ids are deterministic: ``e0007``, ``e0007-b1``, ``e0007-b1-r2``).
- Objects returned are frozen snapshots (:mod:`assay.model`); changing them changes nothing.
- The schema moves forward by named migrations, each recorded in ``migrations``.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import seal
from .errors import JournalError
from .model import (
    BlockKind,
    BlockResult,
    BlockRow,
    BlockState,
    Candidate,
    Decision,
    EventRow,
    Experiment,
    ExperimentState,
    HookRow,
    Hypothesis,
    Incumbent,
    IncumbentSample,
    NextBlock,
    Role,
    RunResult,
    RunStatus,
    SlotRow,
    Verdict,
)
from .usage import Spent, Usage

JOURNAL_NAME = "journal.sqlite"
KEYED = "0009_keyed_seals"
SEALED = "0004_withheld_and_seals"

MIGRATIONS: list[tuple[str, str]] = [
    ("0001_initial", """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE experiments (
        id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, state TEXT NOT NULL,
        base_commit TEXT NOT NULL, patch TEXT NOT NULL, params TEXT NOT NULL,
        hypothesis TEXT NOT NULL, proposer TEXT NOT NULL, sources TEXT NOT NULL,
        hypothesis_id INTEGER, meta TEXT NOT NULL, digest TEXT NOT NULL,
        created_at REAL NOT NULL, updated_at REAL NOT NULL,
        decision TEXT, commit_sha TEXT, note TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX experiments_digest ON experiments(digest);
    CREATE TABLE blocks (
        id TEXT PRIMARY KEY, experiment_id TEXT NOT NULL,
        seq INTEGER NOT NULL, kind TEXT NOT NULL, run_order TEXT NOT NULL,
        inc_commit TEXT NOT NULL, inc_params TEXT NOT NULL,
        state TEXT NOT NULL, slot TEXT, prefer_slot TEXT, avoid_slot TEXT,
        lease_owner TEXT, lease_expires REAL, attempts INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL, started_at REAL, finished_at REAL,
        checks_passed INTEGER, error TEXT NOT NULL DEFAULT '', error_kind TEXT NOT NULL DEFAULT '',
        wall_s REAL
    );
    CREATE INDEX blocks_state ON blocks(state);
    CREATE TABLE runs (
        id TEXT PRIMARY KEY, block_id TEXT NOT NULL REFERENCES blocks(id),
        experiment_id TEXT NOT NULL, role TEXT NOT NULL, idx INTEGER NOT NULL,
        status TEXT NOT NULL, metrics TEXT NOT NULL, holdout TEXT NOT NULL,
        reason TEXT NOT NULL, exit_code INTEGER, wall_s REAL NOT NULL,
        stdout_path TEXT NOT NULL, stderr_path TEXT NOT NULL, worker TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE INDEX runs_experiment ON runs(experiment_id);
    CREATE TABLE decisions (
        id INTEGER PRIMARY KEY AUTOINCREMENT, experiment_id TEXT NOT NULL,
        verdict TEXT NOT NULL, reason TEXT NOT NULL, effect REAL, lo REAL, hi REAL,
        pairs_used INTEGER NOT NULL, runs_used INTEGER NOT NULL, delta REAL NOT NULL,
        rule TEXT NOT NULL, details TEXT NOT NULL, created_at REAL NOT NULL
    );
    CREATE TABLE hypotheses (
        id INTEGER PRIMARY KEY AUTOINCREMENT, text TEXT NOT NULL UNIQUE,
        sources TEXT NOT NULL, source_kind TEXT NOT NULL, status TEXT NOT NULL,
        score REAL NOT NULL, created_at REAL NOT NULL
    );
    CREATE TABLE workers (
        name TEXT PRIMARY KEY, host TEXT NOT NULL, gpus TEXT NOT NULL,
        noise REAL, quarantined INTEGER NOT NULL DEFAULT 0, reason TEXT NOT NULL DEFAULT '',
        updated_at REAL NOT NULL
    );
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, kind TEXT NOT NULL,
        experiment_id TEXT, message TEXT NOT NULL, data TEXT NOT NULL
    );
    CREATE TABLE hooks (
        key TEXT PRIMARY KEY, event TEXT NOT NULL, experiment_id TEXT,
        status TEXT NOT NULL, exit_code INTEGER, output TEXT NOT NULL DEFAULT '',
        attempts INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, finished_at REAL
    );
    """),
    ("0002_lookup_indexes", """
    CREATE INDEX IF NOT EXISTS blocks_experiment ON blocks(experiment_id, seq);
    CREATE INDEX IF NOT EXISTS decisions_experiment ON decisions(experiment_id, id);
    CREATE INDEX IF NOT EXISTS runs_block ON runs(block_id, idx);
    CREATE INDEX IF NOT EXISTS experiments_state ON experiments(state, seq);
    CREATE INDEX IF NOT EXISTS experiments_hypothesis ON experiments(hypothesis_id);
    CREATE INDEX IF NOT EXISTS hypotheses_status ON hypotheses(status);
    CREATE INDEX IF NOT EXISTS events_experiment ON events(experiment_id)
    """),
    # One word per idea: a place a block runs is a slot (it was also called a worker).
    ("0003_slot_names", """
    ALTER TABLE workers RENAME TO slots;
    ALTER TABLE runs RENAME COLUMN worker TO slot
    """),
    ("0004_block_build_checks", """
    ALTER TABLE blocks ADD COLUMN build_s REAL;
    ALTER TABLE blocks ADD COLUMN checks_runs INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE blocks ADD COLUMN checks_outcome TEXT NOT NULL DEFAULT '';
    ALTER TABLE blocks ADD COLUMN checks_detail TEXT NOT NULL DEFAULT ''
    """),
]

MIGRATIONS.append(("0004_withheld_and_seals",
                   "ALTER TABLE experiments ADD COLUMN withheld INTEGER NOT NULL DEFAULT 0;\n"
                   + seal.migration_sql()))
# [[platforms]]: the platform a block must run on ('' when none is declared).
MIGRATIONS.append(("0005_block_platform",
                   "ALTER TABLE blocks ADD COLUMN platform TEXT NOT NULL DEFAULT ''"))
MIGRATIONS.append(("0006_updated_index", """
    CREATE INDEX IF NOT EXISTS experiments_updated ON experiments(updated_at);
    CREATE INDEX IF NOT EXISTS blocks_finished ON blocks(finished_at)

    """))
# A slot's latest incumbent runs (the expensive rule's history, on every decision): newest
# first through the index instead of every run of the journal.
MIGRATIONS.append(("0007_runs_slot_index",
                   "CREATE INDEX IF NOT EXISTS runs_slot ON runs(slot, created_at)"))
# Each block's noise (the weight of its pairs) in a column of its own: it was one meta entry
# holding every block of the journal, read and rewritten after every block.
MIGRATIONS.append(("0008_block_noise", """
    ALTER TABLE blocks ADD COLUMN noise REAL;
    UPDATE blocks SET noise = (SELECT j.value FROM meta m, json_each(m.value) j
                               WHERE m.key = 'block_noise' AND j.key = blocks.id)
     WHERE id IN (SELECT j.key FROM meta m, json_each(m.value) j WHERE m.key = 'block_noise');
    DELETE FROM meta WHERE key = 'block_noise'
    """))

# Seals keyed with the journal's own secret (seal.py); every row is sealed again with it
MIGRATIONS.append((KEYED, seal.reseal_sql()))
# Every model call a proposer made (tokens by kind, dollars if priced; NULL = unknown), the
# experiment it became (NULL until it is recorded, or for a call that gave no candidate).
MIGRATIONS.append(("0010_model_calls", """
    CREATE TABLE model_calls (
        id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, session TEXT NOT NULL,
        call TEXT NOT NULL, model TEXT NOT NULL, experiment_id TEXT,
        tokens_in INTEGER, tokens_out INTEGER, tokens_cached INTEGER NOT NULL DEFAULT 0,
        tokens_cache_write INTEGER NOT NULL DEFAULT 0, cost_usd REAL,
        priced_by TEXT NOT NULL, estimated INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX model_calls_experiment ON model_calls(experiment_id);
    CREATE INDEX model_calls_session ON model_calls(session)
    """))

_SCHEMA_MIGRATIONS = (
    "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
)


def _statements(sql: str) -> Iterator[str]:
    """The complete statements of a script (a trigger's body holds ';' of its own)."""
    buf = ""
    for piece in sql.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n;"):
                yield buf
            buf = ""
    if buf.strip(" \n;"):
        yield buf


_MEMORY_TEMPLATE: sqlite3.Connection | None = None  # the migrated schema Journal.memory copies
_MEMORY_LOCK = threading.Lock()
_MEMORY_KEY = secrets.token_bytes(seal.KEY_BYTES)  # the seal key of journals held in memory


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


class Rows:
    """What one statement gave: its rows (read in full), ``lastrowid`` and ``rowcount``."""

    def __init__(self, rows: list[Any], lastrowid: int | None, rowcount: int) -> None:
        self._rows = rows
        self.lastrowid = lastrowid
        self.rowcount = rowcount

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return list(self._rows)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


class Serialized:
    """The journal's one connection, used by one thread at a time.

    Hooks, the lock's heartbeat and the loop share the connection. SQLite serialises the
    calls on a connection with its own mutex, but some of them are made while Python's
    interpreter lock is held, and the seal triggers call back into Python while SQLite's
    mutex is held: a read on one thread and a sealed write on another could wait for each
    other for ever. Every statement runs here under the journal's lock, and its rows are
    read before the lock is let go."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock) -> None:
        self.raw = conn
        self._lock = lock

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Rows:
        with self._lock:
            cur = self.raw.execute(sql, params)
            return Rows(cur.fetchall(), cur.lastrowid, cur.rowcount)

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> Rows:
        with self._lock:
            cur = self.raw.executemany(sql, seq)
            return Rows([], cur.lastrowid, cur.rowcount)

    def close(self) -> None:
        with self._lock:
            self.raw.close()


class Journal:
    """The run's record. Open with :meth:`open`; write inside :meth:`tx`."""

    def __init__(self, conn: sqlite3.Connection, path: Path, key: bytes = b"") -> None:
        self._key = key  # the seal key (b"": not read yet, or a journal sealed before keys)
        self._lock = threading.RLock()
        self.conn = Serialized(conn, self._lock)
        self.path = path
        self._depth = 0
        self._writer = False  # a writable connection to a journal file
        self._verified = False  # its seals were checked at open (see seal.mark)

    # -- opening -------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path, *, readonly: bool = False) -> Journal:
        p = Path(path)
        if readonly:
            if not p.exists():
                raise JournalError(f"{p}: no journal here; start a run with `assay run` first")
            conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True, timeout=30,
                                   check_same_thread=False, isolation_level=None)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(p), timeout=30, check_same_thread=False,
                                   isolation_level=None)
        conn.row_factory = sqlite3.Row
        key = _MEMORY_KEY if str(p) == ":memory:" else seal.read_key(p)
        seal.install(conn, key or b"")
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            if not readonly:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # reads the header
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise JournalError(f"{p}: not a journal ({exc}); move it aside and start again") \
                from None
        journal = cls(conn, p, key or b"")
        journal._writer = not readonly and str(p) != ":memory:"
        if not readonly:
            before = journal._done()
            journal._bring_key(before)
            journal.migrate()
            if before and KEYED not in before:
                journal.event("journal", f"the journal is now sealed with a key "
                              f"({seal.key_path(p)}, readable by its owner only): a row written "
                              "without it is refused when the journal is opened; keep the key "
                              "with the journal when you move or copy it")
        elif key is None and KEYED in journal._done():
            journal._bring_key(journal._done())  # raises: the key is missing
        elif journal.outdated():
            # Written by an older assay: bring its schema forward once (a short write
            # transaction, serialized with any writer), then read it as usual.
            journal.close()
            cls.open(p).close()
            return cls.open(p, readonly=True)
        journal.check_seals()
        return journal

    def _done(self) -> set[str]:
        """The migrations applied to this journal (none for a file without a schema)."""
        try:
            return {r[0] for r in self.conn.execute("SELECT name FROM migrations")}
        except sqlite3.DatabaseError:
            return set()

    def _bring_key(self, done: set[str]) -> None:
        """Give a writer its seal key: the journal's own, or a new one for a new journal or
        one sealed before keys (whose rows are first checked with the unkeyed recipe)."""
        if KEYED in done and self._key:
            return
        if KEYED in done:
            self.conn.close()
            raise JournalError(
                f"{self.path}: its seal key {seal.key_path(self.path)} is missing, so no row "
                "can be trusted; restore the key file from where the journal came from "
                "(it is created with the journal), or move the journal aside (with its -wal, "
                "-shm and -key files) and start a new run")
        if SEALED in done:
            seal.install(self.conn.raw, b"")
            with self._lock:
                problem = seal.verify(self.conn.raw, self.path, b"", full=True)
            if problem:
                self._refuse(problem)
        self._key = self._key or seal.new_key(self.path)
        seal.install(self.conn.raw, self._key)

    def _refuse(self, problem: str) -> None:
        self.conn.close()
        raise JournalError(
            f"{self.path}: the journal was changed outside assay: {problem}. Its "
            "decisions cannot be trusted; restore the file from a backup, or move it "
            "aside (with its -wal and -shm files) and start a new run")

    def outdated(self) -> bool:
        """Whether this journal has a schema and misses migrations this assay knows."""
        try:
            done = {r[0] for r in self.conn.execute("SELECT name FROM migrations")}
        except sqlite3.DatabaseError:
            return False  # no schema yet (a first run is creating it)
        return bool(done) and not {name for name, _ in MIGRATIONS} <= done

    @classmethod
    def memory(cls) -> Journal:
        """A journal held in memory (simulations, tests): the same schema, gone when closed.

        The schema is built once per process and copied (SQLite's backup), so a fresh
        journal per simulated decision costs no migration.
        """
        global _MEMORY_TEMPLATE
        with _MEMORY_LOCK:
            if _MEMORY_TEMPLATE is None:
                _MEMORY_TEMPLATE = cls.open(":memory:").conn.raw
            conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
            _MEMORY_TEMPLATE.backup(conn)
        conn.row_factory = sqlite3.Row
        seal.install(conn, _MEMORY_KEY)  # the copied triggers call it
        conn.execute("PRAGMA foreign_keys = ON")
        return cls(conn, Path(":memory:"), _MEMORY_KEY)

    def check_seals(self) -> None:
        """Raise JournalError when a sealed row was changed outside assay (see seal.py)."""
        try:
            done = {r[0] for r in self.conn.execute("SELECT name FROM migrations")}
        except sqlite3.DatabaseError:
            return  # a journal too old to have migrations (read-only open): nothing sealed
        if SEALED not in done:
            return
        with self._lock:
            problem = seal.verify(self.conn.raw, self.path, self._key)
        if problem:
            self._refuse(problem)
        if self._writer:
            self._verified = True  # from now on each commit of ours records the file state
            seal.mark(self.path, self._key)

    def close(self) -> None:
        self.conn.close()
        if self._verified:  # the last connection's checkpoint rewrote the file
            seal.mark(self.path, self._key)
            seal.release(self.path)

    def is_ready(self) -> bool:
        """Whether the schema is in place (False while a first run is still creating it)."""
        try:
            return self.conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'experiments'"
            ).fetchone() is not None
        except sqlite3.DatabaseError:
            return False

    def change_key(self) -> tuple[Any, ...]:
        """A value that changes whenever anything a report or dashboard shows changes."""
        q = self.conn.execute
        return (tuple(q("SELECT COUNT(*), MAX(updated_at) FROM experiments").fetchone()),
                q("SELECT MAX(id) FROM events").fetchone()[0],
                q("SELECT COUNT(*) FROM runs").fetchone()[0],
                q("SELECT COUNT(*) FROM decisions").fetchone()[0],
                q("SELECT value FROM meta WHERE key = 'calibration'").fetchone() is not None,
                q("SELECT MAX(id) FROM model_calls").fetchone()[0])

    def migrate(self) -> list[str]:
        applied: list[str] = []
        with self.tx():
            self.conn.execute(_SCHEMA_MIGRATIONS)
            done = {r[0] for r in self.conn.execute("SELECT name FROM migrations")}
            known = {name for name, _ in MIGRATIONS}
            newer = done - known
            if newer:
                raise JournalError(f"{self.path}: written by a newer assay (migrations "
                                   f"{sorted(newer)}); upgrade assay to read it")
            for name, sql in MIGRATIONS:
                if name in done:
                    continue
                for statement in _statements(sql):
                    self.conn.execute(statement)
                self.conn.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))
                applied.append(name)
        return applied

    @contextmanager
    def tx(self) -> Iterator[Serialized]:
        """A write transaction (BEGIN IMMEDIATE); nested calls join the outer one."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self.conn
                finally:
                    self._depth -= 1
                return
            self.conn.execute("BEGIN IMMEDIATE")
            if self._verified and not seal.continues(self.path):
                # another client wrote since our last commit: our marks no longer vouch for
                # the file, and the next open checks every row
                self._verified = False
                seal.release(self.path)
            self._depth = 1
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            else:
                self.conn.execute("COMMIT")
                if self._verified:
                    seal.mark(self.path, self._key)
            finally:
                self._depth = 0

    # -- meta ----------------------------------------------------------------------
    def set_meta(self, key: str, value: Any) -> None:
        with self.tx():
            self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, _dumps(value)))

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def incumbent(self) -> Incumbent | None:
        raw = self.get_meta("incumbent")
        if raw is None:
            return None
        return Incumbent(commit=raw["commit"], params=raw.get("params", {}),
                         experiment_id=raw.get("experiment_id"))

    def set_incumbent(self, inc: Incumbent) -> None:
        self.set_meta("incumbent", {"commit": inc.commit, "params": dict(inc.params),
                                    "experiment_id": inc.experiment_id})

    # -- model calls -------------------------------------------------------------------
    def add_model_call(self, u: Usage, call: str, session: str) -> int:
        """Record one model call at once (its experiment is linked when it is added)."""
        with self.tx():
            cur = self.conn.execute(
                "INSERT INTO model_calls (ts, session, call, model, tokens_in, tokens_out,"
                " tokens_cached, tokens_cache_write, cost_usd, priced_by, estimated)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (time.time(), session, call, u.model, u.tokens_in, u.tokens_out,
                 u.tokens_cached, u.tokens_cache_write, u.cost_usd, u.priced_by,
                 int(u.estimated)))
            assert cur.lastrowid is not None
            return int(cur.lastrowid)

    def model_calls(self, *, session: str | None = None, experiment_id: str | None = None
                    ) -> list[Usage]:
        """The calls of one session or one experiment (all calls without either)."""
        sql = ("SELECT model, tokens_in, tokens_out, tokens_cached, tokens_cache_write, "
               "cost_usd, priced_by, estimated FROM model_calls")
        where, args = [], []
        if session is not None:
            where.append("session = ?")
            args.append(session)
        if experiment_id is not None:
            where.append("experiment_id = ?")
            args.append(experiment_id)
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = self.conn.execute(sql + " ORDER BY id", args).fetchall()
        return [Usage(r[0], r[1], r[2], r[3], r[4], r[5], r[6], bool(r[7])) for r in rows]

    _SPENT_SUMS = (
        "COUNT(*), COALESCE(SUM(cost_usd), 0), COALESCE(SUM(tokens_in), 0),"
        " COALESCE(SUM(tokens_out), 0), COALESCE(SUM(tokens_cached), 0),"
        " COALESCE(SUM(cost_usd IS NULL AND tokens_in IS NOT NULL AND tokens_out IS NOT NULL),"
        " 0), COALESCE(SUM(tokens_in IS NULL OR tokens_out IS NULL), 0)")

    @staticmethod
    def _spent(r: Sequence[Any]) -> Spent:
        return Spent(calls=int(r[0]), usd=float(r[1]), tokens_in=int(r[2]),
                     tokens_out=int(r[3]), tokens_cached=int(r[4]), unpriced=int(r[5]),
                     unknown=int(r[6]))

    def spent(self, session: str | None = None) -> Spent:
        """The model calls added up (one session's, or the whole journal's), in SQL: every
        figure of tokens or dollars that assay shows is read from here."""
        sql = f"SELECT {self._SPENT_SUMS} FROM model_calls"
        args: tuple[str, ...] = ()
        if session is not None:
            sql += " WHERE session = ?"
            args = (session,)
        return self._spent(self.conn.execute(sql, args).fetchone())

    def spent_by_experiment(self, ids: Sequence[str] | None = None) -> dict[str, Spent]:
        """The model calls of each experiment added up, in SQL (those of ``ids`` only when
        given); an experiment that made no call is absent."""
        sql = (f"SELECT experiment_id, {self._SPENT_SUMS} FROM model_calls"
               " WHERE experiment_id IS NOT NULL")
        args: list[str] = []
        if ids is not None:
            if not ids:
                return {}
            sql += f" AND experiment_id IN ({','.join('?' * len(ids))})"
            args = list(ids)
        rows = self.conn.execute(sql + " GROUP BY experiment_id", args).fetchall()
        return {str(r[0]): self._spent(r[1:]) for r in rows}

    # -- events --------------------------------------------------------------------
    def event(self, kind: str, message: str, experiment_id: str | None = None,
              **data: Any) -> None:
        with self.tx():
            self.conn.execute(
                "INSERT INTO events (ts, kind, experiment_id, message, data) VALUES (?,?,?,?,?)",
                (time.time(), kind, experiment_id, message, _dumps(data)))

    def events(self, since_id: int = 0, limit: int = 1000) -> list[EventRow]:
        """Events after ``since_id``, oldest first."""
        rows = self.conn.execute(
            "SELECT * FROM events WHERE id > ? ORDER BY id LIMIT ?", (since_id, limit))
        return [_event(r) for r in rows]

    def events_of_kind(self, kind: str) -> list[EventRow]:
        """Every event of one kind, oldest first (the noise chart's quarantines)."""
        rows = self.conn.execute("SELECT * FROM events WHERE kind = ? ORDER BY id", (kind,))
        return [_event(r) for r in rows]

    def delta_history(self) -> list[tuple[float, float]]:
        """(time, δ) of every decision, oldest first: the δ in force when it was made."""
        rows = self.conn.execute(
            "SELECT created_at, delta FROM decisions ORDER BY created_at, id")
        return [(float(r[0]), float(r[1])) for r in rows]

    def recent_events(self, limit: int = 12) -> list[EventRow]:
        """The latest ``limit`` events, newest first."""
        rows = self.conn.execute("SELECT * FROM events ORDER BY id DESC LIMIT ?", (limit,))
        return [_event(r) for r in rows]

    def last_event_id(self) -> int:
        row = self.conn.execute("SELECT MAX(id) FROM events").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    # -- experiments ---------------------------------------------------------------
    def next_seq(self) -> int:
        row = self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM experiments").fetchone()
        return int(row[0]) + 1

    def add_experiment(self, cand: Candidate, state: ExperimentState = ExperimentState.QUEUED,
                       note: str = "") -> Experiment:
        now = time.time()
        with self.tx():
            seq = self.next_seq()
            exp_id = f"e{seq:04d}"
            self.conn.execute(
                "INSERT INTO experiments (id, seq, state, base_commit, patch, params, hypothesis,"
                " proposer, sources, hypothesis_id, meta, digest, created_at, updated_at, note)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (exp_id, seq, state.value, cand.base_commit, cand.patch, _dumps(dict(cand.params)),
                 cand.hypothesis, cand.proposer, _dumps(list(cand.sources)), cand.hypothesis_id,
                 _dumps(dict(cand.meta)), cand.digest, now, now, note))
            calls = [int(c) for c in cand.meta.get("model_calls", ()) or ()]
            if calls:
                self.conn.executemany("UPDATE model_calls SET experiment_id = ? WHERE id = ?",
                                      [(exp_id, c) for c in calls])
            if cand.hypothesis_id is not None:
                self.conn.execute("UPDATE hypotheses SET status = 'testing' WHERE id = ? "
                                  "AND status = 'open'", (cand.hypothesis_id,))
        exp = self.experiment(exp_id)
        assert exp is not None
        return exp

    def set_state(self, exp_id: str, state: ExperimentState, note: str | None = None,
                  commit: str | None = None, withheld: bool | None = None) -> None:
        with self.tx():
            cur = self.conn.execute("SELECT state FROM experiments WHERE id = ?", (exp_id,))
            row = cur.fetchone()
            if row is None:
                raise JournalError(f"experiment {exp_id} is not in the journal")
            if ExperimentState(row[0]).is_finished() and row[0] != state.value:
                raise JournalError(f"experiment {exp_id} is already {row[0]}; "
                                   f"refusing to move it to {state.value}")
            self.conn.execute(
                "UPDATE experiments SET state = ?, updated_at = ?,"
                " note = COALESCE(?, note), commit_sha = COALESCE(?, commit_sha),"
                " withheld = COALESCE(?, withheld) WHERE id = ?",
                (state.value, time.time(), note, commit,
                 None if withheld is None else int(withheld), exp_id))

    def set_decision(self, exp_id: str, d: Decision) -> None:
        with self.tx():
            self.conn.execute(
                "INSERT INTO decisions (experiment_id, verdict, reason, effect, lo, hi, pairs_used,"
                " runs_used, delta, rule, details, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (exp_id, d.verdict.value, d.reason, d.effect, d.lo, d.hi, d.pairs_used,
                 d.runs_used, d.delta, d.rule, _dumps(dict(d.details)), time.time()))
            self.conn.execute("UPDATE experiments SET decision = ?, updated_at = ? WHERE id = ?",
                              (_dumps(_decision_dict(d)), time.time(), exp_id))

    def experiment(self, exp_id: str) -> Experiment | None:
        row = self.conn.execute(f"SELECT {_columns(True)} FROM experiments WHERE id = ?",
                                (exp_id,)).fetchone()
        return _experiment(row) if row else None

    def experiments(self, states: Sequence[ExperimentState] | None = None, *,
                    patches: bool = True) -> list[Experiment]:
        """Experiments in order (those in ``states``). ``patches=False``: a listing, without
        the patches' text (``Experiment.patch_loaded`` is False, ``patch_chars`` is set)."""
        cols = _columns(patches)
        if states:
            marks = ",".join("?" * len(states))
            rows = self.conn.execute(f"SELECT {cols} FROM experiments WHERE state IN ({marks}) "
                                     "ORDER BY seq", [s.value for s in states])
        else:
            rows = self.conn.execute(f"SELECT {cols} FROM experiments ORDER BY seq")
        return [_experiment(r) for r in rows]

    def count_experiments(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM experiments").fetchone()[0])

    def last_seq(self) -> int:
        """The newest experiment's ``seq`` (0 when there is none): one index lookup."""
        return int(self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM experiments"
                                     ).fetchone()[0])

    def digests_after(self, seq: int) -> list[tuple[int, str]]:
        """(seq, digest) of the experiments after ``seq``, in order: read incrementally."""
        rows = self.conn.execute("SELECT seq, digest FROM experiments WHERE seq > ? ORDER BY seq",
                                 (seq,))
        return [(int(r[0]), str(r[1])) for r in rows]

    def neighbours(self, seq: int) -> tuple[str | None, str | None]:
        """The ids of the experiments just before and just after ``seq``."""
        prev = self.conn.execute("SELECT id FROM experiments WHERE seq < ? ORDER BY seq DESC "
                                 "LIMIT 1", (seq,)).fetchone()
        nxt = self.conn.execute("SELECT id FROM experiments WHERE seq > ? ORDER BY seq LIMIT 1",
                                (seq,)).fetchone()
        return (str(prev[0]) if prev else None, str(nxt[0]) if nxt else None)

    def version(self) -> tuple[float, int, int]:
        """(the last write to an experiment, the last event id, the last model call's id):
        three index lookups."""
        upd = self.conn.execute("SELECT MAX(updated_at) FROM experiments").fetchone()[0]
        call = self.conn.execute("SELECT MAX(id) FROM model_calls").fetchone()[0]
        return float(upd or 0.0), self.last_event_id(), int(call or 0)

    def find_digest(self, digest: str) -> str | None:
        row = self.conn.execute("SELECT id FROM experiments WHERE digest = ? ORDER BY seq LIMIT 1",
                                (digest,)).fetchone()
        return str(row[0]) if row else None

    def decisions(self, exp_id: str) -> list[Decision]:
        rows = self.conn.execute("SELECT * FROM decisions WHERE experiment_id = ? ORDER BY id",
                                 (exp_id,))
        return [_decision_row(r) for r in rows]

    # -- blocks --------------------------------------------------------------------
    def add_block(self, exp_id: str, kind: BlockKind, order: str, incumbent: Incumbent,
                  prefer_slot: str | None = None, avoid_slot: str | None = None,
                  platform: str = "") -> str:
        with self.tx():
            row = self.conn.execute("SELECT COUNT(*) FROM blocks WHERE experiment_id = ?",
                                    (exp_id,)).fetchone()
            seq = int(row[0]) + 1
            block_id = f"{exp_id}-b{seq}"
            self.conn.execute(
                "INSERT INTO blocks (id, experiment_id, seq, kind, run_order, inc_commit,"
                " inc_params, state, prefer_slot, avoid_slot, created_at, platform)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (block_id, exp_id, seq, kind.value, order, incumbent.commit,
                 _dumps(dict(incumbent.params)), BlockState.QUEUED.value, prefer_slot,
                 avoid_slot, time.time(), platform))
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
        return [_block(r) for r in self.conn.execute(sql, args)]

    def run_pace(self, limit: int = 12) -> list[float]:
        """Seconds per run of the last ``limit`` finished blocks: each block's wall time
        (its build, checks and warm-up included) over the runs in its order."""
        rows = self.conn.execute(
            "SELECT wall_s, run_order FROM blocks WHERE state = ? AND wall_s > 0"
            " ORDER BY finished_at DESC LIMIT ?", (BlockState.DONE.value, limit)).fetchall()
        return [float(w) / len(order) for w, order in rows if order]

    def count_blocks(self, states: Sequence[BlockState]) -> int:
        marks = ",".join("?" * len(states))
        row = self.conn.execute(f"SELECT COUNT(*) FROM blocks WHERE state IN ({marks})",
                                [BlockState(s).value for s in states]).fetchone()
        return int(row[0])

    def drop_blocks(self, exp_id: str) -> None:
        """Forget every block of ``exp_id`` and its runs (a failed calibration is redone)."""
        with self.tx():
            self.conn.execute("DELETE FROM runs WHERE block_id IN "
                              "(SELECT id FROM blocks WHERE experiment_id = ?)", (exp_id,))
            self.conn.execute("DELETE FROM blocks WHERE experiment_id = ?", (exp_id,))

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
                     _dumps(dict(r.metrics)), _dumps(dict(r.holdout)), r.reason, r.exit_code,
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
        return [_run(r) for r in self.conn.execute(sql, args)]

    def recent_incumbent_values(self, slot: str, metric: str, commit: str, limit: int = 8,
                                exclude_experiment: str | None = None) -> tuple[float, ...]:
        """The slot's latest measurements of the tree at ``commit`` (newest last): its A
        runs, both sides of its A/A calibration blocks, and, when ``commit`` was kept from a
        candidate, that candidate's own runs (the same tree, measured before the keep).

        ``exclude_experiment`` leaves out that experiment's own A runs (they are already in
        its pairs).
        """
        rows = self.conn.execute(
            "SELECT r.metrics FROM runs r JOIN blocks b ON r.block_id = b.id"
            " WHERE r.status = 'ok' AND r.slot = ? AND r.experiment_id != ?"
            " AND ((b.inc_commit = ? AND (r.role = 'A' OR b.kind = 'aa'))"
            "      OR (r.role = 'B' AND r.experiment_id IN (SELECT id FROM experiments"
            "          WHERE commit_sha = ? AND state = 'kept')))"
            " ORDER BY r.created_at DESC, r.id DESC LIMIT ?",
            (slot, exclude_experiment or "", commit, commit, limit)).fetchall()
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
                (name, host, _dumps(list(gpus)), noise, int(quarantined), reason, time.time()))

    def slots(self) -> list[SlotRow]:
        return [SlotRow(r["name"], r["host"], tuple(json.loads(r["gpus"])), r["noise"],
                        bool(r["quarantined"]), r["reason"], r["updated_at"])
                for r in self.conn.execute("SELECT * FROM slots ORDER BY name")]

    # -- hypotheses ----------------------------------------------------------------
    def add_hypothesis(self, text: str, sources: Sequence[str], source_kind: str,
                       score: float = 0.0) -> int:
        text = text.strip()
        with self.tx():
            row = self.conn.execute("SELECT id FROM hypotheses WHERE text = ?", (text,)).fetchone()
            if row:
                return int(row[0])
            cur = self.conn.execute(
                "INSERT INTO hypotheses (text, sources, source_kind, status, score, created_at)"
                " VALUES (?,?,?,?,?,?)",
                (text, _dumps(list(sources)), source_kind, "open", score, time.time()))
            return int(cur.lastrowid or 0)

    def hypotheses(self, status: str | None = None) -> list[Hypothesis]:
        if status:
            rows = self.conn.execute("SELECT * FROM hypotheses WHERE status = ? "
                                     "ORDER BY score DESC, id", (status,))
        else:
            rows = self.conn.execute("SELECT * FROM hypotheses ORDER BY score DESC, id")
        return [Hypothesis(r["id"], r["text"], tuple(json.loads(r["sources"])), r["source_kind"],
                           r["status"], r["score"], r["created_at"]) for r in rows]

    def update_hypothesis(self, hid: int, text: str, sources: Sequence[str],
                          score: float) -> None:
        """New evidence for a stored hypothesis: its id and status stay, the rest moves.

        The text stays as it was where another hypothesis already holds the new one.
        """
        text = text.strip()
        with self.tx():
            clash = self.conn.execute("SELECT id FROM hypotheses WHERE text = ? AND id != ?",
                                      (text, hid)).fetchone()
            if clash:
                self.conn.execute("UPDATE hypotheses SET sources = ?, score = ? WHERE id = ?",
                                  (_dumps(list(sources)), score, hid))
            else:
                self.conn.execute("UPDATE hypotheses SET text = ?, sources = ?, score = ? "
                                  "WHERE id = ?", (text, _dumps(list(sources)), score, hid))

    def set_hypothesis_status(self, hid: int, status: str) -> None:
        with self.tx():
            self.conn.execute("UPDATE hypotheses SET status = ? WHERE id = ?", (status, hid))

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

    # -- bulk reads (one query each, whatever the journal's size) -----------------------
    def experiment_page(self, limit: int | None = None, offset: int = 0,
                        newest_first: bool = False) -> list[Experiment]:
        """A page of experiments in ``seq`` order (newest first when asked), a listing: the
        patches' text stays in the journal (``assay show`` reads it)."""
        order = "DESC" if newest_first else "ASC"
        rows = self.conn.execute(f"SELECT {_columns(False)} FROM experiments ORDER BY seq {order}"
                                 " LIMIT ? "
                                 "OFFSET ?", (-1 if limit is None else limit, max(0, offset)))
        return [_experiment(r) for r in rows]

    def blocks_of(self, exp_ids: Sequence[str] | None = None) -> dict[str, list[BlockRow]]:
        """Every block of these experiments (all when None), by experiment, in order."""
        out: dict[str, list[BlockRow]] = {}
        for r in self._many("blocks", exp_ids, "created_at, seq"):
            out.setdefault(r["experiment_id"], []).append(_block(r))
        return out

    def runs_of(self, exp_ids: Sequence[str] | None = None) -> dict[str, list[RunResult]]:
        """Every run of these experiments (all when None), by experiment, in order."""
        out: dict[str, list[RunResult]] = {}
        for r in self._many("runs", exp_ids, "created_at, block_id, idx"):
            out.setdefault(r["experiment_id"], []).append(_run(r))
        return out

    def decisions_of(self, exp_ids: Sequence[str] | None = None) -> dict[str, list[Decision]]:
        """Every decision of these experiments (all when None), by experiment, in order."""
        out: dict[str, list[Decision]] = {}
        for r in self._many("decisions", exp_ids, "id"):
            out.setdefault(r["experiment_id"], []).append(_decision_row(r))
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

    def state_counts(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.conn.execute(
            "SELECT state, COUNT(*) FROM experiments GROUP BY state")}

    def first_decided(self) -> Experiment | None:
        """The first experiment (by seq) whose decision holds the incumbent's value."""
        row = self.conn.execute(
            f"SELECT {_columns(False)} FROM experiments WHERE decision LIKE "
            "'%\"incumbent_value\"%' "
            "ORDER BY seq LIMIT 1").fetchone()
        return _experiment(row) if row else None

    def changed_since(self, updated_at: float) -> list[Experiment]:
        """Experiments written after ``updated_at`` (the dashboard's updates; a listing,
        without the patches' text)."""
        # Sorted here: an ORDER BY seq makes SQLite walk the seq index over every row
        # instead of searching the updated_at index for the few that changed.
        rows = self.conn.execute(f"SELECT {_columns(False)} FROM experiments WHERE updated_at > ?",
                                 (updated_at,))
        return sorted((_experiment(r) for r in rows), key=lambda e: e.seq)

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


def peek_count(path: Path, what: str, exp_id: str = "") -> int | None:
    """A count read from the journal file at ``path`` without opening a :class:`Journal`
    (no migration, no seal check; for a line on screen while a run writes it): ``what`` is
    ``"finished"`` (experiments decided) or ``"runs"`` (runs of ``exp_id``). None when
    there is no journal there or it cannot be read now."""
    sql = {"finished": "SELECT COUNT(*) FROM experiments WHERE state IN "
                       "('kept', 'discarded', 'invalid', 'crashed')",
           "runs": "SELECT COUNT(*) FROM runs WHERE experiment_id = ?"}[what]
    if not path.exists():
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            row = conn.execute(sql, (exp_id,) if what == "runs" else ()).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return int(row[0])

def _decision_dict(d: Decision) -> dict[str, Any]:
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


def _decision_row(r: sqlite3.Row) -> Decision:
    return Decision(Verdict(r["verdict"]), r["reason"], r["effect"], r["lo"], r["hi"],
                    r["pairs_used"], r["runs_used"], r["delta"], rule=r["rule"],
                    details=json.loads(r["details"]))


_EXPERIMENT_COLUMNS = ("id, seq, state, base_commit, params, hypothesis, proposer, sources, "
                       "hypothesis_id, meta, digest, created_at, updated_at, decision, "
                       "commit_sha, note, withheld, length(patch) AS patch_chars")


def _columns(patches: bool) -> str:
    """The experiments' columns a query reads: with the patch text, or only its length."""
    return _EXPERIMENT_COLUMNS + (", patch" if patches else ", NULL AS patch")


def _experiment(r: sqlite3.Row) -> Experiment:
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


def _run(r: sqlite3.Row) -> RunResult:
    return RunResult(run_id=r["id"], block_id=r["block_id"], experiment_id=r["experiment_id"],
                     role=Role(r["role"]), index=r["idx"], status=RunStatus(r["status"]),
                     metrics=json.loads(r["metrics"]), reason=r["reason"],
                     exit_code=r["exit_code"], wall_s=r["wall_s"], stdout_path=r["stdout_path"],
                     stderr_path=r["stderr_path"], slot=r["slot"],
                     holdout=json.loads(r["holdout"]))


def _block(r: sqlite3.Row) -> BlockRow:
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
        checks_detail=r["checks_detail"], platform=r["platform"], noise=r["noise"])


def _event(r: sqlite3.Row) -> EventRow:
    return EventRow(r["id"], r["ts"], r["kind"], r["experiment_id"], r["message"],
                    json.loads(r["data"]))
