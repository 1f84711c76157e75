"""What one run drives towards (budget, deadline, a caller's condition) and its pace."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..config.fidelity import FidelitySpec
from ..journal.store import Journal
from ..model import BlockRow, BlockState
from .levels import level_pace

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
    no block starts that the deadline would cut (None until a block has finished). With
    ``[fidelity]`` a block's pace is its level's (:func:`assay.loop.levels.level_pace`)."""

    def __init__(self, drive: Drive, journal: Journal,
                 fidelity: FidelitySpec | None = None) -> None:
        self.drive = drive
        self.journal = journal
        self.fidelity = fidelity
        self.seconds: float | None = None
        self.short = ""  # why a queued block was left unstarted for lack of time ('' if none)
        self.last_beat = 0.0  # time.monotonic() of the last lease heartbeat

    def update(self) -> None:
        if self.drive.deadline is not None:
            recent = self.journal.run_pace()
            self.seconds = statistics.median(recent) if recent else None

    def waiting(self) -> int:
        """Queued blocks that hold back new candidates: all of them, except, with
        ``[fidelity]``, blocks above the first level that cannot end in the time left (a
        promoted candidate waiting for a longer stay must not stop the cheap screening)."""
        rows = self.journal.blocks(states=(BlockState.QUEUED,))
        if self.fidelity is None or self.drive.deadline is None:
            return len(rows)
        short = self.short
        held = sum(1 for r in rows if r.level == 0 or self.fits(r))
        self.short = short  # asking is not dispatching: what was left unstarted is unchanged
        return held

    def fits(self, row: BlockRow) -> bool:
        """Whether ``row`` can end before the deadline, at the recent blocks' pace (a block
        the deadline would cut is time spent for nothing: it runs again on resume)."""
        d = self.drive
        fid, how, at = self.fidelity, "", ""
        seconds = self.seconds
        if fid is not None and d.deadline is not None:
            seconds, how = level_pace(self.journal, fid, row.level)
            seconds = None if math.isnan(seconds) else seconds
            at = f" at {fid.label(row.level)}"
        if d.deadline is None or seconds is None:
            return True
        need = seconds * len(row.order)
        left = d.deadline - time.monotonic()
        if need <= left:
            return True
        self.short = (f"the time budget of {d.max_hours:g} h leaves {max(left, 0):.0f} s, less "
                      f"than the next block{at} needs ({len(row.order)} run(s) at about "
                      f"{seconds:.0f} s each{', ' + how if how else ''}); it was not started, "
                      "and `assay run` starts it")
        return False
