"""benchmarks/karpathy/side_by_side.py: the table of both programs' means, the interleaved
plan of runs spread over calls, and TIME_BUDGET held at 300 s for a given train.py."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "karpathy" / "side_by_side.py"


@pytest.fixture(scope="module")
def sbs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("side_by_side", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["side_by_side"] = mod
    spec.loader.exec_module(mod)
    return mod


def _rec(program: str, bpb: float, mfu: float, started: str) -> dict[str, Any]:
    return {"program": program, "val_bpb": bpb, "mfu_palm": mfu, "mfu_causal": mfu - 8,
            "tokens_per_second": 1.0e6, "steps": 1000, "tokens_M": 400.0, "startup_s": 70.0,
            "peak_vram_mb": 50_000.0, "cache": "empty", "started": started}


def test_the_table_shows_means_and_the_order_of_the_runs(
        sbs: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    gpts = [_rec("gpt", 0.566, 50.0, "2026-12-08T10:00:00"),
            _rec("gpt", 0.568, 50.4, "2026-12-08T10:14:00")]
    kars = [_rec("karpathy", 0.575, 47.0, "2026-12-08T10:07:00"),
            _rec("karpathy", 0.573, 47.6, "2026-12-08T10:21:00")]
    assert sbs.table(gpts, kars) is True
    out = capsys.readouterr().out
    assert ("side-by-side 300s: examples/gpt val_bpb 0.567000 mfu_palm 50.20; karpathy "
            "val_bpb 0.574000 mfu_palm 47.30\n") in out
    assert "in the order they started: g k g k (g examples/gpt, k karpathy); " \
           "interleaved: True" in out
    assert "examples/gpt's val_bpb by run: 0.566000, 0.568000" in out
    assert out.rstrip().endswith("PASS")
    # karpathy's second run before examples/gpt's: not interleaved, and a higher mean loses
    kars[1]["started"] = "2026-12-08T10:10:00"
    gpts[1]["val_bpb"] = 0.590
    assert sbs.table(gpts, kars) is False
    out = capsys.readouterr().out
    assert "g k k g" in out and "interleaved: False" in out
    assert out.rstrip().endswith("FAIL")


def test_the_table_needs_both_programs(sbs: ModuleType) -> None:
    with pytest.raises(SystemExit, match="0 of karpathy"):
        sbs.table([_rec("gpt", 0.5, 50.0, "")], [])


def test_the_plan_alternates_and_skips_what_is_recorded(sbs: ModuleType) -> None:
    assert sbs.round_plan([], 2) == ["g1", "k1", "g2", "k2"]
    assert sbs.round_plan(["g1", "k1"], 2) == ["g2", "k2"]
    assert sbs.round_plan(["g1", "k1", "g2", "k2"], 2) == []
    assert sbs.round_plan(["g1"], 3) == ["k1", "g2", "k2", "g3", "k3"]


def test_rounds_start_no_run_that_cannot_end_in_the_call(
        sbs: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kar = tmp_path / "train.py"
    kar.write_text("print('never run here')\n")
    folder = tmp_path / "records"
    folder.mkdir()
    (folder / "g1.json").write_text(json.dumps(_rec("gpt", 0.566, 50.0, "t1")))
    code = sbs.rounds(folder, kar, None, 2, seconds=100.0, knobs={})
    assert code == 3
    assert "3 run(s) left (k1 g2 k2)" in capsys.readouterr().out
    assert sorted(p.name for p in folder.iterdir()) == ["g1.json"]


def test_rounds_print_the_table_once_every_run_is_recorded(
        sbs: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kar = tmp_path / "train.py"
    kar.write_text("print('never run here')\n")
    folder = tmp_path / "records"
    folder.mkdir()
    for name, rec in (("g1", _rec("gpt", 0.566, 50.0, "t1")),
                      ("k1", _rec("karpathy", 0.575, 47.0, "t2"))):
        (folder / f"{name}.json").write_text(json.dumps(rec))
    assert sbs.rounds(folder, kar, None, 1, seconds=0.0, knobs={}) == 0
    assert "side-by-side 300s: examples/gpt val_bpb 0.566000" in capsys.readouterr().out


def test_a_given_train_py_runs_at_300_s(sbs: ModuleType) -> None:
    committed = (SCRIPT.parents[2] / "examples" / "gpt" / "train.py").read_text()
    assert sbs.at_budget(committed) == (committed, None)  # already 300: left byte for byte
    short = sbs.rewrite(committed, {"TIME_BUDGET": "30.0"})
    fixed, was = sbs.at_budget(short)
    assert was == "30.0"
    assert "\nTIME_BUDGET = 300.0\n" in fixed and "TIME_BUDGET = 30.0" not in fixed
    with pytest.raises(SystemExit, match="no line `TIME_BUDGET"):
        sbs.at_budget("x = 1\n")
