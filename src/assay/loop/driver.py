"""The experiment loop on an ask/tell core, driven one step at a time.

``Loop.ask(n)`` asks the proposer for up to ``n`` candidates, validates them and queues
their first blocks; ``Loop.tell(result)`` records a finished block and carries out what
:func:`~assay.decision.next_step.decide_next` says about its experiment (another block,
keep, discard, invalid). ``Loop.step()`` is one turn of ask → dispatch → wait → tell;
``Loop.run()`` is ``begin()``, ``step()`` until it says stop, ``end()``. The CLI, the MCP
server, the Python API and the simulator all drive the loop through ``run()``/``step()``:
nothing else does.

Dispatch order (deterministic): calibration blocks first, then re-measurements and
confirmations, then everything else first-in first-out. A block is leased in the journal
before it is submitted, so no block is dispatched twice; after a crash every block still
marked running is re-queued and its partial runs dropped.

The loop needs a :class:`~assay.journal.store.Journal` (a file, or ``Journal.memory()``), a
:class:`~assay.repo.repository.Repository` (the git :class:`~assay.repo.workspace.Workspace`, or
:class:`assay.testing.MemoryRepository`) and an :class:`~assay.executors.base.Executor`
(real slots, or :class:`assay.executors.function.FunctionExecutor`). What the session asks
(its name, ``--retry``, ``--continue`` ...), whether the run still holds its lock, and what
runs before each proposal (``before_ask``: :mod:`assay.api` passes research's re-rank of its
brief) are given at construction.

The driver composes the loop's parts, each in a module of its own: candidates' intake
(:mod:`assay.loop.intake`), dispatch (:mod:`assay.loop.dispatch`), what a decision says
and its outcome (:mod:`assay.loop.outcomes`, across platforms :mod:`assay.loop.fanout`),
noise (:mod:`assay.loop.calibration`), when the run ends (:mod:`assay.loop.stopping`,
:mod:`assay.loop.drive`), the proposers' history (:mod:`assay.loop.history`) and the
summary (:mod:`assay.loop.progress`).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from ..bench import process
from ..bench.meter import Meter, caps_of
from ..config.fidelity import last_level
from ..config.prices import for_target
from ..config.spec import Target
from ..decision.next_step import Evidence
from ..decision.rule import DecisionContext, DecisionRule
from ..decision.stats import make_rule
from ..errors import AssayError, CapReached, ExecutorError
from ..executors.base import Executor
from ..journal.store import Journal
from ..model import BlockResult, BlockState, Candidate, Experiment, ExperimentState, Incumbent
from ..proposers.base import LazyFiles, ProposalContext, Proposer
from ..records import CalibrationRecord
from ..repo.repository import Repository
from ..repo.workspace import diff_hashes, hash_paths
from . import sessions
from .calibration import CAL
from .dispatch import LEASE_TTL_S, Dispatcher
from .drive import Drive, Pace, Until
from .history import Histories, TriedDigests
from .hooks import Hooks
from .intake import Intake
from .levels import LevelNoise, awaiting, level_of
from .outcomes import Outcomes
from .progress import Summary, progress
from .sessions import SessionOptions
from .stopping import Stopping

_LOOPS = itertools.count(1)  # loops made by this process
Event = Callable[[str, str, "Experiment | None"], None]
BeforeAsk = Callable[[], object]  # run before each proposal (api: research's re-rank)


class Loop:
    def __init__(self, target: Target, journal: Journal, workspace: Repository,
                 executor: Executor, proposer: Proposer, rule: DecisionRule | None = None,
                 on_event: Event | None = None, *, session: SessionOptions | None = None,
                 lock_held: Callable[[], bool] | None = None,
                 before_ask: BeforeAsk | None = None) -> None:
        self.target = target
        self.journal = journal
        self.ws = workspace
        self.executor = executor
        self.proposer = proposer
        self.rule = rule or make_rule(target.decision)
        self.on_event = on_event or (lambda kind, msg, exp: None)
        self.session = session or SessionOptions()  # name, --from-head, --retry ...
        self.lock_held = lock_held or (lambda: True)  # False once another run took over
        self.before_ask = before_ask or (lambda: None)
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        # unique per loop, also for two sessions of one process within the same second
        # (the on_finish hook's idempotency key and the session's fingerprint use it)
        self.session_id = f"{int(time.time())}-{os.getpid()}-{next(_LOOPS)}"
        self.hooks = Hooks(target, journal, report=lambda m: self.emit("hook", m))
        self.stopping = Stopping(target, journal, executor, self.emit, self.session_id)
        self.noise = LevelNoise(target, journal, executor, lambda: self.incumbent,
                                self.emit, self.stopping.fail)
        self.outcomes = Outcomes(target, journal, workspace, executor, proposer, self.rule,
                                 self.hooks, self.noise, self.stopping, self.emit)
        self.dispatcher = Dispatcher(journal, executor, self.noise, self.owner, target.fidelity)
        self.intake = Intake(target, journal, workspace, lambda: self.incumbent)
        self.histories = Histories(journal)
        self.tried = TriedDigests(journal)
        # every model call is checked against the caps and recorded at once (assay.bench.meter)
        self.meter = Meter(for_target(target), caps_of(target.run), before=journal.spent(),
                           record=lambda u, call: journal.add_model_call(u, call,
                                                                         self.session_id))
        self.drive: Drive | None = None
        self.pace: Pace | None = None
        self._started: Incumbent | None = None
        self._signals = 0

    # -- events and stops ------------------------------------------------------------
    def emit(self, kind: str, message: str, exp: Experiment | None = None) -> None:
        self.journal.event(kind, message, exp.id if exp else None)
        self.on_event(kind, message, exp)

    @property
    def stop_file(self) -> Path:
        """Creating this file asks a running loop (in any process) to stop gracefully."""
        return self.stopping.stop_file

    def fail(self, reason: str) -> None:
        """Stop because the target itself is broken; the run ends with an error."""
        self.stopping.fail(reason)

    def request_stop(self, reason: str) -> None:
        self.stopping.request(reason)

    @property
    def stopped_early(self) -> bool:
        """Whether a stop was asked for (a signal, ``assay stop``, a failure, a lost lock)."""
        return self.stopping.asked

    @property
    def stop_reason(self) -> str:
        return self.stopping.reason

    @property
    def failed(self) -> str:
        return self.stopping.failed

    # -- start / resume ------------------------------------------------------------
    def start(self) -> Incumbent:
        """Set the run up (first run) or resume it (re-queue, re-decide); once per loop."""
        if self._started is not None:
            return self.incumbent
        if self.target.limits.network is False:  # say it now, not after every block fails
            ok, why = process.network_isolation_available()
            if not ok:
                raise ExecutorError(f"limits.network = false was asked for, but {why}")
        inc = self.journal.incumbent()
        if inc is None:
            inc = self._first_incumbent()
        else:
            self._resume(inc)
        self.noise.resume()
        for slot in self.journal.slots():
            if slot.quarantined:
                self.executor.quarantine(slot.name)
        self._started = inc
        return inc

    def _first_incumbent(self) -> Incumbent:
        """The first run: the branch's HEAD, with the parameters' defaults, is the incumbent."""
        head = self.ws.head()
        if self.ws.dirty():
            self.emit("warn", "the working tree has uncommitted changes; assay measures the "
                              "last commit (HEAD) and ignores them")
        self.ws.ensure_branch(head)
        fid = self.target.fidelity  # its parameter is set per block, never the incumbent's
        defaults = {p.name: p.default for p in self.target.params if p.default is not None
                    and (fid is None or p.name != fid.param)}
        inc = Incumbent(commit=head, params=defaults, experiment_id=None)
        self.journal.set_incumbent(inc)
        self.journal.set_run_name(self.ws.run_name)
        self.journal.set_base_commit(head)
        self.emit("start", f"incumbent is {head[:12]} on branch {self.ws.branch}")
        return inc

    def _resume(self, inc: Incumbent) -> None:
        """A later run: re-queue what an earlier process left running, decide again what
        was left undecided, finish the hooks it left pending."""
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

    def _ensure_progress(self, exp: Experiment) -> None:
        """After a crash: an unfinished experiment with no pending block is decided again."""
        pending = self.journal.blocks(exp.id, states=(BlockState.QUEUED, BlockState.RUNNING))
        if pending:
            return
        if not self.journal.blocks(exp.id):
            self.outcomes.queue_first(exp)
            return
        self.outcomes.advance(exp)

    # -- ask -----------------------------------------------------------------------
    def proposal_context(self) -> ProposalContext:
        """What a proposer sees: the incumbent, the history, the noise, the brief."""
        self.before_ask()
        inc = self.incumbent
        cal = self.journal.calibration() or CalibrationRecord()
        brief = ""
        research = self.target.state_dir / "research.md"
        if research.exists():
            brief = research.read_text(errors="replace")
        return ProposalContext(
            target=self.target, incumbent=inc, history=self.histories.hand_out(),
            noise_floor=cal.pooled, delta=self.delta,
            research_brief=brief, hypotheses=self.journal.hypotheses("open"),
            tried_digests=self.tried.view(),
            checkout=lambda name: self.ws.checkout(name, inc.commit),
            files=LazyFiles(lambda: self.ws.editable_files(inc.commit)), meter=self.meter)

    @property
    def incumbent(self) -> Incumbent:
        return self.outcomes.incumbent

    @property
    def delta(self) -> float:
        return self.noise.delta

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
            self.stopping.by_rule("cap", str(exc))
            return []
        except AssayError as exc:
            self.emit("error", f"proposer {self.proposer.name} failed: {exc}")
            self.hooks.fire("on_error", None, {"ASSAY_ERROR": str(exc)},
                            key=f"on_error:propose:{self.journal.next_seq()}")
            # finish what is in flight, then exit non-zero
            self.stopping.give_up(f"the proposer failed: {exc}")
            return []
        if self.meter.reached:  # the wave ended at a cap, with what it made
            self.stopping.by_rule("cap", self.meter.reached)
        if not cands:
            self.stopping.exhaust(f"the {self.proposer.name} proposer has nothing more to propose")
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

    def submit_candidate(self, cand: Candidate) -> Experiment:
        """Validate and queue one candidate (the `tell`-side entry for outside proposers)."""
        admitted = self.intake.admit(cand, self.session)
        cand, reason = admitted.candidate, admitted.reason
        if reason:
            exp = self.journal.add_experiment(cand, admitted.state, note=reason)
            self.emit("reject", f"{exp.id} rejected before any run: {reason}", exp)
            self.outcomes.told(exp)
            return exp
        exp = self.journal.add_experiment(cand, ExperimentState.QUEUED)
        self.emit("queued", f"{exp.id} queued: {cand.hypothesis}", exp)
        self.outcomes.queue_first(exp)
        return exp

    # -- dispatch ------------------------------------------------------------------
    def decision_context(self, exp_id: str | None = None) -> DecisionContext:
        """What a decision rule sees (for ``exp_id``: the history without its own runs, at
        the fidelity level it is measured at now)."""
        fid = self.target.fidelity
        level = 0 if exp_id is None else level_of(self.journal, exp_id, fid)
        return self.outcomes.decision_context(exp_id, level)

    def dispatch(self) -> int:
        """Submit queued blocks to free slots; returns how many were started."""
        return self.dispatcher.dispatch(self.pace)

    # -- tell ----------------------------------------------------------------------
    def tell(self, result: BlockResult) -> Experiment | None:
        """Record a finished block and move its experiment on. Idempotent."""
        if not self.journal.record_block(result):
            return None
        if self.pace is not None:
            self.pace.update()
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
        return self.outcomes.advance(exp)

    def evidence(self, exp_id: str) -> Evidence:
        """A frozen snapshot of what is known about ``exp_id``, for ``decide_next`` (at the
        fidelity level it is measured at now)."""
        level = level_of(self.journal, exp_id, self.target.fidelity)
        return self.outcomes.evidence(exp_id, level)

    # -- noise -------------------------------------------------------------------------
    def calibrate(self) -> None:
        """Queue the start-up A/A blocks on every slot (once per run)."""
        self.noise.queue()

    def update_noise(self, result: BlockResult) -> None:
        """The one place a finished block updates what the loop knows about noise."""
        self.noise.update(result)

    # -- the driver ----------------------------------------------------------------
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
        self.stopping.resume(propose, self.session.carry_on)
        self.start()
        base = sessions.begin(self.target, self.journal, self.ws, self.executor,
                              self.session, self.emit)  # --budget counts from here
        why = sessions.preflight(self.target, self.ws, self.executor, self.incumbent)
        if why:
            self.emit("error", why)
            self.fail(why)
        else:  # no noise to measure on an incumbent that fails its checks
            self.calibrate()
        # the budget counts this session's experiments: the drive's goal is a journal total
        self.drive = Drive(budget + base, base, deadline, max_hours, until=until,
                           propose=propose)
        self.pace = Pace(self.drive, self.journal, self.target.fidelity)
        self.pace.update()

    def step(self) -> bool:
        """One turn: ask → dispatch → wait → tell. False when the run should end
        (``stop_reason`` says why); call :meth:`begin` first and :meth:`end` after."""
        d, pace, st = self.drive, self.pace, self.stopping
        if d is None or pace is None:
            raise AssayError("call begin() before step()")
        if st.before_step(d, self.lock_held):
            return False
        queued = pace.waiting()
        free = self.executor.free_slots()
        room = d.budget - self.journal.count_experiments()
        if (d.propose and self.noise.done and not st.exhausted and room > 0 and free > queued
                and st.paused_since is None):
            self.ask(min(free - queued, room))
        self.dispatch()
        # The journal, not the executor, says what is in flight: a block whose result is
        # between the executor's threads and wait() is still running.
        if pace.short and not self.executor.running() and not self.journal.count_blocks(
                (BlockState.RUNNING,)):
            st.reason = pace.short  # what is queued cannot end in the time left
            return False
        if not self.executor.running() and not self.journal.count_blocks(
                (BlockState.QUEUED, BlockState.RUNNING)):
            if not d.propose:
                st.reason = st.reason or "nothing is left to run"
                return False
            if st.exhausted or self.journal.count_experiments() >= d.budget:
                st.reason = st.reason or f"the budget of {d.budget - d.base} experiments is spent"
                return False
            if not self.noise.done:
                return True
        for res in self.executor.wait(timeout=0.2):
            self.tell(res)
        if time.monotonic() - pace.last_beat > LEASE_TTL_S / 4:
            self.journal.heartbeat(list(self.executor.running()), self.owner, LEASE_TTL_S)
            pace.last_beat = time.monotonic()
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
        self.histories.settle()
        self.drive = None
        self.pace = None

    def install_signal_handlers(self) -> None:
        def handler(signum: int, frame: FrameType | None) -> None:
            self._signals += 1
            if self._signals == 1:
                self.on_event("signal", f"{signal.Signals(signum).name}: stopping after "
                                        "cancelling running blocks (again to stop at once)", None)
                self.request_stop(f"stopped by {signal.Signals(signum).name}")
            else:
                # No locks here: the main thread may hold the executor's. Kill every group.
                process.kill_all()
                os._exit(130)

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)

    def summary(self) -> Summary:
        # the baseline where keeps are decided: with [fidelity], the last level's
        last = last_level(self.target.fidelity)
        cal = self.journal.calibration(last) or CalibrationRecord()
        exps = self.journal.experiments(patches=False)
        p = progress(exps, cal.baseline, last)
        return Summary(baseline=p.baseline, best=p.best, kept=p.kept, finished=p.finished,
                       counts=p.counts, stopped=self.stop_reason, branch=self.ws.branch,
                       failed=self.failed,
                       open=[e for e in exps if not e.state.is_finished()
                             and e.decision is not None],
                       awaiting=awaiting(self.journal, self.target))
