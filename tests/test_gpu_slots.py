"""One slot per GPU, on a CPU machine: N GPUs faked through CUDA_VISIBLE_DEVICES.

The benchmark reads the GPU its slot is pinned to: each fake GPU has its own speed (same
model, different clocks), and one candidate only helps on GPU 0. Values are scripted
(tests/scripted.py), so the loop's decisions do not depend on the machine's load.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay import api

from .conftest import git, make_repo
from .scripted import DRAW

BENCH = DRAW + r'''
import os, pathlib
gpu = os.environ["CUDA_VISIBLE_DEVICES"]
assert "," not in gpu, "a slot sees exactly one GPU"
speed = 1000.0 * (1.0 - 0.05 * int(gpu))  # GPU k is 5k% slower
flags = {f.name for f in pathlib.Path("flags").glob("*")}
if "everywhere" in flags:
    speed *= 1.20
if "gpu0-more" in flags:
    speed *= 1.40 if gpu == "0" else 1.15
print(f"METRIC speed={speed * draw():.4f}")
'''

CONFIG = f'''
[metric]
name = "speed"
direction = "maximize"

[commands]
bench = "{sys.executable} bench.py"
bench_timeout = 60

[scope]
editable = ["flags/*"]
protected = ["bench.py"]

[proposer.queue]
path = "patches"

[run]
slots = "auto"
proposer = "queue"
budget = 5

[decision]
rule = "sequential"
pairs_per_block = 2
max_pairs = 16
aa_blocks = 1
delta = 0.05
confirm = true
'''


@pytest.fixture
def gpus() -> Iterator[None]:
    yield
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)


def _target(tmp_path: Path, flags: list[str]) -> Path:
    root = make_repo(tmp_path / "repo", {"bench.py": BENCH, "flags/.keep": "",
                                         "assay.toml": CONFIG})
    (root / "patches").mkdir()
    for i, flag in enumerate(flags, 1):
        (root / "flags" / flag).write_text("on\n")
        git(root, "add", "-N", f"flags/{flag}")
        diff = git(root, "diff")
        git(root, "reset", "-q", f"flags/{flag}")
        (root / "flags" / flag).unlink()
        (root / "patches" / f"{i}-{flag}.patch").write_text(f"# hypothesis: {flag}\n{diff}")
    return root


@pytest.mark.parametrize("n", [2, 3])
def test_one_slot_per_gpu_with_per_gpu_speed_and_a_confirmed_keep(
        tmp_path: Path, gpus: None, n: int) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(n))
    root = _target(tmp_path, ["everywhere"])
    api.run(root)
    log = {e["hypothesis"]: e for e in api.log(root)}
    assert log["everywhere"]["state"] == "kept"
    shown = api.show(log["everywhere"]["id"], root)
    blocks = [b for b in shown["blocks"] if b["state"] == "done"]
    assert {b["slot"] for b in blocks} <= {f"gpu{i}" for i in range(n)}
    confirm = [b for b in blocks if b["kind"] == "confirm"]
    assert confirm and confirm[0]["slot"] != blocks[0]["slot"]  # another GPU confirms
    details = shown["decision"]["details"]
    assert details["slot_dependent"] is False and "consistent across slots" in \
        shown["decision"]["reason"]
    # each GPU's own speed of the incumbent, and its own noise
    st = api.status(root)
    speed = {s["name"]: s["incumbent_value"] for s in st["slots"]}
    assert set(speed) == {f"gpu{i}" for i in range(n)}
    assert all(s["noise"] is not None for s in st["slots"])
    ratio = speed["gpu1"] / speed["gpu0"]
    assert abs(ratio - 0.95) < 0.02, speed
    out = subprocess.run([sys.executable, "-m", "assay", "status", "-C", str(root)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "slot gpu1 (GPU 1): incumbent" in out.stdout


def test_a_gain_that_differs_between_gpus_is_reported_as_gpu_dependent(
        tmp_path: Path, gpus: None) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"
    root = _target(tmp_path, ["gpu0-more"])  # +40% on GPU 0, +15% on GPU 1
    api.run(root)
    [e] = api.log(root)
    assert e["state"] == "kept"
    d = api.show(e["id"], root)["decision"]
    assert d["details"]["slot_dependent"] is True
    per = {r["slot"]: r["effect"] for r in d["details"]["per_slot"]}
    assert abs(per["gpu0"] - 0.40) < 0.03 and abs(per["gpu1"] - 0.15) < 0.03
    assert "slot-dependent effect" in d["reason"]


def test_a_confirmation_waits_for_another_gpu_when_only_the_first_ones_is_free(
        tmp_path: Path, gpus: None) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"
    root = _target(tmp_path, ["everywhere", "noop-a", "noop-b", "noop-c"])
    # GPU 1 is slow to finish a block: a confirmation queued after a block on GPU 0 finds
    # only GPU 0 free, again and again
    bench = (root / "bench.py").read_text().replace(
        'print(f"METRIC', 'import time\nif gpu == "1":\n    time.sleep(0.4)\nprint(f"METRIC', 1)
    (root / "bench.py").write_text(bench)
    git(root, "commit", "-qam", "a slow GPU 1")
    api.run(root)
    log = {e["hypothesis"]: e for e in api.log(root)}
    assert log["everywhere"]["state"] == "kept"
    confirmed = 0
    for e in log.values():
        blocks = [b for b in api.show(e["id"], root)["blocks"] if b["state"] == "done"]
        for b in blocks:
            if b["kind"] == "confirm":  # never on the slot it was to avoid
                assert b["slot"] != blocks[0]["slot"], (e["hypothesis"], blocks)
                confirmed += 1
    assert confirmed >= 1
