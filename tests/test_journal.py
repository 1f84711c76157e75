"""Journal: migrations, idempotent results, state machine, leases, hypotheses."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from assay.errors import JournalError
from assay.journal.schema import MIGRATIONS
from assay.journal.seal import triggers as seal_triggers
from assay.journal.store import Journal, peek_count
from assay.model import (
    BlockKind,
    BlockResult,
    BlockState,
    Candidate,
    ExperimentState,
    Incumbent,
    Role,
    RunResult,
    RunStatus,
)

T = TypeVar("T")


def _journal(tmp_path: Path) -> Journal:
    return Journal.open(tmp_path / "j.sqlite")


def _result(block_id: str, exp_id: str, value: float = 1.0) -> BlockResult:
    runs = tuple(RunResult(f"{block_id}-r{i}", block_id, exp_id, Role(ch), i, RunStatus.OK,
                           {"m": value + i}) for i, ch in enumerate("ABBA", start=1))
    return BlockResult(block_id, exp_id, "s0", runs)


def test_migrations_are_recorded_and_wal_is_on(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    names = [r[0] for r in j.conn.execute("SELECT name FROM migrations")]
    assert names == [m[0] for m in MIGRATIONS]
    assert j.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert j.migrate() == []  # idempotent
    j.close()


def test_newer_journal_is_refused(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    with j.tx():
        j.conn.execute("INSERT INTO migrations VALUES ('9999_future', 0)")
    j.close()
    with pytest.raises(JournalError, match="newer assay"):
        _journal(tmp_path)


def test_block_results_are_idempotent(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    exp = j.add_experiment(Candidate("abc", params={"x": 1}, hypothesis="h"))
    assert exp.id == "e0001" and exp.state is ExperimentState.QUEUED
    bid = j.add_block(exp.id, BlockKind.COMPARE, "ABBA", Incumbent("abc"))
    assert j.lease_block(bid, "s0", "me", 60)
    assert not j.lease_block(bid, "s1", "me", 60)  # never dispatched twice
    assert j.record_block(_result(bid, exp.id))
    assert not j.record_block(_result(bid, exp.id, value=99.0))
    runs = j.runs(exp.id)
    assert len(runs) == 4 and runs[0].metrics == {"m": 2.0}


def test_peek_count_reads_a_live_journal_file_without_opening_it(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    assert peek_count(path, "finished") is None  # no journal yet
    j = Journal.open(path)
    done = j.add_experiment(Candidate("abc", params={"x": 1}))
    j.add_experiment(Candidate("abc", params={"x": 2}))
    bid = j.add_block(done.id, BlockKind.COMPARE, "ABBA", Incumbent("abc"))
    assert j.lease_block(bid, "s0", "me", 60) and j.record_block(_result(bid, done.id))
    j.set_state(done.id, ExperimentState.DISCARDED)
    assert peek_count(path, "finished") == 1  # while the writer holds it open
    assert peek_count(path, "runs", done.id) == 4
    assert peek_count(path, "runs", "e0002") == 0
    j.close()
    (tmp_path / "junk.sqlite").write_text("not a database")
    assert peek_count(tmp_path / "junk.sqlite", "finished") is None


def test_finished_state_is_final(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    exp = j.add_experiment(Candidate("abc", params={"x": 1}))
    j.set_state(exp.id, ExperimentState.KEPT)
    with pytest.raises(JournalError, match="already kept"):
        j.set_state(exp.id, ExperimentState.DISCARDED)


def test_listings_leave_the_patch_text_in_the_journal(tmp_path: Path) -> None:
    """Listing calls (a page of `assay log`, the dashboard's rows, status) do not read the
    patches; one experiment (`assay show`, the loop's own reads) does."""
    from assay.export import experiment_dict

    j = _journal(tmp_path)
    patch = "--- a/k.py\n+++ b/k.py\n@@ -1 +1 @@\n-X = 1\n+X = 2\n"
    with_patch = j.add_experiment(Candidate("abc", patch=patch, hypothesis="edit"))
    j.add_experiment(Candidate("abc", params={"x": 1}, hypothesis="sweep"))
    listed = {e.id: e for e in j.experiments(patches=False)}
    assert listed.keys() == {"e0001", "e0002"}
    assert not listed["e0001"].patch_loaded and listed["e0001"].candidate.patch == ""
    assert listed["e0001"].patch_chars == len(patch) and listed["e0001"].has_patch
    assert listed["e0002"].patch_chars == 0 and not listed["e0002"].has_patch
    page = j.experiment_page(1, 0, newest_first=True)
    assert [e.id for e in page] == ["e0002"] and not page[0].patch_loaded
    assert [e.patch_loaded for e in j.changed_since(0.0)] == [False, False]
    row = experiment_dict(j, listed["e0001"])
    assert row["patch"] is None and row["patch_chars"] == len(patch)
    one = j.experiment(with_patch.id)
    assert one is not None and one.patch_loaded and one.candidate.patch == patch
    assert [e.candidate.patch for e in j.experiments()] == [patch, ""]  # the default reads it
    assert experiment_dict(j, one)["patch"] == patch


def test_stale_leases_are_requeued_and_partial_runs_dropped(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    exp = j.add_experiment(Candidate("abc", params={"x": 1}))
    bid = j.add_block(exp.id, BlockKind.COMPARE, "ABBA", Incumbent("abc"))
    j.lease_block(bid, "s0", "dead-owner", ttl_s=-1)
    with j.tx():
        j.conn.execute("INSERT INTO runs (id, block_id, experiment_id, role, idx, status, metrics,"
                       " holdout, reason, exit_code, wall_s, stdout_path, stderr_path, slot,"
                       " created_at) VALUES ('x', ?, ?, 'A', 1, 'ok', '{}', '{}', '', 0, 0, '',"
                       " '', 's0', 0)", (bid, exp.id))
    assert j.requeue_stale() == [bid]
    assert j.blocks(exp.id)[0].state is BlockState.QUEUED
    assert j.runs(exp.id) == []


def test_failed_transaction_leaves_nothing(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    with pytest.raises(sqlite3.IntegrityError), j.tx():
        j.add_experiment(Candidate("abc", params={"x": 1}))
        j.conn.execute("INSERT INTO experiments (id) VALUES ('broken')")
    assert j.experiments() == []


def test_hypotheses_dedup_and_status(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    a = j.add_hypothesis("fuse rms_norm and mul", ["ggml-cuda/norm.cu:10"], "backend", 2.0)
    assert j.add_hypothesis("fuse rms_norm and mul", [], "backend") == a
    b = j.add_hypothesis("prefetch", [], "profile", 1.0)
    assert [h.id for h in j.hypotheses()] == [a, b]
    exp = j.add_experiment(Candidate("abc", patch="diff", hypothesis="x", hypothesis_id=a))
    assert exp.candidate.hypothesis_id == a
    assert j.hypotheses("testing")[0].id == a


def test_block_noise_lives_on_its_block_and_an_older_journal_moves_it_there(
        tmp_path: Path) -> None:
    """Each block's noise is a column (it was one meta entry holding every block, rewritten
    after each block); migration 0008 moves a journal's old entry into the column."""
    import json

    from assay.journal import seal

    path = _filled(tmp_path)
    j = Journal.open(path)
    bid = j.blocks()[0].id
    assert j.blocks()[0].noise is None
    j.set_block_noise(bid, 0.031)
    assert j.blocks("e0001")[0].noise == pytest.approx(0.031)
    j.close()
    # The same file as migration 0007 left it: no column, the noise in meta.
    con = sqlite3.connect(path, isolation_level=None)
    key = seal.read_key(path)
    assert key is not None
    seal.install(con, key)
    con.execute("ALTER TABLE blocks DROP COLUMN noise")
    con.execute("DELETE FROM migrations WHERE name = '0008_block_noise'")
    con.execute("INSERT INTO meta (key, value) VALUES ('block_noise', ?)",
                (json.dumps({bid: 0.042, "b-gone": 0.5}),))
    con.close()
    j = Journal.open(path)
    try:
        assert j.blocks("e0001")[0].noise == pytest.approx(0.042)
        assert j.get_meta("block_noise") is None
    finally:
        j.close()
    Journal.open(path, readonly=True).close()  # the seals still hold


def _with_plan(j: Journal, table: str, call: Callable[[], T]) -> tuple[T, str]:
    """What ``call`` returns, and SQLite's query plan of the one query it ran on ``table``."""
    seen: list[str] = []
    j.conn.raw.set_trace_callback(seen.append)
    try:
        out = call()
    finally:
        j.conn.raw.set_trace_callback(None)
    [sql] = [q for q in seen if f"FROM {table}" in q]
    return out, " ".join(str(r[3]) for r in j.conn.execute("EXPLAIN QUERY PLAN " + sql))


def test_lookups_by_experiment_use_the_experiment_index(tmp_path: Path) -> None:
    """One experiment's blocks in some state are found through its own index, not through
    the state index (every done block of the journal: the loop's cost grew with it)."""
    j = _journal(tmp_path)
    for _ in range(3):
        exp = j.add_experiment(Candidate("abc", params={"x": j.count_experiments()}))
        bid = j.add_block(exp.id, BlockKind.COMPARE, "ABBA", Incumbent("abc"))
        assert j.lease_block(bid, "s0", "me", 60) and j.record_block(_result(bid, exp.id))
    found, plan = _with_plan(j, "blocks", lambda: j.blocks("e0002", (BlockState.DONE,)))
    assert [b.state for b in found] == [BlockState.DONE]
    assert "blocks_experiment" in plan and "blocks_state" not in plan, plan
    j.close()


def test_changed_since_searches_the_updated_index_and_returns_seq_order(
        tmp_path: Path) -> None:
    """The dashboard's update reads the experiments written after a time: through the
    updated_at index (an ORDER BY seq made SQLite walk every row), still in seq order."""
    j = _journal(tmp_path)
    for k in range(4):
        j.add_experiment(Candidate("abc", params={"x": k}))
    mark = time.time()
    time.sleep(0.01)
    for exp_id in ("e0004", "e0002"):  # written newest first
        j.set_state(exp_id, ExperimentState.DISCARDED)
    changed, plan = _with_plan(j, "experiments", lambda: j.changed_since(mark))
    assert [e.id for e in changed] == ["e0002", "e0004"]
    assert "experiments_updated" in plan, plan
    j.close()


def test_readonly_open_of_missing_journal(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="no journal"):
        Journal.open(tmp_path / "none.sqlite", readonly=True)


def test_a_journal_of_the_first_schema_is_migrated_to_slot_names(tmp_path: Path) -> None:
    """tests/data/journal-0001.sqlite was written by assay before migration 0002 (a block
    measured on slot s1, which was then quarantined): its stored names move to 'slot'."""
    import shutil

    path = tmp_path / "journal.sqlite"
    shutil.copy(Path(__file__).parent / "data" / "journal-0001.sqlite", path)
    old = sqlite3.connect(path)
    assert {r[0] for r in old.execute("SELECT name FROM sqlite_master")} >= {"workers"}
    old.close()
    # A reader (assay status) on the old file sees the new names too.
    ro = Journal.open(path, readonly=True)
    assert [s.name for s in ro.slots()] == ["s1"]
    ro.close()
    j = Journal.open(path)
    assert j.migrate() == []  # already brought forward by the reader
    names = {r[0] for r in j.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "slots" in names and "workers" not in names
    [slot] = j.slots()
    assert (slot.name, slot.gpus, slot.quarantined, slot.reason) == (
        "s1", (0,), True, "noisier than its peers")
    runs = j.runs("e0001")
    assert [r.slot for r in runs] == ["s1"] * 4 and runs[0].metrics == {"speed": 101.0}
    [block] = j.blocks("e0001")
    assert block.state is BlockState.DONE and block.slot == "s1"
    assert block.incumbent == Incumbent("c0ffee", {"SIZE": 32})
    assert [h.key for h in j.hooks()] == ["on_experiment:e0001"]
    # the journal sealed with a new key, which the events say
    assert [e.kind for e in j.events()] == ["start", "journal"]
    # New writes use the new names.
    j.set_slot("s2", "localhost", (), 0.01)
    assert [s.name for s in j.slots()] == ["s1", "s2"]
    j.close()


def _filled(tmp_path: Path) -> Path:
    j = _journal(tmp_path)
    exp = j.add_experiment(Candidate("abc", params={"x": 1}, hypothesis="h"))
    bid = j.add_block(exp.id, BlockKind.COMPARE, "ABBA", Incumbent("abc"))
    assert j.lease_block(bid, "s0", "me", 60)
    assert j.record_block(_result(bid, exp.id))
    j.event("note", "one event", exp.id)
    j.set_state(exp.id, ExperimentState.DISCARDED, note="no gain")
    j.set_incumbent(Incumbent("abc"))
    j.close()
    return tmp_path / "j.sqlite"


def _other_client(path: Path, *statements: str) -> None:
    """Write with a plain SQLite connection, as any tool other than assay would."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        for sql in statements:
            con.execute(sql)
    finally:
        con.close()


def test_writes_by_another_sqlite_client_fail(tmp_path: Path) -> None:
    path = _filled(tmp_path)
    with pytest.raises(sqlite3.OperationalError, match="assay_seal"):
        _other_client(path, "UPDATE runs SET metrics = '{\"m\": 1e9}'")
    with pytest.raises(sqlite3.OperationalError, match="assay_seal"):
        _other_client(path, "DELETE FROM events")
    Journal.open(path).close()  # nothing changed: it opens


@pytest.mark.parametrize("statements,needle", [
    (["UPDATE runs SET metrics = '{\"m\": 1e9}' WHERE idx = 1"],
     "runs row 'e0001-b1-r1' does not match its seal"),
    (["DELETE FROM runs WHERE idx = 2"], "runs row 'e0001-b1-r2' was deleted"),
    (["UPDATE experiments SET state = 'kept'"], "experiments row 'e0001' does not match"),
    (["INSERT INTO events (ts, kind, message, data) VALUES (0, 'x', 'forged', '{}')"],
     "events row '2' has no seal"),
    (["UPDATE meta SET value = '\"forged\"'"], "meta row"),
])
def test_a_journal_changed_outside_assay_is_refused_at_open(
        tmp_path: Path, statements: list[str], needle: str) -> None:
    path = _filled(tmp_path)
    drop = [f"DROP TRIGGER {name}" for name in sorted(seal_triggers())]
    recreate = [r[0] for r in sqlite3.connect(path).execute(
        "SELECT sql FROM sqlite_master WHERE type = 'trigger'")]
    # the tamperer removes the triggers, edits, and puts the triggers back
    _other_client(path, *drop, *statements, *recreate)
    for readonly in (False, True):
        with pytest.raises(JournalError, match="changed outside assay") as info:
            Journal.open(path, readonly=readonly)
        assert needle in str(info.value)
        assert "restore the file from a backup" in str(info.value)


def test_removed_seal_triggers_are_refused_at_open(tmp_path: Path) -> None:
    path = _filled(tmp_path)
    _other_client(path, "DROP TRIGGER seal_runs_update")
    with pytest.raises(JournalError, match="seal triggers were removed"):
        Journal.open(path, readonly=True)


def test_the_cli_reports_a_tampered_journal_in_one_line(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = tmp_path / "repo"
    root.mkdir()
    (root / "assay.toml").write_text('[metric]\nname = "m"\n[commands]\nbench = "true"\n'
                                     '[scope]\neditable = ["*.py"]\n')
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    state = root / ".assay"
    state.mkdir()
    path = _filled(state)
    path.rename(state / "journal.sqlite")
    Path(f"{path}-key").rename(state / "journal.sqlite-key")  # the key goes with it
    journal = state / "journal.sqlite"
    _other_client(journal, "DROP TRIGGER seal_runs_update",
                  "UPDATE runs SET metrics = '{}'")
    r = subprocess.run([sys.executable, "-c", "from assay.cli.app import main; main()", "status",
                        "-C", str(root)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "COLUMNS": "40"})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert "changed outside assay" in r.stderr or "seal triggers" in r.stderr


def test_seals_are_recomputed_only_when_another_client_wrote(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """assay's own writes record the file state they leave: a fresh process opening the
    journal in that state skips recomputing every seal (a cost that grows with the
    journal); a write by any other client changes the state and the next open checks all."""
    from assay.journal import seal

    path = _filled(tmp_path)
    calls: list[int] = []
    real = seal.digest

    def counting(*values: object) -> str:
        calls.append(1)
        return real(*values)

    monkeypatch.setattr(seal, "digest", counting)
    seal._VERIFIED.clear()  # as in a new process
    Journal.open(path, readonly=True).close()
    assert calls == []  # the state assay left: no row recomputed
    j = Journal.open(path)  # a writer's commit records the new state again
    j.event("note", "two")
    j.close()
    calls.clear()  # the trigger sealed the new row
    seal._VERIFIED.clear()
    Journal.open(path, readonly=True).close()
    assert calls == []
    _other_client(path, "CREATE TABLE notes (x)")  # harmless, but not assay's
    seal._VERIFIED.clear()
    Journal.open(path, readonly=True).close()
    assert len(calls) > 5  # every sealed row recomputed (and all still match)


def test_reads_and_sealed_writes_from_two_threads_never_wait_for_each_other(
        tmp_path: Path) -> None:
    """A hook thread writes events (the seal triggers call back into Python) while the loop
    reads with bound parameters: on one shared connection the two could wait for each other
    for ever (each holding what the other needs). Both must finish."""
    import threading

    from assay.model import BlockState

    j = Journal.open(tmp_path / "journal.sqlite")
    j.check_seals()
    done = threading.Event()

    def writer() -> None:
        for i in range(3000):
            j.event("hook", f"message {i}")
        done.set()

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    reads = 0
    while not done.is_set() and reads < 200_000:
        j.count_blocks((BlockState.QUEUED, BlockState.RUNNING))
        j.get_meta("incumbent")
        reads += 1
    t.join(timeout=120)
    try:
        assert not t.is_alive(), "the writer and the reader are waiting for each other"
        assert len(j.events(limit=5000)) == 3000
    finally:
        if not t.is_alive():
            j.close()


def test_meta_records_written_by_an_older_assay_read_typed(tmp_path: Path) -> None:
    """The meta records keep the JSON older journals hold: written raw, they read typed,
    and written typed, they read back raw as before."""
    j = _journal(tmp_path)
    cal = {"noise": {"s0": 0.01}, "pooled": 0.01, "delta": 0.02, "quarantined": {},
           "message": "calibrated"}  # an older calibration: no samples, baseline, regime
    j.set_meta("calibration", cal)
    j.set_meta("sessions", [{"n": 1, "name": "main", "started": 1.0, "user_head": "abc",
                             "incumbent": "abc", "experiments_before": 0}, "junk"])
    j.set_meta("stop_rule", {"kind": "cap", "reason": "spent"})
    j.set_meta("delta_steps", [{"block": "cal", "slot": "", "old": 0.01, "new": 0.02,
                                "why": "noisy"}])
    j.set_meta("noise_recent", [["s0", 0.5]])
    record = j.calibration()
    assert record is not None and record.noise == {"s0": 0.01} and record.delta == 0.02
    assert record.baseline is None and record.samples == {}
    assert [(s.n, s.name, s.ended) for s in j.sessions()] == [(1, "main", None)]
    stop = j.stop_rule()
    assert stop is not None and (stop.kind, stop.reason, stop.session) == ("cap", "spent", "")
    assert [(d.block, d.old, d.new) for d in j.delta_steps()] == [("cal", 0.01, 0.02)]
    assert j.noise_recent() == [("s0", 0.5)]
    assert j.run_name() is None and j.base_commit() is None and j.verification() is None
    j.set_calibration(record)
    assert {k: v for k, v in j.get_meta("calibration").items() if k in cal} == cal
    j.set_noise_recent(j.noise_recent())
    assert j.get_meta("noise_recent") == [["s0", 0.5]]
    j.set_stop_rule(None)
    assert j.stop_rule() is None
    j.close()
