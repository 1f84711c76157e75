"""Build once, measure many; checks once per candidate (and first on the incumbent); compare."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from assay import api
from assay.bench.checks import CheckMemo, failing_tests
from assay.bench.contain import seed_cache
from assay.bench.outputs import compare_outputs
from assay.bench.process import CancelToken
from assay.bench.steps import ChecksOutcome, run_checks
from assay.config.spec import parse
from assay.faces.data import experiment_data
from assay.finalize.run import finalize
from assay.repo.workspace import rewrite_assignment

from .conftest import TinyFactory, git, patch_work

QUEUE = '[proposer.queue]\npath = "patches"\n'


@pytest.fixture(autouse=True)
def _unconfined(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count builds and checks in logs outside the trees, which the sandbox
    forbids (tests/test_sandbox.py tests the sandbox)."""
    monkeypatch.setenv("ASSAY_SANDBOX", "off")


def _commands(root: Path, **cmds: str) -> None:
    cfg = (root / "assay.toml").read_text()
    lines = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in cmds.items())
    cfg = cfg.replace("bench_timeout = 30\n", "bench_timeout = 30\n" + lines)
    protected = ", ".join(f'"{p}"' for p in ("bench.py", "build.py", "checks.py", "cmp.py"))
    cfg = cfg.replace('protected = ["bench.py"]', f"protected = [{protected}]")
    if "verify =" not in cfg:  # these tests count the builds and checks of the candidates
        cfg = cfg.replace("\n[run]\n", "\n[run]\nverify = false\n", 1)
    (root / "assay.toml").write_text(cfg)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "commands")


def _queue(root: Path, patches: dict[str, tuple[str, str]]) -> None:
    folder = root / "patches"
    folder.mkdir(exist_ok=True)
    for name, (hyp, diff) in patches.items():
        (folder / name).write_text(f"# hypothesis: {hyp}\n{diff}")


# A build and a checks script that count their runs in a file outside the repository.
BUILD = """\
import pathlib, sys, work
with open(sys.argv[1], "a") as fh:
    fh.write(f"{pathlib.Path.cwd().name} {work.WORK}\\n")
"""
CHECKS = """\
import os, pathlib, sys, work
log = pathlib.Path(sys.argv[1])
with open(log, "a") as fh:
    fh.write(f"{pathlib.Path.cwd().name} {work.WORK}\\n")
seen = log.read_text().splitlines().count(f"{pathlib.Path.cwd().name} {work.WORK}")
if work.WORK == 12345:
    print("FAILED tests/test_work.py::test_work_is_not_12345 - assert 12345 != 12345")
    sys.exit(1)
if work.WORK == 54321 and seen == 1:
    print("FAILED tests/test_timing.py::test_fast_enough - took 0.2 s")
    sys.exit(1)
"""


def _tracked(tiny_target: TinyFactory, tmp_path: Path, work: int = 300_000) -> Path:
    root = tiny_target(work=work, budget=3, pairs=4, extra=QUEUE,
                       files={"build.py": BUILD, "checks.py": CHECKS})
    py = sys.executable
    _commands(root, build=f"{py} build.py {tmp_path / 'builds.log'}",
              checks=f"{py} checks.py {tmp_path / 'checks.log'}")
    return root


def test_a_candidate_is_built_and_checked_once_across_its_blocks(
        tiny_target: TinyFactory, tmp_path: Path) -> None:
    root = _tracked(tiny_target, tmp_path)
    _queue(root, {"1.patch": ("twice the work", patch_work(root, 600_000)),
                  "2.patch": ("a tenth of the work", patch_work(root, 30_000))})
    api.run(root, proposer="queue")
    builds = (tmp_path / "builds.log").read_text().splitlines()
    checks = (tmp_path / "checks.log").read_text().splitlines()
    # The incumbent tree is built once (session start), each candidate once.
    assert builds.count("s0-a 300000") == 1, builds
    assert builds.count("s0-b 30000") == 1, builds
    assert builds.count("s0-b 600000") == 1, builds
    # Checks: once on the incumbent before anything, then once per candidate.
    assert checks[0] == "s0-a 300000", checks
    assert checks.count("s0-b 30000") == 1 and checks.count("s0-b 600000") == 1, checks
    for exp in ("e0001", "e0002"):
        blocks = api.show(exp, root)["blocks"]
        assert len(blocks) >= 2, blocks  # measured in more than one block
        assert blocks[0]["checks_runs"] == 1 and blocks[0]["checks_outcome"] == "passed"
        assert all(b["checks_runs"] == 0 for b in blocks[1:]), blocks
        assert all(b["build_s"] == 0.0 for b in blocks[1:]), blocks  # warm: no rebuild
        assert blocks[0]["build_s"] > 0.0, blocks  # the candidate's one build, timed
    # The report shows each block's build time and checks runs the way `assay show` does.
    target = api.load(root)
    journal = api.open_journal(target, readonly=True)
    try:
        detail = experiment_data(target, journal, "e0002")
    finally:
        journal.close()
    assert detail is not None
    shown = [(b["build_s"], b["checks_runs"], b["checks_outcome"]) for b in detail["blocks"]]
    assert [(b["build_s"], b["checks_runs"], b["checks_outcome"])
            for b in api.show("e0002", root)["blocks"]] == shown
    assert shown[0][0] > 0.0 and shown[0][1:] == (1, "passed"), shown


ENV_BUILD = """\
import os, pathlib, sys
with open(sys.argv[1], "a") as fh:
    fh.write(f"{pathlib.Path.cwd()}|{os.environ.get('CCACHE_BASEDIR', '-')}|"
             f"{os.environ.get('SCCACHE_BASEDIRS', '-')}|{os.environ.get('CCACHE_DIR', '-')}|"
             f"{os.environ.get('SCCACHE_DIR', '-')}|{os.environ.get('RTCACHE', '-')}\\n")
    cache = os.environ.get("RTCACHE")
    if cache:  # what a build left in its cache before, then its own entry
        seen = sorted(p.name for p in pathlib.Path(cache).iterdir())
        with open(sys.argv[1] + ".seen", "a") as fh:
            fh.write(f"{pathlib.Path.cwd().name}|{','.join(seen)}\\n")
        (pathlib.Path(cache) / f"{pathlib.Path.cwd().name}-{len(seen)}").write_text("")
"""


def _path_without(folder: Path, *names: str) -> str:
    """This PATH with ``names`` left out: a folder holding one is replaced by links to the rest."""
    dirs: list[str] = []
    for i, entry in enumerate(os.environ["PATH"].split(os.pathsep)):
        here = Path(entry)
        if not any((here / n).exists() for n in names):
            dirs.append(entry)
            continue
        copy = folder / str(i)
        copy.mkdir(parents=True)
        for item in here.iterdir():
            if item.name not in names:
                (copy / item.name).symlink_to(item)
        dirs.append(str(copy))
    return os.pathsep.join(dirs)


@pytest.mark.parametrize("tools", [True, False])
def test_compiler_caches_point_at_the_slots_tree(
        tiny_target: TinyFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        tools: bool) -> None:
    root = tiny_target(work=300_000, budget=2, pairs=2, extra=QUEUE,
                       files={"build.py": ENV_BUILD})
    config = root / "assay.toml"
    config.write_text(config.read_text().replace("[run]\n", '[run]\ncompile_cache = ["RTCACHE"]\n'))
    _commands(root, build=f"{sys.executable} build.py {tmp_path / 'env.log'}")
    _queue(root, {"1.patch": ("twice the work", patch_work(root, 600_000)),
                  "2.patch": ("a tenth of the work", patch_work(root, 30_000))})
    if tools:
        fake = tmp_path / "bin"
        fake.mkdir()
        for name in ("ccache", "sccache"):
            (fake / name).write_text('#!/bin/sh\nexec "$@"\n')
            (fake / name).chmod(0o755)
        monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    else:  # the tools are absent whatever this machine has installed
        monkeypatch.setenv("PATH", _path_without(tmp_path / "path", "ccache", "sccache"))
    monkeypatch.delenv("CCACHE_BASEDIR", raising=False)
    monkeypatch.delenv("SCCACHE_BASEDIRS", raising=False)
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "users-ccache"))  # the user's own
    api.run(root, proposer="queue")
    lines = [ln.split("|") for ln in (tmp_path / "env.log").read_text().splitlines()]
    assert {Path(cwd).name for cwd, *_ in lines} == {"s0-a", "s0-b"}, lines
    caches = root / ".assay" / "cache" / "s0"
    for cwd, ccache, sccache, ccache_dir, sccache_dir, own in lines:
        tree = Path(cwd).name  # each tree is its own base and has its own cache folders
        assert Path(own) == caches / tree / "rtcache", lines
        for tool, base, folder in (("ccache", ccache, ccache_dir),
                                   ("sccache", sccache, sccache_dir)):
            if tools or shutil.which(tool):  # without the fake, the machine's own if any
                assert Path(base).resolve() == Path(cwd).resolve(), lines
                assert Path(folder) == caches / tree / tool, lines
            else:
                assert (base, folder) == ("-", "-"), lines
    # the candidate tree's first build starts from a copy of the incumbent tree's cache
    # (its entry s0-a-0), its cache persists across its own builds (the second candidate's
    # build finds the first's entry), and the incumbent's tree never holds what the
    # candidate's builds wrote
    seen = [ln.split("|") for ln in (tmp_path / "env.log.seen").read_text().splitlines()]
    assert [entries for tree, entries in seen if tree == "s0-a"] == [""], seen
    assert [entries for tree, entries in seen if tree == "s0-b"] == ["s0-a-0",
                                                                     "s0-a-0,s0-b-1"], seen
    assert sorted(p.name for p in (caches / "s0-a" / "rtcache").iterdir()) == ["s0-a-0"]


def test_finalize_builds_with_the_compiler_cache_pointed_at_its_tree(
        tiny_target: TinyFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tiny_target(work=300_000, budget=1, pairs=2, extra=QUEUE,
                       files={"build.py": ENV_BUILD})
    _commands(root, build=f"{sys.executable} build.py {tmp_path / 'env.log'}")
    _queue(root, {"1.patch": ("a tenth of the work", patch_work(root, 30_000))})
    fake = tmp_path / "bin"
    fake.mkdir()
    for name in ("ccache", "sccache"):
        (fake / name).write_text('#!/bin/sh\nexec "$@"\n')
        (fake / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CCACHE_BASEDIR", raising=False)
    monkeypatch.delenv("SCCACHE_BASEDIRS", raising=False)
    assert len(api.run(root, proposer="queue").kept) == 1
    log = tmp_path / "env.log"
    log.write_text("")
    finalize(root, measure_groups=False, reviewer=None)
    lines = [ln.split("|") for ln in log.read_text().splitlines()]
    assert lines, "finalize built nothing"
    for cwd, ccache, sccache, *_ in lines:  # the finalize tree is its own base, as a slot's is
        assert Path(ccache).resolve() == Path(cwd).resolve(), lines
        assert Path(sccache).resolve() == Path(cwd).resolve(), lines


def test_failing_checks_are_told_apart_from_flaky_ones(
        tiny_target: TinyFactory, tmp_path: Path) -> None:
    root = _tracked(tiny_target, tmp_path)
    _queue(root, {"1.patch": ("breaks the checks", patch_work(root, 12345)),
                  "2.patch": ("a timing test fails once", patch_work(root, 54321))})
    events: list[str] = []
    api.run(root, proposer="queue", on_event=lambda k, m, e: events.append(m))
    log = {e["hypothesis"]: e for e in api.log(root)}
    broken = log["breaks the checks"]
    assert broken["state"] == "invalid"
    assert broken["note"].startswith("checks_failed: tests/test_work.py::test_work_is_not_12345")
    assert "passed on the incumbent" in broken["note"]
    flaky = log["a timing test fails once"]
    assert flaky["state"] in ("kept", "discarded")  # measured: the failure was not its own
    block = api.show(flaky["id"], root)["blocks"][0]
    assert block["checks_outcome"] == "flaky" and block["checks_runs"] == 2
    assert "tests/test_timing.py::test_fast_enough" in block["checks_detail"]
    assert any("checks_flaky" in m for m in events)
    checks = (tmp_path / "checks.log").read_text().splitlines()
    # the real failure: twice on the candidate, once more on the incumbent
    assert checks.count("s0-b 12345") == 2 and checks.count("s0-a 300000") == 2, checks


def test_checks_failing_on_the_incumbent_stop_the_session_at_once(
        tiny_target: TinyFactory, tmp_path: Path) -> None:
    root = _tracked(tiny_target, tmp_path, work=12345)
    _queue(root, {"1.patch": ("less work", patch_work(root, 1000))})
    summary = api.run(root, proposer="queue")
    assert "checks fail on the incumbent" in summary.failed
    assert "test_work_is_not_12345" in summary.failed  # the failing output's tail
    assert api.log(root)[0]["state"] == "queued" if api.log(root) else True
    assert not (tmp_path / "builds.log").read_text().count("s0-b")  # nothing else ran
    assert "r1-A.out" not in "".join(str(p) for p in (root / ".assay").rglob("*.out"))


def test_compare_rejects_a_candidate_whose_output_differs(
        tiny_target: TinyFactory) -> None:
    cmp = "import work\nprint('sum', 1.0 / work.WORK * 1000)\nprint('ok')\n"
    root = tiny_target(work=300_000, budget=2, pairs=2, extra=QUEUE, files={"cmp.py": cmp})
    _commands(root, compare=f"{sys.executable} cmp.py")
    cfg = (root / "assay.toml").read_text()
    cfg = cfg.replace('compare = "', 'compare_rtol = 0.05\ncompare = "')
    (root / "assay.toml").write_text(cfg)
    git(root, "commit", "-qam", "rtol")
    _queue(root, {"1.patch": ("within tolerance", patch_work(root, 290_000)),
                  "2.patch": ("changes the result", patch_work(root, 30_000))})
    api.run(root, proposer="queue")
    log = {e["hypothesis"]: e for e in api.log(root)}
    assert log["within tolerance"]["state"] in ("kept", "discarded")
    wrong = log["changes the result"]
    assert wrong["state"] == "invalid"
    assert wrong["note"].startswith("compare: the candidate's output differs")
    assert "line 1" in wrong["note"] and "incumbent: sum 0.00333" in wrong["note"]


def test_a_crashing_incumbent_stops_calibration_on_its_first_run(
        tiny_target: TinyFactory) -> None:
    root = tiny_target(budget=2, pairs=2, slots=1)
    cfg = (root / "assay.toml").read_text().replace("aa_blocks = 0", "aa_blocks = 3")
    (root / "assay.toml").write_text(cfg)
    (root / "bench.py").write_text("import sys\nprint('boom', file=sys.stderr)\nsys.exit(3)\n")
    git(root, "commit", "-qam", "broken bench")
    summary = api.run(root)
    assert "calibration failed" in summary.failed and "crashed" in summary.failed
    assert "logs:" in summary.failed and "r1-A.err" in summary.failed
    outs = list((root / ".assay" / "logs" / "cal").rglob("r*-A.out"))
    assert len(outs) == 1, outs  # one run, not 3 blocks x 4 runs


def test_a_hanging_incumbent_stops_calibration_on_its_first_run(
        tiny_target: TinyFactory) -> None:
    root = tiny_target(budget=2, pairs=2, slots=1)
    cfg = (root / "assay.toml").read_text().replace("aa_blocks = 0", "aa_blocks = 3")
    (root / "assay.toml").write_text(cfg.replace("bench_timeout = 30", "bench_timeout = 1"))
    (root / "bench.py").write_text("import time\nprint('warming up', flush=True)\n"
                                   "time.sleep(60)\n")
    git(root, "commit", "-qam", "a bench that hangs")
    t0 = time.monotonic()
    summary = api.run(root)
    took = time.monotonic() - t0
    assert "calibration failed" in summary.failed and "timeout" in summary.failed, summary
    assert "killed after 1s" in summary.failed and "logs:" in summary.failed
    assert "r1-A.err" in summary.failed
    outs = list((root / ".assay" / "logs" / "cal").rglob("r*-A.out"))
    assert len(outs) == 1, outs  # the first run's timeout, not 3 blocks x 4 of them
    assert "warming up" in outs[0].read_text()
    assert took < 30, took  # one timeout (1 s) and the setup, never a 60 s sleep


def test_parameters_equal_to_the_file_keep_its_spelling() -> None:
    text = "TOTAL_BATCH_SIZE = 2**19  # tokens\nLR = 3e-4\n"
    assert rewrite_assignment(text, "TOTAL_BATCH_SIZE", 524288, "t.py") == text
    assert rewrite_assignment(text, "LR", 0.0003, "t.py") == text
    assert rewrite_assignment(text, "LR", 0.001, "t.py").endswith("LR = 0.001\n")
    assert "TOTAL_BATCH_SIZE = 262144  # tokens" in rewrite_assignment(
        text, "TOTAL_BATCH_SIZE", 262144, "t.py")


def test_failing_test_names_are_read_from_common_runners() -> None:
    out = ("FAILED tests/test_a.py::test_b - assert 1 == 2\n"
           "FAIL: test_parse (tests.test_mod.ParseTest)\n"
           "The following tests FAILED:\n\t  3 - test-backend-ops (Failed)\n"
           "--- FAIL: TestSum (0.00s)\n")
    assert failing_tests(out) == ["tests/test_a.py::test_b",
                                  "test_parse (tests.test_mod.ParseTest)",
                                  "test-backend-ops", "TestSum"]


def test_compare_outputs_within_tolerance_and_not() -> None:
    assert compare_outputs("x = 1.000, y = 2\n", "x = 1.001, y = 2\n", rtol=0.01) == []
    bad = compare_outputs("x = 1.0\nok\n", "x = 1.5\nok\n", rtol=0.01)
    assert [m.line for m in bad] == [1] and "1.0 differs from 1.5" in bad[0].why
    assert compare_outputs("a\n", "a\nb\n")[0].why == "the outputs have 1 and 2 lines"
    assert compare_outputs("status ok\n", "status bad\n")[0].why == "'ok' differs from 'bad'"


def test_a_seeded_cache_copies_only_what_the_candidate_tree_lacks(tmp_path: Path) -> None:
    inc, cand = tmp_path / "s0-a", tmp_path / "s0-b"
    (inc / "ccache" / "0").mkdir(parents=True)
    (inc / "ccache" / "0" / "obj").write_text("incumbent's object")
    (inc / "sccache").mkdir()
    (inc / "sccache" / "x").write_text("x")
    (cand / "sccache").mkdir(parents=True)
    (cand / "sccache" / "own").write_text("the candidate's own")
    assert seed_cache(inc, cand) == ["ccache"]  # sccache: the candidate's tree has its own
    assert (cand / "ccache" / "0" / "obj").read_text() == "incumbent's object"
    assert sorted(p.name for p in (cand / "sccache").iterdir()) == ["own"]
    (cand / "ccache" / "0" / "obj").write_text("rebuilt by a candidate")
    assert seed_cache(inc, cand) == []  # once: a later build keeps the tree's own
    assert (inc / "ccache" / "0" / "obj").read_text() == "incumbent's object"
    assert seed_cache(tmp_path / "none", cand) == []


CHECK_THEN_HANG = """\
import pathlib, sys, time
runs = pathlib.Path("checks-runs")
n = int(runs.read_text()) if runs.exists() else 0
runs.write_text(str(n + 1))
if n == 0:
    sys.exit("test_work failed")  # a real failure on the first run
time.sleep(60)  # the run that tells flaky from real: cut by a stop
"""


@pytest.mark.parametrize("cut", ["checks-again", "checks-incumbent"])
def test_a_stop_during_the_checks_rerun_leaves_no_outcome_behind(
        tmp_path: Path, cut: str) -> None:
    """A stop that cuts the re-run of failed checks (on the candidate, or on the incumbent)
    is no verdict: the block is cancelled, and nothing is remembered, so the next session
    runs the checks again instead of taking the cut runs for a flaky test."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "assay.toml").write_text(
        f'[metric]\nname = "speed"\n[commands]\nbench = "true"\n'
        f'checks = "{sys.executable} check.py"\nchecks_timeout = 120\n'
        '[scope]\neditable = ["work.py"]\n')
    target = parse((root / "assay.toml").read_text(), root)
    cand, inc = tmp_path / "b", tmp_path / "a"
    for tree in (cand, inc):
        tree.mkdir()
        (tree / "check.py").write_text(CHECK_THEN_HANG)
    if cut == "checks-incumbent":  # the candidate fails twice; the incumbent's run hangs
        (cand / "check.py").write_text("import sys\nsys.exit('test_work failed')\n")
        (inc / "checks-runs").write_text("1")
    memo = CheckMemo(tmp_path / "memo")
    token = CancelToken()
    found: list[ChecksOutcome] = []
    worker = threading.Thread(target=lambda: found.append(run_checks(
        target, memo, "key", cand, inc, dict(os.environ), dict(os.environ), tmp_path,
        token)))
    worker.start()
    hanging = (cand if cut == "checks-again" else inc) / "checks-runs"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
            hanging.exists() and hanging.read_text() == "2"):
        time.sleep(0.1)
    token.cancel()
    worker.join(60)
    assert found and found[0].outcome == "cancelled", found
    assert memo.get("key") is None
