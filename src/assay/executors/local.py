"""The local executor: N slots on this machine, one thread per running block.

Each slot owns two persistent worktrees (``<slot>-a``, ``<slot>-b``) and, when GPU ids are
configured, its own ``CUDA_VISIBLE_DEVICES``. A block runs entirely on one slot.

One slot per GPU: ``[run] slots = "auto"`` (or ``gpus = "all"``) makes one slot for each
GPU this host can see (``CUDA_VISIBLE_DEVICES`` when it is set, else ``nvidia-smi``), each
pinned to its GPU and given an equal share of the host's CPU cores.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence

from ..bench.process import CancelToken
from ..bench.worker import SlotTrees, run_block, sweep
from ..config.spec import Target
from ..errors import ExecutorError
from ..model import Block, BlockResult, Slot
from ..repo.workspace import Workspace
from .base import Executor
from .slots import OwnSlots, pick_slot

# -- GPUs ---------------------------------------------------------------------------------


def visible_gpus(env: Mapping[str, str] | None = None) -> list[int]:
    """The GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else nvidia-smi.

    ``CUDA_VISIBLE_DEVICES=""`` means no GPU. Non-numeric entries (GPU UUIDs, MIG names) are
    refused with a clear error, since a slot pins its GPU by index.
    """
    env = os.environ if env is None else env
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is not None:
        items = [x.strip() for x in raw.split(",") if x.strip()]
        ids: list[int] = []
        for item in items:
            if not item.isdigit():
                raise ExecutorError(f"CUDA_VISIBLE_DEVICES={raw!r}: entry {item!r} is not a "
                                    "GPU index; slots = \"auto\" pins GPUs by index (e.g. 0,1)")
            ids.append(int(item))
        return ids
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ExecutorError(f"nvidia-smi could not list the GPUs: {exc}") from None
    if out.returncode != 0:
        raise ExecutorError(f"nvidia-smi could not list the GPUs (exit {out.returncode}): "
                            f"{out.stderr.strip()[:200]}")
    return [int(x) for x in out.stdout.split() if x.strip().isdigit()]


def cpu_share(n_slots: int, cores: int | None = None) -> list[tuple[int, ...]]:
    """An equal, disjoint share of the host's cores for each of ``n_slots`` slots."""
    avail = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if cores is not None:
        avail = list(range(cores))
    if not avail:
        avail = list(range(os.cpu_count() or 1))
    per = max(1, len(avail) // max(1, n_slots))
    shares = []
    for i in range(n_slots):
        chunk = avail[i * per:(i + 1) * per] or [avail[i % len(avail)]]
        shares.append(tuple(chunk))
    return shares


def thread_env(cpus: Sequence[int]) -> dict[str, str]:
    """Thread-count variables that keep a benchmark inside its slot's CPU share."""
    n = str(max(1, len(cpus)))
    return {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "ASSAY_SLOT_CPUS":
            ",".join(str(c) for c in cpus)}


# -- slots --------------------------------------------------------------------------------


def local_slots(target: Target, env: Mapping[str, str] | None = None) -> list[Slot]:
    """The local executor's slots: per platform, per GPU (``slots = "auto"``), or ``s0..``."""
    if target.platforms:
        local = [p for p in target.platforms if p.kind == "local"]
        slots: list[Slot] = []
        for p in local:
            for i in range(p.slots):
                slots.append(Slot(name=f"{p.name}-{i}", platform=p.name,
                                  env=tuple(sorted(p.env.items()))))
        shares = cpu_share(len(slots))
        return [Slot(s.name, s.gpus, s.host, s.platform,
                     tuple(sorted({**dict(s.env), **thread_env(c)}.items())))
                for s, c in zip(slots, shares, strict=True)]
    if target.run.auto_gpus:
        ids = visible_gpus(env)
        if not ids:
            raise ExecutorError(
                "[run] slots = \"auto\" found no GPU: CUDA_VISIBLE_DEVICES is unset or empty "
                "and nvidia-smi lists none; set [run] slots to a number for CPU slots")
        shares = cpu_share(len(ids))
        return [Slot(name=f"gpu{g}", gpus=(g,), env=tuple(sorted(thread_env(c).items())))
                for g, c in zip(ids, shares, strict=True)]
    gpus = target.run.gpus
    return [Slot(name=f"s{i}", gpus=gpus[i] if gpus else ()) for i in range(target.run.slots)]


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
