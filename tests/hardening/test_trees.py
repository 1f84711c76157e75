"""The slot trees around every run: a candidate that reaches into the incumbent's tree.

Each test runs the real loop (``assay.api.run``) on a tiny git target without a sandbox, so
the tree checks alone must catch the attack: the experiment ends ``invalid`` with a reason
that starts with ``tampered:`` and names the path, nothing is kept, the incumbent is never
blamed, and the incumbent's tree holds its commit again when the run ends.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from hardening_kit import ListProposer, Repo, git, journal_rows, make_repo

import assay.api as api


def one_slot(repo: Repo) -> None:
    """One slot: the candidate's tree and the incumbent's sit side by side, as in a run."""
    text = (repo.root / "assay.toml").read_text().replace("slots = 2", "slots = 1")
    (repo.root / "assay.toml").write_text(text)
    git(repo.root, "commit", "-qam", "one slot")
    repo.base = git(repo.root, "rev-parse", "HEAD").strip()


def top_patch(*lines: str) -> str:
    """A patch that inserts ``lines`` at the top of work.py (they run when bench imports it)."""
    body = "".join(f"+{ln}\n" for ln in lines)
    return ("diff --git a/work.py b/work.py\n--- a/work.py\n+++ b/work.py\n"
            f"@@ -1,1 +1,{len(lines) + 1} @@\n{body} SIZE = 200000\n")


def rewrite_incumbent(name: str, old: str, new: str) -> str:
    """Candidate code that rewrites ``name`` in every incumbent tree next to its own."""
    return top_patch(
        "import glob as _g",
        f"for _p in _g.glob('../*-a/{name}'):",
        f"    _t = open(_p).read().replace({old!r}, {new!r})",
        "    open(_p, 'w').write(_t)")


def run_one(repo: Repo, patch: str, name: str) -> dict[str, Any]:
    api.run(repo.root, budget=1, proposer_obj=ListProposer([{"patch": patch,
                                                             "hypothesis": name}]))
    return {e["hypothesis"]: e for e in api.log(repo.root)}[name]


def incumbent_tree_is_clean(repo: Repo) -> None:
    tree = repo.root / ".assay" / "worktrees" / "s0-a"
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tree, capture_output=True,
                            text=True, check=True).stdout
    assert status == "", status
    assert (tree / "work.py").read_text() == (repo.root / "work.py").read_text()
    assert (tree / "bench.py").read_text() == (repo.root / "bench.py").read_text()


def test_sabotage_of_the_incumbent_source_is_tampering(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, counted=True)
    one_slot(repo)
    # the incumbent made to do twice the work: the unchanged candidate would look +100%
    e = run_one(repo, rewrite_incumbent("work.py", "SIZE = 200000", "SIZE = 400000"),
                "slow down the incumbent")
    assert e["state"] == "invalid", e
    assert e["note"].startswith("tampered:"), e["note"]
    assert "work.py" in e["note"] and "s0-a" in e["note"], e["note"]
    assert git(repo.root, "rev-parse", "assay/main").strip() == repo.base  # nothing kept
    incumbent_tree_is_clean(repo)


def test_a_rewritten_incumbent_bench_is_blamed_on_the_candidate(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, counted=True)
    one_slot(repo)
    e = run_one(repo, rewrite_incumbent("bench.py", "1e9 / max(ops, 1)", "1e9 / max(ops, 1) / 2"),
                "halve the incumbent's metric")
    assert e["state"] == "invalid" and e["note"].startswith("tampered:"), e
    assert "bench.py" in e["note"], e["note"]
    # the incumbent is never recorded as having changed its own harness
    rows = journal_rows(repo, "SELECT id, status FROM runs WHERE role = 'A'")
    assert all(status == "ok" for _, status in rows), rows
    assert git(repo.root, "rev-parse", "assay/main").strip() == repo.base
    incumbent_tree_is_clean(repo)


def test_an_incumbent_run_after_the_tampering_is_never_the_reference(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, counted=True)
    one_slot(repo)
    # a second candidate after the tampering one is measured against the true incumbent
    sabotage = rewrite_incumbent("work.py", "SIZE = 200000", "SIZE = 400000")
    same_speed = top_patch("X = 1")
    api.run(repo.root, budget=2, proposer_obj=ListProposer([
        {"patch": sabotage, "hypothesis": "sabotage"},
        {"patch": same_speed, "hypothesis": "no change"}]))
    by_name = {e["hypothesis"]: e for e in api.log(repo.root)}
    assert by_name["sabotage"]["note"].startswith("tampered:")
    assert by_name["no change"]["state"] == "discarded", by_name["no change"]
    values = [json.loads(m)["speed"] for (m,) in journal_rows(
        repo, "SELECT metrics FROM runs WHERE role = 'A' AND status = 'ok'")]
    assert values and len(set(values)) == 1, values  # every incumbent run saw its true code
    incumbent_tree_is_clean(repo)


def test_a_new_file_in_the_incumbent_tree_is_tampering(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, counted=True)
    one_slot(repo)
    # a package beside work.py shadows it when the incumbent's bench imports `work`
    e = run_one(repo, top_patch(
        "import glob as _g, os as _o",
        "for _d in _g.glob('../*-a'):",
        "    _o.makedirs(_d + '/work', exist_ok=True)",
        "    open(_d + '/work/__init__.py', 'w').write("
        "'SIZE = 400000\\ndef run(n):\\n    return n // 10\\n')"), "shadow the incumbent")
    assert e["state"] == "invalid" and e["note"].startswith("tampered:"), e
    assert "work/__init__.py" in e["note"], e["note"]
    assert not (repo.root / ".assay" / "worktrees" / "s0-a" / "work").exists()
    incumbent_tree_is_clean(repo)


def test_hooks_of_the_users_repository_are_guarded(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, counted=True)
    one_slot(repo)
    hook = repo.root / ".git" / "hooks" / "post-commit"
    e = run_one(repo, top_patch(
        "import os as _o",
        "_h = _o.path.join(_o.path.dirname(_o.path.abspath('.')), '..', '..', '.git', 'hooks',"
        " 'post-commit')",
        "open(_h, 'w').write('#!/bin/sh\\necho owned\\n')"), "plant a hook")
    assert e["state"] == "invalid" and e["note"].startswith("tampered:"), e
    assert "post-commit (a new hook, removed)" in e["note"], e["note"]
    assert not hook.exists()  # a hook planted during the block never runs


def test_bytecode_written_for_the_incumbent_never_reaches_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, counted=True)
    one_slot(repo)
    # bytecode for the incumbent's work.py where the candidate's own interpreter would keep
    # it: each tree has its own bytecode folder, so the incumbent never looks there, and
    # nothing planted for another tree is left
    e = run_one(repo, top_patch(
        "import glob as _g, os as _o, sys as _s",
        "for _d in _g.glob(_o.path.abspath('../*-a')):",
        "    _p = _o.environ['PYTHONPYCACHEPREFIX'] + _o.path.realpath(_d)",
        "    _o.makedirs(_p, exist_ok=True)",
        "    open(_p + '/work.cpython-%d%d.pyc' % _s.version_info[:2], 'wb').write(b'x')"),
        "plant bytecode")
    assert e["state"] != "kept", e
    folder = repo.root / ".assay" / "pycache"
    assert sorted(p.name for p in folder.iterdir()) == ["s0-a", "s0-b"]
    planted = [p for p in folder.rglob("work.cpython-*.pyc") if p.read_bytes() == b"x"]
    assert not planted, planted
    incumbent_tree_is_clean(repo)


BUILT_BENCH = """\
import os
import sys

sys.path.insert(0, os.getcwd())
import work

ops = work.run(work.SIZE)
factor = float(open("build/factor.txt").read())
print(f"METRIC speed={1e9 / max(ops, 1) * factor:.6f}")
"""


def test_a_rewritten_build_output_of_the_incumbent_is_tampering(tmp_path: Path) -> None:
    # build outputs are ignored by git, and the incumbent's benchmark reads them
    repo = make_repo(tmp_path, counted=True, extra_commands=(
        "build = \"mkdir -p build && echo 1.0 > build/factor.txt\""),
        files={".gitignore": "build/\n"})
    (repo.root / "bench.py").write_text(BUILT_BENCH)
    one_slot(repo)
    e = run_one(repo, top_patch(
        "import glob as _g",
        "for _p in _g.glob('../*-a/build/factor.txt'):",
        "    open(_p, 'w').write('0.25')"), "slow down the incumbent's build")
    assert e["state"] == "invalid" and e["note"].startswith("tampered:"), e
    assert "build/factor.txt" in e["note"], e["note"]
    built = repo.root / ".assay" / "worktrees" / "s0-a" / "build" / "factor.txt"
    assert not built.exists() or built.read_text().strip() == "1.0"  # scrubbed or rebuilt
