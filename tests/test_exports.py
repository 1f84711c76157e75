"""Exports read back the way the other tools read them.

JSONL: pi-autoresearch's loader (``reconstructJsonlState`` in its ``jsonl.ts``): lines are
parsed one by one; an object with ``type == "config"`` sets the name, metric and direction;
an object whose ``run`` is a number is a run, its fields taken only when they have the
loader's types (``metric`` a number, ``metrics`` an object of numbers, ``status`` one of
keep/discard/crash/checks_failed, anything else read as keep). TSV: pandas, as karpathy's
analysis notebook reads ``results.tsv``.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from assay import api
from assay.export import pi_status, status
from assay.faces.data import status_data
from assay.journal.store import Journal
from assay.model import Candidate, Experiment, ExperimentState

from .conftest import TinyFactory, git, patch_work

PI_STATUSES = ("keep", "discard", "crash", "checks_failed")


def pi_load(text: str) -> dict[str, Any]:
    """pi-autoresearch's JSONL reconstruction, field for field."""
    state: dict[str, Any] = {"name": None, "metricName": "metric", "metricUnit": "",
                             "bestDirection": "lower", "results": [], "configs": 0}
    for line in filter(None, text.split("\n")):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        if entry.get("type") == "config":
            state["configs"] += 1
            for key in ("name", "metricName", "metricUnit"):
                if isinstance(entry.get(key), str):
                    state[key] = entry[key]
            state["bestDirection"] = "higher" if entry.get("bestDirection") == "higher" \
                else "lower"
            continue
        run = entry.get("run")
        if not isinstance(run, (int, float)) or isinstance(run, bool):
            continue
        metrics = entry.get("metrics")
        status = entry.get("status")
        state["results"].append({
            "run": run,
            "commit": entry["commit"] if isinstance(entry.get("commit"), str) else "",
            "metric": entry["metric"] if isinstance(entry.get("metric"), (int, float)) else 0,
            "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
            if isinstance(metrics, dict) else {},
            "status": status if status in PI_STATUSES else "keep",
            "raw_status": status,
            "description": entry["description"] if isinstance(entry.get("description"), str)
            else "",
            "timestamp": entry["timestamp"] if isinstance(entry.get("timestamp"), (int, float))
            else 0,
            "confidence": entry["confidence"]
            if isinstance(entry.get("confidence"), (int, float)) else None,
            "segment": entry["segment"] if isinstance(entry.get("segment"), int) else 0,
            "keys": set(entry),
        })
    return state


def _journal(tiny_target: TinyFactory, memory: str = "mem_kb", aa_blocks: int = 0) -> Path:
    checks = "import sys, work\nsys.exit(1 if work.WORK == 12345 else 0)\n"
    root = tiny_target(work=300_000, budget=3, pairs=4,
                       extra='[proposer.queue]\npath = "patches"\n', files={"checks.py": checks})
    for name in ("bench.py", "assay.toml"):  # the memory guard's name (its unit at the end)
        (root / name).write_text((root / name).read_text().replace("mem_kb", memory))
    cfg = (root / "assay.toml").read_text().replace(
        "bench_timeout = 30", f'bench_timeout = 30\nchecks = "{sys.executable} checks.py"')
    cfg = cfg.replace('protected = ["bench.py"]', 'protected = ["bench.py", "checks.py"]')
    cfg = cfg.replace("aa_blocks = 0", f"aa_blocks = {aa_blocks}")
    (root / "assay.toml").write_text(cfg)
    git(root, "commit", "-qam", "checks")
    folder = root / "patches"
    folder.mkdir()
    for name, hyp, work in (("1.patch", "four times the work", 1_200_000),
                            ("2.patch", "breaks the checks", 12345),
                            ("3.patch", "a tenth of the work", 30_000)):
        (folder / name).write_text(f"# hypothesis: {hyp}\n{patch_work(root, work)}")
    api.run(root, proposer="queue")
    return root


def test_jsonl_export_loads_in_pi_autoresearch(tiny_target: TinyFactory) -> None:
    root = _journal(tiny_target, aa_blocks=2)  # a calibrated noise floor
    state = pi_load(api.export("jsonl", root))
    assert state["configs"] == 1
    assert (state["metricName"], state["bestDirection"]) == ("speed", "higher")
    runs = state["results"]
    assert [r["run"] for r in runs] == [1, 2, 3, 4]  # every run loaded, the baseline first
    assert [r["raw_status"] for r in runs] == ["keep", "discard", "checks_failed", "keep"]
    assert runs[0]["description"] == "baseline" and runs[0]["metric"] > 0
    assert all(r["timestamp"] > 1e12 for r in runs)  # milliseconds, as Date.now()
    need = {"run", "commit", "metric", "metrics", "status", "description", "timestamp",
            "segment", "confidence"}
    assert all(need <= r["keys"] for r in runs), [sorted(need - r["keys"]) for r in runs]
    assert {r["segment"] for r in runs} == {0}  # one config header: one segment
    assert all("mem_kb" in r["metrics"] for r in runs if r["raw_status"] != "checks_failed")
    kept = runs[3]
    assert kept["commit"] and kept["metric"] > runs[0]["metric"] * 3
    assert runs[1]["metric"] < runs[0]["metric"]  # the slower one shows slower
    # confidence is pi's "best improvement over the noise floor": nothing before a keep
    # (a discard's own effect is no evidence that anything is real), then the keep's
    assert [r["confidence"] for r in runs[:3]] == [None, None, None]
    journal = Journal.open(root / ".assay" / "journal.sqlite", readonly=True)
    noise = journal.get_meta("calibration")["pooled"]
    journal.close()
    effect = next(e for e in api.log(root) if e["state"] == "kept")["decision"]["effect"]
    assert kept["confidence"] == pytest.approx(effect / noise, rel=1e-3)


@pytest.mark.parametrize("memory", ["mem_kb", "peak_kb"])
def test_tsv_export_reads_as_karpathys_results(tiny_target: TinyFactory, memory: str) -> None:
    root = _journal(tiny_target, memory)
    df = pd.read_csv(io.StringIO(api.export("tsv", root)), sep="\t")
    assert list(df.columns) == ["commit", "speed", "memory_gb", "status", "description"]
    assert list(df["status"]) == ["keep", "discard", "crash", "keep"]
    assert df["description"][0] == "baseline"
    base, slower, broken, kept = (df.iloc[i] for i in range(4))
    # 100 KiB, found as memory by the guard's unit (the name's last word), in GiB
    assert base["memory_gb"] == pytest.approx(100 * 1024 / 1024 ** 3, rel=0.01)
    assert kept["memory_gb"] == pytest.approx(100 * 1024 / 1024 ** 3, rel=0.01)
    assert broken["speed"] == 0.0
    exp = {e["hypothesis"]: e for e in api.log(root)}
    d = exp["four times the work"]["decision"]
    # a discard shows its decided effect applied to the incumbent's value
    assert abs(slower["speed"] - d["details"]["incumbent_value"] * (1 + d["effect"])) < 1e-3
    assert slower["speed"] < base["speed"] < kept["speed"]


def test_the_baseline_and_a_discards_value_are_one_number_in_status_report_and_exports(
        tiny_target: TinyFactory) -> None:
    root = _journal(tiny_target, aa_blocks=2)  # calibrated: the baseline is its median
    st = api.status(root)
    df = pd.read_csv(io.StringIO(api.export("tsv", root)), sep="\t")
    pi = pi_load(api.export("jsonl", root))["results"]
    journal = Journal.open(root / ".assay" / "journal.sqlite", readonly=True)
    try:
        data = status_data(api.load(root), journal)
        cal = journal.get_meta("calibration")["baseline"]
    finally:
        journal.close()
    assert st["baseline"] == cal == data["baseline"]
    assert df["speed"][0] == pytest.approx(cal, rel=1e-6)
    assert pi[0]["metric"] == pytest.approx(cal, rel=1e-6)
    # the discarded candidate's value: the same in the report's table as in the exports
    table = {r["hypothesis"]: r["value"] for r in data["experiments"]}
    slower = df.iloc[1]
    assert slower["description"] == "four times the work"
    assert table["four times the work"] == pytest.approx(slower["speed"], rel=1e-6)


def test_a_conflict_exports_as_a_discard_in_either_form_a_journal_holds_it() -> None:
    j = Journal.memory()
    note = "conflict: work.py: the patch and the incumbent 0123456789ab change the same lines"

    def add(patch: str, state: ExperimentState, why: str) -> Experiment:
        return j.add_experiment(Candidate(base_commit="0" * 40, patch=patch, hypothesis="h"),
                                state, why)

    new = add("x", ExperimentState.CONFLICT, note)
    old = add("y", ExperimentState.INVALID, note)  # as journals before the conflict state
    broken = add("z", ExperimentState.INVALID, "patch does not apply")
    assert [status(e) for e in (new, old, broken)] == ["discard", "discard", "crash"]
    assert [pi_status(e) for e in (new, old)] == ["discard", "discard"]
