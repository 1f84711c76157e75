"""``[fidelity]`` in the loop, end to end on a real repository with a real benchmark.

The benchmark's speed is scripted: 100 times a factor that depends on the candidate's
``CHOICE`` and on the level's ``BUDGET`` (both environment variables), times the bounded
jitter of :mod:`tests.scripted`; each run prints the values it saw. ``x`` wins at both
levels, ``y`` wins at the cheap level and loses at the decisive one, ``z`` loses at both.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import assay
from assay import api
from assay.assemble import load
from assay.config.spec import parse
from assay.errors import ConfigError
from assay.export import rows
from assay.faces.data import status_data
from assay.journal.store import Journal
from assay.loop.calibration import CAL
from assay.loop.intake import binding_line
from assay.measure.chain import links
from assay.measure.verify import estimate_s
from assay.model import LEVEL, SCREEN, Candidate, Role
from assay.proposers.base import ProposalContext, Proposer
from assay.proposers.sweep import SweepProposer

from .conftest import git, make_repo
from .scripted import DRAW

# speed factor per CHOICE and BUDGET (the levels are BUDGET = 1, then 3)
FACTORS = {"base": {1: 1.0, 3: 1.0}, "x": {1: 1.10, 3: 1.10}, "y": {1: 1.10, 3: 0.88},
           "z": {1: 0.88, 3: 0.88}, "a": {1: 1.10, 3: 0.95}, "b": {1: 1.05, 3: 1.05},
           "c": {1: 1.35, 3: 1.35}, "w": {1: 0.85, 3: 0.85}}

BENCH = DRAW + f"""
import os

FACTORS = {json.dumps(FACTORS)}
import work

budget = os.environ.get("BUDGET") or str(getattr(work, "BUDGET", ""))
choice = os.environ["CHOICE"]
jitter = 1 + (draw() - 1) * (CHEAP_NOISE if budget == "1" else 1)
print(f"seen BUDGET={{budget}} CHOICE={{choice}}")
# a longer budget reaches a larger value: the levels measure different quantities
print(f"METRIC speed={{100 * int(budget) * FACTORS[choice][budget] * jitter:.4f}}")
"""

CONFIG = """\
[metric]
name = "speed"
direction = "maximize"

[commands]
bench = "{python} bench.py"
bench_timeout = 30

[scope]
editable = ["work.py"]
protected = ["bench.py"]

[[params]]
name = "BUDGET"
type = "int"
low = 1
high = 100
{apply}

[[params]]
name = "CHOICE"
type = "categorical"
choices = ["base", "x", "y", "z", "a", "b", "c", "w"]
default = "base"
apply = "env"

[run]
slots = 1
budget = 10
verify = false

[decision]
rule = "fixed"
max_pairs = 4
pairs_per_block = 2
aa_blocks = {aa}
delta = 0.02

[fidelity]
param = "BUDGET"
levels = [1, 3]
{fidelity}
"""


class Listed(Proposer):
    """The candidates given, in order: a choice name, or the params themselves."""

    name = "listed"

    def __init__(self, *items: str | dict[str, object]) -> None:
        self.todo = list(items)

    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        out = []
        while self.todo and len(out) < n:
            item = self.todo.pop(0)
            params: dict[str, Any] = dict(item) if isinstance(item, dict) else {"CHOICE": item}
            out.append(Candidate(context.incumbent.commit, params=params,
                                 hypothesis=f"use {item}", proposer=self.name))
        return out


def target(tmp_path: Path, aa: int = 0, fidelity: str = "", cheap_noise: float = 1,
           assign: bool = False) -> Path:
    """The repository; ``cheap_noise`` widens the jitter at BUDGET=1 that many times;
    ``assign``: BUDGET is the line ``BUDGET = 1`` of work.py, not an environment variable."""
    apply = 'apply = "assign"\nfile = "work.py"' if assign else 'apply = "env"'
    config = CONFIG.format(python=sys.executable, aa=aa, fidelity=textwrap.dedent(fidelity),
                           apply=apply)
    bench = f"CHEAP_NOISE = {cheap_noise}\n" + BENCH
    work = "WORK = 1\nBUDGET = 1  # the training budget\n" if assign else "WORK = 1\n"
    return make_repo(tmp_path / "repo", {"bench.py": bench, "assay.toml": config,
                                         "work.py": work})


def journal(root: Path) -> Journal:
    return Journal.open(root / ".assay" / "journal.sqlite")


def by_hypothesis(root: Path) -> dict[str, dict[str, object]]:
    return {str(e["hypothesis"]): e for e in api.log(root)}


def test_promotion_reversal_and_stop(tmp_path: Path) -> None:
    """z loses at the cheap level and is stopped there; y wins there, is promoted, and loses
    at the decisive level; x wins at both and is kept, at the last level only."""
    root = target(tmp_path)
    events: list[tuple[str, str]] = []
    summary = api.run(root, proposer_obj=Listed("z", "y", "x"),
                      on_event=lambda k, m, e: events.append((k, m)))
    log = by_hypothesis(root)
    ids = {h[4:]: str(e["id"]) for h, e in log.items()}
    assert {h: e["state"] for h, e in log.items()} == {
        "use z": "discarded", "use y": "discarded", "use x": "kept"}
    assert "stopped at BUDGET=1" in str(log["use z"]["note"])
    assert "not measured at BUDGET=3" in str(log["use z"]["note"])
    j = journal(root)
    try:
        got = [(r.experiment_id, r.level, r.outcome) for r in j.level_results()]
        assert got == [(ids["z"], 0, "stopped"), (ids["y"], 0, "promoted"),
                       (ids["y"], 1, "discarded"), (ids["x"], 0, "promoted"),
                       (ids["x"], 1, "kept")]
        # z never ran at the decisive level; y and x did, after their cheap blocks
        assert {b.level for b in j.blocks(ids["z"])} == {0}
        assert [b.level for b in j.blocks(ids["x"])] == [0, 0, 1, 1]
        # every decision made under [fidelity] names its level; a level's last one its screen
        for exp in ids.values():
            for d in j.decisions(exp):
                assert d.details[LEVEL] in (0, 1)
        y_effects = {r.level: r.effect for r in j.level_results() if r.experiment_id == ids["y"]}
        assert y_effects[0] is not None and y_effects[0] > 0.05
        assert y_effects[1] is not None and y_effects[1] < -0.05  # the reversal, measured
        # the level's value reached both sides: each run printed the BUDGET it saw
        for exp in (ids["y"], ids["x"]):
            levels = {b.id: b.level for b in j.blocks(exp)}
            for r in j.runs(exp):
                seen = Path(r.stdout_path).read_text()
                budget = 1 if levels[r.block_id] == 0 else 3
                choice = "base" if r.role is Role.INCUMBENT else exp_choice(ids, exp)
                assert f"seen BUDGET={budget} CHOICE={choice}" in seen, (r, seen)
        # the kept params hold the candidate's change, never the level's value
        inc = j.incumbent()
        assert inc is not None and inc.params.get("CHOICE") == "x" and "BUDGET" not in inc.params
    finally:
        j.close()
    promoted = [m for k, m in events if k == "promote"]
    assert len(promoted) == 2
    assert promoted[0].startswith(f"{ids['y']} promoted to BUDGET=3: at BUDGET=1: +")
    assert "upper end" in promoted[0] and "above δ 2.00%" in promoted[0]
    assert [e.id for e in summary.kept] == [ids["x"]]
    assert summary.awaiting == []


def exp_choice(ids: dict[str, str], exp: str) -> str:
    return next(k for k, v in ids.items() if v == exp)


def test_top_k_screen_promotes_the_best_lower_bounds(tmp_path: Path) -> None:
    """promote = "top", top = 1: a goes on (the first screened) and loses at the decisive
    level; b, a win at the cheap level against the same incumbent, is stopped (its lower
    bound ranks below a's); c goes on (its lower bound is the best so far) and is kept."""
    root = target(tmp_path, fidelity='promote = "top"\ntop = 1\n')
    api.run(root, proposer_obj=Listed("a", "b", "c"))
    log = by_hypothesis(root)
    ids = {h[4:]: str(e["id"]) for h, e in log.items()}
    j = journal(root)
    try:
        cheap = {r.experiment_id: r.outcome for r in j.level_results() if r.level == 0}
        b_level = [d for d in j.decisions(ids["b"]) if d.details.get(SCREEN)]
    finally:
        j.close()
    assert cheap == {ids["a"]: "promoted", ids["b"]: "stopped", ids["c"]: "promoted"}
    assert b_level[-1].details[SCREEN] == "stopped" and b_level[-1].effect is not None
    assert b_level[-1].effect > 0.02  # a win at that level, but not among the top 1
    assert "ranks 2 of 2 screened at this level (the top 1 go on)" in str(log["use b"]["note"])
    assert log["use a"]["state"] == "discarded" and log["use c"]["state"] == "kept"


def test_each_level_is_calibrated_once_and_reused_by_a_later_session(tmp_path: Path) -> None:
    root = target(tmp_path, aa=1, cheap_noise=20)  # ±10% at BUDGET=1, ±0.5% at BUDGET=3
    events: list[tuple[str, str]] = []
    api.run(root, budget=1, proposer_obj=Listed("x"),
            on_event=lambda k, m, e: events.append((k, m)))
    j = journal(root)
    try:
        cals = j.calibrations()
        first = {lv: len([b for b in j.blocks(CAL) if b.level == lv]) for lv in (0, 1)}
        # both sides of an A/A block run the incumbent at the block's level
        levels = {b.id: b.level for b in j.blocks(CAL)}
        seen = {(levels[r.block_id], Path(r.stdout_path).read_text().splitlines()[0])
                for r in j.runs(CAL)}
        xd = {d.details[LEVEL]: d.delta for d in j.decisions("e0001")}
    finally:
        j.close()
    assert sorted(cals) == [0, 1] and cals[1].level == 1 and cals[0].level == 0
    assert first[0] > 0 and first[1] > 0
    assert seen == {(0, "seen BUDGET=1 CHOICE=base"), (1, "seen BUDGET=3 CHOICE=base")}
    # each level's noise and δ are its own: the noisy cheap level resolves a coarser band
    assert cals[0].pooled is not None and cals[1].pooled is not None
    assert cals[0].pooled > 4 * cals[1].pooled
    assert cals[0].delta is not None and cals[1].delta is not None
    assert cals[0].delta > cals[1].delta
    assert xd == {0: cals[0].delta, 1: cals[1].delta}  # each decision used its level's δ
    assert cals[0].baseline is not None and cals[1].baseline is not None
    assert any(k == "calibrate" and "at BUDGET=3" in m for k, m in events)
    # the cheap level's A/A blocks came at the start, the decisive level's only when x
    # was promoted to it
    order = [m.split(":")[0] for k, m in events if k in ("calibrate", "promote")]
    assert order[0] == "measuring noise at BUDGET=1" and order[-1] == "measuring noise at BUDGET=3"

    later: list[tuple[str, str]] = []
    api.run(root, budget=1, proposer_obj=Listed("c"), carry_on=True,
            on_event=lambda k, m, e: later.append((k, m)))
    j = journal(root)
    try:
        again = {lv: len([b for b in j.blocks(CAL) if b.level == lv]) for lv in (0, 1)}
        cexp = next(e for e in j.experiments() if e.candidate.params.get("CHOICE") == "c")
        levels = [b.level for b in j.blocks(cexp.id)]
    finally:
        j.close()
    assert 1 in levels  # c was promoted and measured at the decisive level ...
    assert again == first  # ... on the calibration the first session measured there
    assert not any(k == "calibrate" for k, _ in later)


def test_a_candidate_setting_the_fidelity_parameter_is_invalid(tmp_path: Path) -> None:
    root = target(tmp_path)
    api.run(root, proposer_obj=Listed({"CHOICE": "x", "BUDGET": 3}))
    (entry,) = api.log(root)
    assert entry["state"] == "invalid"
    assert "sets the fidelity parameter BUDGET (to 3)" in str(entry["note"])
    assert "[fidelity] levels = [1, 3]" in str(entry["note"])
    sweep = SweepProposer.from_target(api.load(root))
    assert set(sweep.dists) == {"CHOICE"}  # the sweep never searches the level's parameter


def test_max_hours_refuses_a_decisive_block_it_cannot_finish(tmp_path: Path) -> None:
    """The cheap level's pace (rewritten to 600 s a run) times the levels' ratio (3) says a
    block at BUDGET=3 takes 4 × 1,800 s: under --max-hours 1 it is not started, and the run
    says what the waiting candidate would cost there."""
    root = target(tmp_path)
    api.run(root, proposer_obj=Listed("z", "w"), budget=2)  # both stopped at BUDGET=1
    db = root / ".assay" / "journal.sqlite"
    with sqlite3.connect(db) as c:  # four slow blocks at BUDGET=1, none at BUDGET=3
        assert c.execute("SELECT COUNT(*) FROM blocks WHERE level = 1").fetchone()[0] == 0
        c.execute("UPDATE blocks SET wall_s = 600.0 * length(run_order) WHERE state = 'done'")
    summary = api.run(root, proposer_obj=Listed("x"), budget=1, max_hours=1.0)
    assert "the next block at BUDGET=3 needs (4 run(s) at about 1800 s each, the pace at " \
           "BUDGET=1 × 3)" in summary.stopped, summary.stopped
    assert "not started" in summary.stopped
    x = by_hypothesis(root)["use x"]
    assert x["state"] in ("queued", "running")
    j = journal(root)
    try:
        xb = j.blocks(str(x["id"]))
    finally:
        j.close()
    assert [(b.level, b.state.value) for b in xb] == [(0, "done"), (0, "done"), (1, "queued")]
    assert summary.awaiting and summary.awaiting[0].startswith(
        "1 candidate awaits BUDGET=3: about 2.0 h (4 runs at about 1800 s, the pace at "
        "BUDGET=1 × 3)")
    assert api.status(root)["awaiting"] == summary.awaiting
    env = {**os.environ, "COLUMNS": "200",
           "PYTHONPATH": str(Path(assay.__file__).resolve().parents[1])}
    shown = subprocess.run([sys.executable, "-m", "assay", "status"], cwd=root, env=env,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert f"next: {summary.awaiting[0]}" in shown.stdout


def test_a_candidate_waiting_for_a_longer_stay_does_not_stop_the_screening(
        tmp_path: Path) -> None:
    """Under --max-hours a promoted candidate whose block at BUDGET=3 cannot end in the time
    left waits for the next run, and the cheap level goes on screening the next candidate
    in the meantime (a short stay on a rented GPU still screens)."""
    root = target(tmp_path)
    api.run(root, proposer_obj=Listed("z", "w"), budget=2)  # both stopped at BUDGET=1
    db = root / ".assay" / "journal.sqlite"
    with sqlite3.connect(db) as c:  # slow enough that a block at BUDGET=3 never fits
        c.execute("UPDATE blocks SET wall_s = 600.0 * length(run_order) WHERE state = 'done'")
    summary = api.run(root, proposer_obj=Listed("x", "b"), budget=2, max_hours=1.0)
    x, b = (by_hypothesis(root)[f"use {n}"] for n in ("x", "b"))
    j = journal(root)
    try:
        levels = {n: [(r.level, r.state.value) for r in j.blocks(str(e["id"]))]
                  for n, e in (("x", x), ("b", b))}
    finally:
        j.close()
    # x waits at BUDGET=3 and b was still screened at BUDGET=1 after x was promoted
    assert levels["x"][-1] == (1, "queued"), levels
    assert [lv for lv, st in levels["b"] if st == "done"] and \
        all(lv == 0 for lv, st in levels["b"] if st == "done"), levels
    assert "not started" in summary.stopped
    assert summary.awaiting and summary.awaiting[0].startswith("2 candidates await BUDGET=3")


def test_the_final_verification_measures_at_the_last_level(tmp_path: Path) -> None:
    """The run's closing baseline-vs-best measurement is at the level keeps are decided at:
    both sides at BUDGET=3, the level's parameter never a side's own."""
    root = target(tmp_path)
    cfg = root / "assay.toml"
    cfg.write_text(cfg.read_text().replace("verify = false", "verify = true"))
    git(root, "commit", "-qam", "verify")
    summary = api.run(root, proposer_obj=Listed("x"))
    assert summary.verified is not None, summary.verify_note
    assert 0.08 < summary.verified["effect"] < 0.12  # x's +10% at BUDGET=3
    j = Journal.open(Path(summary.verified["journal"]))
    try:
        runs = j.runs()
    finally:
        j.close()
    seen = {(r.role, Path(r.stdout_path).read_text().splitlines()[0]) for r in runs}
    assert seen == {(Role.INCUMBENT, "seen BUDGET=3 CHOICE=base"),
                    (Role.CANDIDATE, "seen BUDGET=3 CHOICE=x")}


def test_fidelity_and_platforms_are_refused_together(tmp_path: Path) -> None:
    root = target(tmp_path)
    text = (root / "assay.toml").read_text() + '[[platforms]]\nname = "a"\n'
    with pytest.raises(ConfigError) as err:
        parse(text, root)
    assert "[fidelity] levels and [[platforms]] cannot be combined" in str(err.value)


def test_an_assigned_fidelity_parameter_is_set_in_both_trees_and_never_kept(
        tmp_path: Path) -> None:
    """BUDGET as the line of an editable file: each side's tree has the level's value
    written there; a patch that edits the line is invalid; the kept commit keeps the file's
    own line."""
    root = target(tmp_path, assign=True)
    work = root / "work.py"
    work.write_text("WORK = 1\nBUDGET = 3  # the training budget\n")
    edit = git(root, "diff")
    git(root, "checkout", "-q", "--", "work.py")

    class WithPatch(Listed):
        """x, then a patch that edits the line of the fidelity parameter."""

        def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
            out = super().propose(context, n)
            return [c if c.params else Candidate(context.incumbent.commit, patch=edit,
                                                 hypothesis="train longer", proposer=self.name)
                    for c in out]

    api.run(root, proposer_obj=WithPatch("x", {}))
    log = by_hypothesis(root)
    assert log["use x"]["state"] == "kept"
    assert log["train longer"]["state"] == "invalid"
    assert ("removes the line `BUDGET = 1  # the training budget`, which could set BUDGET, "
            "the fidelity parameter") in str(log["train longer"]["note"])
    j = journal(root)
    try:
        xid = str(log["use x"]["id"])
        levels = {b.id: b.level for b in j.blocks(xid)}
        seen = {(levels[r.block_id], r.role, Path(r.stdout_path).read_text().splitlines()[0])
                for r in j.runs(xid)}
    finally:
        j.close()
    assert seen == {(0, Role.INCUMBENT, "seen BUDGET=1 CHOICE=base"),
                    (0, Role.CANDIDATE, "seen BUDGET=1 CHOICE=x"),
                    (1, Role.INCUMBENT, "seen BUDGET=3 CHOICE=base"),
                    (1, Role.CANDIDATE, "seen BUDGET=3 CHOICE=x")}
    kept = git(root, "show", "assay/main:work.py")
    assert "BUDGET = 1  # the training budget" in kept


def test_a_journal_without_levels_reads_as_level_zero(tmp_path: Path) -> None:
    """A journal written before levels existed holds one calibration, with no level: it is
    level 0's, and no other level is calibrated."""
    j = Journal.open(tmp_path / "journal.sqlite")
    try:
        j.set_meta("calibration", {"noise": {"s0": 0.01}, "pooled": 0.01, "delta": 0.03})
        j.set_meta("noise_samples", {"s0": [0.01, -0.02]})
        cal = j.calibration()
        assert cal is not None and (cal.level, cal.delta) == (0, 0.03)
        assert j.calibration(1) is None and j.noise_samples(1) == {}
        assert j.noise_samples() == {"s0": [0.01, -0.02]}
        assert list(j.calibrations()) == [0]
        j.set_calibration(dataclasses.replace(cal, delta=0.05, level=1), 1)
        assert j.calibration(0) == cal  # level 1 is kept beside it, not over it
        assert {lv: c.delta for lv, c in j.calibrations().items()} == {0: 0.03, 1: 0.05}
    finally:
        j.close()


def test_assay_show_says_the_level_of_each_decision_and_block(tmp_path: Path) -> None:
    """`assay show` of a reversed candidate: its promotion at the cheap level and its
    discard at the decisive one, each decision and block labelled with its level."""
    root = target(tmp_path)
    api.run(root, proposer_obj=Listed("y"), budget=1)
    y = by_hypothesis(root)["use y"]
    assert api.show(str(y["id"]), root)["levels"] == ["BUDGET=1", "BUDGET=3"]
    env = {**os.environ, "COLUMNS": "250",
           "PYTHONPATH": str(Path(assay.__file__).resolve().parents[1])}
    shown = subprocess.run([sys.executable, "-m", "assay", "show", str(y["id"])], cwd=root,
                           env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    decisions = [ln for ln in shown.stdout.splitlines() if ln.startswith("  decision")]
    assert any("at BUDGET=1, screen: promoted keep" in ln for ln in decisions), decisions
    assert "at BUDGET=3 discard" in decisions[-1], decisions
    blocks = [ln for ln in shown.stdout.splitlines() if ln.startswith(f"  {y['id']}-b")]
    assert any("at BUDGET=1," in ln for ln in blocks) and "at BUDGET=3," in blocks[-1], blocks


@pytest.mark.parametrize("line", [
    "BUDGET = 300",
    "    BUDGET = 300",
    "BUDGET: float = 300",
    "BUDGET *= 10",
    "BUDGET, WORK = 300, 1",
    "WORK, BUDGET = 1, 300",
    "if (BUDGET := 300) > 0: pass",
    "    global BUDGET",
    'globals()["BUDGET"] = 300',
    "setattr(sys.modules[__name__], 'BUDGET', 300)",
    "a = 1; BUDGET = 300",
    'x = "#"; BUDGET = 300',
    "for BUDGET in (300,): pass",
    "import os as BUDGET",
    "from settings import BUDGET",
    "del BUDGET",
    "cfg.BUDGET = 2",
])
def test_a_patch_that_binds_the_fidelity_parameter_any_way_is_caught(line: str) -> None:
    """The attacks on the level's value: every way a candidate could set the parameter
    behind assay's back, each added in a hunk of the editable file."""
    patch = ("diff --git a/work.py b/work.py\n--- a/work.py\n+++ b/work.py\n"
             "@@ -1,2 +1,3 @@\n WORK = 1\n BUDGET = 3\n+" + line + "\n")
    assert binding_line(patch, "BUDGET", "work.py") == "+" + line


@pytest.mark.parametrize("line", [
    "deadline = start + BUDGET",
    "if elapsed >= BUDGET: stop()",
    "print(BUDGET == 3, BUDGET != 4, BUDGET <= 5)",
    "MY_BUDGET = 2  # not BUDGET = 3",
    "for step in range(BUDGET): pass",
    "import math",
])
def test_a_patch_that_only_reads_the_fidelity_parameter_is_admitted(line: str) -> None:
    patch = ("diff --git a/work.py b/work.py\n--- a/work.py\n+++ b/work.py\n"
             "@@ -1,2 +1,3 @@\n WORK = 1\n BUDGET = 3\n+" + line + "\n")
    assert binding_line(patch, "BUDGET", "work.py") is None


def test_the_baseline_every_output_shows_is_measured_at_the_last_level(
        tmp_path: Path) -> None:
    """A screen at the cheap level measures another quantity (here a third of the last
    level's), so it never gives the baseline: before anything reaches the last level there
    is none; after, the summary, `assay status`, the dashboard's data and the exports give
    the last level's, the same number."""
    root = target(tmp_path)
    summary = api.run(root, proposer_obj=Listed("z"))
    assert by_hypothesis(root)["use z"]["state"] == "discarded"
    assert summary.baseline is None and summary.best is None
    assert api.status(root)["baseline"] is None
    t = load(root)
    j = journal(root)
    try:
        assert status_data(t, j)["baseline"] is None
        assert not [r for r in rows(j, t) if r["id"] == "baseline"]
    finally:
        j.close()

    summary = api.run(root, proposer_obj=Listed("x"))
    assert by_hypothesis(root)["use x"]["state"] == "kept"
    assert summary.baseline is not None and 250 < summary.baseline < 350  # BUDGET=3
    assert summary.best is not None and summary.best > summary.baseline
    j = journal(root)
    try:
        shown = [api.status(root)["baseline"], status_data(t, j)["baseline"],
                 next(r["metric"] for r in rows(j, t) if r["id"] == "baseline")]
    finally:
        j.close()
    assert shown == [summary.baseline] * 3


def test_an_environment_fidelity_parameter_set_by_a_patch_anywhere_is_caught() -> None:
    """An environment parameter has no line to guard: a patch that names it as a string in
    any file (os.environ, putenv) could set it; one that does not passes."""
    head = ("diff --git a/lib/run.py b/lib/run.py\n--- a/lib/run.py\n+++ b/lib/run.py\n"
            "@@ -1 +1,2 @@\n x = 1\n")
    assert binding_line(head + '+os.environ["BUDGET"] = "300"\n', "BUDGET", None)
    assert binding_line(head + "+os.putenv('BUDGET', '300')\n", "BUDGET", None)
    assert binding_line(head + "+BUDGET = 300\n", "BUDGET", None) is None  # a local name


def test_the_chain_of_keeps_runs_at_the_last_level(tmp_path: Path) -> None:
    """Every link of the verification's chain (baseline, each keep, the final best) carries
    the last level's value, as the verification's own pairs do."""
    root = target(tmp_path)
    api.run(root, proposer_obj=Listed("x"))
    assert by_hypothesis(root)["use x"]["state"] == "kept"
    j = journal(root)
    try:
        chain = links(load(root), j)
    finally:
        j.close()
    assert len(chain) >= 2
    assert [link.params.get("BUDGET") for link in chain] == [3] * len(chain)


def test_a_benchmark_failing_at_a_higher_level_names_the_level(tmp_path: Path) -> None:
    """The benchmark works at the cheap level and crashes at the last: the run stops at the
    first block there, saying at which level the incumbent's benchmark fails."""
    root = target(tmp_path)
    bench = root / "bench.py"
    bench.write_text(bench.read_text().replace(
        'print(f"seen BUDGET', 'import sys\nif budget == "3":\n    sys.exit("no GPU memory")\n'
        'print(f"seen BUDGET', 1))
    git(root, "commit", "-qam", "the last level crashes")
    summary = api.run(root, proposer_obj=Listed("x"))
    assert summary.failed.startswith("at BUDGET=3: the incumbent's benchmark fails"), \
        summary.failed
    assert "no GPU memory" in summary.failed


def test_a_calibration_failing_at_a_higher_level_names_the_level(tmp_path: Path) -> None:
    """With A/A calibration: the start-up one at BUDGET=1 passes, the one at BUDGET=3,
    started by the first promotion, fails and says at which level."""
    root = target(tmp_path, aa=1)
    bench = root / "bench.py"
    bench.write_text(bench.read_text().replace(
        'print(f"seen BUDGET', 'import sys\nif budget == "3":\n    sys.exit("no GPU memory")\n'
        'print(f"seen BUDGET', 1))
    git(root, "commit", "-qam", "the last level crashes")
    summary = api.run(root, proposer_obj=Listed("x"))
    assert "calibration at BUDGET=3 failed" in summary.failed, summary.failed


def test_the_verification_estimate_uses_the_last_level_runs(tmp_path: Path) -> None:
    """The estimate of the closing verification's time is the last level's run time: the
    cheap screen's runs, however many, do not shorten it."""
    root = target(tmp_path)
    bench = root / "bench.py"
    bench.write_text(bench.read_text().replace(
        'print(f"seen BUDGET', 'import time\nif budget == "3":\n    time.sleep(0.6)\n'
        'print(f"seen BUDGET', 1))
    git(root, "commit", "-qam", "the last level takes longer")
    api.run(root, proposer_obj=Listed("x"))
    assert by_hypothesis(root)["use x"]["state"] == "kept"
    t = load(root)
    j = journal(root)
    try:
        estimate = estimate_s(j, t)
        levels = {b.id: b.level for b in j.blocks(str(by_hypothesis(root)["use x"]["id"]))}
        cheap = [r.wall_s for r in j.runs() if levels.get(r.block_id) == 0]
    finally:
        j.close()
    assert cheap and max(cheap) < 0.6  # the screen's runs are quick
    assert estimate is not None
    assert estimate / (2 * t.decision.max_pairs) >= 0.6


def test_top_k_screen_never_promotes_a_sure_loss(tmp_path: Path) -> None:
    """promote = "top", top = 2: w, 15% slower at the cheap level and the first screened,
    ranks first among one, yet its interval lies below zero: it is stopped there."""
    root = target(tmp_path, fidelity='promote = "top"\ntop = 2\n')
    api.run(root, proposer_obj=Listed("w"))
    log = by_hypothesis(root)
    assert log["use w"]["state"] == "discarded"
    assert "is not above 0: it loses at this level" in str(log["use w"]["note"])
    j = journal(root)
    try:
        assert {b.level for b in j.blocks(str(log["use w"]["id"]))} == {0}
    finally:
        j.close()
