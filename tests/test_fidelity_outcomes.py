"""``[fidelity]``: each level's outcome is what happened there, and an experiment's figures
are read at the level its decision was made at.

The target is :mod:`tests.test_fidelity_loop`'s (speed scripted per ``CHOICE`` and
``BUDGET``), with a guard, ``mem_mb`` (minimize, 10% tolerance): 100 × ``BUDGET`` × a
factor per choice and level, so each level's memory is another quantity, as its speed is.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import assay
from assay import api
from assay.assemble import load
from assay.decision.agreement import agreement
from assay.export import render, rows
from assay.faces.data import experiment_data
from assay.model import SCREEN

from .conftest import git
from .test_fidelity_loop import Listed, by_hypothesis, journal, target

GUARD = """
[[guards]]
name = "mem_mb"
direction = "minimize"
tolerance = 0.10
"""


def guarded(tmp_path: Path, mem: dict[str, dict[int, float]], aa: int = 0,
            cheap_noise: float = 1) -> Path:
    """The target with the ``mem_mb`` guard: ``mem[choice][budget]`` is the factor (1.0
    when not given)."""
    root = target(tmp_path, aa=aa, cheap_noise=cheap_noise)
    factors = {c: {str(b): f for b, f in by.items()} for c, by in mem.items()}
    with (root / "bench.py").open("a") as f:
        f.write(f"MEM = {json.dumps(factors)}\n"
                "mem = 100 * int(budget) * MEM.get(choice, {}).get(budget, 1.0)\n"
                'print(f"METRIC mem_mb={mem:.4f}")\n')
    with (root / "assay.toml").open("a") as f:
        f.write(GUARD)
    git(root, "commit", "-qam", "a memory guard")
    return root


def test_a_keep_its_guard_discards_reads_discarded_at_that_level(tmp_path: Path) -> None:
    """x wins at both levels and its memory regresses at the decisive one only: the rule's
    verdict there is keep, but the guard discards it, and its outcome there is
    ``discarded``: the agreement between the levels counts it as reversed, not won."""
    root = guarded(tmp_path, {"x": {1: 1.0, 3: 1.5}})
    api.run(root, proposer_obj=Listed("x"))
    x = by_hypothesis(root)["use x"]
    xid = str(x["id"])
    assert x["state"] == "discarded"
    assert "guard mem_mb regressed by 50.00%" in str(x["note"])
    t = load(root)
    assert t.fidelity is not None
    j = journal(root)
    try:
        results = j.level_results()
        exps = j.experiments()
        last = j.decisions(xid)[-1]
    finally:
        j.close()
    assert last.verdict.value == "keep"  # the rule's verdict; the guard discarded it
    assert [(r.experiment_id, r.level, r.outcome) for r in results] == [
        (xid, 0, "promoted"), (xid, 1, "discarded")]
    there = results[1]
    assert there.effect is not None and there.effect > 0.05
    (pair,) = agreement(t.fidelity, results, exps).pairs
    assert (pair.promoted, pair.reached, pair.held) == (1, 1, 0)
    assert [r.experiment_id for r in pair.reversed] == [xid]
    assert pair.reversed[0].next_outcome == "discarded"


def test_a_guard_regression_at_a_cheap_level_stops_the_candidate_there(
        tmp_path: Path) -> None:
    """c wins at the cheap level but its memory regresses there: the screen does not
    promote it (a regression the next level need not confirm); it is stopped at that
    level, its note naming the level and the guard."""
    root = guarded(tmp_path, {"c": {1: 1.5, 3: 1.5}})
    api.run(root, proposer_obj=Listed("c"))
    c = by_hypothesis(root)["use c"]
    cid = str(c["id"])
    assert c["state"] == "discarded"
    note = str(c["note"])
    assert note.startswith("stopped at BUDGET=1: the effect is real but guard mem_mb "
                           "regressed by 50.00%"), note
    assert "not measured at BUDGET=3" in note
    j = journal(root)
    try:
        levels = {b.level for b in j.blocks(cid)}
        results = j.level_results()
        last = j.decisions(cid)[-1]
    finally:
        j.close()
    assert levels == {0}
    assert [(r.experiment_id, r.level, r.outcome) for r in results] == [(cid, 0, "stopped")]
    assert last.details[SCREEN] == "stopped" and last.effect is not None and last.effect > 0.2


def test_an_experiments_figures_are_those_of_its_decisions_level(tmp_path: Path) -> None:
    """x is kept at BUDGET=3 after its screen at BUDGET=1, where memory is a third: the
    guard table of `assay show` and of the report, the exports' memory and metrics and the
    baseline row use its runs at BUDGET=3 only; pi's confidence divides its gain by the
    noise measured at BUDGET=3, not at the noisier BUDGET=1."""
    root = guarded(tmp_path, {"x": {1: 1.0, 3: 0.95}}, aa=1, cheap_noise=20)
    api.run(root, proposer_obj=Listed("x"))
    x = by_hypothesis(root)["use x"]
    assert x["state"] == "kept"
    xid = str(x["id"])
    t = load(root)
    shown = api.show(xid, root)
    (guard,) = shown["guards"]
    assert guard["name"] == "mem_mb"
    assert math.isclose(guard["incumbent"], 300.0) and math.isclose(guard["candidate"], 285.0)
    assert math.isclose(guard["better"], 0.05)
    j = journal(root)
    try:
        assert [b.level for b in j.blocks(xid)] == [0, 0, 1, 1]
        detail = experiment_data(t, j, xid)
        data = {r["id"]: r for r in rows(j, t)}
        jsonl = [json.loads(ln) for ln in render(j, t, "jsonl").splitlines()[1:]]
        cal0, cal1 = j.calibration(0), j.calibration(1)
    finally:
        j.close()
    assert detail is not None and detail["guards"] == shown["guards"]  # report = show
    assert shown["guards_level"] == detail["guards_level"] == "BUDGET=3"
    env = {**os.environ, "COLUMNS": "250",
           "PYTHONPATH": str(Path(assay.__file__).resolve().parents[1])}
    cli = subprocess.run([sys.executable, "-m", "assay", "show", xid], cwd=root, env=env,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert "  guard at BUDGET=3 mem_mb 300 -> 285 (+5.00%" in cli.stdout, cli.stdout
    assert math.isclose(data[xid]["memory"], 285.0)
    assert data[xid]["metrics"] == {"mem_mb": data[xid]["memory"]}
    assert math.isclose(data["baseline"]["memory"], 300.0)
    assert data["baseline"]["metrics"] == {"mem_mb": data["baseline"]["memory"]}
    assert cal0 is not None and cal1 is not None
    assert cal0.pooled is not None and cal1.pooled is not None
    assert cal0.pooled > 4 * cal1.pooled
    row = next(r for r in jsonl if r["asi"]["assay_id"] == xid)
    effect = data[xid]["effect"]
    assert row["confidence"] == round(effect / cal1.pooled, 3)


HOLDOUT = """
import os

budget, choice = os.environ["BUDGET"], os.environ["CHOICE"]
quality = {"c": {"1": 0.5, "3": 0.5}}.get(choice, {}).get(budget, 1.0)
print(f"METRIC quality={100 * quality:.4f}")
"""


def test_a_holdout_regression_at_a_cheap_level_stops_the_candidate_unseen(
        tmp_path: Path) -> None:
    """c wins at the cheap level but its held-out quality halves there: stopped at that
    level, and its note, which holds held-out results, is withheld from proposers."""
    root = target(tmp_path)
    (root / "holdout.py").write_text(HOLDOUT)
    config = root / "assay.toml"
    config.write_text(config.read_text().replace(
        'bench_timeout = 30', f'bench_timeout = 30\nholdout = "{sys.executable} holdout.py"')
        + '\n[holdout_metric]\nname = "quality"\ndirection = "maximize"\ntolerance = 0.10\n')
    git(root, "add", "holdout.py")
    git(root, "commit", "-qam", "a holdout")
    api.run(root, proposer_obj=Listed("c"))
    c = by_hypothesis(root)["use c"]
    cid = str(c["id"])
    assert c["state"] == "discarded"
    j = journal(root)
    try:
        exp = j.experiment(cid)
        levels = {b.level for b in j.blocks(cid)}
        results = j.level_results()
    finally:
        j.close()
    assert exp is not None and exp.withheld
    assert exp.note.startswith("stopped at BUDGET=1: the effect is real but the holdout "
                               "regressed by 50.00%"), exp.note
    assert levels == {0}
    assert [(r.experiment_id, r.level, r.outcome) for r in results] == [(cid, 0, "stopped")]
