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

import secrets
import sqlite3
import threading
import time
from pathlib import Path

from ..config.fidelity import FidelitySpec, check_setup, setup_record
from ..errors import JournalError
from . import seal
from .blocks import BlockStore
from .events import EventStore
from .experiments import ExperimentStore
from .meta import MetaStore
from .model_calls import ModelCallStore
from .schema import KEYED, MIGRATIONS, MIGRATIONS_TABLE, SEALED, statements
from .views import ViewQueries

JOURNAL_NAME = "journal.sqlite"

_MEMORY_TEMPLATE: sqlite3.Connection | None = None  # the migrated schema Journal.memory copies
_MEMORY_LOCK = threading.Lock()
_MEMORY_KEY = secrets.token_bytes(seal.KEY_BYTES)  # the seal key of journals held in memory


class Journal(MetaStore, ExperimentStore, BlockStore, EventStore, ModelCallStore, ViewQueries):
    """The run's record. Open with :meth:`open`; write inside :meth:`tx`.

    Its parts live beside it: the connection and transactions (journal_connection), the
    schema (journal_schema), experiments, blocks, events, model calls, meta records and the
    views' reads (journal_experiments, journal_blocks, journal_events, journal_model_calls,
    journal_meta, journal_views)."""

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

    def hold_fidelity(self, spec: FidelitySpec | None, config_file: str) -> None:
        """Before a session measures into this journal: refuse (ConfigError) a
        ``[fidelity]`` other than the one its blocks were measured under
        (:func:`~assay.config.fidelity.check_setup`), else record the present one. Writes
        nothing when it refuses."""
        recorded = self.fidelity_setup()
        check_setup(recorded, spec, self.deepest_level(), config_file)
        now = setup_record(spec)
        if recorded != now:
            self.set_fidelity_setup(now)

    def close(self) -> None:
        self.conn.close()
        if self._verified:  # the last connection's checkpoint rewrote the file
            seal.mark(self.path, self._key)
            seal.release(self.path)

    def backup(self, dest: Path) -> None:
        """A consistent copy of the journal in the file ``dest`` (SQLite's online backup:
        whole even while a run writes; its seals and their triggers come with it, its key
        does not: copy ``<journal>-key`` beside it)."""
        out = sqlite3.connect(str(dest))
        try:
            with self._lock:
                self.conn.raw.backup(out)
        finally:
            out.close()

    def is_ready(self) -> bool:
        """Whether the schema is in place (False while a first run is still creating it)."""
        try:
            return self.conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'experiments'"
            ).fetchone() is not None
        except sqlite3.DatabaseError:
            return False

    def migrate(self) -> list[str]:
        applied: list[str] = []
        with self.tx():
            self.conn.execute(MIGRATIONS_TABLE)
            done = {r[0] for r in self.conn.execute("SELECT name FROM migrations")}
            known = {name for name, _ in MIGRATIONS}
            newer = done - known
            if newer:
                raise JournalError(f"{self.path}: written by a newer assay (migrations "
                                   f"{sorted(newer)}); upgrade assay to read it")
            for name, sql in MIGRATIONS:
                if name in done:
                    continue
                for statement in statements(sql):
                    self.conn.execute(statement)
                self.conn.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))
                applied.append(name)
        return applied


def _peek(path: Path, sql: str, args: tuple[str, ...]) -> object:
    """The first value of ``sql`` on the journal file at ``path``, read-only, without
    opening a :class:`Journal` (no migration, no seal check); None when there is no journal
    there or it cannot be read now."""
    if not path.exists():
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            row = conn.execute(sql, args).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return None if row is None else row[0]


def peek_wall(path: Path, exp_id: str) -> float | None:
    """The seconds the blocks of ``exp_id`` ran (their wall times summed: building, checks
    and runs, never the time it waited in the queue or across a stop), read as
    :func:`peek_count` reads; None when there is none or the journal cannot be read."""
    value = _peek(path, "SELECT SUM(wall_s) FROM blocks WHERE experiment_id = ?", (exp_id,))
    return float(value) if isinstance(value, int | float) else None


def peek_count(path: Path, what: str, exp_id: str = "") -> int | None:
    """A count read from the journal file at ``path`` without opening a :class:`Journal`
    (no migration, no seal check; for a line on screen while a run writes it): ``what`` is
    ``"finished"`` (experiments decided) or ``"runs"`` (runs of ``exp_id``). None when
    there is no journal there or it cannot be read now."""
    sql = {"finished": "SELECT COUNT(*) FROM experiments WHERE state IN "
                       "('kept', 'discarded', 'invalid', 'crashed', 'conflict')",
           "runs": "SELECT COUNT(*) FROM runs WHERE experiment_id = ?"}[what]
    value = _peek(path, sql, (exp_id,) if what == "runs" else ())
    return int(value) if isinstance(value, int) else None
