"""A session goes on in a fresh clone on another machine: from a copy of ``.assay``, or
from the one file ``assay export --state`` writes. Real git clones of one origin, the real
command line in subprocesses, the first clone deleted before the second goes on."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import assay
from assay import api
from assay.errors import WorkspaceError
from assay.journal.store import Journal
from assay.repo import carry
from tests.conftest import git, make_repo
from tests.scripted import DRAW

SRC = str(Path(assay.__file__).resolve().parents[1])
CLI = [sys.executable, "-c", "from assay.cli.app import main; main()"]

# Three knobs far enough apart that patches to each merge onto one another.
KNOBS = "WORK = 1000\n" + "# -\n" * 8 + "MUL = 1\n" + "# -\n" * 8 + "DIV = 1\n"
BENCH = DRAW + """
import time
import knobs

time.sleep(0.15)
print(f"METRIC speed={1e6 * knobs.DIV / (knobs.WORK * knobs.MUL) * draw():.3f}")
"""
CONFIG = """\
[metric]
name = "speed"
direction = "maximize"

[commands]
bench = "{python} bench.py"
bench_timeout = 30

[scope]
editable = ["knobs.py"]
protected = ["bench.py", "patches/*"]

[proposer.queue]
path = "patches"

[run]
slots = 1
budget = 3
proposer = "queue"
verify = false

[decision]
rule = "fixed"
max_pairs = 4
pairs_per_block = 2
aa_blocks = 6
delta = 0.02
"""
PATCHES = (("1-faster.patch", "half the work", "WORK = 1000", "WORK = 500"),
           ("2-slower.patch", "twice the cost", "MUL = 1", "MUL = 2"),
           ("3-faster.patch", "a third of the cost", "DIV = 1", "DIV = 3"))


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "COLUMNS": "200"}


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env=_env())


def _origin(tmp: Path) -> Path:
    """A bare origin holding the target and its queued patches."""
    src = make_repo(tmp / "src", {"bench.py": BENCH, "knobs.py": KNOBS, "README.md": "t\n",
                                  "assay.toml": CONFIG.format(python=sys.executable)})
    (src / "patches").mkdir()
    for name, hyp, old, new in PATCHES:
        (src / "knobs.py").write_text(KNOBS.replace(old, new))
        (src / "patches" / name).write_text(f"# hypothesis: {hyp}\n" + git(src, "diff"))
        (src / "knobs.py").write_text(KNOBS)
    git(src, "add", "-A")
    git(src, "commit", "-qm", "queued patches")
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(tmp / "origin.git")],
                   check=True)
    return tmp / "origin.git"


def _clone(origin: Path, dest: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(origin), str(dest)], check=True)
    return dest


def _has(root: Path, commit: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=root,
                          capture_output=True).returncode == 0


def _stop_mid_second(root: Path, sig: int) -> str:
    """Run the session in ``root`` and send ``sig`` once e0002 has a measured block (its
    second still to come); what it printed."""
    proc = subprocess.Popen([*CLI, "run", "-C", str(root), "-v"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=_env())
    assert proc.stdout is not None
    seen: list[str] = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("e0002: 2 of 4 pairs measured"):
            proc.send_signal(sig)
            break
    out, _ = proc.communicate(timeout=120)
    return "".join(seen) + out


def _calibration_blocks(root: Path) -> list[str]:
    journal = Journal.open(root / ".assay" / "journal.sqlite", readonly=True)
    try:
        return [b.id for b in journal.blocks("cal")]
    finally:
        journal.close()


def test_a_copy_of_the_state_folder_goes_on_in_a_fresh_clone(tmp_path: Path) -> None:
    origin = _origin(tmp_path)
    a = _clone(origin, tmp_path / "a")
    out = _stop_mid_second(a, signal.SIGINT)
    assert "e0001 kept" in out, out
    before = api.status(a)
    kept = before["incumbent"]["commit"]
    assert before["counts"].get("kept") == 1 and before["open"], before  # e0002 undecided
    first_runs = [r["run_id"] for r in api.show("e0002", a)["runs"]]
    assert len(first_runs) == 4  # one block of two pairs measured on the first machine
    cal = _calibration_blocks(a)
    assert cal

    b = _clone(origin, tmp_path / "b")
    shutil.copytree(a / ".assay", b / ".assay", symlinks=True)
    shutil.rmtree(a)  # the first machine is gone
    assert not _has(b, kept)
    r = cli("run", "-C", str(b), "-v")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fetched the run's commits" in r.stdout
    assert "slot trees copied from another clone" in r.stdout
    assert "measuring noise" not in r.stdout  # the A/A calibration is reused
    assert "resuming session 1" in r.stdout

    after = api.status(b)
    assert _calibration_blocks(b) == cal
    assert after["experiments"] == 3  # the budget of 3 counted across both machines
    states = {e["id"]: e["state"] for e in api.log(b)}
    assert states == {"e0001": "kept", "e0002": "discarded", "e0003": "kept"}
    second = api.show("e0002", b)
    assert [r["run_id"] for r in second["runs"]][:4] == first_runs  # not re-run from scratch
    assert len(second["runs"]) == 8
    assert {b_["id"] for b_ in second["blocks"]} == {"e0002-b1", "e0002-b2"}
    # the kept commit of the first machine is on this clone's run branch, under the new keep
    assert _has(b, kept)
    tip = git(b, "rev-parse", "assay/main").strip()
    assert git(b, "merge-base", "--is-ancestor", kept, tip) == ""
    assert "DIV = 3" in git(b, "show", "assay/main:knobs.py")
    assert "WORK = 500" in git(b, "show", "assay/main:knobs.py")
    # the slot trees are this clone's worktrees; the logs measured there are found here
    trees = git(b, "worktree", "list", "--porcelain")
    assert str(b / ".assay" / "worktrees" / "s0-a") in trees
    assert Path(second["runs"][0]["stdout_path"]).is_file()
    assert str(b) in second["runs"][0]["stdout_path"]


def test_export_and_import_of_the_state_go_on_after_a_kill(tmp_path: Path) -> None:
    origin = _origin(tmp_path)
    a = _clone(origin, tmp_path / "a")
    out = _stop_mid_second(a, signal.SIGKILL)  # the machine's time ran out
    assert "e0001 kept" in out, out
    kept = api.status(a)["incumbent"]["commit"]
    first_runs = [r["run_id"] for r in api.show("e0002", a)["runs"]]
    state = tmp_path / "run.state"
    r = cli("export", "--state", str(state), "-C", str(a))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "wrote" in r.stdout and "assay import --state" in r.stdout
    assert state.stat().st_mode & 0o077 == 0  # it holds the journal's key: its owner's alone
    with tarfile.open(state) as tar:
        names = set(tar.getnames())
    assert {"assay-state.json", "state/journal.sqlite", "state/journal.sqlite-key",
            "state/commits.bundle"} <= names
    assert not any("/worktrees/" in n or "/pycache/" in n for n in names)
    shutil.rmtree(a)

    b = _clone(origin, tmp_path / "b")
    r = cli("import", "--state", str(state), "-C", str(b))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "assay/main at" in r.stdout
    assert _has(b, kept) and git(b, "rev-parse", "assay/main").strip() == kept
    r = cli("run", "-C", str(b), "-v")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "measuring noise" not in r.stdout
    assert "resuming session 1" in r.stdout  # the killed session, its budget with it
    states = {e["id"]: e["state"] for e in api.log(b)}
    assert states == {"e0001": "kept", "e0002": "discarded", "e0003": "kept"}
    assert [r["run_id"] for r in api.show("e0002", b)["runs"]][:4] == first_runs


def _tampered(state: Path, work: Path) -> Path:
    """``state`` with a kept experiment's note rewritten behind the seals' back, and a
    manifest whose checksums match the files again."""
    with tarfile.open(state) as tar:
        tar.extractall(work, filter="data")
    db = sqlite3.connect(work / "state" / "journal.sqlite")
    db.create_function("assay_seal", -1, lambda *values: "forged")
    db.execute("UPDATE experiments SET note = 'better than it was'")
    db.commit()
    db.close()
    manifest = json.loads((work / "assay-state.json").read_text())
    for name in manifest["files"]:
        manifest["files"][name] = hashlib.sha256((work / "state" / name).read_bytes()
                                                 ).hexdigest()
    (work / "assay-state.json").write_text(json.dumps(manifest))
    out = work.with_suffix(".state")
    with tarfile.open(out, "w:gz") as tar:
        tar.add(work / "assay-state.json", arcname="assay-state.json")
        for name in manifest["files"]:
            tar.add(work / "state" / name, arcname=f"state/{name}")
    return out


def test_state_errors_say_what_and_change_nothing(tmp_path: Path) -> None:
    origin = _origin(tmp_path)
    a = _clone(origin, tmp_path / "a")
    r = cli("run", "-C", str(a), "--budget", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    state = tmp_path / "run.state"
    assert cli("export", "--state", str(state), "-C", str(a)).returncode == 0

    # a clone of another repository: the commits the run builds on are not there
    other = make_repo(tmp_path / "other", {"bench.py": BENCH, "knobs.py": KNOBS,
                                           "assay.toml": CONFIG.format(python=sys.executable)})
    r = cli("import", "--state", str(state), "-C", str(other))
    assert r.returncode == 2
    assert "lacks" in r.stderr and "another repository" in r.stderr, r.stderr
    assert not (other / ".assay" / "journal.sqlite").exists()
    assert git(other, "branch", "--list", "assay/*") == ""

    # a damaged file: cut short, or not a state file at all
    cut = tmp_path / "cut.state"
    cut.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    b = _clone(origin, tmp_path / "b")
    for bad in (cut, tmp_path / "a" / "README.md", tmp_path / "missing.state"):
        r = cli("import", "--state", str(bad), "-C", str(b))
        assert r.returncode == 2, r.stdout
        assert "error:" in r.stderr and str(bad) in r.stderr.replace("\n", "")
        assert "Traceback" not in r.stderr
        assert not (b / ".assay" / "journal.sqlite").exists()

    # a journal changed after it was sealed, its checksums made to match
    tampered = _tampered(state, tmp_path / "tampered")
    r = cli("import", "--state", str(tampered), "-C", str(b))
    assert r.returncode == 2 and "its journal does not check" in r.stderr, r.stderr
    assert not (b / ".assay" / "journal.sqlite").exists()

    # a journal here already: refused unless --force, which archives it first
    assert cli("import", "--state", str(state), "-C", str(b)).returncode == 0
    r = cli("import", "--state", str(state), "-C", str(b))
    assert r.returncode == 2 and "--force" in r.stderr
    r = cli("import", "--state", str(state), "-C", str(b), "--force")
    assert r.returncode == 0, r.stderr
    archived = list((b / ".assay" / "archive").glob("*/journal.sqlite"))
    assert len(archived) == 1 and (archived[0].parent / "journal.sqlite-key").is_file()
    assert api.status(b)["counts"] == {"kept": 1}

    # a copy of .assay without its bundle, into a clone lacking the commits: said, not run
    c = _clone(origin, tmp_path / "c")
    shutil.copytree(a / ".assay", c / ".assay", symlinks=True)
    (c / ".assay" / "commits.bundle").unlink()
    r = cli("run", "-C", str(c))
    assert r.returncode == 2
    assert "lacks 1 commit(s)" in r.stderr and "export --state" in r.stderr, r.stderr


GPT = Path(__file__).resolve().parents[1] / "examples" / "gpt"
GPT_CONFIG = """\
[metric]
name = "val_bpb"
direction = "minimize"
unit = "bits/byte"
reader = "summary_block"
bounds = [0.05, 20.0]

[commands]
build = "python prepare.py"
bench = "python train.py"
bench_timeout = 300

[scope]
editable = ["train.py"]
protected = ["prepare.py", "program.md"]

[env]
allow = ["PATH", "HOME", "LANG", "TMPDIR", "USER", "PYTHONPATH", "VIRTUAL_ENV"]

[env.set]
PYTHONUNBUFFERED = "1"
GPT_PRESET = "tiny"
GPT_TIME_BUDGET = "1"
OMP_NUM_THREADS = "1"

[[params]]
name = "LR_MULT"
type = "float"
choices = [0.02, 0.5, 1.0]
apply = "assign"
file = "train.py"
default = 0.02

[proposer.sweep]
sampler = "grid"

[run]
slots = 1
budget = 1
proposer = "sweep"
verify = false
compile_cache = ["GPT_CACHE_DIR"]

[decision]
rule = "expensive"
delta = 0.002
max_pairs = 3
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_gpt_example_goes_on_in_a_fresh_clone_after_a_keep(tmp_path: Path) -> None:
    """examples/gpt's tiny preset on the CPU: a session keeps a learning rate (the base
    trains at a fiftieth of it), stops at its budget; a fresh clone given a copy of
    ``.assay`` goes on with the next candidate against the kept one."""
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    pytest.importorskip("optuna")
    files = {n: (GPT / n).read_text() for n in ("train.py", "prepare.py", "program.md")}
    lines = files["train.py"].splitlines(keepends=True)
    lines = [("LR_MULT = 0.02\n" if ln.startswith("LR_MULT = ") else ln) for ln in lines]
    files["train.py"] = "".join(lines)
    src = make_repo(tmp_path / "src", {**files, "assay.toml": GPT_CONFIG})
    # prepare.py imports assay: a copy in the tree, for the sandboxed runs see a private,
    # empty /tmp, where this checkout (and so PYTHONPATH's assay) may lie
    shutil.copytree(Path(SRC) / "assay", src / "assay",
                    ignore=shutil.ignore_patterns("__pycache__"))
    git(src, "add", "-A")
    git(src, "commit", "-qm", "the assay package prepare.py imports")
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(origin)], check=True)
    env = {**_env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def run(root: Path) -> str:
        r = subprocess.run([*CLI, "run", "-C", str(root), "-v"], capture_output=True,
                           text=True, timeout=600, env=env)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        return r.stdout

    a = _clone(origin, tmp_path / "a")
    out = run(a)
    assert "e0001 kept" in out and "LR_MULT=1.0" in out, out
    kept = api.status(a)["incumbent"]["commit"]
    cal = _calibration_blocks(a)
    b = _clone(origin, tmp_path / "b")
    shutil.copytree(a / ".assay", b / ".assay", symlinks=True)
    shutil.rmtree(a)

    out = run(b)
    assert "fetched the run's commits" in out and "measuring noise" not in out, out
    assert _calibration_blocks(b) == cal
    second = api.show("e0002", b)
    assert second["state"] in ("kept", "discarded") and second["params"] != {"LR_MULT": 1.0}
    assert {blk["incumbent"]["commit"] for blk in second["blocks"]} == {kept}
    tip = git(b, "rev-parse", "assay/main").strip()
    assert git(b, "merge-base", "--is-ancestor", kept, tip) == ""
    assert "LR_MULT = 1.0" in git(b, "show", f"{kept}:train.py")


def test_the_bundle_carries_named_commits_no_branch_reaches(tmp_path: Path) -> None:
    origin = _origin(tmp_path)
    a = _clone(origin, tmp_path / "a")
    base = git(a, "rev-parse", "HEAD").strip()
    for n in (1, 2):  # two commits on the run branch, then the branch moved back
        (a / "knobs.py").write_text(KNOBS.replace("WORK = 1000", f"WORK = {n}"))
        git(a, "commit", "-qam", f"kept {n}")
    second = git(a, "rev-parse", "HEAD").strip()
    first = git(a, "rev-parse", "HEAD~1").strip()
    git(a, "update-ref", "refs/heads/assay/main", first)
    git(a, "reset", "-q", "--hard", base)
    bundle = tmp_path / "commits.bundle"
    assert carry.write_bundle(a, bundle, [base, first, second])
    held = carry.contents(a, bundle)
    assert held.heads == {"refs/heads/assay/main": first, f"{carry.EXTRA}{second}": second}
    assert held.requires == (base,)  # what the origin holds is left out
    assert git(a, "for-each-ref", carry.EXTRA) == ""  # the bundle's own refs are gone here

    b = _clone(origin, tmp_path / "b")
    done = carry.restore(b, bundle)
    assert done == [f"assay/main at {first[:12]}"]
    assert _has(b, second) and git(b, "rev-parse", f"{carry.EXTRA}{second}").strip() == second
    # a branch of this clone that went elsewhere is named, not overwritten
    c = _clone(origin, tmp_path / "c")
    git(c, "commit", "-q", "--allow-empty", "-m", "elsewhere")
    git(c, "branch", "assay/main")
    mine = git(c, "rev-parse", "assay/main").strip()
    with pytest.raises(WorkspaceError, match="went different ways"):
        carry.restore(c, bundle)
    assert git(c, "rev-parse", "assay/main").strip() == mine
    # a branch behind the carried one is moved on
    git(c, "update-ref", "refs/heads/assay/main", base)
    assert carry.restore(c, bundle) == [f"assay/main at {first[:12]} (was {base[:12]})"]
    # assay reset deletes the refs a restore kept and archives the bundle
    (c / ".assay").mkdir(exist_ok=True)
    shutil.copy(bundle, c / ".assay" / carry.BUNDLE_NAME)
    assert cli("reset", "--yes", "-C", str(c)).returncode == 0
    assert git(c, "for-each-ref", carry.EXTRA) == ""
    assert not (c / ".assay" / carry.BUNDLE_NAME).exists()


def test_verify_in_a_fresh_clone_fetches_the_run_commits_first(tmp_path: Path) -> None:
    origin = _origin(tmp_path)
    a = _clone(origin, tmp_path / "a")
    assert cli("run", "-C", str(a), "--budget", "1").returncode == 0
    kept = api.status(a)["incumbent"]["commit"]
    b = _clone(origin, tmp_path / "b")
    shutil.copytree(a / ".assay", b / ".assay", symlinks=True)
    shutil.rmtree(a)
    r = cli("verify", "-C", str(b))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"final best {kept[:12]}" in r.stdout
    assert _has(b, kept)


def test_finalize_in_a_fresh_clone_fetches_the_run_commits_first(tmp_path: Path) -> None:
    """A copy of .assay in a new clone is enough for finalize too: the run branch and its
    kept commits come from the carried bundle before the branches are made."""
    origin = _origin(tmp_path)
    a = _clone(origin, tmp_path / "a")
    assert cli("run", "-C", str(a), "--budget", "1").returncode == 0
    kept = api.status(a)["incumbent"]["commit"]
    b = _clone(origin, tmp_path / "b")
    shutil.copytree(a / ".assay", b / ".assay", symlinks=True)
    shutil.rmtree(a)
    assert not _has(b, kept)
    r = cli("finalize", "-C", str(b), "--no-measure")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fetched the run's commits into this clone" in r.stdout + r.stderr
    assert _has(b, kept)
    branches = subprocess.run(["git", "branch", "--list", "assay/*"], cwd=b, text=True,
                              capture_output=True, check=True).stdout
    assert "assay/" in branches
