"""The re-rank after a wave: what finished experiments taught, into the brief and journal.

:func:`after_wave` runs between waves of experiments: it reads the lessons
(:mod:`.waves`), re-scores the last research's hypotheses with them, stores the scores in
the journal and rewrites the brief's lessons and hypotheses sections.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..config.spec import Target
from ..model import ExperimentState
from .brief import ResearchHypothesis, choose, render_hypotheses, render_lessons, score_all
from .research_journal import ResearchJournal
from .store import read_brief, write_brief
from .waves import WAVE_SHARE, last_research, lessons


def after_wave(target: Target, journal: ResearchJournal) -> bool:
    """Re-rank after a wave: lessons into the brief, scores into the journal.

    Cheap when research never ran (one file lookup) or too little was decided since the
    last re-rank (one count). A wave is one decision while the journal is small, and a
    fiftieth of the decided experiments when it is large (a re-rank reads every decided
    experiment, so its cost per experiment stays bounded). True when the brief was
    rewritten.
    """
    last = last_research(target)
    if last is None:
        return False
    counts = journal.state_counts()  # one indexed count
    decided = (counts.get(ExperimentState.KEPT.value, 0)
               + counts.get(ExperimentState.DISCARDED.value, 0))
    before = journal.research_wave()
    if decided - before < max(1, before // WAVE_SHARE):
        return False
    journal.set_research_wave(decided)
    brief = read_brief(target)
    if not brief:
        return False
    known = {f.name for f in ResearchHypothesis.__dataclass_fields__.values()}
    hyps = [ResearchHypothesis(**{k: tuple(v) if isinstance(v, list) else v  # type: ignore[arg-type]
                                  for k, v in h.items() if k in known})
            for h in last.get("hypotheses", [])]
    found = lessons(journal, target)
    score_all(hyps, found, bool(last.get("hot_path")))
    hyps = choose(hyps, len(hyps))
    for h in hyps:
        if h.id is not None:
            journal.update_hypothesis(h.id, h.text, h.sources, h.score)
    section = [*render_lessons(found), *render_hypotheses(hyps)]
    write_brief(target, replace_sections(brief, section))
    journal.event("research", f"research: re-ranked after wave ({decided} decided, "
                  f"{len(found)} lessons)", lessons=[lesson.text for lesson in found])
    return True


def replace_sections(brief: str, section: Sequence[str]) -> str:
    """The brief with its lessons and hypotheses sections replaced by ``section``."""
    lines = brief.splitlines()
    out: list[str] = []
    skipping = False
    inserted = False
    for line in lines:
        if line.startswith("## "):
            skipping = line in ("## What the waves showed", "## Hypotheses, ranked")
            if skipping and not inserted:
                out.extend(section)
                inserted = True
        if not skipping:
            out.append(line)
    if not inserted:
        out.extend(section)
    return "\n".join(out) + "\n"
