"""git plumbing for finalize: group trees, commits without a checkout, undoable refs.

Nothing here touches the user's branch, index or working tree: trees are built in a
private index (``GIT_INDEX_FILE``), commits with ``git commit-tree``, and branches with
``git update-ref`` guarded by their old value. :class:`Refs` remembers every ref it moved
so that :meth:`Refs.rollback` puts each one back as it was.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import FinalizeError
from .git import git

IDENT = {"GIT_AUTHOR_NAME": "assay", "GIT_AUTHOR_EMAIL": "assay@localhost",
         "GIT_COMMITTER_NAME": "assay", "GIT_COMMITTER_EMAIL": "assay@localhost"}


def rev(root: Path, name: str) -> str | None:
    out = git(["rev-parse", "--verify", "-q", f"{name}^{{commit}}"], root,
              check=False).stdout.strip()
    return out or None


def tree_of(root: Path, commit: str) -> str:
    return git(["rev-parse", f"{commit}^{{tree}}"], root).stdout.strip()


def merge_base(root: Path, a: str, b: str) -> str:
    out = git(["merge-base", a, b], root, check=False).stdout.strip()
    if not out:
        raise FinalizeError(f"{a} and {b} have no common ancestor; finalize needs the run "
                            "branch to start from the user's history")
    return out


def changed_files(root: Path, a: str, b: str) -> tuple[str, ...]:
    """Paths that differ between two commits (a rename counts as both of its paths)."""
    out = git(["diff", "--no-renames", "--name-only", "-z", a, b], root).stdout
    return tuple(p for p in out.split("\0") if p)


def commits_between(root: Path, base: str, tip: str) -> list[str]:
    """The commits of ``base..tip``, oldest first, first parents only."""
    out = git(["rev-list", "--reverse", "--first-parent", f"{base}..{tip}"], root).stdout
    return out.split()


def diff(root: Path, a: str, b: str) -> str:
    return git(["diff", "--binary", "--no-renames", a, b], root).stdout


def _in_index(root: Path, base: str, steps: Iterable[tuple[str, str]]) -> str:
    """Write the tree of ``base`` after each (source commit, path) copy or removal."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(["read-tree", base], root, env=env)
        for source, path in steps:
            entry = git(["ls-tree", source, "--", path], root).stdout.strip()
            if entry:
                meta, _, _name = entry.partition("\t")
                mode, _kind, sha = meta.split()
                git(["update-index", "--add", "--cacheinfo", f"{mode},{sha},{path}"], root,
                    env=env)
            else:
                git(["update-index", "--force-remove", "--", path], root, env=env)
        return git(["write-tree"], root, env=env).stdout.strip()


def tree_with(root: Path, base: str, source: str, files: Sequence[str]) -> str:
    """The tree of ``base`` with ``files`` as they are in ``source`` (absent there: removed)."""
    return _in_index(root, base, ((source, f) for f in files))


def union_tree(root: Path, base: str, commits: Sequence[str]) -> str:
    """The tree of ``base`` with every commit's changes against ``base`` applied together."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(["read-tree", base], root, env=env)
        for c in commits:
            patch = diff(root, base, c)
            if not patch.strip():
                continue
            proc = git(["apply", "--cached", "--binary", "-"], root, input=patch, env=env,
                       check=False)
            if proc.returncode != 0:
                raise FinalizeError(f"the changes of {c[:12]} do not apply together with the "
                                    f"others: {proc.stderr.strip()}")
        return git(["write-tree"], root, env=env).stdout.strip()


def commit_tree(root: Path, tree: str, parent: str, message: str) -> str:
    return git(["commit-tree", tree, "-p", parent, "-F", "-"], root, input=message,
               env=IDENT).stdout.strip()


class Refs:
    """Branch moves that can all be undone: each ref's old value is kept on first touch."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.before: dict[str, str | None] = {}

    def set(self, branch: str, sha: str) -> None:
        ref = f"refs/heads/{branch}"
        old = rev(self.root, ref)
        if ref not in self.before:
            self.before[ref] = old
        git(["update-ref", ref, sha, old or ""], self.root, check=False)
        if rev(self.root, ref) != sha:
            raise FinalizeError(f"cannot create branch {branch}: git refused the ref (a branch "
                                "of that name, or one it would nest under, may exist); rename "
                                "or delete it, then run again")

    def delete(self, branch: str) -> None:
        ref = f"refs/heads/{branch}"
        old = rev(self.root, ref)
        if old is None:
            return
        if ref not in self.before:
            self.before[ref] = old
        git(["update-ref", "-d", ref, old], self.root)

    def rollback(self) -> list[str]:
        """Put every touched ref back; returns the refs that were restored or removed."""
        done: list[str] = []
        for ref, old in reversed(list(self.before.items())):
            now = rev(self.root, ref)
            if now == old:
                continue
            if old is None:
                git(["update-ref", "-d", ref], self.root, check=False)
            else:
                git(["update-ref", ref, old], self.root, check=False)
            done.append(ref)
        self.before.clear()
        return done
