"""The part of the journal research reads and writes, as a protocol (a test passes a fake)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..model import Experiment, ExperimentState, Hypothesis


class ResearchJournal(Protocol):
    """The part of :class:`assay.journal.store.Journal` research reads and writes."""

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
