"""Rank agreement between fidelity levels: measured from the verdicts a journal records per
level (``Decision.details``), written here as the loop writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from assay.config.fidelity import FidelitySpec
from assay.decision.agreement import agreement, spearman
from assay.journal.store import Journal
from assay.model import LEVEL, SCREEN, Candidate, Decision, ExperimentState, Verdict

SPEC = FidelitySpec("TIME_BUDGET", (30, 300))
PATCH = "diff --git a/train.py b/train.py\n--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-a\n+b\n"


def decide(j: Journal, exp_id: str, level: int, effect: float, screen: str = "",
           verdict: Verdict | None = None) -> None:
    details: dict[str, Any] = {LEVEL: level}
    if screen:
        details[SCREEN] = screen
    v = verdict or (Verdict.KEEP if effect > 0 else Verdict.DISCARD)
    j.set_decision(exp_id, Decision(v, "r", effect, effect - 0.01, effect + 0.01, 4, 8, 0.005,
                                    details=details))
    # as the loop ends it: stopped by a screen, or decided without one (the last level)
    if screen == "stopped" or (not screen and v is Verdict.DISCARD):
        j.set_state(exp_id, ExperimentState.DISCARDED)
    elif not screen and v is Verdict.KEEP:
        j.set_state(exp_id, ExperimentState.KEPT)


def add(j: Journal, params: dict[str, Any] | None = None, patch: str = "",
        hypothesis: str = "") -> str:
    return j.add_experiment(Candidate("c0", patch=patch, params=params or {},
                                      hypothesis=hypothesis)).id


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal.open(tmp_path / "journal.sqlite")


def test_held_reversed_rho_and_a_misleading_kind(journal: Journal) -> None:
    j = journal
    # at 30 s: five promoted, one stopped; at 300 s: the LR changes and the patch hold,
    # both MODEL_DIM changes reverse (the trap of the GPU notes: narrow wins short runs)
    lr1, lr2 = add(j, {"LR": 0.02}), add(j, {"LR": 0.04})
    dim1, dim2 = add(j, {"MODEL_DIM": 512}), add(j, {"MODEL_DIM": 384})
    skip = add(j, patch=PATCH, hypothesis="U-net skips between the first and last blocks")
    stop = add(j, {"LR": 0.5})
    for e, cheap, final in ((lr1, 0.030, 0.020), (lr2, 0.020, 0.012), (dim1, 0.025, -0.008),
                            (dim2, 0.018, -0.004), (skip, 0.010, 0.015)):
        decide(j, e, 0, cheap, "promoted")
        decide(j, e, 1, final)
    decide(j, stop, 0, -0.05, "stopped")

    a = agreement(SPEC, j.level_results(), j.experiments(patches=False))
    (p,) = a.pairs
    assert (p.promoted, p.reached, p.held) == (5, 5, 3)
    assert {r.experiment_id for r in p.reversed} == {dim1, dim2}
    r = next(r for r in p.reversed if r.experiment_id == dim1)
    assert (r.effect, r.next_effect, r.next_outcome) == (0.025, -0.008, "discarded")
    assert p.rho_n == 5 and p.rho == pytest.approx(spearman(
        [0.030, 0.020, 0.025, 0.018, 0.010], [0.020, 0.012, -0.008, -0.004, 0.015]))
    line = a.lines()[0]
    assert line.startswith("at TIME_BUDGET=30, 3 of 5 promoted candidates with a verdict at "
                           "TIME_BUDGET=300 also won there; ρ = ")
    assert "over 5 (few: a rough sign)" in line
    assert f"{dim1} MODEL_DIM=512 (+2.5% → -0.8%)" in line
    warnings = a.warnings()
    assert len(warnings) == 1 and warnings[0].startswith(
        "TIME_BUDGET=30 misleads on MODEL_DIM: 0 of 2 promoted MODEL_DIM changes")
    kinds = {k.kind: (k.reached, k.held) for k in p.kinds}
    assert kinds == {"LR": (2, 2), "MODEL_DIM": (2, 0), "patch": (1, 1)}


def test_a_win_needs_a_positive_effect_and_a_verdict(journal: Journal) -> None:
    j = journal
    a1, a2, a3, a4 = (add(j, {"LR": v}) for v in (1, 2, 3, 4))
    for e in (a1, a2, a3, a4):
        decide(j, e, 0, 0.02, "promoted")
    decide(j, a1, 1, 0.004, verdict=Verdict.DISCARD)  # positive but not kept: did not win
    decide(j, a2, 1, 0.03, verdict=Verdict.CONTINUE)  # still measuring: no verdict yet
    decide(j, a3, 1, 0.03)                             # kept
    # a4 never measured at the last level
    p = agreement(SPEC, j.level_results(), j.experiments(patches=False)).pairs[0]
    assert (p.promoted, p.reached, p.held) == (4, 2, 1)
    assert [r.experiment_id for r in p.reversed] == [a1]
    assert p.rho is None and p.rho_n == 2
    assert "(2 more promoted, no verdict there yet)" in p.summary()
    assert "ρ needs 3 candidates with effects at both levels, 2 so far" in p.summary()
    assert agreement(SPEC, j.level_results(), []).warnings() == []
    waiting = add(j, {"LR": 5})
    decide(j, waiting, 0, 0.02, "promoted")
    only = agreement(SPEC, [r for r in j.level_results() if r.experiment_id == waiting], [])
    assert only.lines() == ["at TIME_BUDGET=30: 1 promoted to TIME_BUDGET=300, none with a "
                            "verdict there yet"]


def test_an_outcome_is_what_happened_not_the_rules_verdict(journal: Journal) -> None:
    """The rule's keep is not a win when the experiment did not end kept: a guard discarded
    it, its commit failed (invalid), or the incumbent moved and it is measured again."""
    j = journal
    guard, commit, moved = (add(j, {"LR": v}) for v in (1, 2, 3))
    for e in (guard, commit, moved):
        decide(j, e, 0, 0.02, "promoted")
        j.set_decision(e, Decision(Verdict.KEEP, "r", 0.03, 0.02, 0.04, 4, 8, 0.005,
                                   details={LEVEL: 1}))
    j.set_state(guard, ExperimentState.DISCARDED, note="the effect is real but guard ...")
    j.set_state(commit, ExperimentState.INVALID, note="cannot commit: ...")
    j.set_state(moved, ExperimentState.RUNNING)
    last = {r.experiment_id: r.outcome for r in j.level_results() if r.level == 1}
    assert last == {guard: "discarded", commit: "invalid", moved: "measuring"}
    p = agreement(SPEC, j.level_results(), j.experiments(patches=False)).pairs[0]
    assert (p.promoted, p.reached, p.held) == (3, 1, 0)
    assert [(r.experiment_id, r.next_outcome) for r in p.reversed] == [(guard, "discarded")]


def test_three_levels_give_two_pairs_and_an_empty_journal_says_so(journal: Journal) -> None:
    spec = FidelitySpec("TIME_BUDGET", (30, 120, 300))
    assert agreement(spec, [], []).lines() == [
        "at TIME_BUDGET=30: no candidate promoted to TIME_BUDGET=120 yet",
        "at TIME_BUDGET=120: no candidate promoted to TIME_BUDGET=300 yet"]
    e = add(journal, {"LR": 1})
    decide(journal, e, 0, 0.02, "promoted")
    decide(journal, e, 1, 0.01, "promoted")
    decide(journal, e, 2, 0.01)
    a = agreement(spec, journal.level_results(), journal.experiments())
    assert [(p.label, p.held, p.reached) for p in a.pairs] == [
        ("TIME_BUDGET=30", 1, 1), ("TIME_BUDGET=120", 1, 1)]
    assert a.as_dict()["lines"] == a.lines()


def test_spearman_ranks_ties_and_no_spread() -> None:
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.8660254)
    assert spearman([1, 1, 1], [1, 2, 3]) is None
