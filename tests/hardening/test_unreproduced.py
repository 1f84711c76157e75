"""A keep that the end-of-run verification does not reproduce is said first, by name.

The target's benchmark counts operations (scripted, exact), so the halved work is kept for
sure; then a flag file outside the repository makes every tree measure the same, as if the
keep's gain had come from the moment it was measured. The verification then sees nothing:
``assay status``, the report and ``assay finalize`` say so before anything else, name the
keep and offer ``assay verify --per-keep``, which measures the keep alone against its
parent and finds it not reproduced.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hardening_kit import ListProposer, Repo, git, make_repo
from rich.console import Console

import assay.api as api
from assay.cli import finalize as command
from assay.faces import report
from assay.faces.terminal import RunPrinter
from assay.finalize.run import finalize
from assay.loop.progress import Summary
from assay.measure import verify
from assay.model import Candidate, Decision, Direction, Experiment, ExperimentState, Verdict

BENCH = """\
import os
import sys

sys.path.insert(0, os.getcwd())
import work

ops = work.run(work.SIZE)
speed = 1000.0 if os.path.exists({flag!r}) else 1e9 / max(ops, 1)
print(f"METRIC speed={{speed:.6f}}")
"""


def kept_then_flat(tmp_path: Path) -> Repo:
    repo = make_repo(tmp_path, counted=True)
    (repo.root / "bench.py").write_text(BENCH.format(flag=str(tmp_path / "flat")))
    text = (repo.root / "assay.toml").read_text().replace("budget = 4",
                                                          "budget = 4\nverify = false")
    (repo.root / "assay.toml").write_text(text)
    git(repo.root, "commit", "-qam", "flag-aware bench, verified on demand")
    api.run(repo.root, budget=1, proposer_obj=ListProposer([
        {"params": {"SIZE": 100000}, "hypothesis": "half the work"}]))
    (exp,) = api.log(repo.root)
    assert exp["state"] == "kept", exp
    (tmp_path / "flat").write_text("")  # from now on the gain is gone
    api.verify(repo.root)
    return repo


def cli(repo: Repo, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from assay.cli.app import main; main()", *args,
                           "-C", str(repo.root)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "300"})


def test_an_unreproduced_keep_is_flagged_first_and_measured_per_keep(tmp_path: Path) -> None:
    repo = kept_then_flat(tmp_path)
    st = api.status(repo.root)
    flag = st["unreproduced"]
    assert "e0001" in flag and "assay verify --per-keep" in flag, flag
    assert "contains zero" in flag, flag

    out = cli(repo, "status")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("warning: the keeps are not reproduced"), \
        out.stdout
    assert "e0001" in out.stdout.splitlines()[0]

    html = report.build(api.load(repo.root))
    assert "the keeps are not reproduced" in html and "e0001" in html

    per = cli(repo, "verify", "--per-keep")
    assert per.returncode == 0, per.stdout + per.stderr
    line = next(ln for ln in per.stdout.splitlines() if ln.startswith("e0001"))
    assert "alone against its parent" in line and "not reproduced" in line, per.stdout
    st = api.status(repo.root)
    assert [k["id"] for k in st["per_keep"]] == ["e0001"]
    assert st["per_keep"][0]["reproduced"] is False


def test_finalize_says_it_first_and_never_speaks_of_a_measurement_it_did_not_make(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = kept_then_flat(tmp_path)
    lines: list[str] = []
    res = finalize(repo.root, measure_groups=False, report=lines.append)
    assert lines[0].startswith("warning: the keeps are not reproduced"), lines
    changes = res.changes
    assert "the keeps are not reproduced" in changes.splitlines()[2], changes
    (pr,) = list(res.folder.glob("*/PR.md"))
    text = pr.read_text()
    assert "the keeps are not reproduced" in text
    assert "stands on its own" not in text and "Paired ABBA blocks" not in text, text
    assert "Not measured" in text and "measurement journals" not in text
    assert "stands on its own" not in changes and "| not measured |" in changes, changes
    buf = io.StringIO()
    monkeypatch.setattr(command, "console", Console(file=buf, width=300, color_system=None))
    command.print_result(res)
    shown = buf.getvalue()
    assert "not measured (--no-measure)" in shown, shown
    assert "each group on its own" not in shown and "stands on its own" not in shown, shown


def test_the_run_summary_says_it_first(tmp_path: Path) -> None:
    repo = kept_then_flat(tmp_path)
    target = api.load(repo.root)
    journal = api.open_journal(target, readonly=True)
    try:
        kept = journal.experiments([ExperimentState.KEPT])
        checked = verify.current(journal)
    finally:
        journal.close()
    assert checked is not None
    buf = io.StringIO()
    summary = Summary(baseline=1.0, best=2.0, kept=kept, finished=1, counts={"kept": 1},
                      stopped="done", branch="assay/main", verified=checked.as_dict())
    RunPrinter(Console(file=buf, width=300, color_system=None)).summary(
        summary, "speed", "", Direction.MAXIMIZE)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    assert lines[1].startswith("warning: the keeps are not reproduced"), lines
    assert "e0001" in lines[1] and "assay verify --per-keep" in lines[1]


def _kept(eid: str, effect: float, lo: float, hi: float) -> Experiment:
    return Experiment(id=eid, seq=int(eid[1:]), state=ExperimentState.KEPT,
                      candidate=Candidate(base_commit="0" * 40), created_at=0.0, updated_at=0.0,
                      decision=Decision(Verdict.KEEP, "kept", effect, lo, hi))


@pytest.mark.parametrize(("lo", "hi", "flagged"), [
    (1.0034, 1.0138, ""),  # beside the keep's own interval: the same total, measured again
    (0.20, 0.40, "lies apart from the +100.05% [+97.00%, +103.00%] the keeps compound to"),
    (-0.10, 0.50, "contains zero"),
])
def test_a_verification_is_set_against_the_keeps_intervals_not_their_point(
        lo: float, hi: float, flagged: str) -> None:
    kept = [_kept("e0001", 1.0005, 0.97, 1.03)]
    v = {"effect": (lo + hi) / 2, "lo": lo, "hi": hi, "compounded": 1.0005}
    words = verify.unreproduced(v, kept)
    if flagged:
        assert flagged in words and "e0001" in words and "--per-keep" in words, words
    else:
        assert words == "", words


def test_the_keeps_intervals_compound() -> None:
    kept = [_kept("e0001", 0.10, 0.05, 0.15), _kept("e0002", 0.20, 0.10, 0.30)]
    lo, hi = verify.chain_interval(kept) or (None, None)
    assert lo == pytest.approx(1.05 * 1.10 - 1) and hi == pytest.approx(1.15 * 1.30 - 1)
