"""An in-memory twin of the git workspace, for loops that need no repository.

:class:`MemoryRepository` implements :class:`assay.repo.repository.Repository`: kept candidates
become commits with deterministic ids (a hash of parent, patch, parameters and message),
recorded in :attr:`MemoryRepository.commits`; patches are recorded, not applied, so every
commit shows the files it started with. Use it with a function-backed executor
(:class:`assay.executors.function.FunctionExecutor`) and ``Journal.memory()``.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import WorkspaceError
from ..model import ParamValue

ROOT_COMMIT = "0" * 40


@dataclass(frozen=True)
class MemoryCommit:
    sha: str
    parent: str
    patch: str
    params: Mapping[str, ParamValue]
    message: str


class MemoryRepository:
    """A run branch in memory. ``files`` are the editable files proposers may read."""

    def __init__(self, run_name: str = "main", files: Mapping[str, str] | None = None,
                 head: str = ROOT_COMMIT) -> None:
        self.run_name = run_name
        self.files = dict(files or {})
        self._head = head
        self.tip: str | None = None
        self.commits: dict[str, MemoryCommit] = {}
        self._trees: Path | None = None

    @property
    def branch(self) -> str:
        return f"assay/{self.run_name}"

    def head(self) -> str:
        return self._head

    def dirty(self) -> bool:
        return False

    def ensure_branch(self, base: str) -> str:
        if self.tip is None:
            self.tip = base
        return self.tip

    def commit_candidate(self, base: str, patch: str, params: Mapping[str, ParamValue],
                         message: str) -> str:
        body = json.dumps([base, patch, dict(params), message], sort_keys=True, default=str)
        sha = hashlib.sha1(body.encode()).hexdigest()
        self.commits[sha] = MemoryCommit(sha, base, patch, dict(params), message)
        self.tip = sha
        return sha

    def checkout(self, name: str, commit: str) -> Path:
        if self._trees is None:
            self._trees = Path(tempfile.mkdtemp(prefix="assay-memory-"))
        path = self._trees / name
        for rel, text in self.files.items():
            f = path / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(text)
        return path

    def file_at(self, commit: str, path: str) -> str:
        if path not in self.files:
            raise WorkspaceError(f"{path}: no such file in the memory repository")
        return self.files[path]

    def editable_files(self, commit: str, limit_bytes: int = 200_000) -> dict[str, str]:
        out: dict[str, str] = {}
        total = 0
        for rel, text in self.files.items():
            total += len(text.encode())
            if total > limit_bytes:
                break
            out[rel] = text
        return out
