"""The executor interface: submit a block, collect its result, cancel.

Contract shared by every backend (and checked by ``tests/executors/conformance.py``):

- ``submit(block)`` returns at once; a block whose ``block_id`` is already running or
  finished in this executor is ignored (idempotent).
- ``wait(timeout)`` returns the results finished since the last call (possibly empty).
- one block occupies one slot for its whole life: two measurements never share a slot.
- a benchmark that fails is a result (a run with status crashed/timeout), not an error;
  only a lost worker or node is retried, on another slot where possible.
- ``cancel(block_id)`` kills the block's processes; ``close()`` cancels everything left.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from ..model import Block, BlockResult, Slot


class Executor(ABC):
    name: str = "base"

    @property
    @abstractmethod
    def slots(self) -> Sequence[Slot]:
        """All slots this executor can run blocks on."""

    @abstractmethod
    def free_slot_names(self) -> list[str]:
        """Names of the slots that could start a block right now."""

    def free_slots(self) -> int:
        return len(self.free_slot_names())

    def quarantine(self, slot: str) -> None:  # noqa: B027 - optional
        """Stop giving blocks to ``slot`` (its noise is far above its peers')."""

    @abstractmethod
    def submit(self, block: Block) -> str:
        """Start ``block`` on a free slot (honouring prefer/avoid_slot where possible).

        Returns the slot's name (or the running slot's, for a duplicate submission).
        """

    @abstractmethod
    def wait(self, timeout: float | None = None) -> list[BlockResult]:
        """Results finished since the last call; waits up to ``timeout`` for at least one."""

    @abstractmethod
    def running(self) -> set[str]:
        """Ids of blocks submitted and not yet returned by ``wait``."""

    @abstractmethod
    def cancel(self, block_id: str) -> None:
        """Kill the block's processes; its result will not be returned."""

    def close(self) -> None:
        for block_id in list(self.running()):
            self.cancel(block_id)
