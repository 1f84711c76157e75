"""The journal's one connection and its write transactions: what every part of the
journal (experiments, blocks, events, meta records, views) reads and writes through."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import seal


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


class Store:
    """A journal's connection (one thread at a time) and its transactions; the parts of
    :class:`assay.journal.store.Journal` build on it."""

    def __init__(self, conn: sqlite3.Connection, path: Path, key: bytes = b"") -> None:
        self._key = key  # the seal key (b"": not read yet, or a journal sealed before keys)
        self._lock = threading.RLock()
        self.conn = Serialized(conn, self._lock)
        self.path = path
        self._depth = 0
        self._writer = False  # a writable connection to a journal file
        self._verified = False  # its seals were checked at open (see seal.mark)

    @property
    def logs_home(self) -> Path | None:
        """The folder the journal's run logs live under (None for a journal in memory)."""
        return None if str(self.path) == ":memory:" else self.path.parent.absolute()

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

