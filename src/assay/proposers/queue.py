"""`queue`: patches written by a person, proposed in file-name order.

A patch file is the output of ``git diff``, optionally preceded by header lines::

    # hypothesis: hoist the dictionary lookup out of the inner loop
    # source: https://example.org/some-paper
    diff --git a/kernel.py b/kernel.py
    ...

``[proposer.queue] path`` names a patch file or a folder of ``*.patch`` / ``*.diff`` files.
A patch without a ``# hypothesis:`` line gets its file name as the hypothesis.
"""

from __future__ import annotations

from pathlib import Path

from ..config.spec import Target
from ..errors import ProposerError
from ..journal.store import Journal
from ..model import Candidate
from .base import ProposalContext, Proposer


def read_patch_file(path: Path) -> tuple[str, str, tuple[str, ...]]:
    """(hypothesis, diff text, sources) of one queued patch file."""
    text = path.read_text(encoding="utf-8")
    hypothesis, sources, body = "", [], []
    in_header = True
    for line in text.splitlines(keepends=True):
        if in_header and line.startswith("#"):
            key, _, value = line[1:].partition(":")
            key = key.strip().lower()
            if key == "hypothesis":
                hypothesis = value.strip()
            elif key == "source":
                sources.append(value.strip())
            continue
        in_header = False
        body.append(line)
    diff = "".join(body)
    if "diff --git" not in diff and "\n+++ " not in "\n" + diff:
        raise ProposerError(f"{path}: no unified diff found (expected `git diff` output after the "
                            "`# hypothesis:` header)")
    return hypothesis or path.stem, diff, tuple(sources)


def make_proposer(target: Target, journal: Journal) -> QueueProposer:
    """The queue of ``target``, less the patch files the journal's experiments measured."""
    queue = QueueProposer.from_target(target)
    queue.skip_tried({str(e.candidate.meta.get("file")) for e in journal.experiments(patches=False)
                      if e.candidate.proposer == "queue"})
    return queue


class QueueProposer(Proposer):
    name = "queue"

    def __init__(self, files: list[Path]) -> None:
        self.files = files
        self._next = 0
        self.retry = False  # measure again a patch an earlier experiment already measured
        self.tried: list[Path] = []  # files skipped (or retried) as already measured

    @classmethod
    def from_target(cls, target: Target) -> QueueProposer:
        sec = target.section("proposer.queue")
        raw = sec.get("path", str, "patches")
        sec.reject_unknown()
        return cls(cls.collect(target.root / raw, where=f"{target.config_path} [proposer.queue]"))

    @staticmethod
    def collect(path: Path, where: str = "") -> list[Path]:
        if path.is_file():
            return [path]
        if path.is_dir():
            return sorted(p for p in path.iterdir() if p.suffix in (".patch", ".diff"))
        raise ProposerError(f"{where}: queued patch path {path} does not exist; create it or set "
                            "[proposer.queue] path")

    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        out: list[Candidate] = []
        while len(out) < n and self._next < len(self.files):
            f = self.files[self._next]
            self._next += 1
            hypothesis, diff, sources = read_patch_file(f)
            cand = Candidate(base_commit=context.incumbent.commit, patch=diff,
                             hypothesis=hypothesis, proposer=self.name, sources=sources,
                             meta={"file": f.name})
            if cand.digest in context.tried_digests and not self.retry:
                if f not in self.tried:
                    self.tried.append(f)
                continue
            out.append(cand)
        return out

    def skip_tried(self, names: set[str]) -> None:
        """Skip the files whose experiments already exist (all kept in ``tried``)."""
        self.tried = [f for f in self.files if f.name in names]
        if not self.retry:
            self._all = list(self.files)
            self.files = [f for f in self.files if f.name not in names]

    def retry_tried(self) -> None:
        """Propose again, in order, the files that earlier experiments already measured."""
        self.retry = True
        self.files = getattr(self, "_all", self.files)
