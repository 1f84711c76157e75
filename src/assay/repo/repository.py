"""What the loop needs from the repository it optimizes, as a protocol.

:class:`~assay.repo.workspace.Workspace` (git worktrees and a run branch) implements it;
:class:`assay.testing.MemoryRepository` is an in-memory twin for simulations and tests
that need no git. Executors that build and run code need the git workspace itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..model import ParamValue


@runtime_checkable
class Repository(Protocol):
    """The run branch: where kept candidates are committed, and what proposers read."""

    run_name: str

    @property
    def branch(self) -> str:
        """The run branch's name (``assay/<run name>``)."""
        ...

    def head(self) -> str:
        """The commit the run starts from (HEAD of the target)."""
        ...

    def dirty(self) -> bool:
        """Whether the target has uncommitted changes (they are not measured)."""
        ...

    def ensure_branch(self, base: str) -> str:
        """Create the run branch at ``base`` unless it exists; its tip."""
        ...

    def commit_candidate(self, base: str, patch: str, params: Mapping[str, ParamValue],
                         message: str) -> str:
        """Commit ``base`` + ``patch`` + parameter assignments on the run branch; its sha.

        Raises :class:`~assay.errors.PatchError` when the patch does not apply.
        """
        ...

    def checkout(self, name: str, commit: str) -> Path:
        """A clean tree at ``commit`` for a proposer to read or edit."""
        ...

    def file_at(self, commit: str, path: str) -> str:
        """The text of ``path`` at ``commit``; :class:`~assay.errors.WorkspaceError` when
        the commit has no such file."""
        ...

    def editable_files(self, commit: str, limit_bytes: int = 200_000) -> dict[str, str]:
        """The editable text files at ``commit``."""
        ...
