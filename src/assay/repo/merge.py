"""A queued patch, written against an older commit, merged onto the incumbent.

``git apply --3way`` finds the patch's own base in its ``index`` lines, so a patch that no
longer applies as it stands (an earlier keep changed the lines around it) is merged; a
real conflict names its files. The merge happens in a private index: no tree is touched.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from .git import git


@dataclass(frozen=True)
class Merged:
    patch: str  # the change relative to ``onto`` (empty on a conflict)
    conflicts: tuple[str, ...]  # the files both sides changed in the same lines

    def conflict_note(self, onto: str) -> str:
        """What a conflict is recorded as: ``conflict: <files>: ...``."""
        return (f"conflict: {', '.join(self.conflicts)}: the patch and the incumbent "
                f"{onto[:12]} change the same lines")


def merge_onto(root: Path, patch: str, onto: str) -> Merged | None:
    """``patch`` merged onto the commit ``onto``; None when it applies there as it stands
    (it is left as written, its digest the proposer's) or git cannot merge it at all (its
    base is unknown here, say): then it is applied as written, as before."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(["read-tree", onto], root, env=env)
        text = patch if patch.endswith("\n") else patch + "\n"
        as_written = git(["apply", "--cached", "--check", "--whitespace=nowarn", "-"], root,
                         input=text, env=env, check=False)
        if as_written.returncode == 0:
            return None
        proc = git(["apply", "--cached", "--3way", "--whitespace=nowarn", "-"], root,
                   input=text, env=env, check=False)
        if proc.returncode == 0:
            return Merged(git(["diff", "--cached", "--binary", onto], root, env=env).stdout, ())
        unmerged = git(["ls-files", "--unmerged"], root, env=env).stdout.splitlines()
        files = sorted({line.split("\t", 1)[1] for line in unmerged if "\t" in line})
        return Merged("", tuple(files)) if files else None
