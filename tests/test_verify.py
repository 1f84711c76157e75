"""The run's total improvement, measured paired: the baseline against the final best.

Real git repositories in temp dirs, a benchmark whose time comes from the code it imports
(each fast path divides it by a fixed factor) times a small scripted jitter, so every
decision is the same on a quiet or a busy machine.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typer.testing import CliRunner

from assay import api
from assay.cli.app import app
from assay.faces.data import status_data
from assay.faces.terminal import UNPAIRED, paired_words, ratio_words
from assay.journal.store import Journal
from assay.measure.verify import compounded
from assay.model import Direction

from .finalize.finalize_kit import edit, git, make_repo
from .scripted import DRAW

BENCH = f"""\
import a
import b
{DRAW}
t = 2.0
if a.FAST_A:
    t /= 1.5
if b.FAST_B:
    t /= 1.3
print(f"METRIC time={{t * draw():.6f}}")
"""

CONFIG = """\
[target]
name = "opt"

[metric]
name = "time"
direction = "minimize"
unit = "s"

[commands]
bench = "{python} bench.py"
checks = "{python} checks.py"

[scope]
editable = ["a.py", "b.py"]
protected = ["bench.py", "checks.py"]

[run]
slots = 1
{run}

[decision]
rule = "fixed"
max_pairs = 4
pairs_per_block = 2
aa_blocks = 0
delta = 0.02

[proposer.queue]
path = ".queue"
"""

TRUE_TOTAL = 1.5 * 1.3 - 1.0  # baseline time / final time - 1


def repo(tmp_path: Path, run: str = "") -> Path:
    root = make_repo(tmp_path / "repo", {
        "bench.py": BENCH, "assay.toml": CONFIG.format(python=sys.executable, run=run)})
    folder = root / ".queue"
    folder.mkdir()
    for i, (hyp, path, old, new) in enumerate([
            ("a.py: the fast path", "a.py", "FAST_A = False", "FAST_A = True"),
            ("b.py: the fast kernel", "b.py", "FAST_B = False", "FAST_B = True")]):
        (folder / f"{i:02d}.patch").write_text(f"# hypothesis: {hyp}\n"
                                               + edit(root, path, old, new))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "queue the patches")
    return root


def journal_of(root: Path) -> Journal:
    return Journal.open(root / ".assay" / "journal.sqlite", readonly=True)


def test_a_run_ends_with_a_paired_verification_shown_by_summary_status_and_report(
        tmp_path: Path) -> None:
    root = repo(tmp_path)
    runner = CliRunner()
    res = runner.invoke(app, ["run", "-C", str(root), "--proposer", "queue", "--budget", "2"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    # the two keeps, then the verification: base commit against the final incumbent
    assert out.count(" kept ") >= 2
    assert "verifying: the baseline" in out
    # the comparison's own experiment is not printed as if it were one of the run's
    assert "[verify-" not in out and " KEPT " not in out
    assert "improvement (paired, baseline vs final best): +" in out
    # the paired figure is the summary's headline; the medians come after it, labelled
    assert out.index("improvement (paired, baseline vs final best)") < out.index(
        f"time, {UNPAIRED}: baseline")
    assert out.count("unpaired") == 1
    j = journal_of(root)
    try:
        v = j.get_meta("verification")
        inc = j.incumbent()
        base = j.get_meta("base_commit")
        kept = [e.decision.effect for e in j.experiments() if e.decision
                and e.state.value == "kept"]
        events = [e.message for e in j.events() if e.kind == "verify"]
    finally:
        j.close()
    assert inc is not None and v["final"] == inc.commit and v["base"] == base != inc.commit
    assert v["state"] == "kept" and v["pairs"] >= 2 and v["runs"] >= 4
    assert v["lo"] < v["effect"] < v["hi"]
    assert v["lo"] < TRUE_TOTAL < v["hi"] and abs(v["effect"] - TRUE_TOTAL) < 0.03
    # the kept effects compound consistently with the paired total
    assert len(kept) == 2 and v["kept"] == 2
    assert v["compounded"] == compounded(kept)
    assert abs(v["compounded"] - TRUE_TOTAL) < 0.03
    assert any(m.startswith("verified:") for m in events)
    # ... and the chain measured together: its steps are each keep's own speed-up and
    # compound exactly to its total, the final best against the baseline in the same rounds
    chain = v["chain"]
    assert chain["rounds"] == 6 and chain["runs"] == 18 and not chain["set_aside"]
    steps = {s["label"]: s for s in chain["steps"]}
    (first, second) = [steps[e] for e in sorted(steps)]
    assert abs(first["effect"] - 0.5) < 0.02 and abs(second["effect"] - 0.3) < 0.02
    assert all(s["lo"] < s["effect"] < s["hi"] for s in chain["steps"])
    assert abs((1 + first["effect"]) * (1 + second["effect"]) - (1 + chain["total"])) < 1e-9
    assert chain["lo"] < TRUE_TOTAL < chain["hi"]
    assert f"compound to {chain['total']:+.2%}" in out and "measured together in 6 rounds" in out
    # a time to minimize is also shown as a speed ratio, in the summary ...
    ratio = ratio_words(v["effect"], Direction.MINIMIZE, "time", "s")
    assert ratio.endswith("× faster") and ratio.startswith("-")
    assert ratio in out
    assert f"compound to {v['compounded']:+.2%}" in out
    # ... in `assay status` ...
    st = runner.invoke(app, ["status", "-C", str(root)])
    assert st.exit_code == 0, st.output
    line = " ".join(st.output.split())
    assert "improvement (paired, baseline vs final best): " + " ".join(
        paired_words(v, Direction.MINIMIZE, "time", "s").split()) in line
    assert line.index("improvement (paired") < line.index(f"{UNPAIRED}: baseline")
    as_json = json.loads(runner.invoke(app, ["status", "-C", str(root), "--json"]).output)
    assert as_json["verification"]["current"] is True
    assert as_json["verification"]["measured"]["effect"] == v["effect"]
    # ... and in the report's data (the overview's headline card and the subtitle)
    target = api.load(root)
    j = journal_of(root)
    try:
        data = status_data(target, j)
    finally:
        j.close()
    assert data["verification"]["current"] and data["verification"]["words"]
    assert data["improvement"] is not None and data["improvement"] > 0.5  # positive = better
    from assay.faces import report

    html = report.build(target)
    assert "improvement (paired, baseline vs final best)" in html
    # a second run with nothing new kept does not measure again: it shows what is stored
    again = api.run(root, proposer="queue", budget=1)
    assert again.verified is not None and again.verified["at"] == v["at"]


def test_verify_off_leaves_it_to_the_assay_verify_verb(tmp_path: Path) -> None:
    root = repo(tmp_path, run="verify = false")
    summary = api.run(root, proposer="queue", budget=2)
    assert len(summary.kept) == 2
    assert summary.verified is None and "verify = false" in summary.verify_note
    runner = CliRunner()
    st = runner.invoke(app, ["status", "-C", str(root)])
    assert "not verified since the last keep" in " ".join(st.output.split())
    res = runner.invoke(app, ["verify", "-C", str(root)])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "improvement (paired, baseline" in out and "× faster" in out
    j = journal_of(root)
    try:
        v = j.get_meta("verification")
        inc = j.incumbent()
    finally:
        j.close()
    assert inc is not None and v["final"] == inc.commit
    assert v["lo"] < TRUE_TOTAL < v["hi"]
    st = runner.invoke(app, ["status", "-C", str(root)])
    assert "improvement (paired, baseline vs final best): +" in " ".join(st.output.split())


def test_nothing_to_verify_is_a_clear_error(tmp_path: Path) -> None:
    root = repo(tmp_path)
    runner = CliRunner()
    res = runner.invoke(app, ["verify", "-C", str(root)])
    assert res.exit_code == 2 and "nothing to verify" in res.output
    assert "Traceback" not in res.output
    # a run whose queue holds only a no-op keeps nothing: still nothing to verify
    (root / ".queue" / "00.patch").unlink()
    (root / ".queue" / "01.patch").write_text(
        "# hypothesis: a comment\n" + edit(root, "b.py", "def helper", "# a helper\ndef helper"))
    git(root, "commit", "-qam", "a no-op")
    summary = api.run(root, proposer="queue", budget=1)
    assert not summary.kept and summary.verified is None
    res = runner.invoke(app, ["verify", "-C", str(root)])
    assert res.exit_code == 2 and "nothing was kept" in res.output


def test_ratio_words_and_compounding() -> None:
    assert ratio_words(0.28, Direction.MINIMIZE, "time", "s") == "-21.9% time, 1.28× faster"
    assert ratio_words(-0.2, Direction.MINIMIZE, "latency", "") == "+25.0% time, 1.25× slower"
    assert ratio_words(0.25, Direction.MINIMIZE, "peak_kb", "KB") == \
        "-20.0% peak_kb, 1.25× lower"
    assert ratio_words(0.28, Direction.MAXIMIZE, "tps", "tok/s") == ""
    assert compounded([0.5, 0.3]) == 1.5 * 1.3 - 1.0
    assert compounded([]) is None and compounded([None]) is None
    words = paired_words({"effect": 0.28, "lo": 0.2, "hi": 0.36, "pairs": 12,
                          "compounded": 0.3, "kept": 3}, Direction.MINIMIZE, "time", "s")
    assert words == ("+28.00% [+20.00%, +36.00%] (-21.9% time, 1.28× faster "
                     "[1.20×, 1.36×]), 12 pairs; the 3 kept effects compound to +30.00%")


def test_the_chain_of_keeps_compounds_exactly_and_sets_aside_a_broken_round() -> None:
    import math

    import pytest

    from assay.errors import AssayError
    from assay.measure.chain import Link, summarize

    chain = [Link("baseline", "a" * 40, {}), Link("e0001", "b" * 40, {}),
             Link("e0002", "c" * 40, {})]
    # times to minimize: e0001 makes it 1.25x faster, e0002 another 1.1x; the load of each
    # round scales all three runs alike, so only the ratios matter
    load = [1.0, 1.4, 0.8, 1.2, 1.05]
    jitter = [(1.0, 1.01, 0.99), (0.99, 1.0, 1.01), (1.01, 0.99, 1.0), (1.0, 1.0, 0.99),
              (1.0, 0.995, 1.005)]
    values = [[2.0 * k * j[0], 2.0 / 1.25 * k * j[1], 2.0 / 1.25 / 1.1 * k * j[2]]
              for k, j in zip(load, jitter, strict=True)]
    values.append([2.0, math.nan, 1.5])  # a failed run: the whole round is set aside
    r = summarize(chain, values, Direction.MINIMIZE, 0.9)
    assert r.rounds == 5 and r.runs == 18 and len(r.set_aside) == 1
    assert "round 6" in r.set_aside[0] and "e0001" in r.set_aside[0]
    a, b = r.steps
    assert abs(a.effect - 0.25) < 0.02 and abs(b.effect - 0.10) < 0.02
    assert a.lo < a.effect < a.hi and b.lo < b.effect < b.hi
    # the steps compound exactly to the total, whatever the load did
    assert math.isclose((1 + a.effect) * (1 + b.effect), 1 + r.total, rel_tol=1e-12)
    assert r.lo < 1.25 * 1.1 - 1 < r.hi
    # to maximize, the same values read the other way
    up = summarize(chain, values, Direction.MAXIMIZE, 0.9)
    assert up.steps[0].effect < 0 and math.isclose(1 + up.total, 1 / (1 + r.total))
    with pytest.raises(AssayError, match="1 usable round"):
        summarize(chain, [values[0], values[-1]], Direction.MINIMIZE, 0.9)


def test_chain_rounds_zero_leaves_the_chain_out(tmp_path: Path) -> None:
    root = repo(tmp_path, run="chain_rounds = 0")
    summary = api.run(root, proposer="queue", budget=2)
    assert len(summary.kept) == 2 and summary.verified is not None
    assert summary.verified["chain"] is None
    assert summary.verified["compounded"] is not None


def test_a_chain_that_cannot_be_measured_keeps_the_paired_total(tmp_path: Path) -> None:
    # the second keep's bench fails in the chain's trees only: the chain has no usable
    # round, which is said, and the paired total measured before it is stored all the same
    bench = BENCH.replace('print(f"METRIC', 'import os, sys\n'
                          'if b.FAST_B and "chain-" in os.getcwd():\n'
                          '    sys.exit("no GPU here")\n'
                          'print(f"METRIC')
    root = make_repo(tmp_path / "repo", {
        "bench.py": bench, "assay.toml": CONFIG.format(python=sys.executable, run="")})
    folder = root / ".queue"
    folder.mkdir()
    for i, (path, old, new) in enumerate([("a.py", "FAST_A = False", "FAST_A = True"),
                                          ("b.py", "FAST_B = False", "FAST_B = True")]):
        (folder / f"{i:02d}.patch").write_text(f"# hypothesis: {path}\n"
                                               + edit(root, path, old, new))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "queue the patches")
    res = CliRunner().invoke(app, ["run", "-C", str(root), "--proposer", "queue",
                                   "--budget", "2"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "the chain of keeps was not measured together: measuring the chain of keeps: " \
           "0 usable round(s) of 6" in out
    j = journal_of(root)
    try:
        v = j.get_meta("verification")
    finally:
        j.close()
    assert v["state"] == "kept" and v["lo"] < TRUE_TOTAL < v["hi"]
    assert "0 usable round(s)" in v["chain"]["error"]
    assert "improvement (paired, baseline vs final best): +" in out


def test_the_verification_lines_name_only_the_runs_own_ids_and_commits(tmp_path: Path) -> None:
    import re

    root = repo(tmp_path)
    res = CliRunner().invoke(app, ["run", "-C", str(root), "--proposer", "queue", "--budget",
                                   "2", "-v"])
    assert res.exit_code == 0, res.output
    j = journal_of(root)
    try:
        inc, base = j.incumbent(), str(j.get_meta("base_commit"))
    finally:
        j.close()
    assert inc is not None
    lines = [ln for ln in res.output.splitlines() if "[verify-" in ln]
    assert any("kept:" in ln for ln in lines), res.output  # the comparison's verdict
    for ln in lines:
        # the comparison's own experiment (its e0001) and the commit it made on its scratch
        # branch are not the run's: a line names neither
        assert not re.search(r"\be\d{4}\b", ln), ln
        for sha in re.findall(r"\b[0-9a-f]{12}\b", ln):
            assert base.startswith(sha) or inc.commit.startswith(sha), ln


def test_a_run_that_ends_removes_the_trees_it_will_not_reuse_and_says_what_it_keeps(
        tmp_path: Path) -> None:
    root = repo(tmp_path)
    res = CliRunner().invoke(app, ["run", "-C", str(root), "--proposer", "queue", "--budget",
                                   "2"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "verified: the final best" in out  # its chain of keeps was built in chain-0..2
    trees = root / ".assay" / "worktrees"
    assert sorted(p.name for p in trees.iterdir()) == ["s0-a", "s0-b"]
    assert "removed 3 worktree(s) no run reuses (chain-0, chain-1, chain-2)" in out
    assert "kept s0-a, s0-b in .assay/worktrees: the slots' trees, which the next run " \
           "reuses" in out
    listed = git(root, "worktree", "list", "--porcelain")
    assert "chain-" not in listed and listed.count("worktree ") == 3  # the repository, s0-a/b
    # the next run reuses the slots' trees as they are
    again = CliRunner().invoke(app, ["run", "-C", str(root), "--proposer", "queue", "--budget",
                                     "1"])
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in trees.iterdir()) == ["s0-a", "s0-b"]
