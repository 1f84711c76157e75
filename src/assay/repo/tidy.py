"""What a run leaves in ``.assay/worktrees`` when it ends.

The slots' trees stay: the next run checks its candidates out in them, and their build
folders keep its builds warm. Every other tree goes: the chain's (a verification builds
them afresh), a check's, finalize's, and those of slots the config no longer has.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass

from ..config.spec import Target
from .git import git


@dataclass(frozen=True)
class Tidied:
    removed: tuple[str, ...]  # the trees' names
    kept: tuple[str, ...]

    def words(self) -> str:
        """What was removed, what stays and why; empty when there is no tree."""
        parts = []
        if self.removed:
            parts.append(f"removed {len(self.removed)} worktree(s) no run reuses "
                         f"({', '.join(self.removed)})")
        if self.kept:
            parts.append(f"kept {', '.join(self.kept)} in .assay/worktrees: the slots' trees, "
                         "which the next run reuses with their builds warm (`assay reset` "
                         "removes them)")
        return "; ".join(parts)


def tidy_trees(target: Target, slot_names: Iterable[str]) -> Tidied:
    """Remove every tree but the slots' (``<slot>-a``, ``<slot>-b``). Call while holding
    the run lock: nothing else may be using them."""
    trees = target.state_dir / "worktrees"
    if not trees.is_dir():
        return Tidied((), ())
    reused = {f"{name}-{side}" for name in slot_names for side in ("a", "b")}
    removed: list[str] = []
    kept: list[str] = []
    for tree in sorted(trees.iterdir()):
        if tree.name in reused:
            kept.append(tree.name)
            continue
        git(["worktree", "remove", "--force", str(tree)], target.root, check=False)
        if tree.exists():
            shutil.rmtree(tree, ignore_errors=True)
        removed.append(tree.name)
    if removed:
        git(["worktree", "prune"], target.root, check=False)
    return Tidied(tuple(removed), tuple(kept))
