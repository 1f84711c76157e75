"""Sessions: own budget and name, a new user commit announced or followed, retries, reset."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from assay import api

from .conftest import TinyFactory, git, patch_work

QUEUE = '[proposer.queue]\npath = "patches"\n'


def _queue(root: Path, patches: dict[str, tuple[str, str]]) -> None:
    folder = root / "patches"
    folder.mkdir(exist_ok=True)
    for name, (hyp, diff) in patches.items():
        (folder / name).write_text(f"# hypothesis: {hyp}\n{diff}")


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "assay", *args, "-C", str(root)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def test_a_second_session_has_its_own_budget_and_names_what_was_tried(
        tiny_target: TinyFactory) -> None:
    root = tiny_target(work=300_000, budget=1, pairs=2, extra=QUEUE)
    _queue(root, {"1.patch": ("a tenth of the work", patch_work(root, 30_000))})
    api.run(root, proposer="queue", budget=1)
    assert [e["state"] for e in api.log(root)] == ["kept"]
    # The same patch again, under another name: skipped, and named with its experiment.
    _queue(root, {"2.patch": ("the same again", patch_work(root, 30_000))})
    events: list[str] = []
    api.run(root, proposer="queue", budget=1, on_event=lambda k, m, e: events.append(m))
    assert len(api.log(root)) == 1
    assert any("1.patch was already tried as e0001 (kept)" in m and "--retry" in m
               for m in events), events
    # --retry measures it again (against the new incumbent its patch no longer applies).
    events.clear()
    api.run(root, proposer="queue", budget=1, retry=True,
            on_event=lambda k, m, e: events.append(m))
    log = api.log(root)
    assert len(log) == 2 and log[1]["hypothesis"] == "a tenth of the work"
    assert any("measuring it again (--retry)" in m for m in events), events


def test_a_new_user_commit_is_announced_and_from_head_replays_kept_changes(
        tiny_target: TinyFactory) -> None:
    root = tiny_target(work=300_000, budget=1, pairs=2, extra=QUEUE)
    _queue(root, {"1.patch": ("a tenth of the work", patch_work(root, 30_000))})
    api.run(root, proposer="queue", budget=1, name="first")
    kept = api.log(root)[0]
    assert kept["state"] == "kept"
    # The user commits something new on their branch.
    (root / "README.md").write_text("tiny target, documented\n")
    git(root, "commit", "-qam", "docs: explain the target")
    head = git(root, "rev-parse", "HEAD").strip()
    events: list[str] = []
    api.run(root, proposer="queue", budget=1, name="first",
            on_event=lambda k, m, e: events.append(m))
    assert any("new commit since the last session" in m and head[:12] in m
               and "--from-head" in m for m in events), events
    assert api.status(root)["incumbent"]["commit"] == kept["commit"]  # default: continue
    events.clear()
    api.run(root, proposer="queue", budget=1, name="first", from_head=True,
            on_event=lambda k, m, e: events.append(m))
    assert any(f"replayed {kept['id']} on {head[:12]}" in m for m in events), events
    st = api.status(root)
    tip = git(root, "rev-parse", "assay/first").strip()
    assert st["incumbent"]["commit"] == tip
    assert git(root, "rev-parse", f"{tip}^").strip() == head  # replayed on top of HEAD
    assert "WORK = 30000" in git(root, "show", f"{tip}:work.py")
    assert "documented" in git(root, "show", f"{tip}:README.md")
    assert st["branch"] == "assay/first"


STRICT_CHECKS = """\
import pathlib, sys, work
if pathlib.Path("strict.txt").exists() and work.WORK < 100_000:
    print("FAILED tests/test_strict.py::test_enough_work - WORK below the new floor")
    sys.exit(1)
"""


def test_from_head_re_checks_each_replayed_change(tiny_target: TinyFactory) -> None:
    root = tiny_target(work=300_000, budget=1, pairs=2, extra=QUEUE,
                       files={"checks.py": STRICT_CHECKS})
    cfg = (root / "assay.toml").read_text().replace(
        "bench_timeout = 30", f'bench_timeout = 30\nchecks = "{sys.executable} checks.py"')
    (root / "assay.toml").write_text(cfg.replace('protected = ["bench.py"]',
                                                 'protected = ["bench.py", "checks.py"]'))
    git(root, "commit", "-qam", "checks")
    _queue(root, {"1.patch": ("a tenth of the work", patch_work(root, 30_000))})
    api.run(root, proposer="queue", budget=1)
    assert [e["state"] for e in api.log(root)] == ["kept"]
    # The user's new commit makes the kept change fail the project's checks.
    (root / "strict.txt").write_text("at least 100000\n")
    git(root, "add", "strict.txt")
    git(root, "commit", "-qm", "a stricter test")
    head = git(root, "rev-parse", "HEAD").strip()
    events: list[str] = []
    summary = api.run(root, proposer="queue", budget=1, from_head=True,
                      on_event=lambda k, m, e: events.append(m))
    assert summary.failed == "", summary
    assert any(f"e0001 replayed on {head[:12]} fails its checks and is left out" in m
               and "test_strict.py::test_enough_work" in m for m in events), events
    assert api.status(root)["incumbent"]["commit"] == head  # the replay was left out
    assert not any("replayed e0001" in m and "checks pass" in m for m in events), events


def test_status_names_the_branch_holding_the_incumbent(tiny_target: TinyFactory) -> None:
    root = tiny_target(work=300_000, budget=1, pairs=2, extra=QUEUE)
    _queue(root, {"1.patch": ("a tenth of the work", patch_work(root, 30_000))})
    api.run(root, proposer="queue", budget=1, name="speedup")
    st = api.status(root)
    assert st["branch"] == "assay/speedup"
    assert git(root, "rev-parse", "assay/speedup").strip() == st["incumbent"]["commit"]


def test_reset_archives_the_journal_and_removes_worktrees_and_branches(
        tiny_target: TinyFactory) -> None:
    root = tiny_target(work=300_000, budget=1, pairs=2, extra=QUEUE)
    _queue(root, {"1.patch": ("a tenth of the work", patch_work(root, 30_000))})
    api.run(root, proposer="queue", budget=1, name="try1")
    assert (root / ".assay" / "worktrees" / "s0-a").is_dir()
    refused = _cli(root, "reset")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert (root / ".assay" / "journal.sqlite").exists()
    r = _cli(root, "reset", "--yes")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (root / ".assay" / "journal.sqlite").exists()
    assert list((root / ".assay" / "archive").glob("*/journal.sqlite"))
    assert not (root / ".assay" / "worktrees").exists() or not any(
        (root / ".assay" / "worktrees").iterdir())
    assert git(root, "branch", "--list", "assay/*").strip() == ""
    assert "worktrees" not in git(root, "worktree", "list")
    # and a fresh run starts cleanly
    api.run(root, proposer="queue", budget=1, name="try2")
    assert [e["state"] for e in api.log(root)] == ["kept"]
