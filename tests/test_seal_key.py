"""The journal's seal is keyed: rows written by code that knows the sealing recipe but not
the key (a candidate's benchmark that found the journal two folders up) are refused.

The forger below does what a candidate can do without the key: it defines the sealing
function itself (the recipe is public), inserts an event, changes a kept decision's effect
and deletes a run row, then writes the "verified" mark for the state it left.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from assay.errors import JournalError
from assay.journal.store import Journal
from assay.model import (
    BlockKind,
    BlockResult,
    Candidate,
    Decision,
    ExperimentState,
    Incumbent,
    Role,
    RunResult,
    RunStatus,
    Verdict,
)


def _filled(path: Path) -> Path:
    j = Journal.open(path)
    exp = j.add_experiment(Candidate("abc", params={"x": 1}, hypothesis="h"))
    bid = j.add_block(exp.id, BlockKind.COMPARE, "ABBA", Incumbent("abc"))
    assert j.lease_block(bid, "s0", "me", 60)
    runs = tuple(RunResult(f"{bid}-r{i}", bid, exp.id, Role(r), i, RunStatus.OK,
                           {"m": 1.0 + i}, slot="s0") for i, r in enumerate("ABBA", 1))
    assert j.record_block(BlockResult(bid, exp.id, "s0", runs))
    j.set_decision(exp.id, Decision(Verdict.KEEP, "better", effect=0.05, lo=0.01, hi=0.09))
    j.set_state(exp.id, ExperimentState.KEPT, note="kept")
    j.close()
    return path


def _old_digest(*values: object) -> str:
    """The unkeyed recipe of the seal (what anyone reading the source can recompute)."""
    h = hashlib.blake2b(digest_size=16)
    for v in values:
        h.update(b"\x1f" if v is None else b"\x1e" + repr(v).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _forge(path: Path) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    con.create_function("assay_seal", -1, _old_digest, deterministic=True)
    con.execute("INSERT INTO events (ts, kind, message, data) VALUES (0, 'keep', 'forged', '{}')")
    con.execute("UPDATE decisions SET effect = 0.5, lo = 0.4, hi = 0.6")
    con.execute("DELETE FROM runs WHERE idx = 4")
    con.close()
    st = os.stat(path)
    state = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    wal = Path(f"{path}-wal")
    state += [wal.stat().st_size, wal.stat().st_mtime_ns] if wal.exists() and \
        wal.stat().st_size else [0, None]
    Path(f"{path}-sealed").write_bytes(json.dumps(state).encode().ljust(200))


def test_rows_forged_without_the_key_are_refused_at_open(tmp_path: Path) -> None:
    path = _filled(tmp_path / "journal.sqlite")
    _forge(path)
    for readonly in (True, False):
        with pytest.raises(JournalError, match="changed outside assay") as info:
            Journal.open(path, readonly=readonly)
        assert "decisions row" in str(info.value) or "events row" in str(info.value)


def test_a_forgery_between_the_writers_commits_is_not_vouched_for(tmp_path: Path) -> None:
    """The orchestrator keeps writing after the forgery: its next commit must not record
    the forged state as one it verified."""
    path = _filled(tmp_path / "journal.sqlite")
    writer = Journal.open(path)
    writer.event("note", "before")
    _forge(path)
    writer.event("note", "after")
    writer.close()
    with pytest.raises(JournalError, match="changed outside assay"):
        Journal.open(path, readonly=True)


def test_the_key_file_is_private_and_required(tmp_path: Path) -> None:
    path = _filled(tmp_path / "journal.sqlite")
    key = Path(f"{path}-key")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert len(bytes.fromhex(key.read_text().strip())) == 32
    key.rename(tmp_path / "elsewhere")
    with pytest.raises(JournalError, match="seal key") as info:
        Journal.open(path, readonly=True)
    assert str(key) in str(info.value) and "restore" in str(info.value)


def test_an_older_journal_is_brought_forward_with_a_key(tmp_path: Path) -> None:
    """tests/data/journal-0001.sqlite predates sealing; opening it seals it with a new key
    and says so in an event."""
    path = tmp_path / "journal.sqlite"
    shutil.copy(Path(__file__).parent / "data" / "journal-0001.sqlite", path)
    ro = Journal.open(path, readonly=True)
    assert [s.name for s in ro.slots()] == ["s1"]
    notes = [e.message for e in ro.events() if e.kind == "journal"]
    ro.close()
    assert len(notes) == 1 and "sealed with a key" in notes[0], notes
    assert Path(f"{path}-key").is_file()
    _forge(path)
    with pytest.raises(JournalError, match="changed outside assay"):
        Journal.open(path, readonly=True)


def test_assay_status_exits_2_on_a_forged_journal(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "assay.toml").write_text('[metric]\nname = "m"\n[commands]\nbench = "true"\n'
                                     '[scope]\neditable = ["*.py"]\n')
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    journal = _filled(root / ".assay" / "journal.sqlite")
    _forge(journal)
    r = subprocess.run([sys.executable, "-c", "from assay.cli.app import main; main()", "status",
                        "-C", str(root)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert "changed outside assay" in r.stderr and "row" in r.stderr, r.stderr
    assert "restore the file from a backup" in r.stderr
