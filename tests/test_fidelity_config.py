"""``[fidelity]``: its parsing and errors, the level of a block, and the journal's record of
each candidate's verdict at every level."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.config.spec import parse
from assay.errors import ConfigError
from assay.journal.store import Journal
from assay.model import (
    LEVEL,
    SCREEN,
    BlockKind,
    Candidate,
    Decision,
    ExperimentState,
    Incumbent,
    Verdict,
)

BASE = '''
[metric]
name = "val_bpb"
direction = "minimize"
[commands]
bench = "python train.py"
[scope]
editable = ["train.py"]
[[params]]
name = "TIME_BUDGET"
type = "float"
low = 1
high = 1000
apply = "env"
'''


def test_fidelity_levels_parse(tmp_path: Path) -> None:
    t = parse(BASE + '[fidelity]\nparam = "TIME_BUDGET"\nlevels = [30, 120, 300]\n'
              'promote = "top"\ntop = 3\n', tmp_path)
    assert t.fidelity is not None
    assert t.fidelity.levels == (30, 120, 300)
    assert (t.fidelity.promote, t.fidelity.top, t.fidelity.last) == ("top", 3, 2)
    assert t.fidelity.label(0) == "TIME_BUDGET=30"
    assert parse(BASE, tmp_path).fidelity is None


@pytest.mark.parametrize(("body", "words"), [
    ('param = "STEPS"\nlevels = [1, 2]', "'STEPS' is not a declared parameter"),
    ('param = "TIME_BUDGET"\nlevels = [300]', "has 1 value(s)"),
    ('param = "TIME_BUDGET"\nlevels = [300, 30]', "is not increasing"),
    ('param = "TIME_BUDGET"\nlevels = [30, 30]', "repeats 30"),
    ('param = "TIME_BUDGET"\nlevels = [30, 300]\npromote = "best"', "not one of the choices"),
    ('param = "TIME_BUDGET"\nlevels = [30, 300]\nlevel = 2', "is not a known key"),
])
def test_fidelity_errors_name_the_key(tmp_path: Path, body: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(BASE + "[fidelity]\n" + body + "\n", tmp_path)
    assert words in str(err.value)
    assert "fidelity" in str(err.value)


def test_level_results_keep_each_levels_last_verdict(tmp_path: Path) -> None:
    j = Journal.open(tmp_path / "journal.sqlite")
    inc = Incumbent("c0")
    e1 = j.add_experiment(Candidate("c0", params={"LR": 1})).id
    e2 = j.add_experiment(Candidate("c0", params={"LR": 2})).id
    b = j.add_block(e1, BlockKind.COMPARE, "ABBA", inc, level=1)
    assert j.blocks(e1)[0].level == 1 and b == f"{e1}-b1"

    def d(verdict: Verdict, effect: float, **details: object) -> Decision:
        return Decision(verdict, "r", effect, effect - 0.01, effect + 0.01, 4, 8, 0.002,
                        details=details)
    j.set_decision(e1, d(Verdict.CONTINUE, 0.001, **{LEVEL: 0}))
    j.set_decision(e1, d(Verdict.KEEP, 0.03, **{LEVEL: 0, SCREEN: "promoted"}))
    j.set_decision(e1, d(Verdict.DISCARD, -0.01, **{LEVEL: 1}))
    j.set_decision(e2, d(Verdict.DISCARD, -0.02, **{LEVEL: 0, SCREEN: "stopped"}))
    j.set_decision(e2, d(Verdict.DISCARD, -0.02))  # a decision without fidelity: not a level's
    got = [(r.experiment_id, r.level, r.outcome, r.effect) for r in j.level_results()]
    # e1 is not finished: measuring at the level it was decided at, whatever the verdict
    assert got == [(e1, 0, "promoted", 0.03), (e1, 1, "measuring", -0.01),
                   (e2, 0, "stopped", -0.02)]
    j.set_state(e1, ExperimentState.DISCARDED)
    j.set_state(e2, ExperimentState.DISCARDED)
    got = [(r.experiment_id, r.level, r.outcome, r.effect) for r in j.level_results()]
    assert got == [(e1, 0, "promoted", 0.03), (e1, 1, "discarded", -0.01),
                   (e2, 0, "stopped", -0.02)]
    j.close()
