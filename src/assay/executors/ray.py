"""The Ray executor: one Ray task per block, one block per benchmark slot.

Every node that may measure declares a custom resource, one unit per benchmark slot::

    ray start --address HEAD:6379 --resources '{"assay_slot": 1}'

Each unit becomes one slot (``n<node id>-<k>``); a block is pinned to its slot's node with
a hard node-affinity strategy *and* takes one unit of the slot resource, so two
measurements never share a device even if the driver's bookkeeping were wrong.

Nodes need no shared filesystem: the driver packs the incumbent commit into git bundles
(:mod:`assay.executors.bundle`) held in the object store; the task fetches what its
node-local clone lacks, rebuilds the target from the shipped config text, and runs the
same :func:`assay.bench.worker.run_block` as the local executor in warm per-slot worktrees that
persist on the node. Logs travel back inside the result and are written under the
driver's ``.assay/logs`` so every path in the journal is valid on the driver.

A benchmark that fails is a result. A lost node or worker (``NodeDiedError``,
``WorkerCrashedError`` ...) re-runs the block on another slot, up to ``max_attempts``
times; after that the block comes back as an ``executor`` error and the loop queues it
again. Ray's own task retries are off (``max_retries=0``, ``retry_exceptions=False``):
a hard node affinity cannot be retried elsewhere by Ray.

``[executor.ray]`` keys::

    address = ""            # "" starts a local Ray; "auto", "host:port" or "ray://host:10001"
    num_cpus = 1            # per block
    num_gpus = 0            # per block (Ray sets CUDA_VISIBLE_DEVICES for the task)
    slot_resource = "assay_slot"
    cache_dir = "~/.cache/assay/ray"   # node-local clone and warm worktrees
    min_slots = 1           # wait for this many slots before starting
    connect_timeout_s = 120
    max_attempts = 3        # runs of one block when nodes are lost
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from .. import sandbox
from ..bench import contain
from ..bench.process import CancelToken
from ..bench.worker import SlotTrees, run_block
from ..config.spec import Target, parse
from ..errors import ExecutorError, require
from ..model import Block, BlockResult, Slot
from ..repo.workspace import Workspace
from . import bundle
from .base import Executor
from .slots import pick_slot

SLOT_RESOURCE = "assay_slot"
LOG_LIMIT = 1 << 20  # bytes of each log file shipped back (the tail)
REFRESH_S = 2.0  # how often the node list is read again
SUSPECT_S = 20.0  # a node that lost a block gets no new block for this long
CANCEL_GRACE_S = 10.0
_SYSTEM_ERRORS = ("NodeDiedError", "WorkerCrashedError", "LocalRayletDiedError",
                  "TaskUnschedulableError", "ObjectLostError", "OwnerDiedError",
                  "RaySystemError", "ObjectFetchTimedOutError", "ReferenceCountingAssertionError",
                  "ActorDiedError")


def _ray() -> Any:
    return require("ray", "ray", "The Ray executor")


@dataclass(frozen=True)
class RayConfig:
    address: str = ""
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    slot_resource: str = SLOT_RESOURCE
    cache_dir: str = "~/.cache/assay/ray"
    min_slots: int = 1
    connect_timeout_s: float = 120.0
    max_attempts: int = 3
    slot_prefix: str = ""  # set per platform ("arm-"), so its slot names say where they are

    @classmethod
    def from_target(cls, target: Target, dotted: str = "executor.ray") -> RayConfig:
        sec = target.section(dotted)
        cfg = cls(
            address=sec.get("address", str, ""),
            num_cpus=float(sec.number("num_cpus", 1.0, low=0.0)),
            num_gpus=float(sec.number("num_gpus", 0.0, low=0.0)),
            slot_resource=sec.get("slot_resource", str, SLOT_RESOURCE),
            cache_dir=sec.get("cache_dir", str, "~/.cache/assay/ray"),
            min_slots=sec.number("min_slots", 1, low=1, integer=True),
            connect_timeout_s=float(sec.number("connect_timeout_s", 120.0, low=0.0)),
            max_attempts=sec.number("max_attempts", 3, low=1, high=100, integer=True),
        )
        if not cfg.slot_resource.strip():
            raise sec.error("slot_resource", "must not be empty", 'e.g. "assay_slot"')
        sec.reject_unknown()
        return cfg


# -- the node side ---------------------------------------------------------------------


def _read_tail(path: Path) -> str:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size > LOG_LIMIT:
            fh.seek(size - LOG_LIMIT)
        return fh.read().decode(errors="replace")


def node_run_block(payload: dict[str, Any], chain: list[tuple[str, Any]]) -> dict[str, Any]:
    """The body of the Ray task: runs one block on this node and returns result + logs."""
    ray = _ray()
    block: Block = payload["block"]
    slot_name: str = payload["slot"]
    cache = Path(os.path.expanduser(payload["cache_dir"]))
    cache.mkdir(parents=True, exist_ok=True)
    root = bundle.node_clone(cache, payload["repo_key"])

    def loader(ref: Any) -> Any:
        return lambda: ray.get(ref)

    links = [(tip, loader(ref)) for tip, ref in chain]
    bundle.ensure_commit(root, block.incumbent.commit, links)
    if block.candidate is not None and block.candidate.base_commit != block.incumbent.commit:
        bundle.ensure_commit(root, block.candidate.base_commit, links)
    target = parse(payload["config_text"], root, payload["config_file"])
    ws = Workspace(target, "node")
    with bundle.repo_lock(root):
        trees = SlotTrees(ws.tree(f"{slot_name}-a"), ws.tree(f"{slot_name}-b"))
    state_file = target.state_dir / "slots" / f"{slot_name}.a_state"
    if state_file.exists():
        trees.a_state = state_file.read_text()
    gpus = tuple(int(g) for g in ray.get_gpu_ids()) if payload.get("num_gpus") else ()
    slot = Slot(name=slot_name, gpus=gpus, host=socket.gethostname())

    # ray.cancel() interrupts a running task through SIGINT's Python handler. A worker
    # started from a shell that ignores SIGINT (a job put in the background with `&`)
    # inherits SIG_IGN, the interrupt is dropped and the benchmark runs on: restore it.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    token = CancelToken()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            contain.node_gate(bool(payload.get("confined")))
            box["result"] = run_block(block, target, ws, slot, trees, token)
        except BaseException as exc:  # reported to the driver as an executor error
            box["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=work, name=f"assay-{slot_name}", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.1)
    except BaseException:  # ray.cancel(): KeyboardInterrupt in this thread
        token.cancel()
        thread.join(30)
        raise
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_text(trees.a_state)
    logs_dir = target.state_dir / "logs" / block.experiment_id / block.block_id
    logs: dict[str, str] = {}
    if logs_dir.is_dir():
        for p in sorted(logs_dir.rglob("*")):
            if p.is_file():
                logs[p.relative_to(logs_dir).as_posix()] = _read_tail(p)
        shutil.rmtree(logs_dir, ignore_errors=True)
    return {"result": box.get("result"), "error": box.get("error", ""), "logs": logs,
            "log_dir": str(logs_dir), "host": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id()}


# -- the driver side -------------------------------------------------------------------


@dataclass
class _Task:
    block: Block
    slot: Slot
    ref: Any
    attempt: int
    tried: set[str] = field(default_factory=set)
    cancelled: bool = False


class RayExecutor(Executor):
    name = "ray"

    def __init__(self, target: Target, workspace: Workspace, config: RayConfig | None = None,
                 *, init: bool = True) -> None:
        self.target = target
        self.ws = workspace
        self.cfg = config or RayConfig()
        self._ray = _ray()
        self._lock = threading.RLock()
        self._slots: dict[str, Slot] = {}
        self._slot_node: dict[str, str] = {}
        self._alive: set[str] = set()  # node ids
        self._labels: dict[str, dict[str, str]] = {}  # node id -> its Ray labels
        self._suspect: dict[str, float] = {}  # node id -> when it lost a block
        self._quarantined: set[str] = set()
        self._busy: dict[str, str] = {}  # slot -> block id
        self._tasks: dict[str, _Task] = {}
        self._by_ref: dict[Any, str] = {}
        self._seen: set[str] = set()
        self._ready: list[BlockResult] = []
        self._retry: list[_Task] = []  # lost blocks waiting for a slot
        self._bundles: dict[str, Any] = {}  # commit -> ObjectRef of its bundle
        self._base: str | None = None
        self._refreshed = 0.0
        self._owns_ray = False
        self._remote: Any = None
        self._key = bundle.repo_key(workspace.root)
        if init:
            self.connect()

    @classmethod
    def from_target(cls, target: Target, ws: Workspace) -> RayExecutor:
        return cls(target, ws, RayConfig.from_target(target))

    # -- cluster -----------------------------------------------------------------------
    def connect(self) -> None:
        ray = self._ray
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False,
                                      "namespace": "assay"}
            host = self.cfg.address.rsplit(":", 1)[0].removeprefix("ray://")
            if not self.cfg.address or host in ("127.0.0.1", "localhost"):
                # A cluster on this machine: the driver stays on loopback too, instead of
                # the address of the default route (which a firewall may close).
                kwargs["_node_ip_address"] = "127.0.0.1"
            if self.cfg.address:
                ray.init(address=self.cfg.address, **kwargs)
            else:
                n = self.target.run.slots
                ray.init(num_cpus=max(1, int(n * max(self.cfg.num_cpus, 1.0))),
                         num_gpus=int(n * self.cfg.num_gpus + 0.999),
                         resources={self.cfg.slot_resource: n}, include_dashboard=False,
                         **kwargs)
                self._owns_ray = True
        self._remote = ray.remote(node_run_block)
        deadline = time.monotonic() + self.cfg.connect_timeout_s
        while True:
            self.refresh(force=True)
            if len(self.slots) >= self.cfg.min_slots:
                return
            if time.monotonic() > deadline:
                raise ExecutorError(
                    f"the Ray cluster offers {len(self.slots)} slot(s) with resource "
                    f"{self.cfg.slot_resource!r}, fewer than min_slots = {self.cfg.min_slots} "
                    f"after {self.cfg.connect_timeout_s:g}s; start nodes with "
                    f"`ray start --address ... --resources '{{\"{self.cfg.slot_resource}\": 1}}'`")
            time.sleep(0.5)

    def refresh(self, force: bool = False) -> None:
        """Read the node list again: new nodes add slots, dead nodes lose theirs."""
        now = time.monotonic()
        if not force and now - self._refreshed < REFRESH_S:
            return
        nodes = self._ray.nodes()
        with self._lock:
            self._refreshed = now
            alive: set[str] = set()
            for node in nodes:
                nid = str(node.get("NodeID", ""))
                count = int(float(node.get("Resources", {}).get(self.cfg.slot_resource, 0)))
                if not node.get("Alive") or count <= 0:
                    self._suspect.pop(nid, None)
                    continue
                alive.add(nid)
                self._labels[nid] = {str(k): str(v) for k, v in (node.get("Labels") or {}).items()}
                host = str(node.get("NodeManagerAddress", "")) or "ray"
                for k in range(count):
                    name = self.cfg.slot_prefix + slot_name(nid, k)
                    if name not in self._slots:
                        self._slots[name] = Slot(name=name, host=host)
                        self._slot_node[name] = nid
            self._alive = alive

    def node_of(self, slot: str) -> str | None:
        return self._slot_node.get(slot)

    def node_label(self, slot: str, key: str) -> str | None:
        """A Ray label of the node that holds ``slot`` (e.g. the pool cluster's name)."""
        return self._labels.get(self._slot_node.get(slot, ""), {}).get(key)

    def node_slots(self, node_id: str) -> list[str]:
        return [s for s, n in self._slot_node.items() if n == node_id]

    def _usable(self, name: str) -> bool:
        nid = self._slot_node.get(name, "")
        since = self._suspect.get(nid)
        if since is not None and time.monotonic() - since > SUSPECT_S:
            self._suspect.pop(nid, None)
            since = None
        return nid in self._alive and name not in self._quarantined and since is None

    @property
    def slots(self) -> Sequence[Slot]:
        with self._lock:
            return [s for n, s in self._slots.items()
                    if self._slot_node[n] in self._alive and n not in self._quarantined]

    def quarantine(self, slot: str) -> None:
        with self._lock:
            self._quarantined.add(slot)

    def free_slot_names(self) -> list[str]:
        self.refresh()
        with self._lock:
            self._drain_retries()
            return [n for n in self._slots if self._usable(n) and n not in self._busy]

    # -- bundles -----------------------------------------------------------------------
    def _bundle(self, commit: str, exclude: Sequence[str] = ()) -> Any:
        if commit not in self._bundles:
            data = bundle.make_bundle(self.ws.root, commit, exclude)
            self._bundles[commit] = self._ray.put(data)
        return self._bundles[commit]

    def _chain(self, block: Block) -> list[tuple[str, Any]]:
        commits = [block.incumbent.commit]
        if block.candidate is not None and block.candidate.base_commit not in commits:
            commits.append(block.candidate.base_commit)
        if self._base is None:
            self._base = commits[0]
        chain = [(self._base, self._bundle(self._base))]
        for c in commits:
            if c != self._base:
                chain.append((c, self._bundle(c, [self._base])))
        return chain

    # -- blocks ------------------------------------------------------------------------
    def _pick(self, block: Block, exclude: set[str] | None = None) -> Slot | None:
        exclude = exclude or set()
        bad_nodes = {self._slot_node.get(s) for s in exclude}
        free = [n for n in self._slots if self._usable(n) and n not in self._busy
                and n not in exclude and self._slot_node[n] not in bad_nodes]
        name = pick_slot(free, block)
        return None if name is None else self._slots[name]

    def submit(self, block: Block) -> str:
        self.refresh()
        with self._lock:
            if block.block_id in self._seen:
                task = self._tasks.get(block.block_id)
                return task.slot.name if task else ""
            self._drain_retries()
            self._seen.add(block.block_id)
            slot = self._pick(block)
            if slot is None:  # a re-run took the slot meanwhile: start when one frees
                task = _Task(block, Slot(""), None, 0)
                self._tasks[block.block_id] = task
                self._retry.append(task)
                return ""
            self._launch(block, slot, 1, set())
            return slot.name

    def _launch(self, block: Block, slot: Slot, attempt: int, tried: set[str]) -> None:
        strategy = require("ray.util.scheduling_strategies", "ray", "The Ray executor")
        payload = {"block": block, "slot": slot.name, "config_text": self.target.text,
                   "config_file": self.target.config_path.name, "cache_dir": self.cfg.cache_dir,
                   "repo_key": self._key, "num_gpus": self.cfg.num_gpus,
                   "confined": sandbox.probe().ok}  # then the node must sandbox too
        opts = {"num_cpus": self.cfg.num_cpus, "num_gpus": self.cfg.num_gpus,
                "resources": {self.cfg.slot_resource: 1}, "max_retries": 0,
                "retry_exceptions": False, "name": f"assay:{block.block_id}",
                "scheduling_strategy": cast(Any, strategy).NodeAffinitySchedulingStrategy(
                    self._slot_node[slot.name], soft=False)}
        ref = self._remote.options(**opts).remote(payload, self._chain(block))
        self._tasks[block.block_id] = _Task(block, slot, ref, attempt, tried | {slot.name})
        self._by_ref[ref] = block.block_id
        self._busy[slot.name] = block.block_id

    def wait(self, timeout: float | None = None) -> list[BlockResult]:
        if self._retry:
            self.refresh()
        with self._lock:
            self._drain_retries()
            out, self._ready = self._ready, []
            refs = list(self._by_ref)
        if not refs:
            if not out and timeout:
                time.sleep(timeout)
            return out
        wait_s = 0 if out else timeout
        ready, _ = self._ray.wait(refs, num_returns=1, timeout=wait_s)
        if ready:
            ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            res = self._collect(ref)
            if res is not None:
                out.append(res)
        return out

    def _collect(self, ref: Any) -> BlockResult | None:
        ray = self._ray
        with self._lock:
            bid = self._by_ref.pop(ref)
            task = self._tasks[bid]
            self._busy.pop(task.slot.name, None)
        result: BlockResult | None
        try:
            payload = ray.get(ref)
        except Exception as exc:
            kind = type(exc).__name__
            if task.cancelled or kind == "TaskCancelledError":
                self._forget(bid)
                return None
            if kind in _SYSTEM_ERRORS or isinstance(exc, ray.exceptions.RaySystemError):
                return self._lost(task, exc)
            cause = getattr(exc, "cause", None) or exc
            result = self._error(task, f"{type(cause).__name__}: {cause}")
        else:
            if payload["error"] or payload["result"] is None:
                result = self._error(task, payload["error"] or "the task returned no result")
            else:
                result = self._land(payload)
        with self._lock:
            self._tasks.pop(bid, None)
            if task.cancelled:
                self._seen.discard(bid)
                return None
        return result

    def _forget(self, bid: str) -> None:
        with self._lock:
            self._tasks.pop(bid, None)
            self._seen.discard(bid)

    def _error(self, task: _Task, msg: str) -> BlockResult:
        b = task.block
        return BlockResult(b.block_id, b.experiment_id, task.slot.name, (), None, msg, "executor")

    def _lost(self, task: _Task, exc: Exception) -> BlockResult | None:
        """A node or worker died under the block: run it again on another slot."""
        nid = self._slot_node.get(task.slot.name, "")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        with self._lock:
            self._suspect[nid] = time.monotonic()
        self.refresh(force=True)
        with self._lock:
            if task.attempt < self.cfg.max_attempts and self.slots:
                task.ref = None
                self._retry.append(task)
                self._drain_retries()
                return None
            self._tasks.pop(task.block.block_id, None)
        return self._error(task, f"the block's node or worker was lost "
                                 f"({type(exc).__name__} on {task.slot.name}: {first})")

    def _drain_retries(self) -> None:
        """Start lost blocks again, before any new block, on slots they have not tried."""
        for task in list(self._retry):
            slot = self._pick(task.block, exclude=task.tried) or self._pick(task.block)
            if slot is None:
                if not self.slots:  # no node left at all: let the loop decide
                    self._retry.remove(task)
                    self._tasks.pop(task.block.block_id, None)
                    self._ready.append(self._error(task, "every Ray node with a benchmark "
                                                         "slot is gone"))
                continue
            self._retry.remove(task)
            self._launch(task.block, slot, task.attempt + 1, task.tried)

    def _land(self, payload: dict[str, Any]) -> BlockResult:
        """Write the shipped logs under the driver's state dir; point the runs at them."""
        res: BlockResult = payload["result"]
        local = self.target.state_dir / "logs" / res.experiment_id / res.block_id
        local.mkdir(parents=True, exist_ok=True)
        for rel, text in payload["logs"].items():
            dest = local / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
        node_dir = payload["log_dir"]

        def moved(p: str) -> str:
            return str(local / os.path.relpath(p, node_dir)) if p.startswith(node_dir) else p

        runs = tuple(dataclasses.replace(r, stdout_path=moved(r.stdout_path),
                                         stderr_path=moved(r.stderr_path)) for r in res.runs)
        return dataclasses.replace(res, runs=runs, error=res.error.replace(node_dir, str(local)))

    def running(self) -> set[str]:
        with self._lock:
            return set(self._tasks)

    def cancel(self, block_id: str) -> None:
        with self._lock:
            task = self._tasks.get(block_id)
            if task is None or task.cancelled:
                return
            task.cancelled = True
            if task.ref is None:  # waiting to run again: nothing is running
                self._retry.remove(task)
                self._tasks.pop(block_id, None)
                self._seen.discard(block_id)
                return
        with contextlib.suppress(Exception):  # already finished, or its node is gone
            self._ray.cancel(task.ref, force=False)

    def close(self) -> None:
        for bid in list(self.running()):
            self.cancel(bid)
        refs = list(self._by_ref)
        if refs and self._ray.is_initialized():
            _, pending = self._ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_S)
            for ref in pending:
                with contextlib.suppress(Exception):
                    self._ray.cancel(ref, force=True)
        with self._lock:
            self._by_ref.clear()
            self._retry.clear()
            self._tasks.clear()
            self._busy.clear()
        self._bundles.clear()
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
            self._owns_ray = False


def slot_name(node_id: str, k: int) -> str:
    return f"n{node_id[:8]}-{k}"
