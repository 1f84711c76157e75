"""The expensive rule through the whole loop: calibration costs two incumbent runs that
serve as history, the baseline is the base commit's measurement, a kept candidate's runs
are the new incumbent's history, and a clean 9% gain is not screened as implausible."""

from __future__ import annotations

import json
import sqlite3
import statistics

from typer.testing import CliRunner

from assay import api
from assay.cli.app import app

from .conftest import TinyFactory, git, patch_work


def test_expensive_calibration_history_and_baseline(tiny_target: TinyFactory) -> None:
    root = tiny_target(work=300_000, slots=1, budget=2, pairs=4,
                       extra='[proposer.queue]\npath = "patches"\n')
    cfg = root / "assay.toml"
    cfg.write_text(cfg.read_text().replace('rule = "fixed"', 'rule = "expensive"')
                   .replace("aa_blocks = 0", "aa_blocks = 2\nconfirm = false"))
    git(root, "commit", "-qam", "expensive rule")
    first = patch_work(root, 275_000)  # 300000 -> 275000 loop steps: speed x1.09
    p = root / "work.py"
    old = p.read_text()
    p.write_text(old.replace("WORK = 300000", "WORK = 275000"))  # the tree once 1 is kept
    git(root, "commit", "-qam", "as kept")
    p.write_text(p.read_text().replace("UNITS = 1000", "UNITS = 1090"))  # a further x1.09
    second = git(root, "diff")
    p.write_text(old)
    git(root, "commit", "-qam", "back to the base")
    folder = root / "patches"
    folder.mkdir()
    (folder / "1.patch").write_text("# hypothesis: nine percent\n" + first)
    (folder / "2.patch").write_text("# hypothesis: nine percent more\n" + second)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "patches")

    summary = api.run(root, proposer="queue")
    db = sqlite3.connect(root / ".assay" / "journal.sqlite")
    cal = [json.loads(m)["speed"] for (m,) in db.execute(
        "SELECT metrics FROM runs WHERE experiment_id = 'cal' AND status = 'ok'")]
    assert len(cal) == 2  # one A/A pair although aa_blocks = 2
    assert summary.baseline == statistics.median(cal)
    states = {e["hypothesis"]: e["state"] for e in api.log(root)}
    assert states["nine percent"] == "kept", api.log(root)
    roles = {exp: "".join(r for (r,) in db.execute(
        "SELECT role FROM runs WHERE experiment_id = ? ORDER BY created_at", (exp,)))
        for exp in ("e0001", "e0002")}
    # no fresh incumbent run for e0001: the two calibration runs are its history; e0002
    # reuses e0001's one run as the new incumbent's history and adds one fresh run
    assert "A" not in roles["e0001"] and roles["e0002"].count("A") == 1, roles
    d1 = json.loads(db.execute("SELECT details FROM decisions WHERE experiment_id = 'e0001'"
                               " ORDER BY id DESC").fetchone()[0])
    assert d1["suspicious"] == 0 and d1["reruns"] == 0
    assert d1["incumbent_runs_reused"] == {"s0": 2}
    d2 = db.execute("SELECT decision FROM experiments WHERE id = 'e0002'").fetchone()[0]
    assert d2 is not None, (api.log(root), roles, summary.stopped)
    assert json.loads(d2)["details"]["incumbent_runs_reused"]["s0"] >= 1, d2
    assert summary.best is not None and summary.best > summary.baseline * 1.05
    # `status --json` is strict JSON (a NaN anywhere would be refused)
    out = CliRunner().invoke(app, ["status", "--root", str(root), "--json"])
    assert out.exit_code == 0, out.output

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in the JSON output")

    st = json.loads(out.output, parse_constant=refuse)
    assert st["calibration"]["pooled"] > 0 and st["incumbent"]["experiment"] is not None
    assert "nan" not in st["calibration"]["message"].lower()


def test_a_provisional_keep_cut_by_the_stop_is_in_the_summary(tiny_target: TinyFactory) -> None:
    """A run that stops while a candidate waits for its confirmation must not read as if no
    change beat the incumbent: the summary lists it with its latest look."""
    import io

    from rich.console import Console

    from assay.faces.terminal import RunPrinter
    from assay.model import Direction

    root = tiny_target(work=300_000, slots=1, budget=3, pairs=4,
                       extra='[proposer.queue]\npath = "patches"\n')
    cfg = root / "assay.toml"
    cfg.write_text(cfg.read_text().replace('rule = "fixed"', 'rule = "expensive"')
                   .replace("budget = 3\n", 'budget = 3\nproposer = "queue"\n'))
    git(root, "commit", "-qam", "the expensive rule, confirmation on, the queue")
    folder = root / "patches"
    folder.mkdir()
    (folder / "1.patch").write_text("# hypothesis: twice the work\n" + patch_work(root, 600_000))
    (folder / "2.patch").write_text("# hypothesis: nine percent\n" + patch_work(root, 275_000))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "two patches")
    seen: list[str] = []
    with api.session(api.load(root)) as loop:
        loop.on_event = lambda kind, msg, exp: seen.append(msg)
        summary = loop.run(until=lambda: "stopped before the confirmation" if any(
            "provisional keep" in m for m in seen) else "")
    assert summary.stopped == "stopped before the confirmation", seen
    assert summary.kept == [] and summary.finished == 1
    [waiting] = summary.open
    assert waiting.id == "e0002" and waiting.decision is not None
    assert waiting.decision.effect is not None and waiting.decision.effect > 0.05
    buf = io.StringIO()
    RunPrinter(Console(file=buf, width=100)).summary(summary, "speed", "", Direction.MAXIMIZE)
    out = buf.getvalue()
    assert "no change beat the incumbent" not in out
    assert "measured, not decided yet" in out
    assert "experiments: 1 finished (discarded 1)" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("  e0002 "))
    assert "provisional keep" in row and "nine percent" in row and "+" in row
    # `assay status` says the same between the runs
    assert [e["id"] for e in api.status(root)["open"]] == ["e0002"]
    shown = CliRunner().invoke(app, ["status", "--root", str(root)])
    assert shown.exit_code == 0, shown.output
    assert "measured, not decided yet" in shown.output
    assert any(ln.startswith("  e0002 ") and "provisional keep" in ln
               for ln in shown.output.splitlines()), shown.output
    # the next run goes on with it: confirmed, then kept
    resumed = api.run(root)
    assert [e.id for e in resumed.kept] == ["e0002"] and resumed.open == []
