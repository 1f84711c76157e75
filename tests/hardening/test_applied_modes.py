"""Links, submodules and modes of a candidate's applied tree, read from git's index.

The patches are spelled as git accepts them but as no pattern on the patch's text foresaw
(``0120000``); each runs through the real loop (``assay.api.run``) on a tiny git target.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hardening_kit import ListProposer, git, make_repo

import assay.api as api
from assay.errors import PatchError
from assay.repo import applied


def outcome(tmp_path: Path, patch: str) -> dict[str, object]:
    repo = make_repo(tmp_path, counted=True)
    api.run(repo.root, budget=1, proposer_obj=ListProposer([{"patch": patch,
                                                             "hypothesis": "h"}]))
    (e,) = api.log(repo.root)
    assert git(repo.root, "rev-parse", "assay/main").strip() == repo.base  # nothing kept
    return e


def test_a_symlink_through_a_zero_padded_mode_is_refused(tmp_path: Path) -> None:
    faster = tmp_path / "faster.py"  # outside the repository: in no patch, in no journal
    faster.write_text("SIZE = 200000\n\n\ndef run(n):\n    return 2\n")
    patch = ("diff --git a/work.py b/work.py\ndeleted file mode 100644\n--- a/work.py\n"
             "+++ /dev/null\n@@ -1,9 +0,0 @@\n-SIZE = 200000\n-\n-\n-def run(n):\n"
             "-    s = ops = 0\n-    for i in range(n // 20):\n-        s += i * i\n"
             "-        ops += 2\n-    return ops\n"
             "diff --git a/work.py b/work.py\nnew file mode 0120000\n--- /dev/null\n"
             f"+++ b/work.py\n@@ -0,0 +1 @@\n+{faster}\n\\ No newline at end of file\n")
    e = outcome(tmp_path / "t", patch)
    assert e["state"] == "invalid", e
    assert "symlink" in str(e["note"]) and "work.py" in str(e["note"]), e["note"]


def test_a_submodule_is_refused(tmp_path: Path) -> None:
    sha = "1" * 40
    patch = ("diff --git a/src/lib b/src/lib\nnew file mode 0160000\nindex 0000000..1111111\n"
             f"--- /dev/null\n+++ b/src/lib\n@@ -0,0 +1 @@\n+Subproject commit {sha}\n")
    e = outcome(tmp_path, patch)
    assert e["state"] == "invalid", e
    assert "submodule" in str(e["note"]) and "src/lib" in str(e["note"]), e["note"]


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "r"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    (root / "b.sh").write_text("echo\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return root


def test_the_index_decides_not_the_patch_text(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    base = git(root, "rev-parse", "HEAD").strip()
    applied.check(root, base, lambda p: True)  # the base itself passes
    (root / "a.py").unlink()
    (root / "a.py").symlink_to("/etc/hostname")
    git(root, "add", "-A")
    with pytest.raises(PatchError, match=r"a\.py: .*symlink"):
        applied.check(root, base, lambda p: True)


def test_a_mode_change_outside_the_editable_scope_is_refused(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    base = git(root, "rev-parse", "HEAD").strip()
    subprocess.run(["git", "update-index", "--chmod=+x", "b.sh"], cwd=root, check=True)
    applied.check(root, base, lambda p: p == "b.sh")  # editable: the scope allows it
    with pytest.raises(PatchError, match=r"b\.sh: .*mode from 100644 to 100755"):
        applied.check(root, base, lambda p: p == "a.py")
