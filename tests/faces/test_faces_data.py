"""Page data from a journal made by a real loop: rows, progress, win rates, cost, logs."""

from __future__ import annotations

import json
from pathlib import Path

from assay import api
from assay.faces import data


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
    json.loads(data.dumps(st))


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
