"""One candidate, two platforms: a real loop over two local platform groups.

The benchmark reads the platform its slot belongs to (an environment variable set per
platform) and the flag files a candidate adds, so one candidate is faster on x86 only,
another faster on x86 and slower on ARM, another faster on ARM only. Values are scripted
(see tests/scripted.py), so the decisions do not depend on the machine's load.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from assay import api
from assay.cli.app import app
from assay.loop import stopping as loop_stop

from .conftest import git, make_repo
from .scripted import DRAW

BENCH = DRAW + r'''
import os, pathlib, sys
platform = os.environ["PLATFORM"]
factor = {"x86": 1.0, "arm": 1.0}
effects = {"x86-only": {"x86": 1.25}, "x86-hurts-arm": {"x86": 1.25, "arm": 0.80},
           "arm-only": {"arm": 1.25}, "no-op": {}}
for flag in sorted(pathlib.Path("flags").glob("*")):
    for where, f in effects.get(flag.name, {}).items():
        factor[where] *= f
print(f"METRIC speed={1000.0 * factor[platform] * draw():.4f}")
'''

CHECKS = r'''
import os, pathlib, sys
if os.environ["PLATFORM"] == "arm" and pathlib.Path("flags/needs-avx2").exists():
    print("FAILED tests/test_simd.py::test_dot - illegal instruction on this platform")
    sys.exit(1)
'''

CONFIG = f'''
[metric]
name = "speed"
direction = "maximize"

[commands]
bench = "{sys.executable} bench.py"
checks = "{sys.executable} checks.py"
bench_timeout = 60

[scope]
editable = ["flags/*"]
protected = ["bench.py", "checks.py"]

[proposer.queue]
path = "patches"

[run]
budget = 10
proposer = "queue"

[decision]
rule = "sequential"
pairs_per_block = 2
max_pairs = 12
aa_blocks = 1
delta = 0.05
confirm = false
{{keep_on}}

[[platforms]]
name = "x86"
env = {{{{ PLATFORM = "x86" }}}}

[[platforms]]
name = "arm"
env = {{{{ PLATFORM = "arm" }}}}
'''


def _target(tmp_path: Path, flags: list[str], keep_on: str = "") -> Path:
    root = make_repo(tmp_path / "repo", {
        "bench.py": BENCH, "checks.py": CHECKS, "flags/.keep": "",
        "assay.toml": CONFIG.format(keep_on=keep_on)})
    patches = root / "patches"
    patches.mkdir()
    for i, flag in enumerate(flags, 1):
        (root / "flags" / flag).write_text("on\n")
        git(root, "add", "-N", f"flags/{flag}")
        diff = git(root, "diff")
        git(root, "reset", "-q", f"flags/{flag}")
        (root / "flags" / flag).unlink()
        (patches / f"{i}-{flag}.patch").write_text(f"# hypothesis: {flag}\n{diff}")
    return root


def test_a_candidate_is_kept_by_the_primary_platform_and_refused_for_a_regression(
        tmp_path: Path) -> None:
    root = _target(tmp_path, ["x86-only", "x86-hurts-arm", "arm-only", "needs-avx2"])
    api.run(root, proposer="queue")
    log = {e["hypothesis"]: e for e in api.log(root)}
    assert log["x86-only"]["state"] == "kept"
    assert log["x86-hurts-arm"]["state"] == "discarded"
    assert "regresses on platform arm" in log["x86-hurts-arm"]["note"]
    assert log["arm-only"]["state"] == "discarded"
    assert "not an improvement on the primary platform x86" in log["arm-only"]["note"]
    broken = log["needs-avx2"]
    assert broken["state"] == "invalid"
    assert "on platform arm" in broken["note"] and "test_simd.py::test_dot" in broken["note"]
    assert "logs: x86" in broken["note"] and "arm" in broken["note"]

    # each platform's effect and interval are stored and shown
    shown = api.show(log["x86-only"]["id"], root)
    rows = {r["platform"]: r for r in shown["decision"]["details"]["platforms"]}
    assert rows["x86"]["state"] == "keep" and rows["x86"]["effect"] > 0.15
    assert abs(rows["arm"]["effect"]) < 0.03
    assert rows["x86"]["lo"] is not None and rows["x86"]["lo"] < rows["x86"]["effect"]
    # slots are compared within the platform that decided, never across platforms
    assert "arm-0" not in shown["decision"]["reason"]
    hurt = api.show(log["x86-hurts-arm"]["id"], root)["decision"]["details"]["platforms"]
    effects = {r["platform"]: r["effect"] for r in hurt}  # B/A - 1: positive is better
    assert abs(effects["x86"] - 0.25) < 0.02 and abs(effects["arm"] + 0.20) < 0.02
    # every block ran on a slot of its own platform, and both platforms were calibrated
    for e in log.values():
        for r in api.show(e["id"], root)["runs"]:
            assert r["slot"].split("-")[0] in ("x86", "arm")
    out = subprocess.run([sys.executable, "-m", "assay", "show", log["x86-only"]["id"], "-C",
                          str(root)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    table = out.stdout[out.stdout.index("platform"):]
    assert "x86" in table and "arm" in table and "keep" in table
    # the report carries the same rows into the experiment's details (drawn as a table)
    from assay.config import spec as cfg
    from assay.faces.data import open_readonly, report_data

    target = cfg.load(root)
    journal = open_readonly(target)
    try:
        details = report_data(target, journal)["details"]
    finally:
        if journal is not None:
            journal.close()
    last = details[log["x86-hurts-arm"]["id"]]["decisions"][-1]
    assert {r["platform"]: round(r["effect"], 4) for r in last["details"]["platforms"]} == \
        {k: round(v, 4) for k, v in effects.items()}
    assert app is not None


def test_keep_on_any_keeps_a_win_on_the_second_platform(tmp_path: Path) -> None:
    root = _target(tmp_path, ["arm-only", "no-op"], keep_on='keep_on = "any"')
    api.run(root, proposer="queue")
    log = {e["hypothesis"]: e for e in api.log(root)}
    assert log["arm-only"]["state"] == "kept"
    assert log["no-op"]["state"] == "discarded"
    rows = api.show(log["arm-only"]["id"], root)["decision"]["details"]
    assert rows["decided_on"] == "arm"


def test_a_platform_that_goes_away_pauses_its_decisions(tmp_path: Path) -> None:
    root = _target(tmp_path, ["x86-only"])
    from assay.config import spec as config

    target = config.load(root)
    events: list[tuple[str, str]] = []
    old = loop_stop.PAUSE_LIMIT_S
    loop_stop.PAUSE_LIMIT_S = 1.0
    try:
        with api.session(target, on_event=lambda k, m, e: events.append((k, m))) as lp:
            lp.executor.quarantine("arm-0")  # the ARM platform's only slot is gone
            summary = lp.run()
    finally:
        loop_stop.PAUSE_LIMIT_S = old
    assert any(k == "pause" and "platform arm has no slot left" in m for k, m in events)
    assert "platform arm went away" in summary.stopped
    j = api.open_journal(target, readonly=True)
    try:
        # nothing was decided without it: no experiment finished
        assert all(not e.state.is_finished() for e in j.experiments())
    finally:
        j.close()


def test_finalize_checks_each_platform_and_gives_a_per_platform_table(tmp_path: Path) -> None:
    from assay.finalize.run import finalize

    root = _target(tmp_path, ["x86-only"])
    api.run(root, proposer="queue")
    assert {e["hypothesis"]: e["state"] for e in api.log(root)} == {"x86-only": "kept"}
    res = finalize(root, reviewer=None)
    [o] = res.outcomes
    assert o.alone is not None and o.without is not None
    rows = {(r["platform"]): r for r in o.alone.platforms}
    assert set(rows) == {"x86", "arm"}
    assert abs(rows["x86"]["effect"] - 0.25) < 0.02 and abs(rows["arm"]["effect"]) < 0.03
    text = (res.folder / o.group.slug / "PR.md").read_text()
    table = text[text.index("Per platform"):]
    lines = [ln for ln in table.splitlines() if ln.startswith("| x86 ") or
             ln.startswith("| arm ")]
    assert [ln.split(" | ")[0:2] for ln in lines] == [
        ["| x86", "this change alone"], ["| x86", "final tree without it"],
        ["| arm", "this change alone"], ["| arm", "final tree without it"]]
    assert f"| {rows['x86']['effect']:+.2%} |" in lines[0] and lines[0].endswith("| keep |")
    assert f"| {rows['arm']['effect']:+.2%} |" in lines[2]
    # the checks ran with each local platform's environment (checks.py reads PLATFORM)
    assert "pass on merge-base + this change alone on platforms x86, arm" in text
