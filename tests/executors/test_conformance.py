"""One contract, every executor: local and Ray pass the same tests."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.executors.base import Executor
from assay.executors.local import LocalExecutor
from assay.model import BlockResult, RunStatus

from .helpers import Repo, make_repo

KINDS = ["local", "ray"]


@pytest.fixture(params=KINDS)
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Repo, Executor]]:
    kind = request.param
    repo = make_repo(tmp_path, executor=kind)
    ex: Executor
    if kind == "local":
        ex = LocalExecutor(repo.target, repo.ws)
    else:
        cluster = request.getfixturevalue("ray_connected")
        from assay.executors.ray import RayConfig, RayExecutor

        ex = RayExecutor(repo.target, repo.ws,
                         RayConfig(address=cluster.address, cache_dir=str(tmp_path / "cache"),
                                   min_slots=2, connect_timeout_s=60))
    try:
        yield repo, ex
    finally:
        ex.close()


def drain(ex: Executor, n: int, timeout: float = 60.0) -> list[BlockResult]:
    out: list[BlockResult] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out += ex.wait(0.2)
    return out


def test_submit_then_wait_returns_the_result(setup: tuple[Repo, Executor]) -> None:
    repo, ex = setup
    slot = ex.submit(repo.block("b1", level=1))
    assert slot in {s.name for s in ex.slots}
    assert ex.running() == {"b1"}
    [res] = drain(ex, 1)
    assert (res.block_id, res.slot, res.error) == ("b1", slot, "")
    assert [r.role.value for r in res.runs] == ["A", "B"]
    assert all(r.status is RunStatus.OK for r in res.runs)
    a, b = (r.metrics["score"] for r in res.runs)
    assert 99 < a < 101 and 89 < b < 91
    for r in res.runs:  # logs are on this machine, where the journal points
        assert Path(r.stdout_path).is_file()
        assert "METRIC score=" in Path(r.stdout_path).read_text()
        assert Path(r.stdout_path).is_relative_to(repo.target.state_dir)
    assert ex.running() == set()


def test_submit_is_idempotent(setup: tuple[Repo, Executor]) -> None:
    repo, ex = setup
    block = repo.block("b1")
    slot = ex.submit(block)
    assert ex.submit(block) == slot
    assert len(drain(ex, 1)) == 1
    ex.submit(block)  # finished: still ignored
    assert ex.wait(1.5) == []
    assert ex.running() == set()


def test_one_block_per_slot_and_every_slot_used(setup: tuple[Repo, Executor]) -> None:
    repo, ex = setup
    pending = [repo.block(f"b{i}", order="ABBA") for i in range(6)]
    results: list[BlockResult] = []
    deadline = time.monotonic() + 120
    while len(results) < 6 and time.monotonic() < deadline:
        for _ in ex.free_slot_names():
            if pending:
                ex.submit(pending.pop(0))
        results += ex.wait(0.1)
    assert sorted(r.block_id for r in results) == [f"b{i}" for i in range(6)]
    assert all(r.error == "" and len(r.runs) == 4 for r in results)
    spans = repo.intervals()
    assert set(spans) == {s.name for s in ex.slots}  # both slots (both Ray nodes) measured
    assert sum(len(v) for v in spans.values()) == 24
    for slot, iv in spans.items():
        for (_, end), (start, _) in itertools.pairwise(iv):
            assert start >= end, f"two runs overlapped on {slot}"
    by_block = {r.block_id: {run.slot for run in r.runs} for r in results}
    assert all(len(w) == 1 for w in by_block.values())  # a block stays on its slot


def test_failing_benchmark_is_a_result_not_a_retry(setup: tuple[Repo, Executor]) -> None:
    repo, ex = setup
    ex.submit(repo.block("bad", mode="fail"))
    [res] = drain(ex, 1)
    assert res.error_kind == "" and res.error == ""
    a, b = res.runs
    assert a.status is RunStatus.OK
    assert b.status is RunStatus.CRASHED and "exit 3" in b.reason
    assert "boom" in Path(b.stderr_path).read_text()
    assert ex.wait(1.5) == []  # not run again
    starts = list(repo.marks.glob("start-*"))
    assert len(starts) == 2


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_cancel_kills_the_processes(setup: tuple[Repo, Executor]) -> None:
    repo, ex = setup
    ex.submit(repo.block("slow", mode="sleep", order="B"))
    pid_file = repo.marks / "sleep.pid"
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        ex.wait(0.1)
    pid = int(pid_file.read_text())
    assert _alive(pid)
    ex.cancel("slow")
    deadline = time.monotonic() + 15
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
    results = []
    deadline = time.monotonic() + 15
    while ex.running() and time.monotonic() < deadline:
        results += ex.wait(0.2)
    assert results == [] and ex.running() == set()
    assert len(ex.free_slot_names()) == 2


def test_prefer_and_avoid_slot(setup: tuple[Repo, Executor]) -> None:
    repo, ex = setup
    free = ex.free_slot_names()
    assert len(free) == 2
    assert ex.submit(repo.block("p", prefer=free[1])) == free[1]
    [res] = drain(ex, 1)
    assert res.slot == free[1]
    assert ex.submit(repo.block("a", avoid=free[0])) == free[1]
    [res] = drain(ex, 1)
    assert res.slot == free[1]
