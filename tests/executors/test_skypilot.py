"""SkyPilot: task specs validated by SkyPilot itself (offline); the pool on a local launcher."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from assay.config import spec as config
from assay.errors import ConfigError, ExecutorError
from assay.executors.base import Executor

from .helpers import RAY_ENV, make_repo

sky = pytest.importorskip("sky")
pytest.importorskip("ray")

from assay.executors.ray import RayConfig  # noqa: E402
from assay.executors.skypilot import (  # noqa: E402
    LocalLauncher,
    NodeSpec,
    SkyConfig,
    SkyPilotExecutor,
    build_task,
    task_config,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "scale.md"


def _cfg(tmp_path: Path, block: str) -> SkyConfig:
    repo = make_repo(tmp_path, executor="skypilot", extra=block)
    return SkyConfig.from_target(repo.target)


def test_task_specs_validate_with_skypilot(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, '[executor.skypilot]\nname = "bench"\nnodes = 3\n'
                         'accelerators = "A100:2"\ncloud = "aws"\nregion = "us-east-1"\n'
                         'disk_size = 200\nuse_spot = true\n')
    assert cfg.node_slots == 2 and cfg.nodes == 3
    head = build_task(cfg, "bench-head", NodeSpec("head", 2))
    worker = build_task(cfg, "bench-w1", NodeSpec("worker", 2, "10.0.0.5:6379"))
    for task in (head, worker):
        [res] = list(task.resources)
        assert res.accelerators == {"A100": 2}
        assert str(res.cloud).lower() == "aws" and res.region == "us-east-1"
        assert res.use_spot and res.disk_size == 200
        assert "ray start" in task.run and "--labels" in task.run
    assert next(iter(head.resources)).ports == ["10001"]
    assert head.envs["ASSAY_ROLE"] == "head" and head.envs["ASSAY_SLOTS"] == "2"
    assert worker.envs["ASSAY_HEAD"] == "10.0.0.5:6379"
    # the same spec through SkyPilot's YAML loader
    import yaml

    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump(task_config(cfg, "bench-w1", NodeSpec("worker", 2, "h:1"))))
    assert sky.Task.from_yaml(str(path)).envs["ASSAY_CLUSTER"] == "bench-w1"


def test_bad_specs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"executor\.skypilot\.acelerators"):
        _cfg(tmp_path / "a", '[executor.skypilot]\nacelerators = "A100:1"\n')
    with pytest.raises(ConfigError, match="SkyPilot's own Ray port"):
        _cfg(tmp_path / "b", "[executor.skypilot]\nray_port = 6380\n")
    cfg = _cfg(tmp_path / "c", '[executor.skypilot]\ncloud = "nocloud"\n')
    with pytest.raises(ExecutorError, match="nocloud"):
        build_task(cfg, "x-head", NodeSpec("head", 1))


def test_the_documented_configs_are_valid(tmp_path: Path) -> None:
    text = DOCS.read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    sky_blocks = [b for b in blocks if "[executor.skypilot]" in b]
    assert len(sky_blocks) >= 3  # AWS, GCP, Kubernetes
    clouds = set()
    for i, block in enumerate(blocks):
        repo = make_repo(tmp_path / f"d{i}")
        text = (repo.root / "assay.toml").read_text()
        text = re.sub(r"\[run\].*?\n\n", "", text, flags=re.S) + "\n" + block
        target = config.parse(text, repo.root)
        RayConfig.from_target(target)
        if "[executor.skypilot]" in block:
            cfg = SkyConfig.from_target(target)
            clouds.add(cfg.cloud)
            build_task(cfg, f"{cfg.name}-head", NodeSpec("head", cfg.node_slots))
    assert {"aws", "gcp", "kubernetes"} <= clouds


def test_pool_runs_blocks_replaces_quarantined_nodes_and_tears_down(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, executor="skypilot",
                     extra='[executor.skypilot]\nname = "t"\nnodes = 2\n')
    cfg = SkyConfig.from_target(repo.target)
    launcher = LocalLauncher(cfg, env=RAY_ENV)
    ex = SkyPilotExecutor(repo.target, repo.ws, cfg, launcher,
                          RayConfig(cache_dir=str(tmp_path / "cache"), connect_timeout_s=90))
    try:
        assert launcher.launched == ["t-head", "t-w1"]
        slots = {s.name: ex._cluster_of(s.name) for s in ex.slots}
        assert sorted(slots.values()) == ["t-head", "t-w1"]
        free = ex.free_slot_names()
        for i, slot in enumerate(free):
            ex.submit(repo.block(f"b{i}", prefer=slot))
        got = _drain(ex, 2)
        assert {r.slot for r in got} == set(free) and all(not r.error for r in got)

        worker_slot = next(s for s, c in slots.items() if c == "t-w1")
        head_slot = next(s for s, c in slots.items() if c == "t-head")
        ex.quarantine(worker_slot)
        assert worker_slot not in ex.free_slot_names()
        ex.replace("t-w1").join(120)  # type: ignore[union-attr]
        assert launcher.downed == ["t-w1"] and launcher.launched[-1] == "t-w2"
        deadline = time.monotonic() + 60
        while len(ex.free_slot_names()) < 2 and time.monotonic() < deadline:
            time.sleep(0.3)
        now = {s.name: ex._cluster_of(s.name) for s in ex.slots}
        assert sorted(now.values()) == ["t-head", "t-w2"] and worker_slot not in now
        new_slot = next(s for s, c in now.items() if c == "t-w2")
        ex.submit(repo.block("b-new", prefer=new_slot))
        [res] = _drain(ex, 1)
        assert res.slot == new_slot and not res.error

        ex.quarantine(head_slot)  # the head is quarantined, never replaced
        assert launcher.launched[-1] == "t-w2"
        assert ex.free_slot_names() == [new_slot]
    finally:
        ex.close()
    procs = list(launcher._procs.values())
    assert procs == [] and set(launcher.downed) == {"t-w1", "t-head", "t-w2"}
    ex.close()  # idempotent
    assert len(launcher.downed) == 3
    import ray

    assert not ray.is_initialized()


def _drain(ex: Executor, n: int) -> list:  # type: ignore[type-arg]
    out: list = []  # type: ignore[type-arg]
    deadline = time.monotonic() + 90
    while len(out) < n and time.monotonic() < deadline:
        out += ex.wait(0.2)
    return out


def test_pools_of_two_platforms_form_one_cluster_and_keep_their_blocks_apart(
        tmp_path: Path) -> None:
    """The x86 pool holds the Ray head; the ARM pool's nodes join it as workers with their
    own slot resource, so one driver reaches both and a block runs only on its platform."""
    import dataclasses

    from assay.executors.platforms import PlatformExecutor
    from assay.executors.skypilot import platform_pool

    repo = make_repo(tmp_path, executor="skypilot", extra=(
        '[executor.skypilot]\nname = "t"\ncloud = "aws"\nregion = "us-east-1"\n'
        '[[platforms]]\nname = "x86"\nsky = { instance_type = "c7i.large", nodes = 1 }\n'
        '[[platforms]]\nname = "arm"\nsky = { instance_type = "c7g.large", nodes = 1 }\n'))
    x86, arm = (platform_pool(repo.target, p) for p in repo.target.platforms)
    rcfg = RayConfig(cache_dir=str(tmp_path / "cache"), connect_timeout_s=90)
    lx, la = LocalLauncher(x86, env=RAY_ENV), LocalLauncher(arm, env=RAY_ENV)
    first = SkyPilotExecutor(repo.target, repo.ws, x86, lx, dataclasses.replace(
        rcfg, slot_resource=x86.slot_resource, slot_prefix="x86-"))
    ex = PlatformExecutor({"x86": first})
    try:
        ex.children["arm"] = SkyPilotExecutor(
            repo.target, repo.ws, arm, la, dataclasses.replace(
                rcfg, slot_resource=arm.slot_resource, slot_prefix="arm-"), join=first)
        assert lx.launched == ["t-x86-head"] and la.launched == ["t-arm-w1"]
        assert sorted(s.name.split("-")[0] for s in ex.slots) == ["arm", "x86"]
        assert {s.platform for s in ex.platform_slots("arm")} == {"arm"}
        for i, platform in enumerate(["arm", "x86", "arm"]):
            ex.submit(dataclasses.replace(repo.block(f"b{i}"), platform=platform))
        got = {r.block_id: r for r in _drain(ex, 3)}
        assert all(not r.error for r in got.values())
        assert got["b1"].slot.startswith("x86-")
        assert got["b0"].slot.startswith("arm-") and got["b2"].slot.startswith("arm-")
    finally:
        ex.close()
    assert la.downed == ["t-arm-w1"] and lx.downed == ["t-x86-head"]
    import ray

    assert not ray.is_initialized()


def test_a_replacement_node_is_calibrated_before_it_measures(tmp_path: Path) -> None:
    """The loop on a pool: a quarantined worker's node is replaced, and the fresh node's
    slot runs its own A/A blocks before any candidate is measured on it."""
    from assay.journal.store import Journal
    from assay.loop.driver import CAL, Loop
    from assay.model import BlockState, Candidate
    from assay.repo.workspace import Workspace
    from assay.testing import NoProposer

    repo = make_repo(tmp_path, executor="skypilot", work_s=0.02,
                     extra='[executor.skypilot]\nname = "f"\nnodes = 2\n')
    cfg_path = repo.root / "assay.toml"
    cfg_path.write_text(cfg_path.read_text().replace("aa_blocks = 0", "aa_blocks = 1")
                        .replace("pairs_per_block = 1", "pairs_per_block = 2"))
    import subprocess

    subprocess.run(["git", "commit", "-qam", "calibrate"], cwd=repo.root, check=True,
                   env={**__import__("os").environ, "GIT_AUTHOR_NAME": "t",
                        "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})
    target = config.load(repo.root)
    ws = Workspace(target, "main")
    cfg = SkyConfig.from_target(target)
    launcher = LocalLauncher(cfg, env=RAY_ENV)
    ex = SkyPilotExecutor(target, ws, cfg, launcher,
                          RayConfig(cache_dir=str(tmp_path / "cache"), connect_timeout_s=90))
    events: list[tuple[str, str]] = []
    journal = Journal.memory()
    loop = Loop(target, journal, ws, ex, NoProposer(),
                on_event=lambda kind, msg, exp: events.append((kind, msg)))
    try:
        loop.begin(budget=10, propose=False)
        while loop.step():
            pass
        first = set(journal.get_meta("calibration")["noise"])
        assert len(first) == 2
        worker = next(s.name for s in ex.slots if ex._cluster_of(s.name) == "f-w1")
        ex.quarantine(worker)  # what the loop does when the slot's noise is far above
        ex.replace("f-w1").join(120)  # type: ignore[union-attr]
        deadline = time.monotonic() + 60
        while len(ex.free_slot_names()) < 2 and time.monotonic() < deadline:
            time.sleep(0.3)
        [fresh] = [s.name for s in ex.slots if s.name not in first]
        assert ex._cluster_of(fresh) == "f-w2"
        for level in (1, 2, 3):
            loop.submit_candidate(Candidate(repo.head, params={"LEVEL": level},
                                            hypothesis=f"level {level}"))
        while loop.step():
            pass
    finally:
        loop.end()
    cal_on_fresh = [b for b in journal.blocks(CAL) if b.slot == fresh]
    assert cal_on_fresh and all(b.state is BlockState.DONE for b in cal_on_fresh)
    calibrated_at = max(b.finished_at or 0.0 for b in cal_on_fresh)
    others = [b for b in journal.blocks() if b.experiment_id != CAL and b.slot == fresh]
    assert all((b.started_at or 0.0) >= calibrated_at for b in others)
    assert fresh in journal.get_meta("calibration")["noise"]
    assert any(k == "calibrate" and f"slot {fresh} is new" in m for k, m in events)
    assert any(k == "calibrated" and m.startswith(f"slot {fresh} calibrated") for k, m in events)
    assert all(e.state.is_finished() for e in journal.experiments())
    assert launcher.downed[0] == "f-w1" and "f-w2" in launcher.downed


FLAKY_RAY = """#!{python}
import socket, sys, time
from pathlib import Path
marker = Path({marker!r})
failures = int(marker.read_text()) if marker.exists() else 0
if failures < {fail}:
    marker.write_text(str(failures + 1))
    print("head failed to start: scripted failure", failures + 1, flush=True)
    sys.exit(1)
port = int(sys.argv[sys.argv.index("--port") + 1])
s = socket.socket()
s.bind(("127.0.0.1", port))
s.listen()
time.sleep(600)
"""


@pytest.mark.parametrize("fail", [1, 2])
def test_a_head_that_exits_while_starting_gets_one_more_try(tmp_path: Path, fail: int) -> None:
    """A local head that exits while starting (a busy machine) is started once more on a
    fresh port; a second failure is reported with the end of the node's log."""
    import sys

    script = tmp_path / "ray"
    script.write_text(FLAKY_RAY.format(python=sys.executable, marker=str(tmp_path / "n"),
                                       fail=fail))
    script.chmod(0o755)

    class Scripted(LocalLauncher):
        def _ray(self) -> str:
            return str(script)

    launcher = Scripted(_cfg(tmp_path / "repo", ""), start_timeout_s=30)
    try:
        if fail == 2:
            with pytest.raises(ExecutorError, match=r"exited while starting.*scripted failure 2"):
                launcher.launch("h", NodeSpec("head", 1))
            assert launcher.launched == []
        else:
            info = launcher.launch("h", NodeSpec("head", 1))
            assert info.ray_address.startswith("127.0.0.1:") and launcher.launched == ["h"]
            log = (launcher.temp / "h.log").read_text()
            assert "--- attempt 1" in log and "--- attempt 2" in log
            assert "scripted failure 1" in log
    finally:
        launcher.down("h")
