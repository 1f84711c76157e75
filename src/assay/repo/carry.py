"""The run's commits in one file: a git bundle another clone of the repository can fetch.

A run's kept commits live on ``assay/<run>`` branches of the clone it ran in; a fresh clone
(another machine, a GPU rented by the hour) has none of them. :func:`write_bundle` puts
every ``assay/*`` branch, and any other commit named to it, into a bundle that leaves out
what a fresh copy of the repository already holds: what the remote-tracking branches reach
(a clone of the same origin), else what the local branches other than ``assay/*`` reach.
Those left out are the bundle's prerequisites: :func:`restore` names any that the clone
lacks (a wrong repository, or commits never pushed) before it changes a thing, then fetches
the branches. Commits named besides the branches are kept under ``refs/assay-carry/`` in
the receiving clone, so that git's garbage collection keeps them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import WorkspaceError
from .git import git

BUNDLE_NAME = "commits.bundle"
RUN_BRANCHES = "refs/heads/assay/"
EXTRA = "refs/assay-carry/"  # commits the journal names that no run branch reaches
_FETCHED = "refs/assay-carry-fetch/"  # a bundle's branches while they are checked
_SHA = re.compile(r"^[0-9a-f]{40}$|^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Contents:
    """What a bundle holds (``heads``: ref -> commit) and needs (``requires``: commits)."""

    heads: dict[str, str]
    requires: tuple[str, ...]


def _refs(root: Path, prefix: str) -> dict[str, str]:
    out = git(["for-each-ref", "--format=%(objectname) %(refname)", prefix], root).stdout
    return {ref: sha for sha, ref in (line.split(" ", 1) for line in out.splitlines() if line)}


def missing(root: Path, commits: Iterable[str]) -> list[str]:
    """The commits of ``commits`` this repository does not hold (in the order given)."""
    wanted = [c for c in dict.fromkeys(commits) if c]
    if not wanted:
        return []
    out = git(["cat-file", "--batch-check=%(objecttype)"], root,
              input="".join(f"{c}\n" for c in wanted)).stdout.splitlines()
    return [c for c, kind in zip(wanted, out, strict=True) if kind != "commit"]


def _exclusions(root: Path) -> list[str]:
    """What a fresh copy of the repository holds, as rev-list arguments after ``--not``."""
    if _refs(root, "refs/remotes/"):
        return ["--remotes"]
    if any(not r.startswith(RUN_BRANCHES) for r in _refs(root, "refs/heads/")):
        return ["--exclude=assay/*", "--branches"]
    return []


def _unreached(root: Path, commits: list[str]) -> list[str]:
    """The commits of ``commits`` this clone holds that neither a run branch nor what a fresh
    copy holds reaches (only those need a ref of their own in the bundle)."""
    held = [c for c in commits if c not in missing(root, commits)]
    if not held:
        return []
    out = git(["rev-list", *held, "--not", "--branches=assay/*", *_exclusions(root)],
              root).stdout.split()
    return [c for c in held if c in set(out)]


def write_bundle(root: Path, out: Path, named: Sequence[str] = ()) -> bool:
    """Write the ``assay/*`` branches and the ``named`` commits (those this clone holds)
    into the bundle ``out``, whole when it appears (written aside, then renamed). False,
    and no file, when there is nothing a fresh copy would lack."""
    heads = _refs(root, RUN_BRANCHES)
    extra = _unreached(root, [c for c in dict.fromkeys(named) if c and _SHA.match(c)])
    if not heads and not extra:
        out.unlink(missing_ok=True)
        return False
    had = _refs(root, EXTRA)  # a restore's: they stay
    made = [f"{EXTRA}{sha}" for sha in extra if f"{EXTRA}{sha}" not in had]
    for ref in made:
        git(["update-ref", ref, ref[len(EXTRA):]], root)
    aside = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        args = ["bundle", "create", "-q", str(aside), "--branches=assay/*",
                f"--glob={EXTRA}*"]
        if excl := _exclusions(root):
            args += ["--not", *excl]
        proc = git(args, root, check=False)
        if proc.returncode != 0:
            if "empty bundle" in proc.stderr:
                out.unlink(missing_ok=True)
                return False
            raise WorkspaceError(f"cannot write the run's commits to {out}: "
                                 f"{proc.stderr.strip()}")
        os.replace(aside, out)
    finally:
        aside.unlink(missing_ok=True)
        for ref in made:
            git(["update-ref", "-d", ref], root, check=False)
    return True


def contents(root: Path, bundle: Path) -> Contents:
    """The bundle's refs and prerequisites; WorkspaceError when it is not a bundle."""
    if not bundle.is_file():
        raise WorkspaceError(f"{bundle}: no such file")
    with open(bundle, "rb") as fh:
        first = fh.readline()
    if not first.startswith(b"# v2 git bundle") and not first.startswith(b"# v3 git bundle"):
        raise WorkspaceError(f"{bundle}: not a git bundle (it begins {first[:30]!r})")
    heads: dict[str, str] = {}
    requires: list[str] = []
    with open(bundle, "rb") as fh:
        fh.readline()
        for raw in fh:
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            if not line:
                break
            if line.startswith("@"):
                continue  # a v3 capability
            if line.startswith("-"):
                requires.append(line[1:].split(" ", 1)[0])
            else:
                sha, _, ref = line.partition(" ")
                heads[ref] = sha
    return Contents(heads, tuple(requires))


def restore(root: Path, bundle: Path) -> list[str]:
    """Fetch the bundle's run branches and commits into the repository at ``root``.

    A run branch this clone lacks is created; one behind the bundle's is moved on; one
    ahead of it stays; one that went elsewhere raises WorkspaceError naming it, as does a
    prerequisite this clone lacks (nothing is changed then). Returns what was done."""
    found = contents(root, bundle)
    if lacking := missing(root, found.requires):
        raise WorkspaceError(
            f"{bundle}: this clone lacks {len(lacking)} commit(s) the run's commits build on "
            f"({', '.join(c[:12] for c in lacking[:3])}): it is a clone of another repository, "
            "or those commits were never pushed; fetch them (or clone the repository the run "
            "was made in), then try again")
    proc = git(["bundle", "verify", "-q", str(bundle)], root, check=False)
    if proc.returncode != 0:
        raise WorkspaceError(f"{bundle}: the bundle is damaged: {proc.stderr.strip()}")
    git(["fetch", "-q", "--no-tags", "--no-write-fetch-head", str(bundle),
         f"+{RUN_BRANCHES}*:{_FETCHED}heads/*", f"+{EXTRA}*:{EXTRA}*"], root)
    try:
        done = _move_branches(root)
    finally:
        for ref in _refs(root, _FETCHED):
            git(["update-ref", "-d", ref], root, check=False)
    return done


def _move_branches(root: Path) -> list[str]:
    """Create or move on each run branch to the fetched one; all are checked first."""
    here = _refs(root, RUN_BRANCHES)
    moves: list[tuple[str, str, str | None]] = []
    for ref, sha in sorted(_refs(root, f"{_FETCHED}heads/").items()):
        branch = RUN_BRANCHES + ref[len(f"{_FETCHED}heads/"):]
        name = branch[len("refs/heads/"):]
        old = here.get(branch)
        if old == sha or (old is not None and _is_ancestor(root, sha, old)):
            continue  # here already, or this clone's is ahead
        if old is not None and not _is_ancestor(root, old, sha):
            raise WorkspaceError(
                f"branch {name} of this clone ({old[:12]}) and the carried one ({sha[:12]}) "
                f"went different ways; rename or delete this clone's branch "
                f"(git branch -m {name} {name}-local), then try again")
        moves.append((branch, sha, old))
    for branch, sha, _old in moves:
        git(["update-ref", branch, sha], root)
    return [f"{b[len('refs/heads/'):]} at {sha[:12]}" + (f" (was {old[:12]})" if old else "")
            for b, sha, old in moves]


def _is_ancestor(root: Path, older: str, newer: str) -> bool:
    return git(["merge-base", "--is-ancestor", older, newer], root, check=False).returncode == 0
