"""A candidate's run cannot write the repository's git folder.

Hooks planted there (``reference-transaction``, ``post-checkout``, ``post-commit`` ...) are
run by git, as the user and outside any sandbox, the next time assay (or the user) moves a
ref or checks out a tree.
"""

from __future__ import annotations

from pathlib import Path

from tests.security.attacks import BY_NAME
from tests.security.kit import run_attack


def test_no_hook_can_be_planted_from_a_run(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["git-hooks"], tmp_path)
    assert verdict.blocked, verdict.line
