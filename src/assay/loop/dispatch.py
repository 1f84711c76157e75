"""Which queued block goes to which free slot: calibration blocks first, then
re-measurements and confirmations, then everything else first-in first-out.

With ``[fidelity]`` a block runs at its level's value on both sides
(:func:`assay.loop.levels.at_level`), and only once that level's A/A calibration is in
(the first block at a level queues it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..config.fidelity import FidelitySpec
from ..executors.base import Executor
from ..executors.slots import pick_slot
from ..journal.store import Journal
from ..model import Block, BlockKind, BlockRow, BlockState, Candidate, ExperimentState, Slot
from .calibration import CAL
from .drive import Pace
from .levels import LevelNoise, at_level

LEASE_TTL_S = 120.0  # a leased block whose owner stops renewing it is taken back


def priority(row: BlockRow) -> tuple[int, float, int]:
    rank = 0 if row.kind is BlockKind.AA else 1 if row.kind in (
        BlockKind.RERUN, BlockKind.CONFIRM) else 2
    return rank, row.created_at, row.seq


def waits_for_another_slot(row: BlockRow, free: Sequence[str], slots: Sequence[Slot]) -> bool:
    """A block that avoids a slot (a confirmation, a retry) and finds only that one free
    waits while another slot that could run it is busy; with no other slot (one slot, or
    the others quarantined) it runs on the avoided one."""
    if row.avoid_slot is None or any(name != row.avoid_slot for name in free):
        return False
    return any(s.name != row.avoid_slot and (not row.platform or s.platform == row.platform)
               for s in slots)


def block_for(row: BlockRow, journal: Journal, fid: FidelitySpec | None = None) -> Block | None:
    """The block to submit for ``row`` (at its fidelity level's value); None (and the row
    cancelled) when its experiment is finished."""
    cand: Candidate | None = None
    if row.experiment_id != CAL:
        exp = journal.experiment(row.experiment_id)
        if exp is None or exp.state.is_finished():
            journal.cancel_block(row.id, "its experiment is finished")
            return None
        cand = dataclasses.replace(exp.candidate, base_commit=row.incumbent.commit)
    return at_level(Block(block_id=row.id, experiment_id=row.experiment_id, kind=row.kind,
                          order=row.order, incumbent=row.incumbent, candidate=cand,
                          prefer_slot=row.prefer_slot, avoid_slot=row.avoid_slot, seq=row.seq,
                          platform=row.platform, level=row.level), fid)


class Dispatcher:
    """Starts queued blocks on free slots, each leased in the journal first so that no
    block is dispatched twice."""

    def __init__(self, journal: Journal, executor: Executor, noise: LevelNoise,
                 owner: str, fidelity: FidelitySpec | None = None) -> None:
        self.fidelity = fidelity
        self.journal = journal
        self.executor = executor
        self.noise = noise
        self.owner = owner

    def dispatch(self, pace: Pace | None) -> int:
        """Submit queued blocks to free slots; returns how many were started."""
        started = 0
        if pace is not None:
            pace.short = ""
        self.noise.new_slots()
        free = self.executor.free_slot_names()
        if not free:
            return 0
        queued = sorted(self.journal.blocks(states=(BlockState.QUEUED,)), key=priority)
        for row in queued:
            if not free:
                break
            if row.kind is BlockKind.AA and row.prefer_slot not in free:
                continue
            if row.platform and not any(s.platform == row.platform and s.name in free
                                        for s in self.executor.slots):
                continue  # its platform has no free slot now
            if waits_for_another_slot(row, free, self.executor.slots):
                continue  # a confirmation on the slot it avoids would confirm nothing
            ready = [n for n in free if n not in self.noise.fresh]  # a new slot: A/A blocks only
            if row.kind is not BlockKind.AA and not ready:
                continue
            if row.level and row.kind is not BlockKind.AA and not self.noise.ready(row.level):
                self.noise.need(row.level)  # a higher level's noise first (queued once)
                continue
            block = block_for(row, self.journal, self.fidelity)
            if block is None:
                continue
            if pace is not None and not pace.fits(row):
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
