"""Never a silent fallback: where no sandbox works, the run says so.

``ASSAY_SANDBOX=off`` makes the machine look as if it could not sandbox. An ``agent`` run
then refuses to start (exit 2, naming ``--unconfined``); with ``--unconfined`` it runs and
``status`` and every experiment say so; a ``queue`` run prints one warning.
"""

from __future__ import annotations

from pathlib import Path

from tests.security.attacks import BY_NAME
from tests.security.kit import run_attack


def test_an_agent_run_without_a_sandbox_is_refused(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["agent-without-sandbox"], tmp_path)
    assert verdict.blocked, verdict.line


def test_an_unconfined_agent_run_says_so_on_every_experiment(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["agent-unconfined"], tmp_path)
    assert verdict.blocked, verdict.line


def test_a_queue_run_without_a_sandbox_warns_once(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["queue-unsandboxed"], tmp_path)
    assert verdict.blocked, verdict.line
