"""Twins and conformance kits shipped with assay, for tests and simulations.

Twins (fast, no git, no processes, no threads):

- :class:`MemoryRepository`: the run branch in memory (implements
  :class:`assay.repo.repository.Repository`);
- :class:`~assay.executors.function.FunctionExecutor` and
  :func:`~assay.executors.function.values`: an executor backed by a function;
- ``Journal.memory()``: a journal on an in-memory SQLite database.

:func:`memory_loop` puts them together: a :class:`~assay.loop.driver.Loop` that runs thousands of
decisions a minute.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..config.spec import Target
from ..decision.rule import DecisionRule
from ..executors.base import Executor
from ..executors.function import FunctionExecutor, values
from ..journal.store import Journal
from ..loop.driver import Event, Loop
from ..model import Candidate
from ..proposers.base import ProposalContext, Proposer
from .repository import ROOT_COMMIT, MemoryCommit, MemoryRepository

__all__ = ["ROOT_COMMIT", "FunctionExecutor", "MemoryCommit", "MemoryRepository",
           "NoProposer", "memory_loop", "values"]


class NoProposer(Proposer):
    """Proposes nothing: candidates are submitted with :meth:`Loop.submit_candidate`."""

    name = "none"

    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        return []


def memory_loop(target: Target, executor: Executor, proposer: Proposer | None = None, *,
                journal: Journal | None = None, repository: MemoryRepository | None = None,
                rule: DecisionRule | None = None, on_event: Event | None = None,
                candidates: Sequence[Candidate] = ()) -> Loop:
    """A loop on an in-memory journal and repository (``target`` supplies the settings;
    its folder need not exist). ``candidates`` are queued after the loop has started."""
    loop = Loop(target, journal or Journal.memory(), repository or MemoryRepository(),
                executor, proposer or NoProposer(), rule=rule, on_event=on_event)
    if candidates:
        loop.start()
        loop.calibrate()
        for cand in candidates:
            loop.submit_candidate(cand)
    return loop
