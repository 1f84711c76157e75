"""`assay.planning.simulate.decide` drives the loop's own code: a real run on the same
values agrees."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from assay import api
from assay.config.spec import DecisionSpec
from assay.errors import ConfigError
from assay.model import Candidate, ExperimentState
from assay.planning.simulate import Session, decide
from tests.conftest import git, make_repo

BENCH = """\
import json, pathlib
import work
state = pathlib.Path({state!r})
seq = json.loads(pathlib.Path({values!r}).read_text())
i = int(state.read_text()) if state.exists() else 0
state.write_text(str(i + 1))
print(f"METRIC time={{seq[i] * work.FACTOR:.6f}}")
"""

CONFIG = """\
[metric]
name = "time"
direction = "minimize"

[commands]
bench = "{python} bench.py"

[scope]
editable = ["work.py"]
protected = ["bench.py"]

[[params]]
name = "FACTOR"
type = "float"
low = 0.5
high = 1.0
apply = "assign"
file = "work.py"

[run]
slots = 1
budget = 1

[decision]
delta = 0.02
max_pairs = 16
"""


def sequence(n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [100.0 * (1.0 + rng.gauss(0.0, 0.02)) for _ in range(n)]


@pytest.mark.parametrize("factor", [0.9, 1.0])
def test_the_same_values_give_the_same_decision_in_a_real_run(
        tmp_path: Path, factor: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_SANDBOX", "off")  # the values' counter is outside the trees
    seq = sequence(400, seed=3)
    values = tmp_path / "values.json"
    values.write_text(__import__("json").dumps(seq))
    root = make_repo(tmp_path / "repo", {
        "bench.py": BENCH.format(state=str(tmp_path / "count"), values=str(values)),
        "work.py": "FACTOR = 1.0\n",
        "assay.toml": CONFIG.format(python=sys.executable)})
    # the candidate's tree differs from the base's by a line the bench ignores as well, so
    # that FACTOR 1.0, the file's own value, is still a candidate to measure
    work = root / "work.py"
    work.write_text("FACTOR = 1.0\nNOTE = 'the candidate'\n")
    patch = git(root, "diff")
    git(root, "checkout", "work.py")
    target = api.load(root)
    with api.session(target) as loop:
        inc = loop.start()
        loop.calibrate()
        loop.submit_candidate(Candidate(inc.commit, patch=patch, params={"FACTOR": factor},
                                        hypothesis="scale the time"))
        loop.run(budget=1, propose=False)
        real = loop.journal.experiment("e0001")
    assert real is not None and real.decision is not None
    used = int((tmp_path / "count").read_text())

    it = iter(seq)
    calls: list[str] = []

    def run(role: str, slot: int) -> float:
        calls.append(role)
        # the benchmark prints six decimals
        return float(f"{next(it) * (factor if role == 'B' else 1.0):.6f}")

    sim = decide(run, {"delta": 0.02, "max_pairs": 16}, slots=1, direction="minimize")
    assert len(calls) == used  # the same runs, in the same order
    want = {ExperimentState.KEPT: "keep", ExperimentState.DISCARDED: "discard"}[real.state]
    assert sim.verdict == want
    assert sim.reason == real.note
    assert sim.effect == pytest.approx(real.decision.effect, rel=1e-9)
    assert sim.interval == pytest.approx((real.decision.lo, real.decision.hi), rel=1e-9)
    if factor == 0.9:
        assert sim.verdict == "keep" and sim.effect is not None and sim.effect > 0.05


def test_decide_validates_the_decision_table() -> None:
    with pytest.raises(ConfigError, match="delta"):
        decide(lambda role, slot: 1.0, {"delta": "big"})
    with pytest.raises(ConfigError, match="bogus"):
        decide(lambda role, slot: 1.0, {"bogus": 1})


def test_session_and_decide_use_one_rule() -> None:
    """The fast session keeps a clear win and discards a null, as the loop does."""
    rng = random.Random(5)

    def run(role: str, slot: int) -> float:
        return 100.0 * (1.05 if role == "B" else 1.0) * (1.0 + rng.gauss(0.0, 0.01))

    spec = DecisionSpec(delta=0.01, max_pairs=24)
    sim = Session(run, spec, slots=2)
    sim.calibrate()
    d, runs = sim.decide()
    assert d.verdict.value == "keep" and runs >= 8
    assert d.lo is not None and d.lo > 0.01
