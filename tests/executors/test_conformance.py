"""One contract, every executor: each backend runs the kit shipped in assay.testing."""

from __future__ import annotations

import pytest

from assay.executors.base import Executor
from assay.executors.function import FunctionExecutor
from assay.executors.local import LocalExecutor
from assay.executors.platforms import PlatformExecutor
from assay.model import Block, BlockResult, Role, RunResult, RunStatus, Slot
from assay.testing.executors import BenchmarkExecutorContract, ExecutorContract, KitRepo

from .helpers import RAY_ENV


class TestLocalExecutor(BenchmarkExecutorContract):
    def make_executor(self, repo: KitRepo, request: pytest.FixtureRequest) -> Executor:
        return LocalExecutor(repo.target, repo.ws)


class TestRayExecutor(BenchmarkExecutorContract):
    executor_kind = "ray"

    def make_executor(self, repo: KitRepo, request: pytest.FixtureRequest) -> Executor:
        cluster = request.getfixturevalue("ray_connected")
        from assay.executors.ray import RayConfig, RayExecutor

        return RayExecutor(repo.target, repo.ws,
                           RayConfig(address=cluster.address,
                                     cache_dir=str(repo.root.parent / "cache"),
                                     min_slots=2, connect_timeout_s=60))


@pytest.mark.slow  # a pool of two Ray nodes started and torn down per test
class TestSkyPilotExecutor(BenchmarkExecutorContract):
    """A pool of two nodes, launched as local processes (the launcher is the only fake)."""

    executor_kind = "skypilot"
    executor_config = '[executor.skypilot]\nname = "kit"\nnodes = 2\n'

    def make_executor(self, repo: KitRepo, request: pytest.FixtureRequest) -> Executor:
        import ray

        from assay.executors.ray import RayConfig
        from assay.executors.skypilot import LocalLauncher, SkyConfig, SkyPilotExecutor

        if ray.is_initialized():  # the pool brings its own cluster
            ray.shutdown()
        cfg = SkyConfig.from_target(repo.target)
        return SkyPilotExecutor(repo.target, repo.ws, cfg, LocalLauncher(cfg, env=RAY_ENV),
                                RayConfig(cache_dir=str(repo.root.parent / "cache"),
                                          connect_timeout_s=90))


class TestPlatformExecutor(BenchmarkExecutorContract):
    """The executor of [[platforms]] in front of one platform's local slots."""

    def make_executor(self, repo: KitRepo, request: pytest.FixtureRequest) -> Executor:
        return PlatformExecutor({"": LocalExecutor(repo.target, repo.ws)})


def kit_bench(block: Block, slot: Slot) -> BlockResult:
    """The kit benchmark as a function: score 100 for the incumbent, 100 - 10 * LEVEL."""
    level = int((block.candidate.params if block.candidate else {}).get("LEVEL", 0))
    runs = tuple(
        RunResult(f"{block.block_id}-r{i}", block.block_id, block.experiment_id, Role(ch), i,
                  RunStatus.OK, {"score": 100.0 if ch == "A" else 100.0 - 10 * level},
                  slot=slot.name)
        for i, ch in enumerate(block.order, start=1))
    return BlockResult(block.block_id, block.experiment_id, slot.name, runs)


class TestFunctionExecutor(ExecutorContract):
    def make_executor(self, repo: KitRepo, request: pytest.FixtureRequest) -> Executor:
        return FunctionExecutor(kit_bench, slots=[Slot("s0"), Slot("s1")])
