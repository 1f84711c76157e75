"""An executor backed by a function: ``fn(block, slot) -> BlockResult``, run synchronously.

The twin of a real executor for simulations and tests (as ``httpx.MockTransport`` is of a
network transport): nothing is built or run, no thread is started. ``submit`` calls the
function at once and keeps its result; ``wait`` hands back every result kept and never
sleeps, so a loop on it runs as fast as its journal allows.

:func:`values` builds the function from a simpler one, ``value(role, slot) -> float``,
called once per run in the block's run order (``"A"`` incumbent, ``"B"`` candidate; both
sides of an A/A block run the incumbent, so they are asked as ``"A"``)::

    executor = FunctionExecutor(values("speed", lambda role, slot: 100.0 if role == "A"
                                       else 103.0), slots=[Slot("s0"), Slot("s1")])

The executor keeps the same contract as every backend (``assay.testing.executors``
checks it): idempotent submit, one block per slot, results handed back once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from ..model import Block, BlockKind, BlockResult, Role, RunResult, RunStatus, Slot
from .base import Executor
from .slots import OwnSlots, pick_slot

BlockFn = Callable[[Block, Slot], BlockResult]
ValueFn = Callable[[str, str], "float | Mapping[str, float]"]


class FunctionExecutor(OwnSlots, Executor):
    name = "function"

    def __init__(self, fn: BlockFn, slots: Sequence[Slot] = (Slot("s0"),)) -> None:
        if not slots:
            raise ValueError("FunctionExecutor needs at least one slot")
        self.fn = fn
        OwnSlots.__init__(self, slots)
        self._busy: dict[str, str] = {}  # slot -> block id, until wait() returns it
        self._done: dict[str, BlockResult] = {}  # block id -> result, in submission order
        self._seen: set[str] = set()
        self.calls = 0  # blocks the function was called for

    def free_slot_names(self) -> list[str]:
        return [s.name for s in self.slots if s.name not in self._busy]

    def submit(self, block: Block) -> str:
        if block.block_id in self._seen:
            return next((s for s, b in self._busy.items() if b == block.block_id), "")
        name = pick_slot(self.free_slot_names(), block)
        if name is None:
            raise RuntimeError("submit() called with no free slot")
        slot = next(s for s in self._slots if s.name == name)
        self._seen.add(block.block_id)
        self._busy[name] = block.block_id
        self.calls += 1
        try:
            result = self.fn(block, slot)
        except Exception as exc:  # a failing function is a lost slot, as on a real machine
            result = BlockResult(block.block_id, block.experiment_id, name, (), None,
                                 f"{type(exc).__name__}: {exc}", "executor")
        self._done[block.block_id] = result
        return name

    def wait(self, timeout: float | None = None) -> list[BlockResult]:
        out = list(self._done.values())
        self._done.clear()
        done = {r.block_id for r in out}
        self._busy = {s: b for s, b in self._busy.items() if b not in done}
        return out

    def running(self) -> set[str]:
        return set(self._busy.values())

    def cancel(self, block_id: str) -> None:
        self._done.pop(block_id, None)
        self._busy = {s: b for s, b in self._busy.items() if b != block_id}
        self._seen.discard(block_id)


def values(metric: str, value: ValueFn) -> BlockFn:
    """A block function from ``value(role, slot)``: one benchmark value (or a mapping of
    metric values, for guards) per run. A non-finite primary value is an invalid run."""

    def run(block: Block, slot: Slot) -> BlockResult:
        runs: list[RunResult] = []
        for i, ch in enumerate(block.order):
            role = Role(ch)
            asked = Role.INCUMBENT if block.kind is BlockKind.AA else role
            got = value(asked.value, slot.name)
            metrics = dict(got) if isinstance(got, Mapping) else {metric: float(got)}
            status, reason = RunStatus.OK, ""
            if metric not in metrics or not math.isfinite(metrics[metric]):
                status, reason = RunStatus.INVALID, f"no finite value of {metric}"
                metrics = {}
            runs.append(RunResult(f"{block.block_id}-r{i + 1}", block.block_id,
                                  block.experiment_id, role, i + 1, status, metrics, reason,
                                  slot=slot.name))
        return BlockResult(block.block_id, block.experiment_id, slot.name, tuple(runs))

    return run
