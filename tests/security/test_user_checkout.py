"""Your tree is never touched (finding 6, and the same from a candidate's run).

The agent proposer's command, and a candidate's bench, append to files of the user's own
checkout (an unprotected README.md, the protected bench.py, the editable work.py). After
the run the checkout must be exactly what was committed, nothing added.
"""

from __future__ import annotations

from pathlib import Path

from tests.security.attacks import BY_NAME
from tests.security.kit import run_attack


def test_the_agent_proposer_cannot_write_the_users_checkout(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["user-checkout-agent"], tmp_path)
    assert verdict.blocked, verdict.line


def test_a_candidates_run_cannot_write_the_users_checkout(tmp_path: Path) -> None:
    verdict, outcome = run_attack(BY_NAME["user-checkout-bench"], tmp_path)
    assert verdict.blocked, verdict.line
    e = outcome.by_hypothesis("checkout-bench")
    assert e is not None and e["state"] != "kept"
    if e["state"] == "invalid":
        assert e["note"].startswith("tampered:"), e["note"]
