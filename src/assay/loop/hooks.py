"""Completion hooks: ``on_keep``, ``on_experiment``, ``on_error``, ``on_finish`` commands.

Each firing has an idempotency key (``ASSAY_HOOK_KEY``, e.g. ``on_keep:e0007``) and is
recorded in the journal (status ``pending``) before it starts, so a hook pending when the
orchestrator died is run again on restart: hooks run *at least once*, and a hook that
finished (``ok``, ``failed`` or ``timeout``) is never repeated. A receiver that must act only
once deduplicates on ``ASSAY_HOOK_KEY``.

On restart, :meth:`Hooks.resume` also fires the hooks of finished experiments that have no
record at all (the orchestrator died between deciding an experiment and registering its
hook), with the environment rebuilt from the journal and ``ASSAY_HOOK_RESUMED=1``.

Hooks run in background threads with their own timeout, in a scrubbed environment (the
``[env]`` allowlist, like benchmarks): a failing or hanging hook is reported and recorded in
the journal, and never blocks the loop; :meth:`Hooks.join` waits a bounded time in total.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ..bench import process
from ..config.spec import Command, Target
from ..journal.store import Journal
from ..model import ExperimentState

DONE = ("ok", "failed", "timeout")


class Hooks:
    def __init__(self, target: Target, journal: Journal,
                 report: Callable[[str], None] | None = None) -> None:
        self.target = target
        self.journal = journal
        self.report = report or (lambda _msg: None)
        self._threads: list[threading.Thread] = []

    def fire(self, event: str, experiment_id: str | None = None,
             env: Mapping[str, str] | None = None, key: str | None = None) -> None:
        cmd = self.target.hooks.get(event)
        if cmd is None:
            return
        key = key or f"{event}:{experiment_id or 'run'}"
        try:
            if not self.journal.hook_begin(key, event, experiment_id):
                return
        except Exception as exc:  # a hook must never take the loop down
            self._say(f"hook {event} ({key}) could not be recorded: {exc}")
            return
        extra = {"ASSAY_HOOK_KEY": key, "ASSAY_EVENT": event,
                 "ASSAY_EXPERIMENT": experiment_id or "", **(env or {})}
        t = threading.Thread(target=self._run, args=(key, event, cmd, extra),
                             name=f"assay-hook-{event}", daemon=True)
        self._threads = [x for x in self._threads if x.is_alive()]
        self._threads.append(t)
        t.start()

    def _say(self, message: str) -> None:
        with contextlib.suppress(Exception):  # the journal may be closing: best effort
            self.report(message)

    def _end(self, key: str, status: str, code: int | None, output: str) -> None:
        # A journal closed at shutdown: the hook stays pending and runs again on resume.
        with contextlib.suppress(Exception):
            self.journal.hook_end(key, status, code, output)

    def _run(self, key: str, event: str, cmd: Command, env: Mapping[str, str]) -> None:
        try:
            with tempfile.TemporaryDirectory() as tmp:
                out, err = Path(tmp) / "out", Path(tmp) / "err"
                r = process.run(cmd.cmd, cwd=self.target.root,
                                env=process.scrubbed_env(self.target.env, env),
                                timeout_s=cmd.timeout_s, stdout_path=out, stderr_path=err)
        except Exception as exc:  # never let a hook take the loop down
            self._end(key, "failed", None, f"{type(exc).__name__}: {exc}")
            self._say(f"hook {event} ({key}) could not start: {exc}")
            return
        if r.timed_out:
            status = "timeout"
            self._say(f"hook {event} ({key}) timed out after {cmd.timeout_s:g}s and was killed")
        elif r.exit_code != 0:
            status = "failed"
            tail = (r.stderr or r.stdout).strip()[-200:]
            self._say(f"hook {event} ({key}) exited {r.exit_code}: {tail}")
        else:
            status = "ok"
        self._end(key, status, r.exit_code, r.stdout + r.stderr)

    # -- restart -------------------------------------------------------------------
    def _env_for(self, event: str, experiment_id: str | None) -> dict[str, str]:
        env = {"ASSAY_HOOK_RESUMED": "1"}
        exp = self.journal.experiment(experiment_id) if experiment_id else None
        if exp is not None:
            if event == "on_keep":
                env["ASSAY_COMMIT"] = exp.commit or ""
            elif event == "on_experiment":
                env["ASSAY_STATE"] = exp.state.value
            elif event == "on_error":
                env["ASSAY_ERROR"] = exp.note
        if event == "on_finish":
            env["ASSAY_STOP_REASON"] = "the run was interrupted before it finished"
        return env

    def resume(self) -> None:
        """Fire again the hooks a dead orchestrator started or owed (at least once)."""
        if not self.target.hooks:
            return
        for row in self.journal.hooks("pending"):
            self.fire(row.event, row.experiment_id, self._env_for(row.event, row.experiment_id),
                      key=row.key)
        known = {row.key for row in self.journal.hooks()}
        for exp in self.journal.experiments():
            if not exp.state.is_finished():
                continue
            owed = ["on_experiment"]
            if exp.state is ExperimentState.KEPT:
                owed.insert(0, "on_keep")
            if exp.state is ExperimentState.CRASHED:
                owed.insert(0, "on_error")
            for event in owed:
                key = f"{event}:{exp.id}"
                if event in self.target.hooks and key not in known:
                    self.fire(event, exp.id, self._env_for(event, exp.id), key=key)

    resume_pending = resume  # the name the loop calls

    def join(self, timeout: float = 10.0) -> None:
        """Wait for running hooks, at most ``timeout`` seconds in total; never longer."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            t.join(left)
        late = [t for t in self._threads if t.is_alive()]
        if late:
            self._say(f"{len(late)} hook(s) still running at shutdown; they stay pending in the "
                      "journal and run again on the next `assay run`")

