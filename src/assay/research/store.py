"""Where research keeps what it found: hypotheses in the journal, the brief on disk.

Hypotheses are a set. Each one has a key naming its idea (its kind, the ops it touches
and the files it cites, line numbers dropped); the journal's meta entry ``research.keys``
maps keys to hypothesis ids. A re-run that finds the same idea again updates that
hypothesis (text, sources, score) in place, so its id stays and nothing is stored twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..config.spec import Target
from .brief import ResearchHypothesis
from .research_journal import ResearchJournal


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
