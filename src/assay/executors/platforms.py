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

from ..errors import ExecutorError
from ..model import Block, BlockResult, Slot
from .base import Executor


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

    def free_on(self, platform: str) -> list[str]:
        child = self.children.get(platform)
        return child.free_slot_names() if child is not None else []

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
