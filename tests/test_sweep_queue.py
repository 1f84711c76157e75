"""The sweep (Optuna ask/tell) and queue proposers."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.config.spec import ParamSpec
from assay.errors import ProposerError
from assay.model import (
    Candidate,
    Decision,
    Direction,
    Experiment,
    ExperimentState,
    Incumbent,
    Verdict,
)
from assay.proposers.base import ProposalContext
from assay.proposers.queue import QueueProposer, read_patch_file
from assay.proposers.sweep import SweepProposer

from . import conftest


def _ctx(tmp: Path, tried: frozenset[str] = frozenset()) -> ProposalContext:
    from assay.config import spec as config

    root = tmp / "r"
    if not root.exists():
        conftest.make_repo(root, {"assay.toml": conftest.CONFIG.format(
            python="python3", slots=1, budget=3, pairs=2, extra=""),
            "work.py": "WORK = 1\n", "bench.py": ""})
    return ProposalContext(target=config.load(root), incumbent=Incumbent("abc"),
                           tried_digests=tried)


def _finished(c: Candidate, value: float | None, state: ExperimentState) -> Experiment:
    d = Decision(Verdict.DISCARD, "x", details={"candidate_value": value} if value else {})
    return Experiment("e1", 1, state, c, 0.0, 0.0, decision=d)


def test_grid_sweep_walks_every_point_once_then_stops(tmp_path: Path) -> None:
    spec = ParamSpec(name="N", type="int", low=1, high=4, apply="env")
    sweep = SweepProposer([spec], Direction.MAXIMIZE, sampler="grid")
    seen: list[object] = []
    ctx = _ctx(tmp_path)
    for _ in range(6):
        cands = sweep.propose(ctx, 1)
        if not cands:
            break
        seen.append(cands[0].params["N"])
        sweep.tell(_finished(cands[0], float(cands[0].params["N"]), ExperimentState.DISCARDED))
    assert sorted(seen) == [1, 2, 3, 4]  # type: ignore[type-var]
    assert sweep.propose(ctx, 1) == []


def test_grid_sweep_skips_the_incumbents_own_point(tmp_path: Path) -> None:
    spec = ParamSpec(name="N", type="int", low=1, high=3, apply="env")
    sweep = SweepProposer([spec], Direction.MAXIMIZE, sampler="grid")
    ctx = _ctx(tmp_path)
    ctx = ProposalContext(target=ctx.target, incumbent=Incumbent("abc", params={"N": 2}))
    seen = [c.params["N"] for c in sweep.propose(ctx, 5)]
    assert sorted(seen) == [1, 3]  # type: ignore[type-var]


def test_sweep_skips_tried_values_and_learns(tmp_path: Path) -> None:
    spec = ParamSpec(name="C", type="categorical", choices=("a", "b"), apply="env")
    sweep = SweepProposer([spec], Direction.MAXIMIZE, sampler="random", seed=3)
    tried = frozenset({Candidate("abc", params={"C": "a"}).digest})
    out = sweep.propose(_ctx(tmp_path, tried), 1)
    assert [c.params for c in out] == [{"C": "b"}]
    assert out[0].meta["trial"] == sweep.study.trials[-1].number
    sweep.tell(_finished(out[0], 3.0, ExperimentState.KEPT))
    assert sweep.study.trials[-1].value == 3.0


def test_sweep_needs_parameters() -> None:
    with pytest.raises(ProposerError, match=r"\[\[params\]\]"):
        SweepProposer([], Direction.MAXIMIZE)


def test_replay_rebuilds_the_study(tmp_path: Path) -> None:
    spec = ParamSpec(name="N", type="int", low=1, high=9, apply="env")
    sweep = SweepProposer([spec], Direction.MINIMIZE, sampler="tpe")
    old = _finished(Candidate("abc", params={"N": 4}, proposer="sweep"), 2.5,
                    ExperimentState.DISCARDED)
    crashed = _finished(Candidate("abc", params={"N": 5}, proposer="sweep"), None,
                        ExperimentState.CRASHED)
    sweep.replay([old, crashed])
    values = sorted((t.params["N"], t.value) for t in sweep.study.trials)
    assert values == [(4, 2.5), (5, None)]


def test_queue_reads_hypothesis_and_sources(tmp_path: Path) -> None:
    p = tmp_path / "01-x.patch"
    p.write_text("# hypothesis: hoist the lookup\n# source: https://example.org/paper\n"
                 "diff --git a/w.py b/w.py\n--- a/w.py\n+++ b/w.py\n@@ -1 +1 @@\n-a\n+b\n")
    hyp, diff, sources = read_patch_file(p)
    assert hyp == "hoist the lookup" and sources == ("https://example.org/paper",)
    assert diff.startswith("diff --git")
    q = QueueProposer([p])
    ctx = _ctx(tmp_path)
    (c,) = q.propose(ctx, 3)
    assert c.hypothesis == "hoist the lookup" and c.proposer == "queue"
    assert q.propose(ctx, 3) == []


def test_queue_refuses_a_file_without_a_diff(tmp_path: Path) -> None:
    p = tmp_path / "bad.patch"
    p.write_text("# hypothesis: nothing here\njust words\n")
    with pytest.raises(ProposerError, match="no unified diff"):
        read_patch_file(p)
    with pytest.raises(ProposerError, match="does not exist"):
        QueueProposer.collect(tmp_path / "missing")
