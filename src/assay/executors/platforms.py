"""One executor per platform, behind one executor: each block runs on its own platform.

With ``[[platforms]]`` declared, every block carries the platform it must be measured on;
:class:`PlatformExecutor` hands it to that platform's executor (local slots, a Ray
cluster's nodes that carry the platform's resource, or a SkyPilot pool; several remote
platforms share one Ray cluster), so paired runs
never mix machine classes. A platform whose executor has no slot left is *away*: its
blocks wait (the loop pauses that platform's decisions) instead of running elsewhere.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..config.spec import Target
from ..errors import ExecutorError
from ..model import Block, BlockResult, Slot
from ..registry import EXECUTORS
from ..repo.workspace import Workspace
from .base import Executor
from .local import LocalExecutor, local_slots
from .ray import RayConfig, RayExecutor
from .skypilot import SkyPilotExecutor, SkyPilotLauncher, platform_pool


class PlatformExecutor(Executor):
    name = "platforms"

    def __init__(self, children: Mapping[str, Executor]) -> None:
        if not children:
            raise ExecutorError("no platform executors were given")
        self.children = dict(children)
        self._owner: dict[str, str] = {}  # block id -> platform

    @property
    def slots(self) -> Sequence[Slot]:
        out: list[Slot] = []
        for platform, child in self.children.items():
            out += [s if s.platform == platform else dataclasses.replace(s, platform=platform)
                    for s in child.slots]
        return out

    def platform_slots(self, platform: str) -> list[Slot]:
        return [s for s in self.slots if s.platform == platform]

    def free_slot_names(self) -> list[str]:
        return [n for child in self.children.values() for n in child.free_slot_names()]

    def quarantine(self, slot: str) -> None:
        for child in self.children.values():
            if any(s.name == slot for s in child.slots):
                child.quarantine(slot)

    def submit(self, block: Block) -> str:
        child = self.children.get(block.platform)
        if child is None:
            raise ExecutorError(f"block {block.block_id} is for platform {block.platform!r}, "
                                f"which is not one of {sorted(self.children)}")
        self._owner[block.block_id] = block.platform
        return child.submit(block)

    def wait(self, timeout: float | None = None) -> list[BlockResult]:
        deadline = time.monotonic() + (timeout or 0.0)
        while True:
            out: list[BlockResult] = []
            for child in self.children.values():
                out += child.wait(timeout=0)
            if out or time.monotonic() >= deadline:
                for r in out:
                    self._owner.pop(r.block_id, None)
                return out
            time.sleep(0.02)

    def running(self) -> set[str]:
        return set().union(*(child.running() for child in self.children.values()))

    def cancel(self, block_id: str) -> None:
        platform = self._owner.pop(block_id, None)
        children = [self.children[platform]] if platform in self.children else \
            list(self.children.values())
        for child in children:
            if block_id in child.running():
                child.cancel(block_id)

    def close(self) -> None:
        # In reverse: a pool that joined another's Ray cluster closes before the one that
        # holds the cluster's head.
        for child in reversed(list(self.children.values())):
            child.close()


def build_executor(target: Target, ws: Workspace) -> Executor:
    """The executor of ``target``: ``[run] executor`` (see assay.registry), or with
    ``[[platforms]]`` one executor per declared platform, behind a :class:`PlatformExecutor`.

    A local platform gets its own local slots. A Ray platform gets the nodes that carry its
    resource; several Ray platforms share the one cluster of ``[executor.ray] address``. A
    SkyPilot platform gets a pool of its own (``[executor.skypilot]`` with the platform's
    ``sky`` keys over it); with several, the first pool holds the Ray head and the others'
    nodes join it, each advertising its own platform's slot resource, so one driver talks
    to one cluster and a block still lands only on its platform's machines. Ray platforms
    and SkyPilot pools are not mixed in one run (the pools make their own cluster).
    """
    if not target.platforms:
        make = EXECUTORS.for_config(target.run.executor, str(target.config_path),
                                    "run.executor")
        exe: Executor = make(target, ws)
        return exe
    check_remote(target)
    slots = local_slots(target)
    children: dict[str, Executor] = {}
    first_pool: Any = None
    try:
        for p in target.platforms:
            if p.kind == "local":
                mine = [s for s in slots if s.platform == p.name]
                children[p.name] = LocalExecutor(target, ws, slots=mine)
            elif p.kind == "ray":
                rcfg = dataclasses.replace(RayConfig.from_target(target),
                                           slot_resource=p.ray_resource, min_slots=p.slots,
                                           slot_prefix=f"{p.name}-")
                children[p.name] = RayExecutor(target, ws, rcfg)
            else:
                cfg = platform_pool(target, p)
                rcfg = dataclasses.replace(RayConfig.from_target(target),
                                           slot_resource=cfg.slot_resource,
                                           slot_prefix=f"{p.name}-")
                pool = SkyPilotExecutor(target, ws, cfg, SkyPilotLauncher(cfg), rcfg,
                                        join=first_pool)
                first_pool = first_pool or pool
                children[p.name] = pool
    except BaseException:
        for child in reversed(list(children.values())):
            child.close()
        raise
    return PlatformExecutor(children)


def check_remote(target: Target) -> None:
    """Refuse, before anything starts, remote platforms one driver cannot reach together."""
    ray_ps = [p for p in target.platforms if p.kind == "ray"]
    sky_ps = [p for p in target.platforms if p.kind == "skypilot"]
    if ray_ps and sky_ps:
        raise ExecutorError(
            f"platforms {', '.join(p.name for p in ray_ps)} (Ray) and "
            f"{', '.join(p.name for p in sky_ps)} (SkyPilot) in one run: the SkyPilot pools "
            "make a Ray cluster of their own and one driver talks to one cluster; declare "
            "every remote platform as a SkyPilot pool (sky = {...}) or every one as a Ray "
            "resource (ray_resource = ...)")
    if len(ray_ps) > 1 and not target.section("executor.ray").get("address", str, ""):
        raise ExecutorError(
            f"Ray platforms {', '.join(p.name for p in ray_ps)} share one Ray cluster and "
            "[executor.ray] address is not set; set it to the cluster whose nodes carry "
            f"the resources {', '.join(repr(p.ray_resource) for p in ray_ps)}")
    if len(sky_ps) > 1:
        pools = [platform_pool(target, p) for p in sky_ps]
        clouds = {c.cloud.lower() for c in pools if c.cloud}
        regions = {c.region for c in pools if c.region}
        if len(clouds) > 1 or len(regions) > 1:
            said = "; ".join(f"{p.name}: cloud {c.cloud or '(open)'}, region "
                             f"{c.region or '(open)'}" for p, c in zip(sky_ps, pools,
                                                                        strict=True))
            raise ExecutorError(
                f"the SkyPilot pools of platforms {', '.join(p.name for p in sky_ps)} join "
                "one Ray cluster, so their nodes must reach each other's private addresses: "
                "name one cloud and region in [executor.skypilot], or leave them open "
                f"(the nodes then follow the first pool's head) ({said})")
