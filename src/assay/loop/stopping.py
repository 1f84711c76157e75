"""When a running loop ends, and why: asked stops (a signal, ``assay stop``, a failure, a lost
lock), the stop rules of :mod:`assay.loop.stops`, a platform that went away, the time budget.

:class:`Stopping` is the loop's mutable stop state: the reason, the failure, the stop rule
that ended proposing, and the run of discards that rule counts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..config.spec import Target
from ..executors.base import Executor
from ..journal.store import Journal
from ..model import ExperimentState
from ..records import StopRecord
from . import stops
from .drive import Drive

PAUSE_LIMIT_S = 600.0  # how long a platform that went away may take to come back


class Stopping:
    """Whether the loop goes on; ``reason`` says why not (``failed`` when it is an error)."""

    def __init__(self, target: Target, journal: Journal, executor: Executor,
                 emit: Callable[[str, str], None], session_id: str) -> None:
        self.target = target
        self.journal = journal
        self.executor = executor
        self.emit = emit
        self.session_id = session_id
        self.reason = ""
        self.failed = ""
        self.rule = ""  # the stop rule that ended proposing ('' while none has)
        self.exhausted = False  # nothing more is proposed
        self._asked = threading.Event()
        self._discards = 0  # decided experiments since the last keep (stop_after_discards)
        self.paused_since: float | None = None  # when a declared platform went away

    @property
    def stop_file(self) -> Path:
        """Creating this file asks a running loop (in any process) to stop gracefully."""
        return self.target.state_dir / "stop"

    @property
    def asked(self) -> bool:
        """Whether a stop was asked for (a signal, ``assay stop``, a failure, a lost lock)."""
        return self._asked.is_set()

    def request(self, reason: str) -> None:
        self.reason = reason
        self._asked.set()

    def fail(self, reason: str) -> None:
        """Stop because the target itself is broken; the run ends with an error."""
        self.failed = reason
        self.request(reason)

    def exhaust(self, reason: str) -> None:
        """Propose no more: the proposer has nothing left (a stop rule's reason stays)."""
        self.exhausted = True
        self.reason = self.reason if self.rule else reason

    def give_up(self, reason: str) -> None:
        """Propose no more and end with an error once what is in flight is finished."""
        self.exhausted = True
        self.reason = reason
        self.failed = reason

    def by_rule(self, kind: str, reason: str) -> None:
        """Stop proposing for a stop rule (assay.loop.stops): the blocks in flight are measured
        and decided; the next `assay run` goes on only with --continue."""
        if self.rule:
            return
        self.rule = kind
        self.exhausted = True
        self.reason = reason
        self.journal.set_stop_rule(StopRecord(kind, reason, self.session_id))
        self.emit("stop", f"stopping ({kind}): {reason}; the blocks in flight are finished")

    def resume(self, propose: bool, carry_on: bool) -> None:
        """At a run's start: refuse to go on after a stop rule without ``carry_on``, else
        clear its record; count the discards since the last keep afresh."""
        # a stop rule ended proposing: only a run that proposes needs --continue
        last = self.journal.stop_rule() if propose else None
        stops.refuse_resume(last, carry_on)
        if last:
            self.journal.set_stop_rule(None)
            self.emit("session", f"going on after the last run's stop ({last.kind}), "
                                 "as --continue asks")
        elif self.target.run.stop_after_discards is not None:
            self._discards = stops.discard_streak(sorted(
                self.journal.experiments([ExperimentState.KEPT, ExperimentState.DISCARDED],
                                         patches=False), key=lambda e: e.updated_at))

    def kept(self, value: float | None) -> None:
        """A keep ends the run of discards, and the run when it reached the metric's goal."""
        self._discards = 0
        why = stops.target_reason(self.target.metric, value)
        if why:
            self.by_rule("target", why)

    def discarded(self) -> None:
        limit = self.target.run.stop_after_discards
        self._discards += 1
        if limit is not None and self._discards >= limit:
            self.by_rule("discards", stops.discards_reason(self._discards, limit))

    def before_step(self, d: Drive, lock_held: Callable[[], bool]) -> bool:
        """Whether the run must end before this step (``reason`` then says why)."""
        if self._asked.is_set():
            return True
        goal = d.until() if d.until is not None else ""
        if goal:
            self.reason = goal
            return True
        if not lock_held():
            self.fail("this run lost its lock (its heartbeat went stale and another run "
                      "took the target over); stopping")
            return True
        if not self.executor.slots:  # never wait forever on nothing
            self.reason = "no slot is left to run blocks on (all quarantined)"
            return True
        if self._platform_gone():
            return True
        if self.stop_file.exists():
            self.stop_file.unlink(missing_ok=True)
            self.request("a stop was requested (assay stop / the MCP stop tool)")
            return True
        if d.deadline is not None and time.monotonic() > d.deadline:
            self.reason = f"the time budget of {d.max_hours:g} h is spent"
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
            self.paused_since = None
            return False
        now = time.monotonic()
        if self.paused_since is None:
            self.paused_since = now
            self.emit("pause", f"platform {', '.join(away)} has no slot left: decisions that "
                               f"need it are paused (up to {PAUSE_LIMIT_S:.0f} s for it to "
                               "come back); nothing is decided without it")
        if now - self.paused_since > PAUSE_LIMIT_S:
            self.reason = (f"platform {', '.join(away)} went away and did not come back "
                           f"within {PAUSE_LIMIT_S:.0f} s; its blocks stay queued, and "
                           "`assay run` resumes them when it is back")
            return True
        return False
