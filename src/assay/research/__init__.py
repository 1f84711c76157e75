"""The research phase: read before proposing.

:func:`run_research` profiles the benchmark, places it on a roofline (measuring the
machine's peaks where the hardware table has no row), compares the target's code with
other implementations (competitors, forks, the project's other backends) and diffs their
versions of the hot functions, searches documents, papers and repositories for passages
about the hot spots, and writes a ranked set of hypotheses into the journal and
``.assay/research.md``. After each wave of experiments :func:`after_wave` adds what the
wave showed to the brief and re-ranks.

Modules: ``config`` (``[research]``), ``run`` (the steps), ``profile``, ``roofline`` and
``peaks`` (measured peaks), ``gaps`` and ``diffs`` (other implementations), ``sources``,
``index`` and ``remote`` (what is read), ``brief`` (ranking and the Markdown), ``store``
(journal and brief on disk), ``research_journal`` (the journal's part research uses),
``waves`` (lessons of finished experiments), ``rerank`` (the re-rank after a wave).
"""

from __future__ import annotations

from .brief import ResearchHypothesis
from .config import ResearchConfig
from .rerank import after_wave
from .research_journal import ResearchJournal
from .result import ResearchResult
from .run import run_research
from .sources import SourceError
from .store import brief_path, read_brief

__all__ = [
    "ResearchConfig",
    "ResearchHypothesis",
    "ResearchJournal",
    "ResearchResult",
    "SourceError",
    "after_wave",
    "brief_path",
    "read_brief",
    "run_research",
]
