"""The proposer interface and the context every proposal reads.

A proposer is a small object with one required method::

    propose(context, n) -> list[Candidate]

It returns at most ``n`` candidates (one wave: n = free slots). It may return fewer, and
an empty list means it has nothing more to propose (the loop then stops). ``tell`` is
called with every finished experiment the proposer produced, so search-based proposers
(Optuna) learn from the decided metric. Proposers never touch the journal or the user's
tree; the loop validates every candidate (scope, protected paths, duplicates) after.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path

from ..bench.meter import Meter
from ..config.spec import Target
from ..errors import ProposerError
from ..model import Candidate, Experiment, Hypothesis, Incumbent


@dataclass(frozen=True)
class ExperimentSummary:
    """What a proposer may know about a past experiment: never full logs, never holdout."""

    id: str
    state: str
    hypothesis: str
    proposer: str
    params: Mapping[str, object]
    effect: float | None
    lo: float | None
    hi: float | None
    reason: str
    diffstat: str = ""


class LazyFiles(Mapping[str, str]):
    """The editable files, read from git only when a proposer first looks at them."""

    def __init__(self, load: Callable[[], Mapping[str, str]]) -> None:
        self._load = load
        self._data: Mapping[str, str] | None = None

    def _get(self) -> Mapping[str, str]:
        if self._data is None:
            self._data = self._load()
        return self._data

    def __getitem__(self, key: str) -> str:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


@dataclass(frozen=True)
class ProposalContext:
    target: Target
    incumbent: Incumbent
    history: Sequence[ExperimentSummary] = ()
    noise_floor: float | None = None  # sd of one pair's log-ratio, pooled over slots
    delta: float = 0.0
    research_brief: str = ""
    hypotheses: Sequence[Hypothesis] = ()
    # Every digest in the journal (a read-only view the loop keeps current: no copy per ask).
    tried_digests: Set[str] = frozenset()
    # Returns a clean checkout of the incumbent, for proposers that read or edit files.
    checkout: Callable[[str], Path] | None = None
    files: Mapping[str, str] = field(default_factory=dict)  # editable files at the incumbent
    # Checks each model call against the spending caps and records it (assay.bench.meter); a
    # proposer that calls a model refuses a context without one (metered()).
    meter: Meter | None = None

    def metered(self, proposer: str) -> Meter:
        """The meter, for a proposer about to call a model: never an uncounted call."""
        if self.meter is None:
            raise ProposerError(f"the {proposer} proposer calls a model, and its context has no "
                                "meter to count and cap the calls: pass meter=Meter(...) "
                                "(assay.bench.meter) in the ProposalContext, as the loop does")
        return self.meter


class Proposer(ABC):
    name: str = "base"

    @abstractmethod
    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        """Up to ``n`` candidates against ``context.incumbent``; [] when exhausted."""

    def tell(self, experiment: Experiment) -> None:  # noqa: B027 - optional hook
        """Learn from a finished experiment this proposer produced."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (studies, clients, processes)."""
