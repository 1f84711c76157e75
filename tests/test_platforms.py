"""Platforms and GPU slots: config, slot making, GPU discovery, per-platform routing, pools."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assay.config import spec as config
from assay.errors import ConfigError, ExecutorError
from assay.executors.local import cpu_share, local_slots, visible_gpus
from assay.model import Block, BlockKind, Incumbent
from assay.repo.workspace import Workspace

BASE = '''[metric]
name = "t"
[commands]
bench = "true"
[scope]
editable = ["*.py"]
'''


def parse(extra: str) -> config.Target:
    return config.parse(BASE + extra, Path("/nonexistent-root"))


def test_platforms_parse_with_primary_env_and_defaults() -> None:
    t = parse('[[platforms]]\nname = "x86"\nslots = 2\nenv = { SPEED = "fast" }\n'
              '[[platforms]]\nname = "arm"\nprimary = true\n'
              '[decision]\nkeep_on = "any"\nplatform_tolerance = 0.05\n')
    assert [p.name for p in t.platforms] == ["x86", "arm"]
    assert [p.primary for p in t.platforms] == [False, True]
    assert t.platforms[0].env == {"SPEED": "fast"} and t.platforms[0].slots == 2
    assert t.decision.keep_on == "any" and t.decision.platform_tolerance == 0.05
    first = parse('[[platforms]]\nname = "a"\n[[platforms]]\nname = "b"\n')
    assert [p.primary for p in first.platforms] == [True, False]  # the first by default


@pytest.mark.parametrize(("extra", "key", "words"), [
    ('[[platforms]]\nname = "9lives"\n', "platforms[0].name", "not a platform name"),
    ('[[platforms]]\nname = "a"\n[[platforms]]\nname = "a"\n', "platforms", "repeat"),
    ('[[platforms]]\nname = "a"\nprimary = true\n[[platforms]]\nname = "b"\nprimary = true\n',
     "platforms", "at most one"),
    ('[[platforms]]\nname = "a"\nsky = { flavour = "big" }\n', "platforms[0].sky.flavour",
     "not a SkyPilot pool key"),
    ('[[platforms]]\nname = "a"\nsky = { instance_type = "c7g.large" }\nray_resource = "r"\n',
     "platforms[0].sky", "either"),
    ('[[platforms]]\nname = "a"\nslotz = 2\n', "platforms[0].slotz", "not a known key"),
    ('[run]\nslots = "auto"\ngpus = [0, 1]\n', "run.gpus", "picks them itself"),
    ('[run]\nslots = "auto"\n[[platforms]]\nname = "a"\n', "run.slots", "both say"),
    ('[decision]\nkeep_on = "all"\n', "decision.keep_on", "primary"),
])
def test_bad_platform_config_names_the_key(extra: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(extra)
    text = str(err.value)
    assert f"[{key}]" in text and words in text


def test_local_platform_slots_are_labelled_and_get_their_env() -> None:
    t = parse('[[platforms]]\nname = "x86"\nslots = 2\nenv = { SPEED = "1" }\n'
              '[[platforms]]\nname = "arm"\n')
    slots = local_slots(t)
    assert [(s.name, s.platform) for s in slots] == [("x86-0", "x86"), ("x86-1", "x86"),
                                                     ("arm-0", "arm")]
    env = dict(slots[0].env)
    assert env["SPEED"] == "1" and env["OMP_NUM_THREADS"] == str(len(cpu_share(3)[0]))
    assert "SPEED" not in dict(slots[2].env)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_auto_slots_make_one_slot_per_visible_gpu(n: int) -> None:
    ids = list(range(10, 10 + n))
    for extra in ('[run]\nslots = "auto"\n', '[run]\ngpus = "all"\n'):
        t = parse(extra)
        assert t.run.auto_gpus
        slots = local_slots(t, {"CUDA_VISIBLE_DEVICES": ",".join(map(str, ids))})
        assert [s.gpus for s in slots] == [(g,) for g in ids]
        assert len({s.name for s in slots}) == n
        cpus = [dict(s.env)["ASSAY_SLOT_CPUS"] for s in slots]
        if n <= (os.cpu_count() or 1):  # disjoint shares when there are cores enough
            assert len(set(cpus)) == n


def test_auto_slots_without_gpus_say_what_to_do() -> None:
    t = parse('[run]\nslots = "auto"\n')
    with pytest.raises(ExecutorError, match="found no GPU"):
        local_slots(t, {"CUDA_VISIBLE_DEVICES": ""})
    with pytest.raises(ExecutorError, match="not a GPU index"):
        visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-1234abcd"})


def test_cpu_share_is_disjoint_and_covers_the_cores() -> None:
    shares = cpu_share(4, cores=16)
    assert [len(s) for s in shares] == [4, 4, 4, 4]
    flat = [c for s in shares for c in s]
    assert sorted(flat) == list(range(16))


def test_pinned_gpu_reaches_the_benchmark(tmp_path: Path) -> None:
    """Each auto slot's benchmark sees only its own GPU (CUDA_VISIBLE_DEVICES pinned)."""
    from assay.executors.local import LocalExecutor

    repo = _repo(tmp_path, 'print("METRIC t=" + __import__("os").environ["CUDA_VISIBLE_DEVICES"])',
                 '[run]\nslots = "auto"\n')
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = "3,5,7"
    try:
        target = config.load(repo)
        ws = Workspace(target, "plat")
        exe = LocalExecutor(target, ws)
    finally:
        if old is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old
    head = ws.head()
    seen = {}
    for i, slot in enumerate(exe.slots):
        exe.submit(Block(f"b{i}", "cal", BlockKind.AA, "A", Incumbent(head, {}),
                         None, prefer_slot=slot.name))
    results = _collect(exe, 3)
    for r in results:
        seen[r.slot] = r.runs[0].metrics["t"]
    exe.close()
    assert seen == {"gpu3": 3.0, "gpu5": 5.0, "gpu7": 7.0}


def test_platform_executor_runs_each_block_on_its_own_platform(tmp_path: Path) -> None:
    from assay.executors.platforms import PlatformExecutor, build_executor

    repo = _repo(tmp_path, 'import os\nprint("METRIC t=" + os.environ["SPEED"])',
                 '[[platforms]]\nname = "x86"\nslots = 2\nenv = { SPEED = "1" }\n'
                 '[[platforms]]\nname = "arm"\nenv = { SPEED = "2" }\n')
    target = config.load(repo)
    ws = Workspace(target, "plat")
    exe = build_executor(target, ws)
    assert isinstance(exe, PlatformExecutor)
    assert sorted(s.name for s in exe.platform_slots("x86")) == ["x86-0", "x86-1"]
    head = ws.head()
    blocks = [Block(f"b{i}", "cal", BlockKind.AA, "A", Incumbent(head, {}), None,
                    platform=p) for i, p in enumerate(["arm", "x86", "x86"])]
    for b in blocks:
        exe.submit(b)
    results = {r.block_id: r for r in _collect(exe, 3)}
    exe.close()
    assert results["b0"].slot == "arm-0" and results["b0"].runs[0].metrics["t"] == 2.0
    assert {results["b1"].slot, results["b2"].slot} == {"x86-0", "x86-1"}
    assert results["b1"].runs[0].metrics["t"] == 1.0
    with pytest.raises(ExecutorError, match="not one of"):
        exe.submit(Block("b9", "cal", BlockKind.AA, "A", Incumbent(head, {}), None,
                         platform="riscv"))


@pytest.mark.parametrize(("extra", "message"), [
    ('[[platforms]]\nname = "x86"\nray_resource = "x86"\n'
     '[[platforms]]\nname = "arm"\nsky = { instance_type = "c7g.4xlarge" }\n',
     r"x86 \(Ray\) and arm \(SkyPilot\) in one run"),
    ('[[platforms]]\nname = "x86"\nray_resource = "x86"\n'
     '[[platforms]]\nname = "arm"\nray_resource = "arm"\n',
     r"Ray platforms x86, arm share one Ray cluster and \[executor.ray\] address is not set"),
    ('[executor.skypilot]\ncloud = "aws"\nregion = "us-east-1"\n'
     '[[platforms]]\nname = "x86"\nsky = { instance_type = "c7i.4xlarge" }\n'
     '[[platforms]]\nname = "arm"\nsky = { instance_type = "c7g.4xlarge", '
     'region = "eu-west-1" }\n',
     r"one cloud and region.*arm: cloud aws, region eu-west-1"),
    ('[[platforms]]\nname = "x86"\nsky = { instance_type = "c7i.4xlarge", cloud = "aws" }\n'
     '[[platforms]]\nname = "arm"\nsky = { instance_type = "t2a-standard-4", cloud = "gcp" }\n',
     r"x86: cloud aws, region \(open\); arm: cloud gcp"),
])
def test_remote_platforms_one_driver_cannot_reach_together_are_refused_before_anything_starts(
        tmp_path: Path, extra: str, message: str) -> None:
    from assay.executors.platforms import check_remote

    target = config.load(_repo(tmp_path, 'print("METRIC t=1")', extra))
    with pytest.raises(ExecutorError, match=message):
        check_remote(target)


def test_several_remote_platforms_of_one_kind_are_accepted(tmp_path: Path) -> None:
    from assay.executors.platforms import check_remote

    for i, extra in enumerate((
            '[executor.ray]\naddress = "10.0.0.2:6379"\n'
            '[[platforms]]\nname = "x86"\nray_resource = "x86"\n'
            '[[platforms]]\nname = "arm"\nray_resource = "arm"\n'
            '[[platforms]]\nname = "here"\n',
            '[executor.skypilot]\ncloud = "aws"\nregion = "us-east-1"\n'
            '[[platforms]]\nname = "x86"\nsky = { instance_type = "c7i.4xlarge" }\n'
            '[[platforms]]\nname = "arm"\nsky = { instance_type = "c7g.4xlarge" }\n'
            '[[platforms]]\nname = "here"\n',
            '[[platforms]]\nname = "x86"\nsky = { instance_type = "c7i.4xlarge" }\n'
            '[[platforms]]\nname = "arm"\nsky = { instance_type = "c7g.4xlarge" }\n')):
        (tmp_path / str(i)).mkdir()
        target = config.load(_repo(tmp_path / str(i), 'print("METRIC t=1")', extra))
        check_remote(target)
        assert [p.kind for p in target.platforms][:2] in (["ray", "ray"],
                                                          ["skypilot", "skypilot"])


def test_skypilot_pools_for_x86_and_arm_validate_offline(tmp_path: Path) -> None:
    sky = pytest.importorskip("sky")
    from assay.executors.skypilot import NodeSpec, build_task, platform_pool

    t = config.parse(BASE + '[executor.skypilot]\nname = "bench"\nnodes = 2\n'
                     '[[platforms]]\nname = "x86"\nsky = { instance_type = "c7i.4xlarge", '
                     'nodes = 2 }\n'
                     '[[platforms]]\nname = "arm"\nsky = { instance_type = "c7g.4xlarge", '
                     'nodes = 1, disk_size = 100 }\n', tmp_path)
    x86, arm = (platform_pool(t, p) for p in t.platforms)
    assert (x86.name, x86.instance_type, x86.nodes) == ("bench-x86", "c7i.4xlarge", 2)
    assert (arm.name, arm.instance_type, arm.nodes, arm.disk_size) == \
        ("bench-arm", "c7g.4xlarge", 1, 100)
    assert x86.slot_resource != arm.slot_resource
    try:
        for cfg in (x86, arm):
            head = build_task(cfg, f"{cfg.name}-head", NodeSpec("head", 1))
            worker = build_task(cfg, f"{cfg.name}-w1", NodeSpec("worker", 1, "10.0.0.9:6379"))
            for task in (head, worker):
                [res] = list(task.resources)
                assert res.instance_type == cfg.instance_type
                assert cfg.slot_resource in task.run  # its nodes carry its own slot label
            assert worker.envs["ASSAY_HEAD"] == "10.0.0.9:6379"
    finally:
        subprocess.run([sys.executable, "-m", "sky.cli", "api", "stop"], capture_output=True,
                       check=False, timeout=120)
    assert sky is not None


# -- helpers ------------------------------------------------------------------------------


def _repo(tmp_path: Path, bench: str, extra: str) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "bench.py").write_text(bench + "\n")
    (repo / "work.py").write_text("X = 1\n")
    (repo / "assay.toml").write_text(
        f'[metric]\nname = "t"\n[commands]\nbench = "{sys.executable} bench.py"\n'
        '[scope]\neditable = ["work.py"]\nprotected = ["bench.py"]\n' + extra)
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"],
                ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    return repo


def _collect(exe: object, n: int, deadline_s: float = 120.0) -> list:  # type: ignore[type-arg]
    from assay.executors.base import Executor

    assert isinstance(exe, Executor)
    out = []
    end = time.monotonic() + deadline_s
    while len(out) < n and time.monotonic() < end:
        out += exe.wait(timeout=0.5)
    assert len(out) == n, f"only {len(out)} of {n} blocks finished in {deadline_s} s"
    return out
