"""The Python API: the same verbs as the CLI, on the ask/tell core.

    import assay.api as assay
    summary = assay.run("path/to/repo", budget=10)
    print(assay.status("path/to/repo"))

For driving the loop yourself (an MCP tool, a notebook), use :func:`session`, which
returns a :class:`~assay.loop.driver.Loop` holding the lock: ``loop.run(...)``, or
``loop.begin()``, ``loop.step()`` until it returns False, then ``loop.end()``. Every turn
goes through :meth:`~assay.loop.driver.Loop.step` (ask → dispatch → decide → tell).
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from . import keys, state
from .assemble import build_proposer
from .assemble import journal_path as journal_path
from .assemble import load as load
from .assemble import open_journal as open_journal
from .bench import contain, fingerprint, process
from .config.fidelity import last_level
from .config.spec import Target
from .decision.agreement import agreement
from .decision.rule import guard_change
from .errors import AssayError, ConfigError
from .executors.base import Executor
from .executors.platforms import build_executor
from .export import experiment_dict, render
from .init import write as init_mod
from .journal.lock import RunLock
from .journal.store import Journal
from .loop.driver import Event, Loop
from .loop.levels import awaiting
from .loop.progress import Summary, progress
from .loop.sessions import SessionOptions, holding_branch
from .loop.sessions import reset as reset_target
from .measure import spend
from .measure import verify as verify_mod
from .model import Experiment, ExperimentState, decided_level, decided_runs, patch_digest
from .proposers.base import Proposer
from .proposers.queue import QueueProposer, read_patch_file
from .refname import branch_problem
from .registry import RESEARCH_RERANK, resolve
from .repo.paramdiff import params_diff
from .repo.tidy import tidy_trees
from .repo.workspace import Workspace


def already_tried(proposer: Proposer, journal: Journal, retry: bool) -> list[str]:
    """One line per queued patch that an earlier experiment already measured."""
    if not isinstance(proposer, QueueProposer):
        return []
    out: list[str] = []
    for f in proposer.tried:
        try:
            _hyp, diff, _src = read_patch_file(f)
        except (OSError, AssayError):
            continue
        earlier = journal.find_digest(patch_digest(diff, {}))
        exp = journal.experiment(earlier) if earlier else None
        if exp is None:
            continue
        if retry:
            out.append(f"{f.name} was tried as {exp.id} ({exp.state.value}); measuring it "
                       "again (--retry)")
        else:
            out.append(f"{f.name} was already tried as {exp.id} ({exp.state.value}); skipped "
                       "(`assay run --retry` measures it again)")
    return out


def _rerank_research(target: Target, journal: Journal) -> None:
    """Research re-ranks its brief on what the last wave of experiments showed (the loop's
    hook before each proposal). Research loads on the first proposal, not with api: a core
    verb (``assay status``) starts without it: the registry names it and loads it on use."""
    resolve(RESEARCH_RERANK)(target, journal)


@contextlib.contextmanager
def session(target: Target, proposer: Proposer | None = None, executor: Executor | None = None,
            on_event: Event | None = None, name: str | None = None,
            lock: bool = True, from_head: bool = False, retry: bool = False,
            unconfined: bool = False, carry_on: bool = False) -> Iterator[Loop]:
    """A started loop holding the target's lock; closes everything on exit.

    Refuses (ConfigError) candidates of the llm and agent proposers where the machine
    cannot sandbox, unless ``unconfined`` (see :func:`assay.bench.contain.gate`)."""
    keys.take()  # before any child starts: no process can read a key from /proc
    if name is not None and branch_problem(name):
        raise ConfigError(f"--name {name!r} {branch_problem(name)}", file=str(target.config_path),
                          key="target.name",
                          valid='a git branch name such as "speed-1" or "ops/softmax"')
    run_lock = RunLock(target.state_dir / "run.lock")
    reaped: list[int] = []
    if lock:
        run_lock.acquire()
        # Holding the lock, anything a dead run started is an orphan: kill it.
        reaped = process.reap(target.state_dir / process.PROCS_DIR)
    try:
        journal = open_journal(target)
    except BaseException:
        if lock:
            run_lock.release()
        raise
    exe: Executor | None = None
    try:
        journal.hold_fidelity(target.fidelity, str(target.config_path))
        stored = journal.run_name()
        ws = Workspace(target, name or stored or target.run.name or "main")
        # a copy of .assay from another machine: its commits and slot trees made this clone's
        carried = [*state.ensure_commits(target, journal), *_adopted(ws.adopt_trees())] \
            if lock else []
        prop = proposer or build_proposer(target, journal, retry=retry)
        confinement = contain.gate(prop.name, unconfined)
        exe = executor or build_executor(target, ws)
        options = SessionOptions(name=ws.run_name, from_head=from_head, retry=retry,
                                 unconfined=confinement.unconfined, carry_on=carry_on)
        loop = Loop(target, journal, ws, exe, prop, on_event=on_event, session=options,
                    lock_held=(lambda: run_lock.held) if lock else None,
                    before_ask=lambda: _rerank_research(target, journal))
        if confinement.unconfined:
            journal.set_unconfined()
            loop.emit("warn", confinement.warning)
        for line in already_tried(prop, journal, retry):
            loop.emit("skip", line)
        if run_lock.took_over:
            loop.emit("lock", run_lock.took_over)
        for line in carried:
            loop.emit("resume", line)
        if reaped:
            loop.emit("resume", f"killed {len(reaped)} process(es) left running by a dead run: "
                                f"{', '.join(map(str, reaped))}")
        extra = {}
        if target.env.fingerprint:
            extra = fingerprint.extra_from_command(target.env.fingerprint, target.root,
                                                   process.scrubbed_env(target.env))
        fingerprint.record(journal, loop.session_id,
                           fingerprint.take(ws.head(), target.config_path, extra))
        locks = ws.clear_stale_locks() if lock else []
        if locks:
            loop.emit("resume", f"removed {len(locks)} git lock file(s) left by a dead run")
        yield loop
        if lock:
            state.save_commits(target, journal)  # for the next machine: see assay.state
    finally:
        if exe is not None and executor is None:
            exe.close()  # a cloud pool must not outlive a session that never ran the loop
        journal.close()
        if lock:
            run_lock.release()


def _adopted(trees: list[str]) -> list[str]:
    return [f"slot trees copied from another clone are this clone's now: {', '.join(trees)}"
            ] if trees else []


def run(root: str | Path = ".", *, budget: int | None = None, proposer: str | None = None,
        slots: int | None = None, name: str | None = None, max_hours: float | None = None,
        on_event: Event | None = None, signals: bool = False, config: str | None = None,
        proposer_obj: Proposer | None = None, executor_obj: Executor | None = None,
        from_head: bool = False, retry: bool = False, unconfined: bool = False,
        carry_on: bool = False) -> Summary:
    """Run one session on the repository at ``root`` until its budget is spent.

    After a run that a stop rule ended (a spending cap, ``stop_after_discards``, the
    metric's target: :mod:`assay.loop.stops`) it starts only with ``carry_on`` (``--continue``).
    """
    target = load(root, config, slots=slots, proposer=proposer, budget=budget)
    started = time.monotonic()
    with session(target, proposer=proposer_obj, executor=executor_obj, on_event=on_event,
                 name=name, from_head=from_head, retry=retry, unconfined=unconfined,
                 carry_on=carry_on) as loop:
        if signals:
            loop.install_signal_handlers()
        summary = loop.run(budget=target.run.budget, max_hours=max_hours)
        hours = max_hours if max_hours is not None else target.run.max_hours
        left = None if not hours else hours * 3600 - (time.monotonic() - started)
        verified, note = _verify_at_end(target, loop, summary, left, executor_obj is None)
        summary = dataclasses.replace(summary, verified=verified, verify_note=note,
                                      spend=spend.of_journal(loop.journal, target))
        if words := tidy_trees(target, [s.name for s in loop.executor.slots]).words():
            loop.emit("tidy", words)
        return summary


def _verify_at_end(target: Target, loop: Loop, summary: Summary, left_s: float | None,
                   own_executor: bool) -> tuple[dict[str, Any] | None, str]:
    """Measure the baseline against the final best when the run ends, if it may: the
    measurement (None without one) and why there is none ('' when there is, or nothing new
    was kept).

    Not when ``[run] verify = false``, the run failed or was stopped, nothing new was kept,
    the executor was handed in (it is closed: a verification needs one of its own), or the
    time left is less than a generous estimate of what it takes."""
    journal = loop.journal
    done = verify_mod.current(journal)
    if done is not None:
        return done.as_dict(), ""
    if verify_mod.pending(journal):
        return None, ""  # nothing kept: there is no total improvement to verify
    why = _why_not_verify(target, loop, summary, left_s, own_executor)
    if why:
        loop.emit("verify", f"the final best is not verified: {why}")
        return None, why
    try:
        # the comparison's own lines (its e0001, its calibration) are shown with -v only:
        # without it they would read like the run's own experiments
        v = verify_mod.verify(target, journal, report=lambda m: loop.emit("verify", m.strip()),
                              detail=lambda m: loop.emit("verify-step", m.strip()))
    except AssayError as exc:
        note = f"the verification failed: {exc}"
        loop.emit("warn", note)
        return None, note
    loop.emit("verify", f"verified: the final best against the baseline: {v.state}, effect "
                        f"{_pct(v.effect)} [{_pct(v.lo)}, {_pct(v.hi)}] over {v.pairs} pairs")
    return v.as_dict(), ""


def _why_not_verify(target: Target, loop: Loop, summary: Summary, left_s: float | None,
                    own_executor: bool) -> str:
    """Why the run's end does not verify its final best ('' when it may)."""
    if not target.run.verify:
        return "[run] verify = false; `assay verify` measures it"
    if summary.failed:
        return "the run failed; `assay verify` measures it once the target is fixed"
    if loop.stopped_early:
        return "the run was stopped; `assay verify` measures it"
    if not own_executor:
        return "the run was given its executor; `assay verify` measures it"
    if left_s is not None:
        est = verify_mod.estimate_s(loop.journal, target)
        if left_s <= 0 or (est is not None and est > left_s):
            return (f"the time budget leaves {max(0.0, left_s) / 60:.1f} min, a verification "
                    + (f"may take {est / 60:.1f} min" if est is not None else "needs more")
                    + "; `assay verify` measures it")
    return ""


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.2%}"


def verify(root: str | Path = ".", config: str | None = None,
           report: Any = None, per_keep: bool = False) -> dict[str, Any]:
    """Measure the journal's final best against its baseline in ABBA blocks (the run's
    decision rule and calibration), store the result in the journal and return it with
    the kept effects compounded (``assay verify``). With ``per_keep``, measure instead each
    kept change alone against its parent (``assay verify --per-keep``): ``{"per_keep":
    [...]}``. Holds the run lock meanwhile."""
    target = load(root, config)
    if not journal_path(target).exists():
        raise AssayError(f"nothing to verify: no journal at {journal_path(target)}; "
                         "`assay run` first")
    run_lock = RunLock(target.state_dir / "run.lock")
    run_lock.acquire()
    try:
        journal = open_journal(target)
        try:
            # it measures at the last level, on the calibration the journal holds there
            journal.hold_fidelity(target.fidelity, str(target.config_path))
            for line in state.ensure_commits(target, journal):  # a copy of .assay, a new clone
                journal.event("resume", line)
            if per_keep:
                checks = verify_mod.per_keep(target, journal, report or (lambda m: None))
                journal.event("verify", "each keep alone against its parent: " + "; ".join(
                    c.words() for c in checks))
                return {"per_keep": [c.as_dict() for c in checks],
                        "metric": target.metric.name, "unit": target.metric.unit,
                        "direction": target.metric.direction.value}
            v = verify_mod.verify(target, journal, report or (lambda m: None))
            journal.event("verify", f"verified: the final best against the baseline: {v.state}, "
                                    f"effect {_pct(v.effect)} [{_pct(v.lo)}, {_pct(v.hi)}] "
                                    f"over {v.pairs} pairs")
            return v.as_dict() | {"metric": target.metric.name, "unit": target.metric.unit,
                                  "direction": target.metric.direction.value}
        finally:
            journal.close()
    finally:
        run_lock.release()


def status(root: str | Path = ".", config: str | None = None) -> dict[str, Any]:
    target = load(root, config)
    journal = open_journal(target, readonly=True)
    try:
        # Only what the summary needs (counts in SQL, the first decided and the kept ones),
        # so the cost does not grow with the journal.
        last = last_level(target.fidelity)  # where keeps are decided
        cal = journal.calibration(last)
        first = journal.first_decided(last)
        kept = journal.experiments([ExperimentState.KEPT], patches=False)
        p = progress([*([first] if first else []), *kept], cal.baseline if cal else None, last)
        counts = journal.state_counts()
        inc = journal.incumbent()
        return {
            "metric": target.metric.name, "direction": target.metric.direction.value,
            "unit": target.metric.unit, "experiments": sum(counts.values()), "counts": counts,
            "incumbent": None if inc is None else {"commit": inc.commit, "params": dict(inc.params),
                                                    "experiment": inc.experiment_id},
            "baseline": p.baseline, "best": p.best,
            "branch": holding_branch(target.root, inc.commit,
                                     f"assay/{journal.run_name() or 'main'}")
            if inc is not None else f"assay/{journal.run_name() or 'main'}",
            "sessions": len(journal.sessions()),
            # a session ran the trees' commands without a sandbox (--unconfined, or none)
            "unconfined": journal.unconfined(),
            "calibration": None if cal is None else cal.as_dict(), "slots": [
                dataclasses.asdict(s) | _speed(journal, target, s.name, inc)
                for s in journal.slots()],
            "kept": [experiment_dict(journal, e) for e in p.kept],
            "verification": _verification(journal, kept),
            "unreproduced": _unreproduced(journal, kept),
            "per_keep": [c.as_dict() for c in journal.keep_checks()],
            "spend": spend.of_journal(journal, target),
            # measured, not decided (a provisional keep waiting for its confirmation, say)
            "open": [experiment_dict(journal, e) for e in journal.experiments(
                [ExperimentState.QUEUED, ExperimentState.RUNNING, ExperimentState.MEASURED],
                patches=False) if e.decision is not None],
            # [fidelity]: candidates still to measure at a level, and what it would cost
            "awaiting": awaiting(journal, target),
            # with [fidelity]: how each level's verdicts held at the next
            "fidelity": None if target.fidelity is None else agreement(
                target.fidelity, journal.level_results(),
                journal.experiments(patches=False)).as_dict(),
        }
    finally:
        journal.close()


def _verification(journal: Journal, kept: Sequence[Experiment]) -> dict[str, Any] | None:
    """The paired baseline-vs-best measurement, whether it is of the present incumbent, and
    the kept effects (``kept``: the kept experiments, in order) compounded (also when
    nothing is verified yet)."""
    v = journal.verification()
    effects = verify_mod.kept_effects(kept)
    comp = verify_mod.compounded(effects)
    if v is None and comp is None:
        return None
    return {"measured": v.as_dict() if v else None,
            "current": verify_mod.current(journal) is not None,
            "compounded": comp, "kept": sum(1 for e in effects if e is not None)}


def _unreproduced(journal: Journal, kept: Sequence[Experiment]) -> str:
    """The warning said first when the verification of the present final best does not
    reproduce the keeps ('' when it does, or there is none)."""
    v = verify_mod.current(journal)
    return verify_mod.unreproduced(v.as_dict() if v else None, kept)


def _speed(journal: Journal, target: Target, slot: str, inc: Any) -> dict[str, Any]:
    """The incumbent's metric on one slot (one GPU): median of its latest runs there."""
    vals = journal.recent_incumbent_values(slot, target.metric.name, inc.commit) if inc else ()
    return {"incumbent_value": statistics.median(vals) if vals else None,
            "incumbent_runs": len(vals)}


def log(root: str | Path = ".", config: str | None = None, *, limit: int | None = None,
        offset: int = 0, newest_first: bool = False) -> list[dict[str, Any]]:
    """Experiments in order (a page of them with ``limit``/``offset``)."""
    target = load(root, config)
    journal = open_journal(target, readonly=True)
    try:
        setup = journal.setup_seconds()
        return [experiment_dict(journal, e) | {"setup_s": setup.get(e.id)}
                for e in journal.experiment_page(limit, offset, newest_first)]
    finally:
        journal.close()


def show(exp_id: str, root: str | Path = ".", config: str | None = None) -> dict[str, Any]:
    target = load(root, config)
    journal = open_journal(target, readonly=True)
    try:
        exp = journal.experiment(exp_id)
        if exp is None:
            ids = [e.id for e in journal.experiments()]
            hint = f"known: {ids[0]} .. {ids[-1]}" if ids else "the journal has no experiments"
            raise AssayError(f"no experiment {exp_id!r} in {journal.path} ({hint})")
        out = experiment_dict(journal, exp)
        out["decisions"] = [dataclasses.asdict(d) | {"verdict": d.verdict.value}
                            for d in journal.decisions(exp_id)]
        blocks = journal.blocks(exp_id)
        out["blocks"] = [dataclasses.asdict(b) for b in blocks]
        runs = journal.runs(exp_id)
        out["runs"] = [dataclasses.asdict(r) | {"role": r.role.value, "status": r.status.value}
                       for r in runs]
        # each guard's medians over the runs at the level its decision was made at, and the
        # candidate's change (positive: better)
        out["guards"] = [guard_change(decided_runs(exp, blocks, runs), g).as_dict()
                         for g in target.guards]
        fid = target.fidelity
        out["guards_level"] = "" if fid is None else fid.label(decided_level(exp, blocks))
        for d in out["decisions"]:
            d.pop("next_block", None)
        # the model calls that made it: tokens by kind, dollars (None: price unknown)
        out["model_calls"] = [dataclasses.asdict(u)
                              for u in journal.model_calls(experiment_id=exp_id)]
        out["params_diff"] = params_diff(target, exp.candidate.base_commit,
                                         exp.candidate.params) if exp.candidate.params else ""
        spent = journal.spent_by_experiment([exp_id]).get(exp_id)
        out["spent_words"] = spent.words() if spent is not None else ""
        fp = fingerprint.at(journal, exp.created_at)
        out["fingerprint"] = fp.as_dict() if fp else None
        # [fidelity]: each level as people read it, by index (decisions and blocks carry one)
        out["levels"] = [] if fid is None else [fid.label(i) for i in range(len(fid.levels))]
        return out
    finally:
        journal.close()


def export(fmt: str, root: str | Path = ".", out: str | Path | None = None,
           config: str | None = None, for_proposers: bool = False) -> str:
    """The journal in ``fmt``; ``for_proposers`` withholds held-out reasons (export.py)."""
    target = load(root, config)
    journal = open_journal(target, readonly=True)
    try:
        text = render(journal, target, fmt, for_proposers=for_proposers)
    finally:
        journal.close()
    if out is not None:
        Path(out).write_text(text)
    return text


def export_state(out: str | Path, root: str | Path = ".", config: str | None = None
                 ) -> state.StateFile:
    """The run's state in one file, for another machine (``assay export --state``)."""
    return state.export_state(load(root, config), out)


def import_state(file: str | Path, root: str | Path = ".", config: str | None = None,
                 force: bool = False) -> list[str]:
    """Restore a state file into this clone (``assay import --state``); what was done."""
    return state.import_state(load(root, config), file, force=force)


def init(root: str | Path = ".", force: bool = False, ask: Any = None,
         answers: dict[str, str] | None = None, show: Any = None) -> Path:
    """Detect, complete (flags, then questions when ``ask`` is given) and write assay.toml.

    Without ``ask`` (no terminal) nothing is asked: a plan still missing an answer raises a
    ConfigError naming each one and the flag that gives it. ``show(text)`` receives what was
    detected before anything is written.
    """
    root_path = Path(root).resolve()
    plan = init_mod.apply_answers(init_mod.detect(root_path), answers or {})
    if show is not None:
        show(plan.describe())
    if ask is not None:  # a terminal: every guess is confirmed, the flags are not asked again
        given = [k for k, v in (answers or {}).items() if v]
        plan = init_mod.ask_plan(root_path, ask, plan=plan, given=given)
    elif not plan.complete:
        raise ConfigError(init_mod.missing_message(plan), file=str(root_path / "assay.toml"),
                          valid=", ".join(init_mod.FLAGS[m] for m in plan.missing))
    return init_mod.write_config(root_path, plan, force=force)


def reset(root: str | Path = ".", config: str | None = None) -> list[str]:
    """Archive the journal, remove slot worktrees and run branches (see ``assay reset``)."""
    return reset_target(load(root, config))
