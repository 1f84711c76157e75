"""benchmarks/karpathy/fidelity_stay.py: one stay of the multi-fidelity session on a
machine that keeps nothing. Every machine builds the same base commit, the run is given
the time the stay has left, a step past its limit is stopped the way assay stops cleanly,
and a session goes on in a second stay, in a new folder, from the state the first one
exported (the CPU with the tiny preset standing in for the GPU machine)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "karpathy" / "fidelity_stay.py"
CONFIG = ROOT / "benchmarks" / "karpathy" / "fidelity_session.toml"


@pytest.fixture(scope="module")
def stay() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fidelity_stay", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fidelity_stay"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_every_machine_builds_the_same_base_commit(stay: ModuleType, tmp_path: Path) -> None:
    first = stay.base_repo(tmp_path / "a", CONFIG)
    second = stay.base_repo(tmp_path / "b", CONFIG)
    assert first == second and len(first) == 40
    files = subprocess.run(["git", "ls-files"], cwd=tmp_path / "a", check=True,
                           capture_output=True, text=True).stdout.split()
    assert "train.py" in files and "prepare.py" in files
    assert "patches/05_matrix_lr_006.patch" in files
    assert (tmp_path / "a" / "assay.toml").read_text() == CONFIG.read_text()
    # another config is another base
    other = tmp_path / "other.toml"
    other.write_text(CONFIG.read_text().replace("budget = 12", "budget = 3"))
    assert stay.base_repo(tmp_path / "c", other) != first


def test_the_run_gets_what_the_stay_has_left(stay: ModuleType) -> None:
    after = stay.AFTER_RUN_S
    assert stay.run_hours(100.0, 540.0, 100.0) == round((540.0 - after) / 3600, 4)
    assert stay.run_hours(100.0, 540.0, 400.0) == round((240.0 - after) / 3600, 4)
    # too little left for a run: none is started
    assert stay.run_hours(0.0, 540.0, 540.0 - after - stay.MIN_RUN_S + 1) == 0.0


def test_a_step_past_its_limit_is_interrupted_and_a_clean_stop_counts_as_done(
        stay: ModuleType, tmp_path: Path) -> None:
    s = stay.Stay(tmp_path, dict(os.environ))
    clean = ("import signal, sys, time\n"
             "signal.signal(signal.SIGINT, lambda *_: sys.exit(130))\n"
             "print('running', flush=True)\n"
             "time.sleep(60)\n")
    assert s.step("run", [sys.executable, "-c", clean], tmp_path, limit=2.0) == 0
    assert s.step("broken", [sys.executable, "-c", "raise SystemExit(4)"], tmp_path) == 4
    assert s.finish() == 1
    record = json.loads((tmp_path / "stay.json").read_text())
    run, broken = record["steps"]
    assert run["interrupted"] and run["exit"] == 130 and run["ok"] and run["seconds"] < 30
    assert not broken["interrupted"] and not broken["ok"]
    assert record["failed"] == ["broken"]
    assert (tmp_path / "run.log").read_text() == "running\n"
    assert "run: past its 2 s, interrupted" in (tmp_path / "stay.log").read_text()


def test_the_corpus_goes_where_a_sandboxed_run_sees_it(stay: ModuleType, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert stay.private(Path("/tmp/x")) and stay.private(tmp_path / "home" / "data")
    assert not stay.private(Path("/var/tmp/assay-gpt"))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"),
                           "--data", str(tmp_path / "data")], capture_output=True, text=True,
                          check=False)
    assert proc.returncode != 0
    assert "lies under /tmp or $HOME" in proc.stderr and "/var/tmp/assay-gpt" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture
def data() -> Iterator[Path]:
    # outside /tmp and $HOME: a sandboxed run sees its own, empty ones
    folder = Path("/var/tmp") / f"assay-test-gpt-{uuid.uuid4().hex[:8]}"
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _stay(out: Path, work: Path, data: Path, budget: int,
          *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GPT_PRESET="tiny", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--work", str(work),
                           "--data", str(data), "--seconds", "300", "--budget", str(budget),
                           *extra], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def _count(journal: Path, table: str) -> int:
    with sqlite3.connect(journal) as db:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_second_stay_goes_on_from_the_first_ones_state(tmp_path: Path, data: Path) -> None:
    pytest.importorskip("torch")
    cache = data
    one, two = tmp_path / "out1", tmp_path / "out2"
    first = _stay(one, tmp_path / "machine1", cache, 1)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    for name in ("status.txt", "log.txt", "journal.jsonl", "journal.sqlite", "session.log",
                 "state", "stay.json", "best_train.py"):
        assert (one / name).is_file(), name
    with sqlite3.connect(one / "journal.sqlite") as db:
        kept = db.execute("SELECT count(*) FROM experiments WHERE state = 'kept'").fetchone()[0]
    base = (ROOT / "examples" / "gpt" / "train.py").read_text()
    # the incumbent's program: the base's unless something was kept
    assert ((one / "best_train.py").read_text() == base) == (kept == 0)
    blocks, experiments = (_count(one / "journal.sqlite", t) for t in ("blocks", "experiments"))
    assert experiments >= 1
    second = _stay(two, tmp_path / "machine2", cache, 2, "--state", str(one / "state"))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    rec1, rec2 = (json.loads((d / "stay.json").read_text()) for d in (one, two))
    assert rec1["base"] == rec2["base"]
    assert [s["step"] for s in rec2["steps"]][:3] == ["prepare", "import", "run"]
    # the second stay holds the first one's experiments and blocks, and measured more
    assert _count(two / "journal.sqlite", "experiments") >= experiments
    assert _count(two / "journal.sqlite", "blocks") > blocks


@pytest.mark.slow
def test_a_detached_stay_is_collected_once_it_ends(tmp_path: Path, data: Path) -> None:
    # a stay given no time for a run: it prepares the data and records the rest, detached
    env = dict(os.environ, GPT_PRESET="tiny", OMP_NUM_THREADS="1")
    spool, out = tmp_path / "spool", tmp_path / "out"
    cmd = [sys.executable, str(SCRIPT), "--out", str(tmp_path / "unused"), "--work",
           str(tmp_path / "machine"), "--data", str(data), "--spool", str(spool)]
    started = subprocess.run([*cmd, "--seconds", "1", "--detach"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert started.returncode == 0, started.stderr
    assert f"results in {spool}" in started.stdout
    pid = int((spool / "pid").read_text())
    collect = [*cmd[:2], "--out", str(out), "--spool", str(spool), "--collect"]
    deadline = time.monotonic() + 240
    while True:
        got = subprocess.run(collect, cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=60, check=False)
        if got.returncode != 3 or time.monotonic() > deadline:
            break
        assert "still running" in got.stdout
        time.sleep(2)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "the detached stay has ended" in got.stdout
    log = (out / "stay.log").read_text()
    assert "prepare: exit 0" in log and "run: not started, the stay's time is spent" in log
    assert json.loads((out / "stay.json").read_text())["steps"][0]["step"] == "prepare"
    assert not (tmp_path / "unused").exists()  # the detached stay wrote to the spool
    # and it is gone (or a zombie, where nothing reaps the orphans of a container)
    deadline = time.monotonic() + 30
    while _running(pid):
        assert time.monotonic() < deadline, f"the detached stay {pid} still runs"
        time.sleep(0.5)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
