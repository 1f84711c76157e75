"""The history a proposer reads: built lazily, settled before the journal closes, and the
digests already tried, read incrementally."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence, Set
from typing import Any

from ..errors import PatchError
from ..journal.store import Journal
from ..model import Experiment, for_proposer
from ..proposers.base import ExperimentSummary
from ..repo.workspace import patch_paths


class LazyHistory(Sequence[ExperimentSummary]):
    """The proposal history, read from the journal only if a proposer looks at it (the sweep
    proposer never does), so an ask costs the same on a journal of any size.

    It holds the experiments up to ``upto`` (the last one at its ask), however late it is
    read; the loop settles a history still unread when it ends, before the journal closes.
    """

    def __init__(self, load: Callable[[], Sequence[Experiment]], upto: int) -> None:
        self._load = load
        self._upto = upto
        self._items: list[ExperimentSummary] | None = None

    @property
    def loaded(self) -> bool:
        return self._items is not None

    def settle(self, exps: Sequence[Experiment]) -> None:
        if self._items is None:
            self._items = [history_entry(e) for e in exps if e.seq <= self._upto]

    def _all(self) -> list[ExperimentSummary]:
        if self._items is None:
            self.settle(self._load())
        assert self._items is not None
        return self._items

    def __len__(self) -> int:
        return len(self._all())

    def __getitem__(self, i: Any) -> Any:
        return self._all()[i]

    def __iter__(self) -> Any:
        return iter(self._all())

    def __bool__(self) -> bool:
        return bool(self._all())


class Histories:
    """The histories handed out to proposers, so that those never read are settled when the
    loop ends, while the journal is open (each as it stood at its ask)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._handed: list[weakref.ref[LazyHistory]] = []  # handed out, maybe unread

    def hand_out(self) -> LazyHistory:
        history = LazyHistory(self.journal.experiments, self.journal.last_seq())
        self._handed.append(weakref.ref(history))
        return history

    def settle(self) -> None:
        alive = [h for ref in self._handed if (h := ref()) is not None and not h.loaded]
        self._handed.clear()
        if alive:
            exps = self.journal.experiments()
            for h in alive:
                h.settle(exps)


class TriedDigests:
    """Every digest in the journal, read incrementally (only experiments added since), as a
    read-only view (no copy of the whole set per ask)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._digests: dict[str, None] = {}  # its keys() are the proposers' read-only view
        self._seq = 0

    def view(self) -> Set[str]:
        rows = self.journal.digests_after(self._seq)
        if rows:
            self._digests.update(dict.fromkeys(digest for _, digest in rows))
            self._seq = rows[-1][0]
        return self._digests.keys()


@functools.lru_cache(maxsize=4096)
def _patch_files(patch: str) -> tuple[str, ...]:
    """The files a patch touches, as git reads them (a history is rebuilt at every ask)."""
    try:
        return patch_paths(patch).paths
    except PatchError:
        return ()


def history_entry(e: Experiment) -> ExperimentSummary:
    """One experiment as a proposer reads it in its context's history."""
    d = e.decision
    stat = ""
    if e.candidate.patch:
        stat = ", ".join(_patch_files(e.candidate.patch))
    return ExperimentSummary(
        id=e.id, state=e.state.value, hypothesis=e.candidate.hypothesis,
        proposer=e.candidate.proposer, params=dict(e.candidate.params),
        effect=d.effect if d else None, lo=d.lo if d else None, hi=d.hi if d else None,
        reason=for_proposer(e).note or (d.reason if d else ""), diffstat=stat)
