"""The local executor: N slots on this machine, one thread per running block.

Each slot owns two persistent worktrees (``<slot>-a``, ``<slot>-b``) and, when GPU ids are
configured, its own ``CUDA_VISIBLE_DEVICES``. A block runs entirely on one slot.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence

from ..config import Target
from ..model import Block, BlockResult, Slot
from ..process import CancelToken
from ..worker import SlotTrees, run_block, sweep
from ..workspace import Workspace
from .base import Executor
from .slots import OwnSlots, pick_slot


def local_slots(target: Target) -> list[Slot]:
    from ..platforms import local_slots as make

    return make(target)


class LocalExecutor(OwnSlots, Executor):
    name = "local"

    def __init__(self, target: Target, workspace: Workspace,
                 slots: Sequence[Slot] | None = None) -> None:
        self.target = target
        self.ws = workspace
        OwnSlots.__init__(self, slots if slots is not None else local_slots(target))
        self._trees: dict[str, SlotTrees] = {}
        self._busy: dict[str, str] = {}  # slot -> block id
        self._tokens: dict[str, CancelToken] = {}
        self._done: queue.Queue[BlockResult] = queue.Queue()
        self._seen: set[str] = set()
        self._pending: set[str] = set()  # submitted, not yet returned by wait()
        self._lock = threading.Lock()

    def free_slot_names(self) -> list[str]:
        with self._lock:
            return [s.name for s in self.slots if s.name not in self._busy]

    def trees_for(self, slot: Slot) -> SlotTrees:
        if slot.name not in self._trees:
            self._trees[slot.name] = SlotTrees(self.ws.tree(f"{slot.name}-a"),
                                               self.ws.tree(f"{slot.name}-b"))
        return self._trees[slot.name]

    def _pick(self, block: Block) -> Slot:
        by_name = {s.name: s for s in self.slots if s.name not in self._busy}
        name = pick_slot(list(by_name), block)
        if name is None:
            raise RuntimeError("submit() called with no free slot")
        return by_name[name]

    def submit(self, block: Block) -> str:
        with self._lock:
            if block.block_id in self._seen:
                return next((s for s, b in self._busy.items() if b == block.block_id), "")
            self._seen.add(block.block_id)
            self._pending.add(block.block_id)
            slot = self._pick(block)
            self._busy[slot.name] = block.block_id
            token = CancelToken()
            self._tokens[block.block_id] = token
            trees = self.trees_for(slot)
        thread = threading.Thread(target=self._work, args=(block, slot, trees, token),
                                  name=f"assay-{slot.name}", daemon=True)
        thread.start()
        return slot.name

    def _work(self, block: Block, slot: Slot, trees: SlotTrees, token: CancelToken) -> None:
        try:
            result = run_block(block, self.target, self.ws, slot, trees, token)
        except Exception as exc:  # a bug or a broken machine: report it as an executor error
            result = BlockResult(block.block_id, block.experiment_id, slot.name, (), None,
                                 f"{type(exc).__name__}: {exc}", "executor")
        with self._lock:
            self._busy.pop(slot.name, None)
            cancelled = self._tokens.pop(block.block_id, token).cancelled
        if not cancelled:
            self._done.put(result)
        else:
            with self._lock:
                self._seen.discard(block.block_id)
                self._pending.discard(block.block_id)

    def wait(self, timeout: float | None = None) -> list[BlockResult]:
        out: list[BlockResult] = []
        try:
            out.append(self._done.get(timeout=timeout))
        except queue.Empty:
            return out
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                break
        with self._lock:
            for r in out:
                self._pending.discard(r.block_id)
        return out

    def running(self) -> set[str]:
        with self._lock:
            return set(self._pending)

    def slot_of(self, block_id: str) -> str | None:
        with self._lock:
            for slot, bid in self._busy.items():
                if bid == block_id:
                    return slot
        return None

    def cancel(self, block_id: str) -> None:
        with self._lock:
            token = self._tokens.get(block_id)
        if token is not None:
            token.cancel()

    def close(self) -> None:
        with self._lock:
            busy = set(self._busy)  # slots whose block is still running: left as they are
        for bid in list(self.running()):
            self.cancel(bid)
        for slot in self._slots:  # quarantined ones included: their trees may hold it too
            tree_a = self.ws.trees / f"{slot.name}-a"
            if slot.name not in busy and (slot.name in self._trees or tree_a.is_dir()):
                sweep(self.ws, self.trees_for(slot))
