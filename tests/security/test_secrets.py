"""The orchestrator's secrets stay in the orchestrator (finding 4).

The bench's own environment is scrubbed, but a process can read another's initial
environment through ``/proc/<pid>/environ``. The attack walks its ancestors and every
``/proc`` entry for ``OPENAI_API_KEY`` and ``ANTHROPIC_API_KEY``, which ``assay run`` got
from the user's shell, and writes what it finds where it can. Neither value may appear in
anything the run wrote or any command shows; with the sandbox or without it.
"""

from __future__ import annotations

from pathlib import Path

from tests.security.attacks import BY_NAME
from tests.security.kit import run_attack


def test_no_key_reaches_a_sandboxed_bench(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["secrets"], tmp_path)
    assert verdict.blocked, verdict.line


def test_no_key_reaches_an_unsandboxed_bench(tmp_path: Path) -> None:
    verdict, _ = run_attack(BY_NAME["secrets-unsandboxed"], tmp_path)
    assert verdict.blocked, verdict.line
