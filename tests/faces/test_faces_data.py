"""Page data from a journal made by a real loop: rows, progress, win rates, cost, logs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from assay import api
from assay.faces import data
from assay.faces.terminal import improvement
from assay.loop.sessions import holding_branch
from assay.model import Direction
from assay.strictjson import dumps


def _status(root: Path) -> dict:
    target = api.load(root)
    journal = data.open_readonly(target)
    assert journal is not None
    try:
        return data.status_data(target, journal)
    finally:
        journal.close()


def test_rows_states_and_values(ran_target: Path) -> None:
    st = _status(ran_target)
    rows = st["experiments"]
    assert [r["id"] for r in rows] == [f"e000{i}" for i in range(1, 7)]
    assert [r["state"] for r in rows] == ["kept", "discarded", "crashed", "invalid", "kept",
                                          "kept"]
    assert st["counts"] == {"kept": 3, "discarded": 1, "crashed": 1, "invalid": 1}
    assert rows[0]["source_kind"] == "paper" and rows[2]["source_kind"] == "none"
    assert rows[0]["effect"] > 0.5 and rows[1]["effect"] < -0.5
    assert st["baseline"] is not None and st["best"] > 5 * st["baseline"]
    # JSON-safe (no NaN) and round-trips.
    json.loads(dumps(st))


def test_the_dashboard_and_status_give_the_same_progress(ran_target: Path) -> None:
    """Counts, baseline and best have one owner: the overview page shows what
    `assay status` says, and its improvement is positive when the best is better."""
    st = _status(ran_target)
    status = api.status(ran_target)
    assert st["counts"] == status["counts"]
    assert (st["baseline"], st["best"]) == (status["baseline"], status["best"])
    assert st["improvement"] == improvement(status["baseline"], status["best"],
                                            Direction(status["direction"]))
    assert st["improvement"] > 0
    # Read as a time to minimize, the same values are a loss: the sign follows the direction.
    target = api.load(ran_target)
    flipped = dataclasses.replace(target, metric=dataclasses.replace(
        target.metric, direction=Direction.MINIMIZE))
    journal = data.open_readonly(target)
    assert journal is not None
    try:
        low = data.status_data(flipped, journal)
    finally:
        journal.close()
    assert low["improvement"] == pytest.approx(status["baseline"] / status["best"] - 1.0)
    assert low["improvement"] < 0


def test_progress_running_best_and_band(ran_target: Path) -> None:
    st = _status(ran_target)
    prog = st["progress"]
    assert len(prog["points"]) == 6
    best = prog["best"]
    # Starts at the baseline, steps at each kept experiment, runs to the last one.
    assert best["x"] == [0, 1, 5, 6]
    assert best["y"][0] == st["baseline"] and best["y"][-1] == st["best"]
    assert all(b >= a for a, b in zip(best["y"], best["y"][1:], strict=False))
    crashed = next(p for p in prog["points"] if p["state"] == "crashed")
    assert not crashed["measured"] and crashed["y"] == best["y"][1]
    band = prog["band"]
    assert band is not None and band["noise"] > 0
    assert all(lo < y < hi for lo, y, hi in zip(band["lower"], best["y"], band["upper"],
                                                strict=True))


def test_win_rates_and_cost(ran_target: Path) -> None:
    st = _status(ran_target)
    by_prop = {g["name"]: g for g in st["win_rates"]["proposer"]}
    assert by_prop["llm"]["kept"] == 2 and by_prop["llm"]["finished"] == 3
    assert by_prop["sweep"]["win_rate"] == 1 / 3
    by_kind = {g["name"]: g for g in st["win_rates"]["source_kind"]}
    assert by_kind["paper"]["win_rate"] == 1.0 and by_kind["fork"]["win_rate"] == 0.0
    assert by_kind["none"]["finished"] == 3
    cost = st["cost"]
    assert cost["kept"] == 3
    assert cost["tokens"] == 1200 + 300 + 900 + 250 + 2000 + 500
    assert abs(cost["cost_usd"] - 0.051) < 1e-9
    assert abs(cost["cost_usd_per_kept"] - 0.017) < 1e-9
    assert (cost["tokens"], cost["cost_usd"]) == (st["spend"]["tokens"], st["spend"]["usd"])
    rows = {r["id"]: r for r in st["experiments"]}
    assert (rows["e0001"]["tokens_in"], rows["e0001"]["tokens_out"]) == (1200, 300)
    assert rows["e0005"]["cost_usd"] == pytest.approx(0.03)
    assert rows["e0003"]["tokens_in"] == 0 and rows["e0003"]["cost_usd"] == 0
    # One GPU per slot: GPU-hours equal the summed run wall time (calibration included).
    assert cost["gpu_hours"] > 0 and abs(cost["gpu_hours"] - cost["run_hours"]) < 1e-12
    target = api.load(ran_target)
    journal = api.open_journal(target, readonly=True)
    try:
        wall = sum(r.wall_s for r in journal.runs())
    finally:
        journal.close()
    assert abs(cost["gpu_hours"] - wall / 3600) < 1e-9


def test_experiment_detail_has_logs_diff_and_decision(ran_target: Path) -> None:
    target = api.load(ran_target)
    journal = api.open_journal(target, readonly=True)
    try:
        crashed = data.experiment_data(target, journal, "e0003")
        patched = data.experiment_data(target, journal, "e0005")
        assert data.experiment_data(target, journal, "e0999") is None
    finally:
        journal.close()
    assert crashed is not None and patched is not None
    assert any("boom: SIZE 13" in (r["stderr"] or "") for r in crashed["runs"])
    assert all(not r["stdout_path"].startswith("/") for r in crashed["runs"])
    assert "+BONUS = 1.5" in patched["patch"]
    assert patched["decisions"][-1]["verdict"] == "keep"
    assert patched["source_kind"] == "profile"
    assert patched["cost"]["tokens_in"] == 2000
    journal = api.open_journal(target, readonly=True)
    try:
        details = data.report_data(target, journal)["details"]
    finally:
        journal.close()
    model = ("tokens_in", "tokens_out", "cost_usd")
    assert [details["e0005"]["cost"][k] for k in model] == [patched["cost"][k] for k in model]
    assert (details["e0001"]["cost"]["tokens_out"], details["e0003"]["cost"]["cost_usd"]) == (
        300, 0)
    assert patched["prev"] == "e0004" and patched["next"] == "e0006"
    assert any("METRIC speed=" in (r["stdout"] or "") for r in patched["runs"])


def test_tail_keeps_the_end(tmp_path: Path) -> None:
    f = tmp_path / "big.log"
    f.write_text("x" * 10_000 + "THE END")
    text = data.tail(f, 100)
    assert text is not None and text.endswith("THE END") and len(text) <= 101
    assert data.tail(tmp_path / "missing.log") is None


def test_status_without_journal(tmp_path: Path) -> None:
    from .conftest import make_target

    root = make_target(tmp_path / "empty")
    target = api.load(root)
    st = data.status_data(target, data.open_readonly(target))
    assert st["experiments"] == [] and st["journal"] is False
    assert st["lock"]["running"] is False


def test_noise_per_block_follows_delta_and_marks_quarantines(ran_target: Path,
                                                             tmp_path: Path) -> None:
    import shutil

    from assay.journal.store import Journal

    target = api.load(ran_target)
    copy = tmp_path / "journal.sqlite"
    shutil.copy(api.journal_path(target), copy)
    shutil.copy(f"{api.journal_path(target)}-key", f"{copy}-key")  # its seal key with it
    journal = Journal.open(copy)
    try:
        ends = sorted({float(x.finished_at or 0.0)
                       for x in journal.incumbent_samples("speed")})
        assert len(ends) >= 4
        # δ moved to 12.3% by a decision right after the first block; slot s0 quarantined
        # between the second and the third block.
        with journal.tx():
            journal.conn.execute(
                "INSERT INTO decisions (experiment_id, verdict, reason, pairs_used, runs_used, "
                "delta, rule, details, created_at) VALUES ('e0001', 'continue', 'x', 2, 4, "
                "0.123, 'fixed', '{}', ?)", (ends[0],))
            journal.conn.execute(
                "INSERT INTO events (ts, kind, message, data) VALUES (?, 'quarantine', "
                "'slot s0 quarantined: noise 30% is 5x the others', '{}')",
                ((ends[1] + ends[2]) / 2,))
        noise = data.noise_data(target, journal)
        deltas = [d.delta for ds in journal.decisions_of().values() for d in ds]
    finally:
        journal.close()
    d = noise["deltas"]
    assert d["x"] == list(range(1, noise["blocks"] + 1))
    assert d["y"][0] == 0.123 and 0.123 not in d["y"][1:]
    assert set(d["y"]) <= set(deltas) | {noise["delta"]}
    [q] = noise["quarantines"]
    assert q["slot"] == "s0" and q["x"] == 2 and q["reason"] == "noise 30% is 5x the others"
    s0 = next(s for s in noise["slots"] if s["slot"] == "s0")
    before = [v for x, v in zip(s0["x"], s0["noise"], strict=True) if x <= 2]
    assert q["y"] == (before[-1] if before else None)


def test_resources_leave_out_what_is_zero_by_construction() -> None:
    # A CPU project measured by a sweep: no GPU, no tokens, no money; only CPU time shows.
    used = data.resources({"kept": 2, "gpu_hours": 0.0, "cpu_seconds": 145.6, "tokens": 0,
                           "cost_usd": 0.0})
    assert [(r["key"], r["total"], r["per_kept"]) for r in used] == [
        ("cpu_seconds", 145.6, 72.8)]
    assert data.resources({"kept": 0, "tokens": 10, "cost_usd": 0.5})[0]["per_kept"] is None


def test_run_card_names_the_branch_that_holds_the_kept_commit(tmp_path: Path) -> None:
    import subprocess

    from .conftest import make_target, sh

    root = make_target(tmp_path / "repo")
    sh(root, "git", "branch", "assay/retry")
    head = sh(root, "git", "rev-parse", "HEAD").strip()
    target = api.load(root)
    assert holding_branch(target.root, head, "assay/main") == "assay/retry"
    sh(root, "git", "branch", "assay/main")
    assert holding_branch(target.root, head, "assay/main") == "assay/main"  # its own, when both
    assert holding_branch(target.root, None, "assay/main") == "assay/main"
    subprocess.run(["git", "branch", "-D", "assay/main", "assay/retry"], cwd=root, check=True,
                   capture_output=True)
    assert holding_branch(target.root, head, "assay/main") == "assay/main"


def test_a_conflict_is_finished_in_the_win_rates_and_drawn_without_a_value() -> None:
    rows = [{"id": "e0001", "seq": 1, "state": "conflict", "proposer": "queue", "value": None,
             "incumbent_value": 10.0, "effect": 0.2, "lo": 0.1, "hi": 0.3,
             "hypothesis": "h"}]  # decided, then in conflict with a newer incumbent
    rate = data.win_rates(rows, "proposer")[0]
    assert rate["finished"] == 1 and rate["conflict"] == 1 and rate["win_rate"] == 0
    assert "conflict" in data.FINISHED
    point = data.progress(rows, 10.0, None)["points"][0]
    assert point["y"] == 10.0 and not point["measured"]  # drawn at the best of its time
