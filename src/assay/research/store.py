"""Where research keeps what it found: hypotheses in the journal, the brief on disk.

Hypotheses are a set. Each one has a key naming its idea (its kind, the ops it touches
and the files it cites, line numbers dropped); the journal's meta entry ``research.keys``
maps keys to hypothesis ids. A re-run that finds the same idea again updates that
hypothesis (text, sources, score) in place, so its id stays and nothing is stored twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..config import Target
from ..model import Experiment, ExperimentState, Hypothesis
from .brief import ResearchHypothesis


class ResearchJournal(Protocol):
    """The part of :class:`assay.journal.Journal` research reads and writes."""

    def add_hypothesis(self, text: str, sources: Sequence[str], source_kind: str,
                       score: float = 0.0) -> int: ...

    def update_hypothesis(self, hid: int, text: str, sources: Sequence[str],
                          score: float) -> None: ...

    def hypotheses(self, status: str | None = None) -> list[Hypothesis]: ...

    def experiments(self, states: Sequence[ExperimentState] | None = None, *,
                    patches: bool = True) -> list[Experiment]: ...

    def state_counts(self) -> dict[str, int]: ...

    def event(self, kind: str, message: str, experiment_id: str | None = None,
              **data: Any) -> None: ...

    def research_wave(self) -> int: ...

    def set_research_wave(self, decided: int) -> None: ...

    def research_keys(self) -> dict[str, int]: ...

    def set_research_keys(self, keys: Mapping[str, int]) -> None: ...


def brief_path(target: Target) -> Path:
    """Where the research brief lives: ``.assay/research.md``."""
    return target.state_dir / "research.md"


def read_brief(target: Target) -> str:
    """The research brief's text for a proposer's prompt ('' before any research)."""
    try:
        return brief_path(target).read_text(encoding="utf-8")
    except OSError:
        return ""


def write_brief(target: Target, text: str) -> Path:
    """Write the brief atomically; return its path."""
    path = brief_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def store_hypotheses(journal: ResearchJournal, hyps: Sequence[ResearchHypothesis]) -> None:
    """Give each hypothesis its journal id: the stored one with its key, else a new one."""
    keys = journal.research_keys()
    stored = {h.id: h for h in journal.hypotheses()}
    by_sources = {(h.source_kind, tuple(h.sources)): h.id for h in stored.values()}
    for h in hyps:
        hid = keys.get(h.key) if h.key else None
        if hid is not None and hid not in stored:
            hid = None  # the key points at a hypothesis no longer there
        if hid is None:
            hid = by_sources.get((h.source_kind, tuple(h.sources)))
        if hid is None:
            hid = journal.add_hypothesis(h.text, h.sources, h.source_kind, h.score)
        else:
            journal.update_hypothesis(hid, h.text, h.sources, h.score)
        h.id = hid
        if h.key:
            keys[h.key] = hid
    journal.set_research_keys(keys)
