"""With ``[fidelity]``: the rank agreement between levels where people look (`assay status`,
its JSON, the report in a real headless Chromium), and nothing of it without ``[fidelity]``.

The verdicts per level are written into the journal as the loop records them
(``Decision.details``: the level, and at a level below the last the screen's outcome), and
each experiment ends as the loop ends it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from assay import api
from assay.faces import mcp, report
from assay.model import LEVEL, SCREEN, Candidate, Decision, ExperimentState, Verdict

from ..test_fidelity_loop import Listed
from ..test_fidelity_outcomes import guarded
from .conftest import BONUS_PATCH, make_target, sh

FIDELITY = '''
[[params]]
name = "TIME_BUDGET"
type = "int"
low = 1
high = 1000
apply = "env"
default = 300

[fidelity]
param = "TIME_BUDGET"
levels = [30, 300]
'''

# (params or a BONUS patch, effect at 30 s, effect at 300 s or None: stopped at 30 s)
HISTORY: list[tuple[dict[str, Any] | str, float, float | None]] = [
    ({"SIZE": 16}, 0.031, 0.024),
    ("1.5", 0.022, 0.011),          # positive at 300 s, but too small to keep: did not win
    ({"SIZE": 8}, 0.026, -0.008),   # the small sizes win the short run, lose the long one
    ({"SIZE": 4}, 0.019, -0.012),
    ("1.2", 0.012, 0.016),
    ({"SIZE": 60}, -0.04, None),
]


def _fill(root: Path) -> list[str]:
    """The journal of a two-level session: five promoted at 30 s, one stopped."""
    journal = api.open_journal(api.load(root))
    ids = []
    try:
        for change, cheap, final in HISTORY:
            cand = (Candidate("c0", params=change, hypothesis=f"SIZE {change['SIZE']}")
                    if isinstance(change, dict) else
                    Candidate("c0", patch=BONUS_PATCH.format(value=change),
                              hypothesis=f"BONUS {change} in fast.py"))
            e = journal.add_experiment(cand).id
            ids.append(e)
            screen = "stopped" if final is None else "promoted"
            journal.set_decision(e, Decision(
                Verdict.KEEP if cheap > 0 else Verdict.DISCARD, "r", cheap, cheap - 0.01,
                cheap + 0.01, 4, 8, 0.005, details={LEVEL: 0, SCREEN: screen}))
            if final is not None:
                journal.set_decision(e, Decision(
                    Verdict.KEEP if final > 0.015 else Verdict.DISCARD, "r", final,
                    final - 0.005, final + 0.005, 8, 16, 0.005, details={LEVEL: 1}))
            # ended as the loop ends it: a level's outcome is what happened there
            journal.set_state(e, ExperimentState.KEPT if final is not None and final > 0.015
                              else ExperimentState.DISCARDED)
    finally:
        journal.close()
    return ids


def _target(tmp_path: Path, fidelity: bool) -> tuple[Path, list[str]]:
    root = make_target(tmp_path / ("fid" if fidelity else "plain"))
    if fidelity:
        with (root / "assay.toml").open("a") as f:
            f.write(FIDELITY)
        sh(root, "git", "commit", "-qam", "two fidelity levels")
    return root, _fill(root)


def test_status_shows_how_the_cheap_level_held(tmp_path: Path) -> None:
    root, ids = _target(tmp_path, fidelity=True)
    st = api.status(root)["fidelity"]
    assert st is not None
    (pair,) = st["pairs"]
    assert (pair["promoted"], pair["reached"], pair["held"]) == (5, 5, 2)
    assert [r["experiment_id"] for r in pair["reversed"]] == [ids[1], ids[2], ids[3]]
    out = subprocess.run([sys.executable, "-m", "assay", "status", "-C", str(root)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert ("fidelity: at TIME_BUDGET=30, 2 of 5 promoted candidates with a verdict at "
            "TIME_BUDGET=300 also won there; ρ = ") in text
    assert f"{ids[2]} SIZE=8 (+2.6% → -0.8%)" in text
    assert "warning: TIME_BUDGET=30 misleads on SIZE: 1 of 3 promoted SIZE changes" in text
    assert "misleads on patch" not in text  # 1 of 2 held
    js = subprocess.run([sys.executable, "-m", "assay", "status", "-C", str(root), "--json"],
                        capture_output=True, text=True, timeout=120)
    assert js.returncode == 0, js.stderr
    assert json.loads(js.stdout)["fidelity"] == json.loads(json.dumps(st))
    # the MCP status tool: the same result, for an agent choosing what to try next
    assert json.loads(json.dumps(mcp.status(api.load(root))["fidelity"])) == \
        json.loads(json.dumps(st))


def test_nothing_is_shown_without_fidelity(tmp_path: Path, browser: Any) -> None:
    root, _ = _target(tmp_path, fidelity=False)
    assert api.status(root)["fidelity"] is None
    out = subprocess.run([sys.executable, "-m", "assay", "status", "-C", str(root)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "fidelity" not in out.stdout
    path = report.write(api.load(root), tmp_path / "plain.html")
    page = browser.new_page()
    try:
        page.goto(path.as_uri(), timeout=30_000)
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        assert page.locator("#experiments-table tbody tr").count() == len(HISTORY)
        assert page.locator("#fidelity").count() == 0
    finally:
        page.close()


def test_the_report_draws_the_agreement_table(tmp_path: Path, browser: Any,
                                              screenshots: Path) -> None:
    root, ids = _target(tmp_path, fidelity=True)
    path = report.write(api.load(root), tmp_path / "fidelity.html")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(path.as_uri(), timeout=30_000)
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        row = page.locator("#fidelity-table tbody tr[data-level='0']")
        cells = row.locator("td").evaluate_all("ns => ns.map(n => n.textContent)")
        st = api.status(root)["fidelity"]["pairs"][0]
        assert cells[:5] == ["TIME_BUDGET=30", "TIME_BUDGET=300", "5", "5", "2"]
        assert cells[5] == f"{st['rho']:.2f} over 5"
        assert f"{ids[3]} SIZE=4 (+1.90% → -1.20%)" in cells[6]
        lines = page.locator("#fidelity-lines li").all_inner_texts()
        assert lines == api.status(root)["fidelity"]["lines"]
        warn = page.locator("#fidelity-warnings li").all_inner_texts()
        assert len(warn) == 1 and warn[0].startswith("warning: TIME_BUDGET=30 misleads on SIZE")
        page.locator("#fidelity").screenshot(path=str(screenshots / "report-fidelity.png"))
        assert errors == []
    finally:
        page.close()


def test_the_report_names_the_level_of_an_experiments_guard_table(
        tmp_path: Path, browser: Any) -> None:
    """x, kept at BUDGET=3 after its screen at BUDGET=1: the report's guard table is its
    runs at BUDGET=3, so headed, with the numbers `assay show` gives."""
    root = guarded(tmp_path, {"x": {1: 1.0, 3: 0.95}})
    api.run(root, proposer_obj=Listed("x"))
    (x,) = api.log(root)
    assert x["state"] == "kept"
    path = report.write(api.load(root), tmp_path / "guards.html")
    page = browser.new_page()
    try:
        page.goto(path.as_uri(), timeout=30_000)
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        page.click(f"#experiments-table a:text('{x['id']}')")
        detail = page.locator(f"details#{x['id']}")
        # drawn once the page has unpacked its data (asynchronously): wait for the table
        detail.locator("table.guards").wait_for(state="attached", timeout=30_000)
        heads = detail.locator("h3").all_inner_texts()
        assert "Guards at BUDGET=3" in heads, heads
        cells = detail.locator("table.guards tbody tr[data-guard='mem_mb'] td").all_inner_texts()
        assert cells[:4] == ["mem_mb", "300", "285", "+5.00%"], cells
    finally:
        page.close()
