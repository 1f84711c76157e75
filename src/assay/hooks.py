"""Completion hooks: ``on_keep``, ``on_experiment``, ``on_error``, ``on_finish`` commands.

Each firing has an idempotency key (``ASSAY_HOOK_KEY``, e.g. ``on_keep:e0007``) and is
recorded in the journal before it starts, so a hook pending when the orchestrator died is
run again on restart (at least once), and a finished one is never repeated. Hooks run in a
background thread with their own timeout: a failing or hanging hook is reported in the
journal and never blocks the loop.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from . import process
from .config import Command, Target
from .journal import Journal


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
        if not self.journal.hook_begin(key, event, experiment_id):
            return
        extra = {"ASSAY_HOOK_KEY": key, "ASSAY_EVENT": event,
                 "ASSAY_EXPERIMENT": experiment_id or "", **(env or {})}
        t = threading.Thread(target=self._run, args=(key, event, cmd, extra),
                             name=f"assay-hook-{event}", daemon=True)
        t.start()
        self._threads.append(t)

    def _run(self, key: str, event: str, cmd: Command, env: Mapping[str, str]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            out, err = Path(tmp) / "out", Path(tmp) / "err"
            try:
                r = process.run(cmd.cmd, cwd=self.target.root,
                                env=process.scrubbed_env(self.target.env, env),
                                timeout_s=cmd.timeout_s, stdout_path=out, stderr_path=err)
            except Exception as exc:  # never let a hook take the loop down
                self.journal.hook_end(key, "failed", None, f"{type(exc).__name__}: {exc}")
                self.report(f"hook {event} ({key}) could not start: {exc}")
                return
        if r.timed_out:
            status = "timeout"
            self.report(f"hook {event} ({key}) timed out after {cmd.timeout_s:g}s")
        elif r.exit_code != 0:
            status = "failed"
            self.report(f"hook {event} ({key}) exited {r.exit_code}: {r.stderr.strip()[-200:]}")
        else:
            status = "ok"
        self.journal.hook_end(key, status, r.exit_code, r.stdout + r.stderr)

    def resume_pending(self) -> None:
        """Run again the hooks a dead orchestrator had started but not finished."""
        for row in self.journal.pending_hooks():
            self.fire(row["event"], row["experiment_id"], key=row["key"])

    def join(self, timeout: float = 10.0) -> None:
        for t in self._threads:
            t.join(timeout)
