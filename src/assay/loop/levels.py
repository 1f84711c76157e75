"""``[fidelity]`` in a running loop: the noise of each level, the value a block runs at,
the screen between levels, and what a level costs.

A candidate climbs the levels cheapest first (:class:`~assay.config.fidelity.FidelitySpec`).
Each level has its own A/A calibration (:class:`LevelNoise`: one
:class:`~assay.loop.calibration.Calibration` per level, stored under the level in the
journal), measured the first time a block at that level is queued: a level no candidate
reaches costs nothing, and the last level, the dearest, is calibrated only once a candidate
earned it. A later session finds a level's calibration in the journal and reuses it.

Without ``[fidelity]`` there is one level, 0, and everything here is what the loop did
before levels existed.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence

from ..config.fidelity import FidelitySpec, last_level
from ..config.spec import Target
from ..errors import AssayError
from ..executors.base import Executor
from ..journal.store import Journal
from ..model import (
    LEVEL,
    Block,
    BlockResult,
    BlockState,
    Decision,
    ExperimentState,
    Incumbent,
    LevelResult,
)
from .calibration import Calibration


class LevelNoise:
    """One :class:`Calibration` per fidelity level, behind the interface the loop uses;
    ``done`` and ``delta`` are the first level's (the one candidates start at)."""

    def __init__(self, target: Target, journal: Journal, executor: Executor,
                 incumbent: Callable[[], Incumbent], emit: Callable[[str, str], None],
                 fail: Callable[[str], None]) -> None:
        count = 1 if target.fidelity is None else len(target.fidelity.levels)
        self.journal = journal
        self.fidelity = target.fidelity
        self.levels = [Calibration(target, journal, executor, incumbent, emit, fail, level=i)
                       for i in range(count)]

    @property
    def done(self) -> bool:
        """The first level's calibration is in (or none was asked for)."""
        return self.levels[0].done

    @property
    def fresh(self) -> set[str]:
        """Slots measuring their own noise, at any level: they run A/A blocks only."""
        return set().union(*(c.fresh for c in self.levels))

    @property
    def delta(self) -> float:
        return self.levels[0].delta

    def delta_at(self, level: int) -> float:
        """The effective δ at ``level``."""
        return self.levels[level].delta

    def ready(self, level: int) -> bool:
        """Whether blocks at ``level`` may run: its calibration is in (or none is asked)."""
        return self.levels[level].done

    def need(self, level: int) -> None:
        """Queue ``level``'s A/A blocks unless it is calibrated or they are queued."""
        self.levels[level].queue()

    def resume(self) -> None:
        for c in self.levels:
            c.resume()

    def queue(self) -> None:
        """The start-up calibration: the first level's; the others when first needed."""
        self.levels[0].queue()

    def new_slots(self) -> None:
        for c in self.levels:
            c.new_slots()

    def update(self, result: BlockResult) -> None:
        level = self.journal.block_level(result.block_id)
        if level >= len(self.levels):
            raise beyond(level, self.fidelity, f"block {result.block_id}")
        self.levels[level].update(result)


def at_level(block: Block, fid: FidelitySpec | None) -> Block:
    """``block`` as the executor runs it: with ``[fidelity]``, the level's value set on both
    sides (the incumbent's params and the candidate's). The journal keeps the params without
    it: the level is the block's own column, never part of what is kept."""
    if block.level > last_level(fid):
        raise beyond(block.level, fid, f"block {block.block_id}")
    if fid is None:
        return block
    value = {fid.param: fid.value(block.level)}
    inc = dataclasses.replace(block.incumbent, params={**block.incumbent.params, **value})
    cand = block.candidate
    if cand is not None:
        cand = dataclasses.replace(cand, params={**cand.params, **value})
    return dataclasses.replace(block, incumbent=inc, candidate=cand)


def level_of(journal: Journal, exp_id: str, fid: FidelitySpec | None) -> int:
    """The level an experiment is measured at now: its latest block's (0 before any)."""
    level = max((b.level for b in journal.blocks(exp_id)), default=0)
    if level > last_level(fid):
        raise beyond(level, fid, exp_id)
    return level


def beyond(level: int, fid: FidelitySpec | None, what: str) -> AssayError:
    """The error of a block at a level the config does not have: the journal was measured
    under another ``[fidelity]`` (a session refuses to start on one, see
    :meth:`~assay.journal.store.Journal.hold_fidelity`), and no level is ever clamped."""
    has = "no [fidelity]" if fid is None else f"[fidelity] levels 0 to {fid.last}"
    return AssayError(f"{what} is at fidelity level {level}, and assay.toml has "
                      f"{has}: the journal was measured under another [fidelity]; restore it "
                      "in assay.toml, or `assay reset` to start a new run")


def tagged(decision: Decision | None, level: int) -> Decision | None:
    """``decision`` with the level it was made at in its details."""
    if decision is None:
        return None
    return dataclasses.replace(decision, details={**decision.details, LEVEL: level})


@dataclasses.dataclass(frozen=True)
class Screen:
    """A level's screen on one candidate: whether it goes on, and why in words."""

    promoted: bool
    why: str


def screen(fid: FidelitySpec, level: int, exp_id: str, decision: Decision,
           results: Sequence[LevelResult]) -> Screen:
    """The screen at ``level`` (below the last) for a decision the rule reached.

    ``interval``: promoted iff the interval's upper end is above the level's δ (it could
    still be a win). ``top``: promoted iff its lower bound ranks within the ``top`` best
    among the candidates screened at that level so far (``results``: the journal's
    :meth:`~assay.journal.views.ViewQueries.level_results`), unless its interval lies at or
    below zero (a sure loss is never promoted, not even among the first ``top``)."""
    hi, lo, delta = decision.hi, decision.lo, decision.delta
    if fid.promote == "interval":
        if hi is None:
            return Screen(False, "it has no interval")
        ok = hi > delta
        return Screen(ok, f"its interval's upper end {hi:+.2%} is {'' if ok else 'not '}"
                          f"above δ {delta:.2%}")
    if hi is not None and hi <= 0:  # a sure loss here: no rank makes it worth a longer stay
        return Screen(False, f"its interval's upper end {hi:+.2%} is not above 0: it loses "
                             "at this level")
    mine = -math.inf if lo is None else lo
    peers = [r for r in results if r.level == level and r.experiment_id != exp_id
             and r.outcome in ("promoted", "stopped") and r.lo is not None]
    rank = 1 + sum(1 for r in peers if r.lo is not None and r.lo > mine)
    ok = rank <= fid.top
    shown = "no lower bound" if lo is None else f"its lower bound {lo:+.2%}"
    return Screen(ok, f"{shown} ranks {rank} of {len(peers) + 1} screened at this level "
                      f"(the top {fid.top} go on)")


def interval(decision: Decision) -> str:
    """A decision's effect and interval in words: ``+3.10% [+1.20%, +5.00%]``."""
    if decision.effect is None:
        return "no effect measured"
    if decision.lo is None or decision.hi is None:
        return f"{decision.effect:+.2%}"
    return f"{decision.effect:+.2%} [{decision.lo:+.2%}, {decision.hi:+.2%}]"


def level_pace(journal: Journal, fid: FidelitySpec | None, level: int) -> tuple[float, str]:
    """Seconds per run at ``level`` and where the number comes from: the recent blocks at
    that level, else (numeric levels: a time budget, a step count, costs in proportion to
    the value) the nearest cheaper level's pace times the values' ratio; else the recent
    blocks of any level. ``(nan, '')`` when nothing was measured yet."""
    own = journal.run_pace(level=level) if fid is not None else journal.run_pace()
    if own:
        return statistics.median(own), ""
    if fid is not None:
        here = fid.value(level)
        for lower in range(level - 1, -1, -1):
            there = fid.value(lower)
            cheap = journal.run_pace(level=lower)
            if cheap and isinstance(here, (int, float)) and isinstance(there, (int, float)) \
                    and there > 0:
                ratio = float(here) / float(there)
                return (statistics.median(cheap) * ratio,
                        f"the pace at {fid.label(lower)} × {ratio:g}")
    anywhere = journal.run_pace()
    return (statistics.median(anywhere), "") if anywhere else (math.nan, "")


def awaiting(journal: Journal, target: Target) -> list[str]:
    """With ``[fidelity]``: the candidates still to measure at each level when a run stops,
    with what that would cost at the level's pace (``2 candidates await TIME_BUDGET=300:
    about 26 min``); [] without levels or when none waits."""
    fid = target.fidelity
    if fid is None:
        return []
    first = 2 * target.decision.pairs_per_block  # runs in one block: ABBA per two pairs
    typical: dict[int, list[int]] = {}
    for r in journal.level_results():
        if r.outcome != "measuring":
            typical.setdefault(r.level, []).append(2 * r.pairs)
    need: dict[int, list[int]] = {}
    for exp in journal.experiments([ExperimentState.QUEUED, ExperimentState.RUNNING,
                                    ExperimentState.MEASURED], patches=False):
        blocks = journal.blocks(exp.id)
        level = max((b.level for b in blocks), default=0)
        here = [b for b in blocks if b.level == level]
        done = sum(len(b.order) for b in here if b.state is BlockState.DONE)
        pending = sum(len(b.order) for b in here
                      if b.state in (BlockState.QUEUED, BlockState.RUNNING))
        usual = statistics.median(typical[level]) if level in typical else first
        need.setdefault(level, []).append(max(pending, int(usual) - done, first if not
                                              done else 0))
    lines = []
    for level in sorted(need):
        runs = sum(need[level])
        n = len(need[level])
        calibrated = journal.calibration(level) is not None or target.decision.aa_blocks <= 0
        secs, how = level_pace(journal, fid, level)
        cost = ("its cost is not known yet: no block was measured" if math.isnan(secs) else
                f"about {_duration(runs * secs)} ({runs} runs at about {secs:.0f} s"
                + (f", {how}" if how else "") + ")")
        extra = "" if calibrated else ", and its A/A calibration first"
        lines.append(f"{n} candidate{'' if n == 1 else 's'} await{'s' if n == 1 else ''} "
                     f"{fid.label(level)}: {cost}{extra}")
    return lines


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

