"""Workspace: scope and protected paths, worktrees, the run branch, the user's tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from assay.config import spec as config
from assay.config.spec import ParamSpec, parse
from assay.errors import PatchError, WorkspaceError
from assay.repo.workspace import (
    Workspace,
    assigned_value,
    check_scope,
    patch_paths,
    rewrite_assignment,
)

from .conftest import TinyFactory, git, make_repo, patch_work


def _ws(root: Path) -> Workspace:
    return Workspace(config.load(root), "t")


def test_patch_paths_lists_every_file(tiny_target: TinyFactory) -> None:
    root = tiny_target()
    diff = patch_work(root, 5)
    assert patch_paths(diff).paths == ("work.py",)


HUNK = "@@ -1 +1 @@\n-a\n+b\n"


@pytest.mark.parametrize("bad,needle", [
    ("diff --git a/../x b/../x\n--- a/../x\n+++ b/../x\n" + HUNK, "escapes"),
    ("--- /etc/passwd\n+++ /etc/passwd\n" + HUNK, "absolute"),
    ("diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n"
     "+/etc/passwd\n\\ No newline at end of file\n", "symbolic link"),
    ("diff --git a/l b/l\nindex 1111111..2222222 120000\n--- a/l\n+++ b/l\n" + HUNK,
     "symbolic link"),
    ("diff --git a/.git/config b/.git/config\n--- a/.git/config\n+++ b/.git/config\n" + HUNK,
     ".git"),
    ("not a patch at all\n", "git cannot read the patch"),
])
def test_unsafe_paths_are_rejected(bad: str, needle: str) -> None:
    with pytest.raises(PatchError, match=needle):
        patch_paths(bad)


def test_a_deleted_double_dash_comment_line_is_not_a_path(tmp_path: Path) -> None:
    # Deleting the SQL/Lua line "-- cache the plan" makes the hunk line "--- cache the plan":
    # git reads it as a removed line, not as a file header.
    root = make_repo(tmp_path / "r", {"q.sql": "-- cache the plan\nselect 1;\n"})
    (root / "q.sql").write_text("select 1;\n")
    diff = git(root, "diff")
    assert "\n--- cache the plan\n" in diff
    assert patch_paths(diff).paths == ("q.sql",)
    target = parse('[metric]\nname = "m"\n[commands]\nbench = "true"\n'
                   '[scope]\neditable = ["*.sql"]\nprotected = ["bench.py"]\n', root)
    assert check_scope(diff, target) == ("q.sql",)


def test_a_quoted_utf8_path_is_unquoted_and_checked(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "r", {"données/table.csv": "a\n", "src/é.py": "x = 1\n"})
    (root / "données" / "table.csv").write_text("b\n")
    (root / "src" / "é.py").write_text("x = 2\n")
    diff = git(root, "-c", "core.quotePath=true", "diff")
    assert '"a/donn\\303\\251es/table.csv"' in diff  # git quotes the name
    assert patch_paths(diff).paths == ("données/table.csv", "src/é.py")
    target = parse('[metric]\nname = "m"\n[commands]\nbench = "true"\n'
                   '[scope]\neditable = ["src/**", "données/**"]\n'
                   'protected = ["données/table.csv"]\n',
                   root)
    with pytest.raises(PatchError, match=r"protected path 'données/table\.csv'"):
        check_scope(diff, target)


def test_a_proposer_history_names_the_files_as_git_reads_them(tmp_path: Path) -> None:
    from assay.loop.history import history_entry
    from assay.model import Candidate, Experiment, ExperimentState

    root = make_repo(tmp_path / "r", {"q.sql": "-- cache the plan\nselect 1;\n",
                                      "données/t.sql": "select 2;\n"})
    (root / "q.sql").write_text("select 1;\n")
    (root / "données" / "t.sql").write_text("select 3;\n")
    diff = git(root, "-c", "core.quotePath=true", "diff")
    exp = Experiment(id="e0001", seq=1, state=ExperimentState.DISCARDED,
                     candidate=Candidate("abc", patch=diff, hypothesis="h"),
                     created_at=0.0, updated_at=0.0)
    assert history_entry(exp).diffstat == "données/t.sql, q.sql"


def test_a_rename_into_or_out_of_a_protected_file_is_rejected(tiny_target: TinyFactory) -> None:
    root = tiny_target()
    target = config.load(root)
    into = ("diff --git a/work.py b/bench.py\nsimilarity index 100%\n"
            "rename from work.py\nrename to bench.py\n")  # only headers: no hunk to hide in
    assert set(patch_paths(into).paths) == {"work.py", "bench.py"}
    with pytest.raises(PatchError, match=r"protected path 'bench\.py'"):
        check_scope(into, target)
    git(root, "mv", "bench.py", "timing.py")  # the benchmark renamed away, as git writes it
    away = git(root, "diff", "--cached", "-M", "HEAD")
    git(root, "reset", "-q", "--hard")
    assert "rename from bench.py" in away
    assert set(patch_paths(away).paths) == {"timing.py", "bench.py"}
    with pytest.raises(PatchError, match=r"protected path 'bench\.py'"):
        check_scope(away, target)


def test_scope_rejects_protected_and_outside(tiny_target: TinyFactory) -> None:
    root = tiny_target()
    target = config.load(root)
    (root / "bench.py").write_text("print('METRIC speed=1e9')\n")
    protected = git(root, "diff")
    git(root, "checkout", "bench.py")
    with pytest.raises(PatchError, match=r"protected path 'bench\.py'"):
        check_scope(protected, target)
    (root / "README.md").write_text("changed\n")
    outside = git(root, "diff")
    git(root, "checkout", "README.md")
    with pytest.raises(PatchError, match="outside the editable scope"):
        check_scope(outside, target)
    assert check_scope(patch_work(root, 10), target) == ("work.py",)


def test_materialize_applies_patch_and_params(tiny_target: TinyFactory) -> None:
    root = tiny_target()
    ws = _ws(root)
    head = ws.head()
    tree = ws.tree("s0-b")
    env = ws.materialize(tree, head, patch_work(root, 1234), {})
    assert env == {}
    assert (tree / "work.py").read_text().startswith("WORK = 1234")
    ws.materialize(tree, head, "", {"WORK": 777})
    assert (tree / "work.py").read_text().startswith("WORK = 777")
    (tree / "stray.txt").write_text("left by a benchmark")
    ws.reset(tree, head)
    assert not (tree / "stray.txt").exists()
    assert (tree / "work.py").read_text().startswith("WORK = 200000")


def test_a_rewritten_parameter_never_runs_stale_bytecode(tiny_target: TinyFactory) -> None:
    # WORK = 777, 778, 779: the same size, and here the same modification second too, which
    # is all Python checks before it trusts a .pyc: each must still import its own value,
    # while the standard library's bytecode, compiled once, stays in the tree's folder
    root = tiny_target()
    ws = _ws(root)
    head = ws.head()
    tree = ws.tree("s0-b")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(ws.bytecode_env(tree))
    seen = []
    for value in (777, 778, 779):
        ws.materialize(tree, head, "", {"WORK": value})
        os.utime(tree / "work.py", (1_700_000_000, 1_700_000_000))
        out = subprocess.run([sys.executable, "-c", "import json, work; print(work.WORK)"],
                             cwd=tree, env=env, capture_output=True, text=True, check=True)
        seen.append(int(out.stdout))
        if value == 777:
            library = sorted(ws.bytecode_dir(tree).rglob("json/__init__.*.pyc"))
            assert len(library) == 1
            first = library[0].stat().st_mtime_ns
    assert seen == [777, 778, 779]
    assert library[0].stat().st_mtime_ns == first  # not compiled again
    assert sorted(ws.bytecode_dir(tree).rglob("work.*.pyc"))  # the tree's own, the last one


def test_non_applying_patch_is_an_error(tiny_target: TinyFactory) -> None:
    root = tiny_target()
    ws = _ws(root)
    bad = patch_work(root, 5).replace("WORK = 200000", "WORK = 999")
    with pytest.raises(PatchError, match="does not apply"):
        ws.materialize(ws.tree("s0-b"), ws.head(), bad, {})


def test_commit_candidate_never_touches_the_user_tree(tiny_target: TinyFactory) -> None:
    root = tiny_target()
    (root / "README.md").write_text("uncommitted user edit\n")
    (root / "notes.txt").write_text("untracked user file\n")
    before_status = git(root, "status", "--porcelain")
    before_head = git(root, "rev-parse", "HEAD")
    before_branch = git(root, "branch", "--show-current")
    ws = _ws(root)
    base = ws.head()
    ws.ensure_branch(base)
    sha = ws.commit_candidate(base, patch_work(root, 4321), {"WORK": 4321}, "assay: faster")
    assert git(root, "status", "--porcelain") == before_status
    assert git(root, "rev-parse", "HEAD") == before_head
    assert git(root, "branch", "--show-current") == before_branch
    assert (root / "README.md").read_text() == "uncommitted user edit\n"
    assert git(root, "rev-parse", "assay/t").strip() == sha
    assert "WORK = 4321" in git(root, "show", f"{sha}:work.py")
    assert git(root, "rev-parse", f"{sha}^").strip() == base


def test_rewrite_assignment_needs_exactly_one_line() -> None:
    assert rewrite_assignment("A = 1\nB = 2\n", "A", 5, "f.py") == "A = 5\nB = 2\n"
    assert rewrite_assignment("A: int = 1  # knob\n", "A", 2, "f.py") == "A = 2  # knob\n"
    assert rewrite_assignment("S = 'x'\n", "S", "y", "f.py") == "S = 'y'\n"
    with pytest.raises(PatchError, match="found 0"):
        rewrite_assignment("B = 1\n", "A", 5, "f.py")
    with pytest.raises(PatchError, match="found 2"):
        rewrite_assignment("A = 1\nA = 2\n", "A", 5, "f.py")


def test_assigned_value_reads_the_files_own_line_as_the_parameters_type() -> None:
    n = ParamSpec(name="N", type="int", low=1, high=2**20, apply="assign", file="f.py")
    lr = ParamSpec(name="LR", type="float", low=0.0, high=1.0, apply="assign", file="f.py")
    act = ParamSpec(name="ACT", type="categorical", choices=("relu", "gelu"), apply="assign",
                    file="f.py")
    on = ParamSpec(name="ON", type="bool", apply="assign", file="f.py")
    text = "N = 2**19  # tokens\nLR: float = 1\nACT = 'gelu'\nON = True\n"
    assert assigned_value(text, n) == 524288
    got = assigned_value(text, lr)
    assert got == 1.0 and isinstance(got, float)
    assert assigned_value(text, act) == "gelu"
    assert assigned_value(text, on) is True
    # what the file does not pin down is not guessed
    assert assigned_value("N = 0.5\n", n) is None  # not an int
    assert assigned_value("N = 1\nN = 2\n", n) is None  # two lines
    assert assigned_value("M = 1\n", n) is None  # none
    assert assigned_value("N = int(os.environ['N'])\n", n) is None  # not a constant
    assert assigned_value("ACT = 'tanh'\n", act) is None  # not a choice
    assert assigned_value("ON = 1\n", on) is None  # not a bool
    assert assigned_value("N = True\n", n) is None


def test_not_a_git_repository(tmp_path: Path) -> None:
    (tmp_path / "assay.toml").write_text(
        '[metric]\nname = "x"\n[commands]\nbench = "true"\n[scope]\neditable = ["a"]\n')
    with pytest.raises(WorkspaceError, match="not a git repository"):
        Workspace(config.load(tmp_path))


def test_state_dir_is_ignored_by_git(tiny_target: TinyFactory) -> None:
    root = tiny_target()
    ws = _ws(root)
    ws.tree("s0-a")
    assert git(root, "status", "--porcelain") == ""
