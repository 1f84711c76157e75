"""The experiment loop on an ask/tell core, driven one step at a time.

``Loop.ask(n)`` asks the proposer for up to ``n`` candidates, validates them and queues
their first blocks; ``Loop.tell(result)`` records a finished block and carries out what
:func:`~assay.decide.decide_next` says about its experiment (another block, keep, discard,
invalid). ``Loop.step()`` is one turn of ask → dispatch → wait → tell; ``Loop.run()`` is
``begin()``, ``step()`` until it says stop, ``end()``. The CLI, the MCP server, the Python
API and the simulator all drive the loop through ``run()``/``step()``: nothing else does.

Dispatch order (deterministic): calibration blocks first, then re-measurements and
confirmations, then everything else first-in first-out. A block is leased in the journal
before it is submitted, so no block is dispatched twice; after a crash every block still
marked running is re-queued and its partial runs dropped.

The loop needs a :class:`~assay.journal.Journal` (a file, or ``Journal.memory()``), a
:class:`~assay.repository.Repository` (the git :class:`~assay.workspace.Workspace`, or
:class:`assay.testing.MemoryRepository`) and an :class:`~assay.executors.base.Executor`
(real slots, or :class:`assay.executors.function.FunctionExecutor`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import os
import re
import signal
import socket
import statistics
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from . import sessions, stops
from .calibration import CAL, Calibration
from .combine import combine
from .config import Target, primary_platform
from .contain import UNCONFINED
from .decide import (
    Action,
    BlockEvidence,
    Discard,
    Evidence,
    Invalid,
    Keep,
    Measure,
    Rerun,
    decide_next,
)
from .decision import DecisionContext, DecisionRule
from .errors import AssayError, CapReached, ExecutorError, PatchError, WorkspaceError
from .executors.base import Executor
from .executors.slots import pick_slot
from .hooks import Hooks
from .journal import Journal
from .journal_records import CalibrationRecord, StopRecord
from .merge import merge_onto
from .meter import Meter, caps_of
from .model import (
    Block,
    BlockKind,
    BlockResult,
    BlockRow,
    BlockState,
    Candidate,
    Decision,
    Experiment,
    ExperimentState,
    Incumbent,
    NextBlock,
    ParamValue,
    RunResult,
    Verdict,
    as_pairs,
    for_proposer,
)
from .prices import for_target
from .proposers.base import ExperimentSummary, LazyFiles, ProposalContext, Proposer
from .repository import Repository
from .sessions import SessionOptions
from .workspace import check_scope, diff_hashes, hash_paths, held_params, patch_paths

_LOOPS = itertools.count(1)  # loops made by this process
PAUSE_LIMIT_S = 600.0  # how long a platform that went away may take to come back
_HYP_REF = re.compile(r"^\s*\[?H(\d+)\]?\s*[:.)\-]")
LEASE_TTL_S = 120.0
Event = Callable[[str, str, "Experiment | None"], None]
Until = Callable[[], str]  # '' to go on; otherwise why the run ends


@dataclass
class Summary:
    baseline: float | None = None
    best: float | None = None
    kept: list[Experiment] = field(default_factory=list)
    finished: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    stopped: str = ""
    branch: str = ""
    failed: str = ""
    verified: dict[str, Any] | None = None  # the paired baseline-vs-best measurement
    verify_note: str = ""  # why the run did not verify its final best ('' when it did)
    # experiments measured but not decided when the run stopped (a provisional keep waiting
    # for its confirmation, say): their latest look; the next `assay run` goes on with them
    open: list[Experiment] = field(default_factory=list)
    spend: dict[str, Any] | None = None  # model calls: what they cost and bought (assay.spend)


@dataclass
class Drive:
    """What one ``run()`` drives towards (set by :meth:`Loop.begin`)."""

    budget: int  # experiments in the journal, in all
    deadline: float | None = None  # time.monotonic() at which the run ends
    max_hours: float | None = None
    # with a deadline: the median seconds per run of the recent blocks, to start no block
    # that the deadline would cut (None until a block has finished)
    pace: float | None = None
    short: str = ""  # why a queued block was left unstarted for lack of time ('' if none)
    until: Until | None = None
    propose: bool = True  # False: only measure what is queued (the MCP server)
    last_beat: float = 0.0


class Loop:
    def __init__(self, target: Target, journal: Journal, workspace: Repository,
                 executor: Executor, proposer: Proposer, rule: DecisionRule | None = None,
                 on_event: Event | None = None) -> None:
        from .stats import make_rule

        self.target = target
        self.journal = journal
        self.ws = workspace
        self.executor = executor
        self.proposer = proposer
        self.rule = rule or make_rule(target.decision)
        self.on_event = on_event or (lambda kind, msg, exp: None)
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        # unique per loop, also for two sessions of one process within the same second
        # (the on_finish hook's idempotency key and the session's fingerprint use it)
        self.session_id = f"{int(time.time())}-{os.getpid()}-{next(_LOOPS)}"
        self.lock_held: Callable[[], bool] = lambda: True  # set by api.session
        self.hooks = Hooks(target, journal, report=lambda m: self.emit("hook", m))
        self.exhausted = False
        self.stop_reason = ""
        self._stop = threading.Event()
        self._signals = 0
        self._started: Incumbent | None = None
        self._paused_since: float | None = None  # when a declared platform went away
        self._histories: list[weakref.ref[LazyHistory]] = []  # handed out, maybe unread
        self.drive: Drive | None = None
        self.failed = ""
        self.session = SessionOptions()  # set by api.session: name, --from-head, --retry
        self._session_base = 0  # experiments in the journal when this session began
        self._digests: dict[str, None] = {}  # its keys() are the proposers' read-only view
        self._digest_seq = 0
        self.noise = Calibration(target, journal, executor, lambda: self.incumbent,
                                 lambda kind, msg: self.emit(kind, msg), self.fail)
        # every model call is checked against the caps and recorded at once (assay.meter)
        self.meter = Meter(for_target(target), caps_of(target.run), before=journal.spent(),
                           record=lambda u, call: journal.add_model_call(u, call,
                                                                         self.session_id))
        self.stop_rule = ""  # the stop rule that ended proposing ('' while none has)
        self._discards = 0  # decided experiments since the last keep (stop_after_discards)

    # -- events --------------------------------------------------------------------
    def emit(self, kind: str, message: str, exp: Experiment | None = None) -> None:
        self.journal.event(kind, message, exp.id if exp else None)
        self.on_event(kind, message, exp)

    @property
    def stop_file(self) -> Path:
        """Creating this file asks a running loop (in any process) to stop gracefully."""
        return self.target.state_dir / "stop"

    def fail(self, reason: str) -> None:
        """Stop because the target itself is broken; the run ends with an error."""
        self.failed = reason
        self.request_stop(reason)

    def request_stop(self, reason: str) -> None:
        self.stop_reason = reason
        self._stop.set()

    @property
    def stopped_early(self) -> bool:
        """Whether a stop was asked for (a signal, ``assay stop``, a failure, a lost lock)."""
        return self._stop.is_set()

    # -- start / resume ------------------------------------------------------------
    def start(self) -> Incumbent:
        """Set the run up (first run) or resume it (re-queue, re-decide); once per loop."""
        if self._started is not None:
            return self.incumbent
        if self.target.limits.network is False:  # say it now, not after every block fails
            from .process import network_isolation_available

            ok, why = network_isolation_available()
            if not ok:
                raise ExecutorError(f"limits.network = false was asked for, but {why}")
        inc = self.journal.incumbent()
        if inc is None:
            head = self.ws.head()
            if self.ws.dirty():
                self.emit("warn", "the working tree has uncommitted changes; assay measures the "
                                  "last commit (HEAD) and ignores them")
            self.ws.ensure_branch(head)
            defaults = {p.name: p.default for p in self.target.params if p.default is not None}
            inc = Incumbent(commit=head, params=defaults, experiment_id=None)
            self.journal.set_incumbent(inc)
            self.journal.set_run_name(self.ws.run_name)
            self.journal.set_base_commit(head)
            self.emit("start", f"incumbent is {head[:12]} on branch {self.ws.branch}")
        else:
            self.ws.ensure_branch(inc.commit)
            stale = self.journal.requeue_stale(owner=self.owner)
            if stale:
                self.emit("resume", f"re-queued {len(stale)} block(s) left running by an earlier "
                                    f"process: {', '.join(stale)}")
            for exp in self.journal.experiments([ExperimentState.PROPOSED]):
                self.journal.set_state(exp.id, ExperimentState.QUEUED)
            for exp in self.journal.experiments([ExperimentState.QUEUED,
                                                 ExperimentState.RUNNING,
                                                 ExperimentState.MEASURED]):
                self._ensure_progress(exp)
            self.hooks.resume_pending()
        self.noise.resume()
        for slot in self.journal.slots():
            if slot.quarantined:
                self.executor.quarantine(slot.name)
        self._started = inc
        return inc

    def _ensure_progress(self, exp: Experiment) -> None:
        """After a crash: an unfinished experiment with no pending block is decided again."""
        pending = self.journal.blocks(exp.id, states=(BlockState.QUEUED, BlockState.RUNNING))
        if pending:
            return
        if not self.journal.blocks(exp.id):
            self._queue_first(exp)
            return
        self._advance(exp)

    # -- ask -----------------------------------------------------------------------
    def proposal_context(self) -> ProposalContext:
        """What a proposer sees: the incumbent, the history, the noise, the brief."""
        from .research import after_wave

        after_wave(self.target, self.journal)  # what the last wave showed, into the brief
        inc = self.incumbent
        cal = self.journal.calibration() or CalibrationRecord()
        brief = ""
        research = self.target.state_dir / "research.md"
        if research.exists():
            brief = research.read_text(errors="replace")
        history = LazyHistory(self.journal.experiments, self.journal.last_seq())
        self._histories.append(weakref.ref(history))
        return ProposalContext(
            target=self.target, incumbent=inc, history=history,
            noise_floor=cal.pooled, delta=self.delta,
            research_brief=brief, hypotheses=self.journal.hypotheses("open"),
            tried_digests=self._tried_digests(),
            checkout=lambda name: self.ws.checkout(name, inc.commit),
            files=LazyFiles(lambda: self.ws.editable_files(inc.commit)), meter=self.meter)

    def _tried_digests(self) -> Set[str]:
        """Every digest in the journal, read incrementally (only experiments added since),
        as a read-only view (no copy of the whole set per ask)."""
        rows = self.journal.digests_after(self._digest_seq)
        if rows:
            self._digests.update(dict.fromkeys(digest for _, digest in rows))
            self._digest_seq = rows[-1][0]
        return self._digests.keys()

    @property
    def incumbent(self) -> Incumbent:
        inc = self.journal.incumbent()
        if inc is None:
            raise AssayError("the journal has no incumbent; call start() first")
        return inc

    @property
    def delta(self) -> float:
        cal = self.journal.calibration()
        if cal is None or cal.delta is None:
            return float(self.target.decision.delta)
        return float(cal.delta)

    def ask(self, n: int) -> list[Experiment]:
        """Propose up to ``n`` candidates and queue them; rejected ones are recorded too."""
        if n <= 0:
            return []
        ctx = self.proposal_context()
        guarded = [*self.target.protected, "assay.toml"]
        before = hash_paths(self.target.root, guarded)
        try:
            cands = self.proposer.propose(ctx, n)
        except CapReached as exc:
            self.stop_by_rule("cap", str(exc))
            return []
        except AssayError as exc:
            self.emit("error", f"proposer {self.proposer.name} failed: {exc}")
            self.hooks.fire("on_error", None, {"ASSAY_ERROR": str(exc)},
                            key=f"on_error:propose:{self.journal.next_seq()}")
            self.exhausted = True
            self.stop_reason = f"the proposer failed: {exc}"
            self.failed = self.stop_reason  # finish what is in flight, then exit non-zero
            return []
        if self.meter.reached:  # the wave ended at a cap, with what it made
            self.stop_by_rule("cap", self.meter.reached)
        if not cands:
            self.exhausted = True
            self.stop_reason = (self.stop_reason if self.stop_rule else
                                f"the {self.proposer.name} proposer has nothing more to propose")
            return []
        changed = diff_hashes(before, hash_paths(self.target.root, guarded))
        if changed:
            # The proposer (an agent editing files) touched the harness: trust none of its work.
            why = (f"harness_changed: protected paths changed in {self.target.root} while "
                   f"proposer {self.proposer.name} was proposing: {changed}")
            self.emit("error", why)
            self.hooks.fire("on_error", None, {"ASSAY_ERROR": why},
                            key=f"on_error:harness:{self.journal.next_seq()}")
            cands = [dataclasses.replace(c, meta={**c.meta, "rejected": why}) for c in cands]
        return [self.submit_candidate(c) for c in cands[:n]]

    def link_hypothesis(self, cand: Candidate) -> Candidate:
        """Link a candidate whose hypothesis names a journal hypothesis (``H4: ...``) to it."""
        if cand.hypothesis_id is not None:
            return cand
        m = _HYP_REF.match(cand.hypothesis)
        if not m:
            return cand
        hid = int(m.group(1))
        known = {h.id: h for h in self.journal.hypotheses()}
        if hid not in known:
            return cand
        sources = tuple(dict.fromkeys((*cand.sources, *known[hid].sources)))
        return dataclasses.replace(cand, hypothesis_id=hid, sources=sources)

    def submit_candidate(self, cand: Candidate) -> Experiment:
        """Validate and queue one candidate (the `tell`-side entry for outside proposers)."""
        cand = self.link_hypothesis(cand)
        if self.session.unconfined:  # shown on the experiment by `show`, status, the report
            cand = dataclasses.replace(cand, meta={**cand.meta, UNCONFINED: True})
        reason = self._reject_reason(cand)  # the patch as proposed: its scope, its paths
        if not reason:
            cand, reason = self._merged(cand)
        if reason:
            exp = self.journal.add_experiment(cand, ExperimentState.INVALID, note=reason)
            self.emit("reject", f"{exp.id} rejected before any run: {reason}", exp)
            self._finish_tell(exp)
            return exp
        exp = self.journal.add_experiment(cand, ExperimentState.QUEUED)
        self.emit("queued", f"{exp.id} queued: {cand.hypothesis}", exp)
        self._queue_first(exp)
        return exp

    def _merged(self, cand: Candidate) -> tuple[Candidate, str]:
        """The candidate's patch merged onto the incumbent (:mod:`assay.merge`), and on a
        conflict the reason: ``conflict: <files> ...``."""
        if not cand.patch.strip():
            return cand, ""
        try:
            merged = merge_onto(self.target.root, cand.patch, self.incumbent.commit)
        except WorkspaceError:
            return cand, ""  # not a git repository here: applied as it stands
        if merged is None:
            return cand, ""
        if merged.conflicts:
            return cand, (f"conflict: {', '.join(merged.conflicts)}: the patch and the "
                          f"incumbent {self.incumbent.commit[:12]} change the same lines")
        return dataclasses.replace(cand, patch=merged.patch), ""

    def _reject_reason(self, cand: Candidate) -> str:
        if cand.meta.get("rejected"):
            return str(cand.meta["rejected"])
        if cand.is_empty():
            return "the candidate changes nothing"
        inc = self.incumbent
        if not cand.patch.strip() and cand.base_commit == inc.commit \
                and self._holds(inc, cand.params):
            return "the candidate changes nothing: its parameter values are the incumbent's"
        dup = self.journal.find_digest(cand.digest)
        if dup and not self.session.retry:
            return f"identical to {dup}, already tried"
        try:
            if cand.patch.strip():
                check_scope(cand.patch, self.target)
            declared = {p.name for p in self.target.params}
            unknown = set(cand.params) - declared
            if unknown:
                return f"sets undeclared parameters {sorted(unknown)}"
        except PatchError as exc:
            return str(exc)
        return ""

    def _holds(self, inc: Incumbent, params: Mapping[str, ParamValue]) -> bool:
        """Whether ``inc`` already holds every value in ``params``: assay's own values, else
        the line of an assigned parameter's file at its commit (read only when needed)."""
        rest: dict[str, ParamValue] = {}
        for name, value in params.items():
            if name not in inc.params:
                rest[name] = value
            elif inc.params[name] != value:
                return False
        if not rest:
            return True

        def read(path: str) -> str | None:
            try:
                return self.ws.file_at(inc.commit, path)
            except WorkspaceError:
                return None

        specs = [p for p in self.target.params if p.name in rest]
        held = held_params(specs, {}, read)
        return all(held.get(k) == v for k, v in rest.items())

    def _queue_first(self, exp: Experiment) -> None:
        nb = self.rule.first_block(self.decision_context())
        for platform in [p.name for p in self.target.platforms] or [""]:
            self.journal.add_block(exp.id, nb.kind, nb.run_order(), self.incumbent,
                                   platform=platform)

    # -- dispatch ------------------------------------------------------------------
    def decision_context(self, exp_id: str | None = None) -> DecisionContext:
        """What a decision rule sees (for ``exp_id``: the history without its own runs)."""
        cal = self.journal.calibration() or CalibrationRecord()
        inc = self.journal.incumbent()
        slots = tuple(s.name for s in self.executor.slots)
        history: dict[str, tuple[float, ...]] = {}
        if inc is not None and self.target.decision.rule == "expensive":
            for s in slots:
                history[s] = self.journal.recent_incumbent_values(
                    s, self.target.metric.name, inc.commit, exclude_experiment=exp_id)
        block_noise: dict[str, float] = {}
        if exp_id is not None:
            block_noise = {b.id: b.noise for b in self.journal.blocks(exp_id)
                           if b.noise is not None}
        return DecisionContext(direction=self.target.metric.direction, spec=self.target.decision,
                               delta=self.delta, slots=slots, noise=cal.noise,
                               incumbent_history=history, bounds=self.target.metric.bounds,
                               block_noise=block_noise,
                               pooled=float(cal.pooled or math.nan),
                               noise_samples=cal.samples)

    def _priority(self, row: BlockRow) -> tuple[int, float, int]:
        rank = 0 if row.kind is BlockKind.AA else 1 if row.kind in (
            BlockKind.RERUN, BlockKind.CONFIRM) else 2
        return rank, row.created_at, row.seq

    def dispatch(self) -> int:
        """Submit queued blocks to free slots; returns how many were started."""
        started = 0
        if self.drive is not None:
            self.drive.short = ""
        self.noise.new_slots()
        free = self.executor.free_slot_names()
        if not free:
            return 0
        queued = sorted(self.journal.blocks(states=(BlockState.QUEUED,)), key=self._priority)
        for row in queued:
            if not free:
                break
            if row.kind is BlockKind.AA and row.prefer_slot not in free:
                continue
            if row.platform and not any(s.platform == row.platform and s.name in free
                                        for s in self.executor.slots):
                continue  # its platform has no free slot now
            if self._waits_for_another_slot(row, free):
                continue  # a confirmation on the slot it avoids would confirm nothing
            ready = [n for n in free if n not in self.noise.fresh]  # a new slot: A/A blocks only
            if row.kind is not BlockKind.AA and not ready:
                continue
            block = self._block(row)
            if block is None:
                continue
            if not self._fits(row):
                continue
            if block.kind is not BlockKind.AA and self.noise.fresh:
                block = dataclasses.replace(block, prefer_slot=pick_slot(ready, block))
            if not self.journal.lease_block(block.block_id, "", self.owner, LEASE_TTL_S):
                continue
            slot = self.executor.submit(block)
            self.journal.set_block_slot(block.block_id, slot)
            free = self.executor.free_slot_names()
            if block.experiment_id != CAL:
                exp = self.journal.experiment(block.experiment_id)
                if exp is not None and exp.state is ExperimentState.QUEUED:
                    self.journal.set_state(exp.id, ExperimentState.RUNNING)
            started += 1
        return started

    def _waits_for_another_slot(self, row: BlockRow, free: Sequence[str]) -> bool:
        """A block that avoids a slot (a confirmation, a retry) and finds only that one free
        waits while another slot that could run it is busy; with no other slot (one slot, or
        the others quarantined) it runs on the avoided one."""
        if row.avoid_slot is None or any(name != row.avoid_slot for name in free):
            return False
        return any(s.name != row.avoid_slot and (not row.platform or s.platform == row.platform)
                   for s in self.executor.slots)

    def _block(self, row: BlockRow) -> Block | None:
        cand: Candidate | None = None
        if row.experiment_id != CAL:
            exp = self.journal.experiment(row.experiment_id)
            if exp is None or exp.state.is_finished():
                self.journal.cancel_block(row.id, "its experiment is finished")
                return None
            cand = dataclasses.replace(exp.candidate, base_commit=row.incumbent.commit)
        return Block(block_id=row.id, experiment_id=row.experiment_id, kind=row.kind,
                     order=row.order, incumbent=row.incumbent, candidate=cand,
                     prefer_slot=row.prefer_slot, avoid_slot=row.avoid_slot, seq=row.seq,
                     platform=row.platform)

    # -- tell ----------------------------------------------------------------------
    def tell(self, result: BlockResult) -> Experiment | None:
        """Record a finished block and move its experiment on. Idempotent."""
        if not self.journal.record_block(result):
            return None
        self._pace()
        for role, wall in result.warmups:
            self.emit("warm-up", f"{result.block_id}: warm-up run of the "
                      f"{'incumbent' if role == 'A' else 'candidate'} on slot {result.slot} "
                      f"({wall:.1f} s, not measured): its compile cache was cold")
        for what in result.restored:
            self.emit("warn", f"{result.block_id}: {what}")
        self.update_noise(result)
        if result.experiment_id == CAL:
            return None
        if result.checks_outcome == "flaky":
            self.emit("warn", f"{result.experiment_id}: checks_flaky: {result.checks_detail}")
        exp = self.journal.experiment(result.experiment_id)
        if exp is None or exp.state.is_finished():
            return exp
        return self._advance(exp)

    def evidence(self, exp_id: str) -> Evidence:
        """A frozen snapshot of what is known about ``exp_id``, for :func:`decide_next`."""
        runs: dict[str, list[RunResult]] = {}
        for r in self.journal.runs(exp_id):
            runs.setdefault(r.block_id, []).append(r)
        blocks = tuple(
            BlockEvidence(b.id, b.kind, b.incumbent.commit, b.slot or "",
                          tuple(sorted(runs.get(b.id, ()), key=lambda r: r.index)),
                          b.error, b.error_kind, b.platform)
            for b in self.journal.blocks(exp_id, states=(BlockState.DONE,)))
        return Evidence(exp_id, blocks, self.incumbent, self.decision_context(exp_id),
                        self.target.metric.name, tuple(self.target.guards),
                        self.target.holdout_metric)

    def _advance(self, exp: Experiment) -> Experiment:
        """Decide what comes next for ``exp`` and do it."""
        if self.target.platforms:
            return self._advance_platforms(exp)
        return self._act(exp, decide_next(self.evidence(exp.id), self.rule))

    def _advance_platforms(self, exp: Experiment) -> Experiment:
        """With [[platforms]]: decide on each platform's own blocks, then across them."""
        ev = self.evidence(exp.id)
        pending = {b.platform for b in self.journal.blocks(
            exp.id, states=(BlockState.QUEUED, BlockState.RUNNING))}
        actions: dict[str, Action | None] = {}
        for p in self.target.platforms:
            if p.name in pending:
                actions[p.name] = None  # a block is still out on it
                continue
            slots = tuple(s.name for s in self.executor.slots if s.platform == p.name)
            mine = dataclasses.replace(
                ev, blocks=tuple(b for b in ev.blocks if b.platform == p.name),
                context=dataclasses.replace(ev.context, slots=slots))
            actions[p.name] = decide_next(mine, self.rule)
        c = combine(actions, primary_platform(self.target), self.target.decision.keep_on,
                    self.target.decision.platform_tolerance)
        for name, action in c.queue:
            self._act(exp, action, platform=name)
        if c.final is None:
            return exp
        table = [r.as_dict() for r in c.table]
        final = c.final
        if isinstance(final, Invalid):  # what happened on each platform, with its logs
            last = {b.platform: b.id for b in ev.blocks}
            where = (self.target.state_dir / "logs" / exp.id).relative_to(self.target.root)
            logs = "; ".join(f"{p} {where / bid}" for p, bid in last.items())
            final = dataclasses.replace(final, reason=f"{final.reason}; logs: {logs}")
        d = final.decision or Decision(
            Verdict.INVALID if isinstance(final, Invalid) else Verdict.DISCARD, final.reason)
        d = dataclasses.replace(d, details={**d.details, "platforms": table})
        return self._act(exp, dataclasses.replace(final, decision=d))

    def _act(self, exp: Experiment, action: Action, platform: str = "") -> Experiment:
        if isinstance(action, Keep):
            action = Keep(self._per_slot(exp, action.decision))
        decision = action.decision if not isinstance(action, Rerun) else None
        if decision is not None:
            self.journal.set_decision(exp.id, decision)
        if isinstance(action, Measure | Rerun):
            if action.message:
                self.emit(action.event, action.message, exp)
            if isinstance(action, Measure) and action.notice:
                self.emit("rebase", action.notice, exp)
            if isinstance(action, Rerun) and action.fail:
                self.fail(action.fail)
            self._add_block(exp, action.block, avoid=action.avoid_slot, platform=platform)
            return exp
        if isinstance(action, Keep):
            return self._keep(exp, action.decision)
        if isinstance(action, Invalid):
            state = ExperimentState.CRASHED if action.crashed else ExperimentState.INVALID
            return self._finish(exp, state, action.reason, decision)
        assert isinstance(action, Discard)
        return self._finish(exp, ExperimentState.DISCARDED, action.reason, decision,
                            withheld=action.withheld)

    def _add_block(self, exp: Experiment, nb: NextBlock, avoid: str | None = None,
                   platform: str = "") -> None:
        self.journal.add_block(exp.id, nb.kind, nb.run_order(), self.incumbent, avoid_slot=avoid,
                               platform=platform)

    def _keep(self, exp: Experiment, decision: Decision) -> Experiment:
        inc = self.incumbent
        params = {**inc.params, **exp.candidate.params}
        msg = (f"assay {exp.id}: {exp.candidate.hypothesis}\n\n{decision.reason}\n"
               f"proposer: {exp.candidate.proposer}")
        try:
            sha = self.ws.commit_candidate(inc.commit, exp.candidate.patch, params, msg)
        except PatchError as exc:
            return self._finish(exp, ExperimentState.INVALID, f"cannot commit: {exc}", decision)
        new = Incumbent(commit=sha, params=params, experiment_id=exp.id)
        with self.journal.tx():
            self.journal.set_incumbent(new)
            self.journal.set_state(exp.id, ExperimentState.KEPT, note=decision.reason, commit=sha)
        done = self.journal.experiment(exp.id)
        assert done is not None
        self.emit("keep", f"{exp.id} KEPT ({sha[:12]}): {decision.reason}", done)
        self.hooks.fire("on_keep", exp.id, {"ASSAY_COMMIT": sha})
        self._finish_tell(done)
        self._discards = 0
        value = decision.details.get("candidate_value")
        why = stops.target_reason(self.target.metric, None if value is None else float(value))
        if why:
            self.stop_by_rule("target", why)
        return done

    def _per_slot(self, exp: Experiment, decision: Decision) -> Decision:
        """A keep measured on several slots (GPUs) says whether its effect depends on them."""
        from .stats.heterogeneity import heterogeneity

        ev = self.evidence(exp.id)
        if not ev.blocks:
            return decision
        now = ev.blocks[-1].inc_commit
        # With [[platforms]] the platforms have their own table: compare the slots of the
        # platform that decided, not one platform's slots with another's.
        platform = str(decision.details.get("decided_on", ""))
        pairs = [p for b in ev.blocks if b.inc_commit == now
                 and (not platform or b.platform == platform)
                 for p in as_pairs(b.runs, self.target.metric.name, b.slot, b.id, b.kind)]
        h = heterogeneity(pairs, self.target.metric.direction)
        if len(h.per_slot) < 2:
            return decision
        rows = [{"slot": e.slot, "pairs": e.pairs, "effect": e.effect} for e in h.per_slot]
        return dataclasses.replace(
            decision, reason=f"{decision.reason}; {h.words()}",
            details={**decision.details, "per_slot": rows, "slot_dependent": h.dependent,
                     "slot_dependence_p": h.p})

    def _finish(self, exp: Experiment, state: ExperimentState, reason: str,
                decision: Decision | None = None, withheld: bool = False) -> Experiment:
        for b in self.journal.blocks(exp.id, states=(BlockState.QUEUED,)):
            self.journal.cancel_block(b.id, f"experiment {state.value}")
        self.journal.set_state(exp.id, state, note=reason, withheld=withheld)
        done = self.journal.experiment(exp.id)
        assert done is not None
        self.emit(state.value, f"{exp.id} {state.value}: {reason}", done)
        if state in (ExperimentState.CRASHED,):
            self.hooks.fire("on_error", exp.id, {"ASSAY_ERROR": reason})
        self._finish_tell(done)
        limit = self.target.run.stop_after_discards
        if state is ExperimentState.DISCARDED:
            self._discards += 1
            if limit is not None and self._discards >= limit:
                self.stop_by_rule("discards", stops.discards_reason(self._discards, limit))
        return done

    def _finish_tell(self, exp: Experiment) -> None:
        self.hooks.fire("on_experiment", exp.id, {"ASSAY_STATE": exp.state.value})
        if exp.candidate.hypothesis_id is not None:
            status = "supported" if exp.state is ExperimentState.KEPT else "refuted"
            self.journal.set_hypothesis_status(exp.candidate.hypothesis_id, status)
        try:
            self.proposer.tell(for_proposer(exp))
        except Exception as exc:  # a proposer bug must not lose the result
            self.emit("warn", f"proposer {self.proposer.name} could not learn from {exp.id}: {exc}")

    def stop_by_rule(self, kind: str, reason: str) -> None:
        """Stop proposing for a stop rule (assay.stops): the blocks in flight are measured
        and decided; the next `assay run` goes on only with --continue."""
        if self.stop_rule:
            return
        self.stop_rule = kind
        self.exhausted = True
        self.stop_reason = reason
        self.journal.set_stop_rule(StopRecord(kind, reason, self.session_id))
        self.emit("stop", f"stopping ({kind}): {reason}; the blocks in flight are finished")

    # -- noise -------------------------------------------------------------------------
    def calibrate(self) -> None:
        """Queue the start-up A/A blocks on every slot (once per run)."""
        self.noise.queue()

    def update_noise(self, result: BlockResult) -> None:
        """The one place a finished block updates what the loop knows about noise."""
        self.noise.update(result)

    # -- the driver ----------------------------------------------------------------
    def _total(self) -> int:
        return self.journal.count_experiments()

    def run(self, budget: int | None = None, max_hours: float | None = None, *,
            until: Until | None = None, propose: bool = True) -> Summary:
        """Drive the loop until the budget is spent, the proposer is done or it is stopped.

        ``until`` is asked before every step: a non-empty answer ends the run with it as
        the reason. ``propose=False`` measures only what is queued (no proposer is asked).
        """
        self.begin(budget, max_hours, until=until, propose=propose)
        try:
            while self.step():
                pass
        finally:
            self.end()
        return self.summary()

    def begin(self, budget: int | None = None, max_hours: float | None = None, *,
              until: Until | None = None, propose: bool = True) -> None:
        """Start or resume, queue calibration, and set what the steps drive towards."""
        budget = budget if budget is not None else self.target.run.budget
        max_hours = max_hours if max_hours is not None else self.target.run.max_hours
        deadline = time.monotonic() + max_hours * 3600 if max_hours else None
        self.stop_file.unlink(missing_ok=True)  # a request left over from no live run
        # a stop rule ended proposing: only a run that proposes needs --continue
        last = self.journal.stop_rule() if propose else None
        stops.refuse_resume(last, self.session.carry_on)
        if last:
            self.journal.set_stop_rule(None)
            self.emit("session", f"going on after the last run's stop ({last.kind}), "
                                 "as --continue asks")
        elif self.target.run.stop_after_discards is not None:
            self._discards = stops.discard_streak(sorted(
                self.journal.experiments([ExperimentState.KEPT, ExperimentState.DISCARDED],
                                         patches=False), key=lambda e: e.updated_at))
        self.start()
        self._session_base = sessions.begin(self, self.session)  # --budget counts from here
        why = sessions.preflight(self.target, self.ws, self.executor, self.incumbent)
        if why:
            self.emit("error", why)
            self.fail(why)
        else:  # no noise to measure on an incumbent that fails its checks
            self.calibrate()
        # the budget counts this session's experiments: the drive's goal is a journal total
        self.drive = Drive(budget + self._session_base, deadline, max_hours, until=until,
                           propose=propose)
        self._pace()

    def _pace(self) -> None:
        d = self.drive
        if d is not None and d.deadline is not None:
            recent = self.journal.run_pace()
            d.pace = statistics.median(recent) if recent else None

    def _fits(self, row: BlockRow) -> bool:
        """Whether ``row`` can end before the deadline, at the recent blocks' pace (a block
        the deadline would cut is time spent for nothing: it runs again on resume)."""
        d = self.drive
        if d is None or d.deadline is None or d.pace is None:
            return True
        need = d.pace * len(row.order)
        left = d.deadline - time.monotonic()
        if need <= left:
            return True
        d.short = (f"the time budget of {d.max_hours:g} h leaves {max(left, 0):.0f} s, less "
                   f"than the next block needs ({len(row.order)} run(s) at about "
                   f"{d.pace:.0f} s each); it was not started, and `assay run` starts it")
        return False

    def _should_stop(self, d: Drive) -> bool:
        """Whether the run must end before this step (``stop_reason`` then says why)."""
        if self._stop.is_set():
            return True
        goal = d.until() if d.until is not None else ""
        if goal:
            self.stop_reason = goal
            return True
        if not self.lock_held():
            self.fail("this run lost its lock (its heartbeat went stale and another run "
                      "took the target over); stopping")
            return True
        if not self.executor.slots:  # never wait forever on nothing
            self.stop_reason = "no slot is left to run blocks on (all quarantined)"
            return True
        if self._platform_gone():
            return True
        if self.stop_file.exists():
            self.stop_file.unlink(missing_ok=True)
            self.request_stop("a stop was requested (assay stop / the MCP stop tool)")
            return True
        if d.deadline is not None and time.monotonic() > d.deadline:
            self.stop_reason = f"the time budget of {d.max_hours:g} h is spent"
            return True
        return False

    def _away(self) -> list[str]:
        """Declared platforms with no slot left (all quarantined, or their nodes gone)."""
        live = {s.platform for s in self.executor.slots}
        return [p.name for p in self.target.platforms if p.name not in live]

    def _platform_gone(self) -> bool:
        """A platform that went away pauses the decisions that need it, for a while."""
        away = self._away()
        if not away:
            self._paused_since = None
            return False
        now = time.monotonic()
        if self._paused_since is None:
            self._paused_since = now
            self.emit("pause", f"platform {', '.join(away)} has no slot left: decisions that "
                               f"need it are paused (up to {PAUSE_LIMIT_S:.0f} s for it to "
                               "come back); nothing is decided without it")
        if now - self._paused_since > PAUSE_LIMIT_S:
            self.stop_reason = (f"platform {', '.join(away)} went away and did not come back "
                                f"within {PAUSE_LIMIT_S:.0f} s; its blocks stay queued, and "
                                "`assay run` resumes them when it is back")
            return True
        return False

    def step(self) -> bool:
        """One turn: ask → dispatch → wait → tell. False when the run should end
        (``stop_reason`` says why); call :meth:`begin` first and :meth:`end` after."""
        d = self.drive
        if d is None:
            raise AssayError("call begin() before step()")
        if self._should_stop(d):
            return False
        queued = self.journal.count_blocks((BlockState.QUEUED,))
        free = self.executor.free_slots()
        room = d.budget - self._total()
        if (d.propose and self.noise.done and not self.exhausted and room > 0 and free > queued
                and self._paused_since is None):
            self.ask(min(free - queued, room))
        self.dispatch()
        # The journal, not the executor, says what is in flight: a block whose result is
        # between the executor's threads and wait() is still running.
        if d.short and not self.executor.running() and not self.journal.count_blocks(
                (BlockState.RUNNING,)):
            self.stop_reason = d.short  # what is queued cannot end in the time left
            return False
        if not self.executor.running() and not self.journal.count_blocks(
                (BlockState.QUEUED, BlockState.RUNNING)):
            if not d.propose:
                self.stop_reason = self.stop_reason or "nothing is left to run"
                return False
            if self.exhausted or self._total() >= d.budget:
                self.stop_reason = self.stop_reason or f"the budget of " \
                    f"{d.budget - self._session_base} experiments is spent"
                return False
            if not self.noise.done:
                return True
        for res in self.executor.wait(timeout=0.2):
            self.tell(res)
        if time.monotonic() - d.last_beat > LEASE_TTL_S / 4:
            self.journal.heartbeat(list(self.executor.running()), self.owner, LEASE_TTL_S)
            d.last_beat = time.monotonic()
        return True

    def end(self) -> None:
        """Cancel and re-queue what is running, fire ``on_finish``, close the backends."""
        running = list(self.executor.running())
        for bid in running:
            self.executor.cancel(bid)
        # Also blocks whose result had not reached wait() yet: all are measured again.
        running += [b.id for b in self.journal.blocks(states=(BlockState.RUNNING,))
                    if b.id not in running]
        if running:
            self.journal.requeue(running)
            self.emit("stop", f"cancelled {len(running)} running block(s); they will run again "
                              "on resume")
        sessions.end(self.journal)
        self.hooks.fire("on_finish", None, {"ASSAY_STOP_REASON": self.stop_reason},
                        key=f"on_finish:{self.session_id}")
        self.hooks.join()
        self.executor.close()
        self.proposer.close()
        self._settle_histories()
        self.drive = None

    def _settle_histories(self) -> None:
        """Contexts a proposer kept but never read get their history now, while the journal
        is open (each as it stood at its ask)."""
        alive = [h for ref in self._histories if (h := ref()) is not None and not h.loaded]
        self._histories.clear()
        if alive:
            exps = self.journal.experiments()
            for h in alive:
                h.settle(exps)

    def install_signal_handlers(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            self._signals += 1
            if self._signals == 1:
                self.on_event("signal", f"{signal.Signals(signum).name}: stopping after "
                                        "cancelling running blocks (again to stop at once)", None)
                self.request_stop(f"stopped by {signal.Signals(signum).name}")
            else:
                # No locks here: the main thread may hold the executor's. Kill every group.
                from . import process

                process.kill_all()
                os._exit(130)

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)

    def summary(self) -> Summary:
        cal = self.journal.calibration() or CalibrationRecord()
        exps = self.journal.experiments(patches=False)
        p = progress(exps, cal.baseline)
        return Summary(baseline=p.baseline, best=p.best, kept=p.kept, finished=p.finished,
                       counts=p.counts, stopped=self.stop_reason, branch=self.ws.branch,
                       failed=self.failed,
                       open=[e for e in exps if not e.state.is_finished()
                             and e.decision is not None])


@dataclass(frozen=True)
class Progress:
    counts: dict[str, int]
    finished: int
    kept: list[Experiment]
    baseline: float | None  # the base commit's median: its calibration runs, else the
    # incumbent's median in the first decided experiment
    best: float | None  # the last kept candidate's median (the baseline if none was kept)


def progress(exps: Sequence[Experiment], calibrated: float | None = None) -> Progress:
    """Counts by state, the kept experiments, the baseline and the best, from the journal.

    ``calibrated`` is the base commit's median over its calibration runs: when given it is
    the baseline (under the expensive rule the first decided experiment may come after a
    keep, so its incumbent is not the base commit)."""
    counts: dict[str, int] = {}
    for e in exps:
        counts[e.state.value] = counts.get(e.state.value, 0) + 1
    kept = [e for e in exps if e.state is ExperimentState.KEPT]
    first = next((e.decision for e in exps
                  if e.decision and "incumbent_value" in e.decision.details), None)
    baseline = float(first.details["incumbent_value"]) if first else None
    if calibrated is not None:
        baseline = float(calibrated)
    best = baseline
    if kept and kept[-1].decision and "candidate_value" in kept[-1].decision.details:
        best = float(kept[-1].decision.details["candidate_value"])
    return Progress(counts, sum(1 for e in exps if e.state.is_finished()), kept, baseline, best)


class LazyHistory(Sequence[ExperimentSummary]):
    """The proposal history, read from the journal only if a proposer looks at it (the sweep
    proposer never does), so an ask costs the same on a journal of any size.

    It holds the experiments up to ``upto`` (the last one at its ask), however late it is
    read; the loop settles a history still unread when it ends, before the journal closes.
    """

    def __init__(self, load: Callable[[], Sequence[Experiment]], upto: int) -> None:
        self._load = load
        self._upto = upto
        self._items: list[ExperimentSummary] | None = None

    @property
    def loaded(self) -> bool:
        return self._items is not None

    def settle(self, exps: Sequence[Experiment]) -> None:
        if self._items is None:
            self._items = [_history_entry(e) for e in exps if e.seq <= self._upto]

    def _all(self) -> list[ExperimentSummary]:
        if self._items is None:
            self.settle(self._load())
        assert self._items is not None
        return self._items

    def __len__(self) -> int:
        return len(self._all())

    def __getitem__(self, i: Any) -> Any:
        return self._all()[i]

    def __iter__(self) -> Any:
        return iter(self._all())

    def __bool__(self) -> bool:
        return bool(self._all())


@functools.lru_cache(maxsize=4096)
def _patch_files(patch: str) -> tuple[str, ...]:
    """The files a patch touches, as git reads them (a history is rebuilt at every ask)."""
    try:
        return patch_paths(patch).paths
    except PatchError:
        return ()


def _history_entry(e: Experiment) -> ExperimentSummary:
    """One experiment as a proposer reads it in its context's history."""
    d = e.decision
    stat = ""
    if e.candidate.patch:
        stat = ", ".join(_patch_files(e.candidate.patch))
    return ExperimentSummary(
        id=e.id, state=e.state.value, hypothesis=e.candidate.hypothesis,
        proposer=e.candidate.proposer, params=dict(e.candidate.params),
        effect=d.effect if d else None, lo=d.lo if d else None, hi=d.hi if d else None,
        reason=for_proposer(e).note or (d.reason if d else ""), diffstat=stat)

