"""A candidate cannot touch the incumbent's tree (the containment issue's findings 1 and 2).

Each attack is a queued patch whose module, when imported by the candidate's checks or
bench, rewrites a file of the incumbent's worktree next to its own (``../*-a/``), or plants
bytecode for it (an unchecked hash-based .pyc, which Python loads without looking at the
source) beside it or in the bytecode folder ``PYTHONPYCACHEPREFIX`` names. Whichever
defence stops it (the sandbox hides the tree, or the fingerprints catch the change), a user
sees the same: the candidate is not kept, no incumbent run was measured on the sabotaged
tree, the incumbent's tree holds what was committed, and an experiment marked ``invalid``
says ``tampered:`` and names the file.
"""

from __future__ import annotations

from pathlib import Path

from tests.security.attacks import BY_NAME
from tests.security.kit import Setting, run_attack


def test_a_candidate_that_slows_the_incumbents_code_is_not_kept(tmp_path: Path) -> None:
    verdict, outcome = run_attack(BY_NAME["incumbent-tree"], tmp_path)
    assert verdict.blocked, verdict.line
    assert "assay/" not in outcome.status.text or outcome.status.code == 0


def test_bytecode_planted_for_the_incumbent_is_never_run(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["incumbent-bytecode"], tmp_path)
    assert verdict.blocked, verdict.line


def test_bytecode_planted_for_another_slots_incumbent_is_never_left(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["incumbent-bytecode"], tmp_path, Setting(slots=2))
    assert verdict.blocked, verdict.line


def test_a_candidate_that_rewrites_the_incumbents_bench_is_blamed_not_the_incumbent(
        tmp_path: Path) -> None:
    verdict, outcome = run_attack(BY_NAME["incumbent-bench"], tmp_path)
    assert verdict.blocked, verdict.line
    blamed = [r["run_id"] for e in outcome.shows for r in outcome.runs(e)
              if r["role"] == "a" and r["status"] != "ok"]
    assert not blamed, f"incumbent runs blamed: {blamed}"
