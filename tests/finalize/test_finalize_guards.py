"""A guard metric (llama-bench's pp512 beside its tg128) in `assay show`, its JSON, the
report's data and the finalize PR text: each side's median and the candidate's change."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from assay import api
from assay import finalize as fin
from assay.cli.app import app
from assay.config.spec import load
from assay.faces.data import experiment_data
from assay.journal.store import Journal

from .finalize_kit import edit, make_repo, run_queue

# the kit's benchmark, printing a second metric: prompt tokens/s, which FAST_A costs 10%
BENCH = """\
import random

import a
import b

speed = 1000.0
pp = 5000.0
if a.FAST_A:
    speed *= 1.5
    pp *= 0.9
if b.FAST_B:
    speed *= 1.3
speed *= 1 + random.Random().uniform(-0.005, 0.005)
print(f"METRIC speed={speed:.3f}")
print(f"METRIC pp512={pp:.1f}")
"""
GUARD = """
[[guards]]
name = "pp512"
direction = "maximize"
unit = "tok/s"
tolerance = 0.5
"""


def guarded_run(tmp_path: Path) -> Path:
    root = make_repo(tmp_path / "repo", {"bench.py": BENCH}, extra=GUARD)
    run_queue(root, [("a.py: the fast path", edit(root, "a.py", "FAST_A = False",
                                                 "FAST_A = True"))])
    return root


def test_show_the_report_and_the_pr_text_carry_the_guard(tmp_path: Path) -> None:
    root = guarded_run(tmp_path)
    shown = api.show("e0001", root)
    [g] = shown["guards"]
    assert (g["name"], g["unit"], g["incumbent"], g["candidate"]) == ("pp512", "tok/s",
                                                                      5000.0, 4500.0)
    assert abs(g["better"] + 0.10) < 1e-9 and g["regressed"] is False
    out = CliRunner().invoke(app, ["show", "e0001", "-C", str(root)])
    assert out.exit_code == 0, out.output
    assert "guard pp512 5000 -> 4500 tok/s (-10.00%, tolerance 50.00%): holds" in out.output
    target = load(root)
    j = Journal.open(root / ".assay" / "journal.sqlite", readonly=True)
    try:
        detail = experiment_data(target, j, "e0001")  # the report's and the dashboard's
    finally:
        j.close()
    assert detail is not None and detail["guards"] == shown["guards"]

    res = fin.finalize(root, reviewer=None)
    [o] = res.outcomes
    assert o.alone is not None and o.without is not None
    assert [x["name"] for x in o.alone.guards] == ["pp512"]
    text = (res.folder / o.group.slug / "PR.md").read_text()
    assert "Metric `speed`" in text
    assert "| pp512 | this change alone | 5000 tok/s | 4500 tok/s | -10.00% | 50.00% | holds |" \
        in text
    # the final tree without it gains the 10% back
    assert "| pp512 | final tree without it | 4500 tok/s | 5000 tok/s | +11.11% |" in text
