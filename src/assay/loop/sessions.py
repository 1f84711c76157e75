"""Sessions: each ``assay run`` is one, with its own budget, name and starting point.

A session begins by naming what changed since the last one (a new commit on the user's
branch is announced, and ``--from-head`` starts from it with the kept commits it lacks
replayed on top), then builds the incumbent and runs its checks before anything else
(:func:`preflight`): checks that fail on the incumbent stop the session at once.
``assay reset`` archives the journal and removes what assay made in the repository.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..bench.worker import SlotTrees, check_incumbent
from ..config.spec import Target
from ..errors import AssayError
from ..executors.base import Executor
from ..journal.lock import RunLock
from ..journal.store import JOURNAL_NAME, Journal
from ..model import ExperimentState, Incumbent
from ..records import SessionRecord
from ..repo import carry
from ..repo.git import git
from ..repo.repository import Repository
from ..repo.workspace import Workspace


@dataclass(frozen=True)
class SessionOptions:
    name: str = ""
    from_head: bool = False
    retry: bool = False
    unconfined: bool = False  # the trees' commands run without a sandbox (see contain.gate)
    carry_on: bool = False  # --continue: go on after a stop rule ended the last run


def _subject(root: Path, commit: str) -> str:
    return git(["log", "-1", "--format=%s", commit], root, check=False).stdout.strip()


def _is_ancestor(root: Path, older: str, newer: str) -> bool:
    return git(["merge-base", "--is-ancestor", older, newer], root, check=False).returncode == 0


_UNFINISHED = (ExperimentState.PROPOSED, ExperimentState.QUEUED, ExperimentState.RUNNING,
               ExperimentState.MEASURED)


def _incumbent(journal: Journal) -> Incumbent:
    inc = journal.incumbent()
    if inc is None:
        raise AssayError("the journal has no incumbent; call start() first")
    return inc


def begin(target: Target, journal: Journal, ws: Repository, executor: Executor,
          options: SessionOptions, say: Callable[[str, str], None]) -> int:
    """Record the session and announce (or follow, with ``from_head``) a new user commit.

    Returns the number of experiments before this session: its budget counts the rest. A
    session that was interrupted (killed, or stopped with experiments unfinished) is
    resumed, budget included, rather than started anew.
    """
    past = journal.sessions()
    if past and (not past[-1].ended or journal.experiments(list(_UNFINISHED))):
        last = dataclasses.replace(past[-1], ended=None)
        journal.set_sessions([*past[:-1], last])
        say("session", f"resuming session {last.n} ({last.name}), which was "
                       "interrupted; its budget counts from where it began")
        return int(last.experiments_before)
    head = ws.head()
    inc = _incumbent(journal)
    last_head = past[-1].user_head if past else journal.base_commit()
    root = target.root
    contained = head == inc.commit or _is_ancestor(root, head, inc.commit)
    subject = _subject(root, head)
    if options.from_head and not contained:
        say("session", f"starting from your branch's HEAD {head[:12]} ({subject})")
        from_head(target, journal, ws, executor, head, say)
    elif options.from_head:
        say("session", f"the incumbent already holds your HEAD {head[:12]}; continuing")
    elif last_head and head != last_head and not contained:
        say("session", f"your branch has a new commit since the last session: "
                       f"{head[:12]} ({subject}); this session continues from the "
                       f"last incumbent {inc.commit[:12]}; `assay run --from-head` "
                       "starts from the new commit instead")
    journal.set_run_name(ws.run_name)
    before = journal.count_experiments()
    record = SessionRecord(n=len(past) + 1, name=ws.run_name, started=time.time(),
                           user_head=head, incumbent=_incumbent(journal).commit,
                           experiments_before=before)
    journal.set_sessions([*past, record])
    if len(past):
        say("session", f"session {record.n} ({ws.run_name}); its budget counts only "
                       "its own experiments")
    return before


def end(journal: Journal) -> None:
    """Mark the current session finished (a later run starts a new one)."""
    past = journal.sessions()
    if past:
        journal.set_sessions([*past[:-1], dataclasses.replace(past[-1], ended=time.time())])


def from_head(target: Target, journal: Journal, ws: Repository, executor: Executor,
              head: str, say: Callable[[str, str], None]) -> None:
    """Make ``head`` plus the kept changes it lacks the incumbent; re-check each replay."""
    inc = _incumbent(journal)
    tip = head
    kept = [e for e in journal.experiments([ExperimentState.KEPT]) if e.commit]
    params = dict(inc.params)
    last_id: str | None = None
    for e in kept:
        assert e.commit is not None
        if _is_ancestor(target.root, e.commit, head):
            continue
        try:
            new = ws.commit_candidate(tip, e.candidate.patch, params,
                                      f"assay {e.id} (replayed on {head[:12]}): "
                                      f"{e.candidate.hypothesis}")
        except AssayError as exc:
            say("warn", f"{e.id} does not apply on {head[:12]} and is left out: {exc}")
            continue
        why = preflight(target, ws, executor, Incumbent(new, params, e.id))
        if why:
            say("warn", f"{e.id} replayed on {head[:12]} fails its checks and is left "
                        f"out: {why.splitlines()[0]}")
            continue
        tip, last_id = new, e.id
        say("session", f"replayed {e.id} on {head[:12]} as {new[:12]} (checks pass)")
    git(["update-ref", f"refs/heads/{ws.branch}", tip], target.root)
    journal.set_incumbent(Incumbent(tip, params, last_id))


def preflight(target: Target, ws: Repository, executor: Executor, inc: Incumbent) -> str:
    """Build the incumbent on the first slot and run its checks; '' or why not."""
    if target.checks is None or not executor.slots or not isinstance(ws, Workspace):
        return ""  # no checks, or a repository without git (a simulation)
    slot = executor.slots[0]
    trees_for = getattr(executor, "trees_for", None)
    trees = trees_for(slot) if trees_for is not None else SlotTrees(
        ws.tree("check-a"), ws.tree("check-b"))
    return check_incumbent(target, ws, slot, trees, inc)


def holding_branch(root: Path, commit: str | None, fallback: str) -> str:
    """The ``assay/...`` branch whose tip is ``commit`` (the fallback when none is, or when
    there is no commit): the one answer ``assay status`` and the dashboard give."""
    if not commit:
        return fallback
    out = git(["for-each-ref", "--format=%(refname:short)", "--points-at", commit,
               "refs/heads/assay/"], root, check=False).stdout.split()
    if fallback in out or not out:
        return fallback
    return out[0]


def reset(target: Target) -> list[str]:
    """Archive the journal and logs, remove slot worktrees and run branches; what was done."""
    state = target.state_dir
    lock = RunLock(state / "run.lock")
    lock.acquire()  # refuses while a run is live
    done: list[str] = []
    try:
        branches: set[str] = set()
        journal_file = state / JOURNAL_NAME
        if journal_file.exists():
            j = Journal.open(journal_file, readonly=True)
            try:
                names = {s.name for s in j.sessions() if s.name}
                names.add(j.run_name() or "main")
            finally:
                j.close()
            branches = {f"assay/{n}" for n in names}
        archive = state / "archive" / time.strftime("%Y%m%d-%H%M%S")
        for name in (JOURNAL_NAME, f"{JOURNAL_NAME}-wal", f"{JOURNAL_NAME}-shm",
                     f"{JOURNAL_NAME}-key", f"{JOURNAL_NAME}-sealed", "logs", "research.md",
                     carry.BUNDLE_NAME):
            src = state / name
            if src.exists():
                archive.mkdir(parents=True, exist_ok=True)
                shutil.move(str(src), str(archive / name))
        if archive.exists():
            done.append(f"archived the journal to {archive}")
        trees = state / "worktrees"
        if trees.is_dir():
            for tree in sorted(trees.iterdir()):
                git(["worktree", "remove", "--force", str(tree)], target.root, check=False)
                if tree.exists():
                    shutil.rmtree(tree, ignore_errors=True)
                done.append(f"removed worktree {tree.name}")
            git(["worktree", "prune"], target.root, check=False)
        for cache in ("checks", "compare", "pycache", "stop"):
            p = state / cache
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()
        for b in sorted(branches):
            ref = f"refs/heads/{b}"
            if git(["rev-parse", "--verify", "-q", ref], target.root, check=False).stdout.strip():
                git(["update-ref", "-d", ref], target.root)
                done.append(f"deleted branch {b}")
        carried = git(["for-each-ref", "--format=%(refname)", carry.EXTRA], target.root,
                      check=False).stdout.split()
        for ref in carried:  # commits an import kept alive for the archived journal
            git(["update-ref", "-d", ref], target.root, check=False)
    finally:
        lock.release()
    return done
