"""What one run drives towards (budget, deadline, a caller's condition) and its pace."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..journal.store import Journal
from ..model import BlockRow

Until = Callable[[], str]  # '' to go on; otherwise why the run ends


@dataclass(frozen=True)
class Drive:
    """What one ``run()`` drives towards (fixed by :meth:`~assay.loop.driver.Loop.begin`)."""

    budget: int  # experiments in the journal, in all
    base: int = 0  # experiments in the journal when this session began (not its budget)
    deadline: float | None = None  # time.monotonic() at which the run ends
    max_hours: float | None = None
    until: Until | None = None
    propose: bool = True  # False: only measure what is queued (the MCP server)


class Pace:
    """How fast the run goes against its deadline: changes as blocks finish (mutable).

    With a deadline, ``seconds`` is the median seconds per run of the recent blocks, so that
    no block starts that the deadline would cut (None until a block has finished)."""

    def __init__(self, drive: Drive, journal: Journal) -> None:
        self.drive = drive
        self.journal = journal
        self.seconds: float | None = None
        self.short = ""  # why a queued block was left unstarted for lack of time ('' if none)
        self.last_beat = 0.0  # time.monotonic() of the last lease heartbeat

    def update(self) -> None:
        if self.drive.deadline is not None:
            recent = self.journal.run_pace()
            self.seconds = statistics.median(recent) if recent else None

    def fits(self, row: BlockRow) -> bool:
        """Whether ``row`` can end before the deadline, at the recent blocks' pace (a block
        the deadline would cut is time spent for nothing: it runs again on resume)."""
        d = self.drive
        if d.deadline is None or self.seconds is None:
            return True
        need = self.seconds * len(row.order)
        left = d.deadline - time.monotonic()
        if need <= left:
            return True
        self.short = (f"the time budget of {d.max_hours:g} h leaves {max(left, 0):.0f} s, less "
                      f"than the next block needs ({len(row.order)} run(s) at about "
                      f"{self.seconds:.0f} s each); it was not started, and `assay run` starts "
                      "it")
        return False
