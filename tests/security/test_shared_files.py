"""Nothing one side writes outside its tree reaches the other side's runs.

Five channels a bench shares with the other side without either tree: a cache in ``$HOME``
and one in ``/tmp`` (where compile and data caches live), a ``.pth`` file in site-packages
(run by every interpreter at start), the byte-compiled copy of a module the bench imports
from the environment, and the compile cache assay keeps per slot (``[run] compile_cache``,
which both sides of a slot share). Each attack halves what the incumbent's runs report, so
an unblocked one is kept. A sixth leaves a CPU hog running while the incumbent is measured.
"""

from __future__ import annotations

from pathlib import Path

from tests.security.attacks import BY_NAME
from tests.security.kit import run_attack


def test_a_home_cache_written_by_the_candidate_never_reaches_the_incumbent(
        tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["home-cache"], tmp_path)
    assert verdict.blocked, verdict.line


def test_a_tmp_cache_written_by_the_candidate_never_reaches_the_incumbent(
        tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["tmp-cache"], tmp_path)
    assert verdict.blocked, verdict.line


def test_a_pth_file_cannot_be_planted_in_site_packages(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["pth-file"], tmp_path)
    assert verdict.blocked, verdict.line


def test_a_byte_compiled_module_outside_the_tree_cannot_be_poisoned(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["pyc-outside-tree"], tmp_path)
    assert verdict.blocked, verdict.line


def test_a_cpu_hog_never_runs_beside_the_incumbent(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["cpu-hog"], tmp_path)
    assert verdict.blocked, verdict.line


def test_a_compile_cache_shared_by_the_slot_never_carries_the_candidates_writes(
        tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["compile-cache"], tmp_path)
    assert verdict.blocked, verdict.line
