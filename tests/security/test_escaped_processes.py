"""Every process of a run dies with it, however it detached (finding 7).

The candidate's bench starts ``setsid sleep`` in the background and a double-forked sleep
in a session of its own; another is running when assay itself is killed with SIGKILL. Each
sleep's duration carries digits unique to the test, so the host's ``/proc`` finds them
whatever PID namespace they ran in.
"""

from __future__ import annotations

from pathlib import Path

from tests.security.attacks import BY_NAME
from tests.security.kit import run_attack


def test_no_detached_process_outlives_its_run(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["escaped-processes"], tmp_path)
    assert verdict.blocked, verdict.line


def test_no_process_of_a_run_outlives_a_killed_assay(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["kill-nine"], tmp_path)
    assert verdict.blocked, verdict.line
