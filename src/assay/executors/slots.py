"""Choosing a slot for a block: one rule for every executor.

A block may name a slot it prefers (A/A calibration blocks are pinned to the slot they
measure) and one it avoids (a confirmation on another slot, a retry after a lost slot).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..model import Block, Slot


def pick_slot(free: Sequence[str], block: Block) -> str | None:
    """The slot for ``block`` among the ``free`` ones (in their order); None when none is.

    Its preferred slot when free; else the first free slot that is not the one it avoids;
    else (only the avoided slot is free) that one.
    """
    if not free:
        return None
    if block.prefer_slot is not None and block.prefer_slot in free:
        return block.prefer_slot
    others = [name for name in free if name != block.avoid_slot]
    return (others or list(free))[0]


class OwnSlots:
    """A fixed list of slots, less the quarantined ones: for executors that own their slots
    (mixed in before :class:`~assay.executors.base.Executor`)."""

    def __init__(self, slots: Sequence[Slot]) -> None:
        self._slots = list(slots)
        self._quarantined: set[str] = set()

    @property
    def slots(self) -> Sequence[Slot]:
        return [s for s in self._slots if s.name not in self._quarantined]

    def quarantine(self, slot: str) -> None:
        self._quarantined.add(slot)
