"""The journal's seals: a keyed digest of every row of the tables a decision rests on.

Tables sealed (:data:`SEALED`): ``experiments``, ``runs``, ``decisions``, ``events`` and
``meta`` (the incumbent). SQLite triggers keep ``seals`` (one digest per row, keyed by the
row's primary key) in step with every insert, update and delete; the digest is computed by a
function only assay's own connections define (:func:`install`), so a write made with any
other SQLite client fails (``no such function: assay_seal``). :func:`verify` recomputes every
digest when the journal is opened and names the first row that does not match, a row
without a seal, a seal without its row, and a missing trigger.

The digest is a MAC: BLAKE2b keyed with a secret of 32 random bytes kept beside the
journal in ``<journal>-key`` (file mode 0600, inside ``.assay/``, which no sandboxed process
sees). Whoever reads this module can define ``assay_seal`` with the same recipe, but without
the key its seals do not match, and the mark that lets an open skip the check (:func:`mark`)
carries a MAC of its own. A journal sealed before the key existed is checked with the
unkeyed recipe once, then sealed with a new key (:func:`new_key`).

What it detects: edits of the journal file made outside assay (an SQLite shell, a script, a
benchmark or agent that found the file), rows added or removed behind its back, dropped
triggers. What it does not: a process that can read the key file (one running as the same
user without a sandbox can); keeping candidates away from ``.assay`` is the sandbox's job.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path

from ..errors import JournalError

FUNCTION = "assay_seal"
KEY_BYTES = 32

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


def digest(key: bytes, *values: object) -> str:
    """The digest of one row: its table name, then its sealed columns, in order, keyed with
    ``key`` (``b""``: the unkeyed recipe of journals sealed before keys)."""
    h = hashlib.blake2b(digest_size=16, key=key)
    for v in values:
        h.update(b"\x1f" if v is None else b"\x1e" + repr(v).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def install(conn: sqlite3.Connection, key: bytes) -> None:
    """Define the digest function, keyed with ``key``, on an assay connection (before any
    write or check)."""
    conn.create_function(FUNCTION, -1, lambda *values: digest(key, *values),
                         deterministic=True)


def key_path(path: Path) -> Path:
    return Path(f"{path}-key")


def read_key(path: Path) -> bytes | None:
    """The key of the journal at ``path``; None when it has none (yet)."""
    try:
        text = key_path(path).read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise JournalError(f"{key_path(path)}: the journal's seal key cannot be read ({exc}); "
                           "run assay as the user who owns the journal") from None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise JournalError(f"{key_path(path)}: not a seal key ({KEY_BYTES} bytes in hex); "
                           "restore the file that came with the journal")
    return key


def new_key(path: Path) -> bytes:
    """Create the key file of the journal at ``path`` (mode 0600 from its first byte, whole
    when it appears: written aside, then linked into place), or read the one a concurrent
    opener created first."""
    key = secrets.token_bytes(KEY_BYTES)
    aside = Path(f"{key_path(path)}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(key.hex() + "\n")
        os.link(aside, key_path(path))
    except FileExistsError:
        found = read_key(path)
        if found is None:
            raise JournalError(f"{key_path(path)}: the seal key vanished while the journal "
                               "was opened; open it again") from None
        return found
    finally:
        aside.unlink(missing_ok=True)
    return key


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


def reseal_sql() -> str:
    """The statements that seal every row again with the connection's (keyed) function."""
    out = ["DELETE FROM seals"]
    for table, (pk, _cols) in SEALED.items():
        out.append(f"INSERT INTO seals (tbl, k, digest) SELECT '{table}', CAST(t.{pk} AS TEXT),"
                   f" {_row_expr(table, 't')} FROM {table} t")
    return ";\n".join(out)


def triggers() -> set[str]:
    return {f"seal_{t}_{e}" for t in SEALED for e in ("insert", "update", "delete")}


_VERIFIED: dict[str, tuple[object, ...]] = {}  # journal path -> file state last verified


def _state(path: Path) -> tuple[object, ...]:
    """The file state of the journal and its WAL. The journal's ``st_ctime_ns`` moves with
    every write and cannot be set back by the writer, so an edit by another client changes
    it. The WAL's size and time only: a reader may create an empty one and change its owner
    (and so its ctime); an empty or missing WAL holds nothing, whatever its times."""
    try:
        st = os.stat(path)
        out: list[object] = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    except OSError:
        out = [None]
    try:
        wal = os.stat(f"{path}-wal")
        out += [wal.st_size, wal.st_mtime_ns] if wal.st_size else [0, None]
    except OSError:
        out += [0, None]
    return tuple(out)


def _mark_path(path: Path) -> Path:
    return Path(f"{path}-sealed")


_MARK_FDS: dict[str, int] = {}  # journal path -> the open mark file (one write per commit)
_MARK_SIZE = 200  # a fixed-size record, written in place: no truncation, no rename


def _mac(key: bytes, state: object) -> str:
    return hashlib.blake2b(json.dumps(state).encode(), digest_size=16,
                           key=key + b"mark").hexdigest()


def continues(path: Path) -> bool:
    """Whether the journal file is still in the state this process's last commit left it
    (checked at the start of each write: a change in between is not ours to vouch for)."""
    return _VERIFIED.get(str(path)) == _state(path)


def mark(path: Path, key: bytes) -> None:
    """Record the state an assay connection left the journal file in, after a write it made
    on a journal it had verified. The next open, in any process, that finds the file in this
    state knows no other client wrote since, and skips recomputing every seal (whose cost
    grows with the journal). Any other write changes the state, and the next open checks
    every row again. (A reader that catches the record half written reads no mark, and
    checks every row: slower, never wrong.)"""
    state = _state(path)
    _VERIFIED[str(path)] = state
    record = json.dumps([state, _mac(key, state)]).encode().ljust(_MARK_SIZE)
    try:
        fd = _MARK_FDS.get(str(path))
        if fd is None:
            fd = os.open(_mark_path(path), os.O_WRONLY | os.O_CREAT, 0o644)
            _MARK_FDS[str(path)] = fd
        os.pwrite(fd, record, 0)
    except OSError:  # a read-only folder: the next open verifies every row, as before
        release(path)


def release(path: Path) -> None:
    """Close the mark file of ``path`` (when its journal is closed)."""
    fd = _MARK_FDS.pop(str(path), None)
    if fd is not None:
        os.close(fd)


def _marked(path: Path, key: bytes) -> tuple[object, ...] | None:
    """The state the mark file vouches for, when its MAC is the key's."""
    try:
        state, mac = json.loads(_mark_path(path).read_bytes().strip() or b"null")
    except (OSError, ValueError, TypeError):
        return None
    if not isinstance(mac, str) or mac != _mac(key, state):
        return None
    return tuple(state)


def verify(conn: sqlite3.Connection, path: Path, key: bytes, *, full: bool = False) -> str:
    """'' when every sealed row matches its seal, else what does not (for the error).

    The rows are recomputed unless the file is in a state an assay writer marked (and
    ``full`` is False)."""
    for wait in (0.0, 0.005, 0.01, 0.02, 0.04):  # a writer marks just after its commit
        if full:
            break
        time.sleep(wait)
        state = _state(path)
        if _VERIFIED.get(str(path)) == state or _marked(path, key) == state:
            return ""
    state = _state(path)
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
        # t.pk = s.k finds the row through its primary key (an integer key takes the text
        # as a number); the CAST then asks for the exact key the trigger wrote.
        gone = conn.execute(
            f"SELECT s.k FROM seals s WHERE s.tbl = '{table}' AND NOT EXISTS"
            f" (SELECT 1 FROM {table} t WHERE t.{pk} = s.k AND CAST(t.{pk} AS TEXT) = s.k)"
            " LIMIT 1").fetchone()
        if gone is not None:
            return f"{table} row {gone[0]!r} was deleted outside assay"
    _VERIFIED[str(path)] = state
    return ""
