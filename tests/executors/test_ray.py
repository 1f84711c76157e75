"""The Ray executor on a real local cluster: node loss, the real loop, config keys."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from assay.errors import ConfigError
from assay.journal.store import Journal
from assay.loop.driver import Loop
from assay.model import BlockState, Candidate, ExperimentState
from assay.proposers.base import ProposalContext, Proposer

from .helpers import RayCluster, make_repo

pytest.importorskip("ray")

from assay.executors.ray import RayConfig, RayExecutor


class Levels(Proposer):
    name = "levels"

    def __init__(self, levels: list[int]) -> None:
        self.levels = list(levels)

    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        out = [Candidate(context.incumbent.commit, "", {"LEVEL": lv}, f"level {lv}", self.name)
               for lv in self.levels[:n]]
        del self.levels[:n]
        return out


def test_config_keys_are_validated(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, executor="ray",
                     extra='[executor.ray]\naddress = "auto"\nnum_cpu = 2\n')
    with pytest.raises(ConfigError, match=r"executor\.ray\.num_cpu.*not a known key"):
        RayConfig.from_target(repo.target)
    repo2 = make_repo(tmp_path / "b", executor="ray", extra=(
        '[executor.ray]\naddress = "ray://h:10001"\nnum_cpus = 2\nnum_gpus = 1\n'
        'slot_resource = "gpu_slot"\ncache_dir = "/scratch/assay"\nmin_slots = 4\n'
        'connect_timeout_s = 30\nmax_attempts = 2\n'))
    cfg = RayConfig.from_target(repo2.target)
    assert cfg == RayConfig("ray://h:10001", 2.0, 1.0, "gpu_slot", "/scratch/assay", 4, 30.0, 2)


def test_killing_a_node_mid_block_reruns_it_elsewhere(ray_connected: RayCluster,
                                                      tmp_path: Path) -> None:
    import ray

    cluster = ray_connected
    before = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    cluster.add_node("victim")
    cluster.wait_nodes(3)
    t0 = time.monotonic()
    repo = make_repo(tmp_path, executor="ray", slots=3, work_s=0.6)
    ex = RayExecutor(repo.target, repo.ws,
                     RayConfig(address=cluster.address, cache_dir=str(tmp_path / "cache"),
                               min_slots=3, connect_timeout_s=60))
    victim_node = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and
                       n["NodeID"] not in before)
    victim_slots = set(ex.node_slots(victim_node))
    assert len(victim_slots) == 1
    killed: list[str] = []

    def watch() -> None:  # kill the victim node while a benchmark runs there
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not killed:
            for slot in victim_slots:
                if list(repo.marks.glob(f"start-{slot}-*")):
                    cluster.kill("victim")
                    killed.append(slot)
                    return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    journal = Journal.open(repo.target.state_dir / "journal.db")
    try:
        loop = Loop(repo.target, journal, repo.ws, ex, Levels([1, 2, 3, 4]))
        summary = loop.run(budget=4)
        watcher.join(5)
        assert killed, "the victim node never ran a benchmark"
        exps = journal.experiments()
        assert len(exps) == 4
        assert all(e.state is ExperimentState.DISCARDED for e in exps)  # all worse
        blocks = journal.blocks()
        assert all(b.state is BlockState.DONE for b in blocks)
        runs = journal.runs()
        # Every block counted once: 4 experiments x 2 blocks x (A, B); none from the dead node.
        assert len(blocks) == 8 and len(runs) == 16
        assert Counter(r.block_id for r in runs) == {b.id: 2 for b in blocks}
        assert len({r.run_id for r in runs}) == 16
        assert not {r.slot for r in runs} & victim_slots
        assert not {b.slot for b in blocks} & victim_slots  # the slot that measured it
        assert not [e for e in journal.events() if e.kind == "retry"]  # re-run inside Ray
        # the killed block really started on the victim, and finished elsewhere
        starts = list(repo.marks.glob("start-*"))
        assert len(starts) > 16
        assert summary.finished == 4
        assert all(Path(r.stdout_path).is_file() for r in runs)
        print(f"node {killed[0]} killed mid-block; loop finished in {time.monotonic() - t0:.1f}s, "
              f"{len(blocks)} blocks, {len(runs)} runs, each counted once")
    finally:
        journal.close()
        ex.close()


def test_cancel_stops_the_benchmark_on_nodes_that_ignore_sigint(tmp_path: Path) -> None:
    """A job put in the background with `&` starts with SIGINT ignored, and so do the Ray
    nodes it starts and their workers. ray.cancel() interrupts a task through SIGINT's
    Python handler, so the worker must restore it: cancelling still kills the benchmark."""
    import ray

    from assay.testing.executors import make_kit_repo

    from .helpers import ray_cluster
    from .test_conformance import TestRayExecutor

    if ray.is_initialized():  # connected to the package's cluster: this test has its own
        ray.shutdown()
    with ray_cluster(workers=1, ignore_sigint=True) as cluster:
        repo = make_kit_repo(tmp_path, executor="ray")
        ex = RayExecutor(repo.target, repo.ws,
                         RayConfig(address=cluster.address, cache_dir=str(tmp_path / "cache"),
                                   min_slots=2, connect_timeout_s=60))
        try:
            TestRayExecutor().test_cancel_kills_the_processes((repo, ex))
        finally:
            ex.close()
