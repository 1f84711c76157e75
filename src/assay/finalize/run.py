"""`assay finalize`: the kept commits of a run as reviewed, separately measured branches.

Steps, each of which may fail; on any failure every branch finalize made or moved is put
back and the error says why (the user's branch, index and working tree are never used):

1. the kept commits of ``assay/<run>`` since its merge-base with ``HEAD`` become groups
   (:mod:`.grouping`: shared files, or ``--groups FILE``);
2. each group alone on the merge-base is built and checked; a group that needs another
   is merged with it (the reason is kept);
3. one branch per group, ``assay/<run>-pr/<slug>``, one commit on the merge-base; the
   union of the branches must give the final tree exactly;
4. each branch measured against the merge-base, and the final tree without each group
   against the final tree (:mod:`.measure`, the run's loop and decision rule);
5. each group reviewed (:mod:`.review`); findings go to the journal, and a blocking one
   keeps the group out (no branch) until a later review drops it or ``--waive ID``;
6. each branch's commit message becomes its pull-request text, also written to
   ``.assay/finalize/<run>/<slug>/PR.md``, with ``CHANGES.md`` beside them.

(The branches sit under ``assay/<run>-pr/`` because git cannot hold a branch
``assay/<run>/x`` while the branch ``assay/<run>`` exists.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import state
from ..assemble import load, open_journal
from ..bench import fingerprint, process
from ..bench.meter import Meter, caps_of
from ..bench.steps import run_step
from ..bench.worker import cache_env
from ..config.fidelity import last_level
from ..config.prices import for_target
from ..config.spec import PlatformSpec, Target
from ..errors import CapReached, FinalizeError
from ..journal.lock import RunLock
from ..journal.store import Journal
from ..measure import compare as measure
from ..measure import verify
from ..model import ExperimentState
from ..records import FinalizedGroup, FinalizeRecord, Fingerprint
from ..repo import plumbing as branches
from ..repo.git import git
from ..repo.workspace import Workspace, split_params
from . import grouping, pr, review
from .grouping import Change, Group

Report = Callable[[str], None]


@dataclass
class Result:
    run: str
    base: str
    final: str
    outcomes: list[pr.Outcome]
    notes: list[str]
    folder: Path
    changes: str  # CHANGES.md
    rolled_back: list[str] = field(default_factory=list)

    @property
    def finalized(self) -> list[pr.Outcome]:
        return [o for o in self.outcomes if o.finalized]


def kept_changes(root: Path, journal: Journal, base: str, final: str) -> list[Change]:
    kept = {e.commit: e for e in journal.experiments([ExperimentState.KEPT]) if e.commit}
    out: list[Change] = []
    for sha in branches.commits_between(root, base, final):
        parent = git(["rev-parse", f"{sha}^"], root).stdout.strip()
        files = branches.changed_files(root, parent, sha)
        exp = kept.get(sha)
        if exp is None:
            subject = git(["log", "-1", "--format=%s", sha], root).stdout.strip()
            out.append(Change(sha, parent, files, hypothesis=subject))
            continue
        d = exp.decision
        out.append(Change(sha, parent, files, exp.id, exp.candidate.hypothesis,
                          tuple(exp.candidate.sources), exp.candidate.hypothesis_id,
                          d.effect if d else None, d.lo if d else None, d.hi if d else None,
                          dict(exp.candidate.params)))
    return out


class _Checker:
    """Build + checks of merge-base + some groups, in one scratch worktree; cached."""

    def __init__(self, target: Target, ws: Workspace, base: str, final: str,
                 defaults: dict[str, Any]) -> None:
        self.target, self.ws, self.base, self.final = target, ws, base, final
        self.defaults = defaults
        self.cache: dict[str, str] = {}
        self.logs = target.state_dir / "finalize" / "checks"

    def tree(self, groups: Sequence[Group]) -> str:
        files = [f for g in groups for f in g.files]
        return branches.tree_with(self.target.root, self.base, self.final, files)

    def worktree(self, tree: str, message: str) -> Path:
        commit = branches.commit_tree(self.target.root, tree, self.base, message)
        path = self.ws.tree("finalize")
        self.ws.reset(path, commit)
        return path

    def __call__(self, groups: Sequence[Group]) -> str:
        if self.target.build is None and self.target.checks is None:
            return ""
        tree = self.tree(groups)
        if tree in self.cache:
            return self.cache[tree]
        path = self.worktree(tree, "finalize: check " + ", ".join(g.slug for g in groups))
        params = dict(self.defaults)
        for g in groups:
            for c in g.changes:
                params.update(measure.env_params(self.target, c.params))
        env_vars = split_params(params, self.target.params)[0]
        # built as a slot's tree is: its own base and its own caches, warm across the groups
        # built in this tree (no cache a candidate's run wrote is read here)
        env = process.scrubbed_env(self.target.env, {**self.ws.bytecode_env(path),
                                                     **cache_env(self.target, "finalize", path),
                                                     **env_vars})
        logs = self.logs / tree[:12]
        why = ""
        # With [[platforms]]: on each local platform, with its environment (a remote
        # platform's build and checks run in its measuring blocks, on its own machines).
        plats: list[PlatformSpec | None] = [*local_platforms(self.target)] or [None]
        for plat in plats:
            penv = {**env, **plat.env} if plat is not None else env
            where = logs / plat.name if plat is not None else logs
            for name, cmd in (("build", self.target.build), ("checks", self.target.checks)):
                why = run_step(cmd, path, penv, where, name, self.target, None).why
                if why:
                    break
            if why:
                why = f"on platform {plat.name}: {why}" if plat is not None else why
                break
        self.cache[tree] = why
        return why


def local_platforms(target: Target) -> list[PlatformSpec]:
    return [p for p in target.platforms if p.kind == "local"]


def _env_defaults(target: Target) -> dict[str, Any]:
    return {p.name: p.default for p in target.params
            if p.apply == "env" and p.default is not None}


def finalize(root: str | Path = ".", *, groups_file: str | Path | None = None,
             waive: Iterable[str] = (), measure_groups: bool = True,
             config: str | None = None, report: Report = lambda m: None,
             reviewer: review.Reviewer | str | None = "config") -> Result:
    """Turn the run's kept commits into reviewed, separately measured branches."""
    target = load(root, config)
    lock = RunLock(target.state_dir / "run.lock")
    lock.acquire()
    try:
        journal = open_journal(target)
        try:
            if measure_groups:  # measured at the last level, on the journal's calibration
                journal.hold_fidelity(target.fidelity, str(target.config_path))
            for line in state.ensure_commits(target, journal):  # a copy of .assay, a new clone
                journal.event("resume", line)
                report(line)
            return _finalize(target, journal, groups_file, set(waive), measure_groups,
                             report, reviewer)
        finally:
            journal.close()
    finally:
        lock.release()


def _finalize(target: Target, journal: Journal, groups_file: str | Path | None,
              waive: set[str], measure_groups: bool, report: Report,
              reviewer_arg: review.Reviewer | str | None) -> Result:
    root = target.root
    run = journal.run_name() or target.run.name or "main"
    ws = Workspace(target, run)
    final = branches.rev(root, f"refs/heads/{ws.branch}")
    if final is None:
        raise FinalizeError(f"no branch {ws.branch} in {root}; `assay run` makes it, then "
                            "`assay finalize` turns its kept commits into branches")
    base = branches.merge_base(root, "HEAD", final)
    doubt = _doubt(journal, report)
    changes = kept_changes(root, journal, base, final)
    if not changes:
        raise FinalizeError(f"{ws.branch} has no commit on top of its merge-base "
                            f"{base[:12]} with HEAD: nothing was kept to finalize")
    reviewer = review.from_target(target) if reviewer_arg == "config" else reviewer_arg
    assert not isinstance(reviewer, str)
    if groups_file is not None:
        groups = grouping.read_groups(Path(groups_file), changes)
    else:
        groups = grouping.propose(changes)
    how = f"from {groups_file}" if groups_file is not None else "by shared files"
    report(f"{len(changes)} kept change(s) on {ws.branch} since {base[:12]}: "
           f"{len(groups)} group(s) {how}")
    defaults = _env_defaults(target)
    checker = _Checker(target, ws, base, final, defaults)
    notes: list[str] = []
    if target.build is None and target.checks is None:
        notes.append("no build or checks command: dependencies between groups were not tested")
    refs = branches.Refs(root)
    try:
        groups, merges = grouping.merge_dependent(groups, changes, checker)
        notes += merges
        for n in merges:
            report(n)
        outcomes = _branches(target, run, base, final, groups, refs)
        if measure_groups:
            _measure(target, run, base, final, journal, outcomes, defaults, report)
        _review(target, journal, base, outcomes, checker, reviewer, waive, report)
        folder = target.state_dir / "finalize" / run
        fp = fingerprint.take(final, target.config_path)
        fingerprint.record(journal, f"finalize-{int(time.time())}", fp)
        _write_texts(target, journal, run, base, outcomes, refs, fp, doubt)
        _drop_earlier(journal, run, outcomes, refs, folder, report)
        changes_text = pr.changes_md(outcomes, target, run, base, notes, fp, doubt)
        (folder / "CHANGES.md").write_text(changes_text)
        _record(journal, run, base, final, notes, outcomes)
        journal.event("finalize", f"finalized {sum(o.finalized for o in outcomes)} of "
                                  f"{len(outcomes)} group(s) of {ws.branch}")
        return Result(run, base, final, outcomes, notes, folder, changes_text)
    except BaseException:
        undone = refs.rollback()
        if undone:
            report(f"rolled back: {', '.join(undone)}")
        raise


def _doubt(journal: Journal, report: Report) -> str:
    """Why the kept changes may not reproduce ('' when the last verification found none),
    reported as a warning."""
    checked = verify.current(journal)
    doubt = verify.unreproduced(checked.as_dict() if checked else None,
                               journal.experiments([ExperimentState.KEPT], patches=False))
    if doubt:
        report(f"warning: {doubt}")
    return doubt


def _write_texts(target: Target, journal: Journal, run: str, base: str,
                 outcomes: Sequence[pr.Outcome], refs: branches.Refs,
                 fp: Fingerprint, doubt: str) -> None:
    """Each group's pull-request text, written to its PR.md and, for a finalized group, as
    the message of its branch's one commit (a blocked group's branch is deleted)."""
    folder = target.state_dir / "finalize" / run
    hyps = {h.id: h for h in journal.hypotheses()}
    checks_note = _checks_note(target, outcomes)
    for o in outcomes:
        body = pr.text(o, target, run, base, fp, hyps, checks_note[o.group.slug], doubt)
        path = folder / o.group.slug / "PR.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        if o.finalized:
            o.commit = branches.commit_tree(target.root, o.tree, base, body)
            refs.set(o.branch, o.commit)
        else:
            refs.delete(o.branch)


def _drop_earlier(journal: Journal, run: str, outcomes: Sequence[pr.Outcome],
                  refs: branches.Refs, folder: Path, report: Report) -> None:
    """The branches and texts of groups an earlier finalize made and this one no longer has."""
    previous = journal.finalized(run)
    current = {o.branch for o in outcomes}
    for g in previous.groups if previous else []:
        if g.branch and g.branch not in current:
            refs.delete(g.branch)  # a branch of an earlier finalize, now regrouped
            report(f"removed {g.branch}, made by an earlier finalize")
    slugs = {o.group.slug for o in outcomes}
    for old in folder.glob("*/PR.md"):
        if old.parent.name not in slugs:
            old.unlink()  # the text of a group an earlier finalize made
            if not any(old.parent.iterdir()):
                old.parent.rmdir()


def _record(journal: Journal, run: str, base: str, final: str, notes: Sequence[str],
            outcomes: Sequence[pr.Outcome]) -> None:
    """What this finalize made, in the journal (the next one removes what it drops)."""
    journal.set_finalized(run, FinalizeRecord(
        base=base, final=final, at=time.time(), notes=list(notes),
        groups=[FinalizedGroup(slug=o.group.slug, branch=o.branch if o.finalized else None,
                               experiments=list(o.group.labels), files=list(o.group.files),
                               reason=o.group.reason, status=o.status,
                               alone=o.alone.as_dict() if o.alone else None,
                               without=o.without.as_dict() if o.without else None)
                for o in outcomes]))


def _branches(target: Target, run: str, base: str, final: str, groups: Sequence[Group],
              refs: branches.Refs) -> list[pr.Outcome]:
    root = target.root
    outcomes: list[pr.Outcome] = []
    for g in groups:
        tree = branches.tree_with(root, base, final, g.files)
        branch = f"assay/{run}-pr/{g.slug}"
        commit = branches.commit_tree(root, tree, base, f"{g.title}\n\n(assay finalize: "
                                                          "measuring and reviewing)\n")
        refs.set(branch, commit)
        if branches.tree_of(root, branch) != tree:
            raise FinalizeError(f"branch {branch} does not hold the tree it was made from")
        outcomes.append(pr.Outcome(g, branch, tree, commit=commit))
    union = branches.union_tree(root, base, [o.commit for o in outcomes])
    final_tree = branches.tree_of(root, final)
    if union != final_tree:
        missing = git(["diff", "--name-only", union, final_tree], root).stdout.split()
        raise FinalizeError(f"the {len(outcomes)} group branches together do not reproduce "
                            f"assay/{run}: {', '.join(missing) or 'the trees'} differ; "
                            "nothing was kept")
    return outcomes


def _measure(target: Target, run: str, base: str, final: str, journal: Journal,
             outcomes: Sequence[pr.Outcome], defaults: dict[str, Any], report: Report) -> None:
    root = target.root
    folder = target.state_dir / "finalize" / run / "measure"
    cal = journal.calibration(last_level(target.fidelity))
    inc = journal.incumbent()
    final_params = measure.env_params(target, inc.params if inc else {})
    for o in outcomes:
        params = dict(defaults)
        for c in o.group.changes:
            params.update(measure.env_params(target, c.params))
        report(f"measuring {o.group.slug} alone: merge-base + group vs merge-base")
        o.alone = measure.compare(target, run, measure.Comparison(
            f"{o.group.slug}-alone", base, o.commit, defaults, params,
            f"{o.group.title} (alone on the merge-base)"), folder, cal, report)
        report(f"  {o.group.slug} alone: {pr.pct(o.alone.effect)} {pr.interval(o.alone)} "
               f"({o.alone.state})")
    if outcomes:  # with one group, leaving it out is the merge-base: measured all the same
        for o in outcomes:
            tree = branches.tree_with(root, final, base, o.group.files)
            without = branches.commit_tree(root, tree, final, f"final without {o.group.slug}")
            params = dict(final_params)
            for c in o.group.changes:
                for k in measure.env_params(target, c.params):
                    if k in defaults:
                        params[k] = defaults[k]
            report(f"measuring the final tree without {o.group.slug}")
            o.without = measure.compare(target, run, measure.Comparison(
                f"{o.group.slug}-without", final, without, final_params, params,
                f"the final tree without {o.group.slug}"), folder, cal, report)
            report(f"  without {o.group.slug}: {pr.pct(o.without.effect)} "
                   f"{pr.interval(o.without)} ({o.without.state})")
    for o in outcomes:
        o.flags = pr.flags_for(o.alone, o.without)


def _review(target: Target, journal: Journal, base: str, outcomes: Sequence[pr.Outcome],
            checker: _Checker, reviewer: review.Reviewer | None, waive: set[str],
            report: Report) -> None:
    stored = journal.waived()
    if waive - stored:
        journal.set_waived(stored | waive)
        for fid in sorted(waive - stored):
            journal.event("waive", f"finding {fid} waived (assay finalize --waive)")
    waived = stored | waive
    if reviewer is None:
        return
    # the review's calls are counted against the same caps as the proposers', the run's
    # calls so far included; finalize is a session of its own
    meter = Meter(for_target(target), caps_of(target.run), before=journal.spent(),
                  record=lambda u, call: journal.add_model_call(u, call, "finalize"))
    for o in outcomes:
        path = checker.worktree(o.tree, f"finalize: review {o.group.slug}")
        req = review.build_request(target.root, o.group.slug, o.group.title, base, o.commit,
                                   o.group.files, path)
        worst = reviewer.worst_call(req)
        if worst is not None:
            try:
                meter.check(*worst)
            except CapReached as exc:
                o.review = review.ReviewResult(reviewer=reviewer.name, skipped=str(exc))
                journal.event("review", f"review of {o.group.slug} skipped: {exc}", None,
                              experiments=list(o.group.labels))
                report(f"review of {o.group.slug} by {reviewer.name} skipped: {exc}")
                continue
        try:
            found = reviewer.review(req)
        finally:  # a reply the review could not use was still paid for
            for u in reviewer.used():
                meter.charge(u, "review")
        o.review = review.ReviewResult(found, {f.id for f in found if f.id in waived},
                                  reviewer.name)
        for f in found:
            journal.event("review", f"{f.id} {f.severity} {f.where}: {f.message}",
                          None, finding=f.as_dict(), experiments=list(o.group.labels))
        report(f"review of {o.group.slug} by {reviewer.name}: {len(found)} finding(s), "
               f"{len(o.review.blocking)} blocking")


def _checks_note(target: Target, outcomes: Sequence[pr.Outcome]) -> dict[str, str]:
    out: dict[str, str] = {}
    cmds = [f"`{c.cmd}`" for c in (target.build, target.checks) if c is not None]
    for o in outcomes:
        parts: list[str] = []
        if cmds:
            local = [p.name for p in local_platforms(target)]
            remote = [p.name for p in target.platforms if p.kind != "local"]
            on = (f" on platform{'s' if len(local) > 1 else ''} {', '.join(local)}"
                  if local else "")
            parts.append(f"- build and checks ({', '.join(cmds)}) pass on merge-base + this "
                         f"change alone{on}")
            if remote:
                parts.append(f"- on {', '.join(remote)}: build and checks run in the "
                             "measuring blocks")
        else:
            parts.append("- the target has no build or checks command")
        if o.alone is not None and o.alone.checks_passed is not None:
            parts.append(f"- checks before measuring: "
                         f"{'passed' if o.alone.checks_passed else 'FAILED'}")
        out[o.group.slug] = "\n".join(parts)
    return out
