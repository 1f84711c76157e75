"""The proposer conformance kit: what any :class:`~assay.proposers.base.Proposer` owes.

Subclass :class:`ProposerContract` as ``Test...`` and build a :class:`ProposerCase`::

    class TestMyProposer(ProposerContract):
        def make_case(self, tmp_path: Path) -> ProposerCase:
            target = ...  # a target in a git repository under tmp_path
            return ProposerCase(MyProposer(), target, head_commit)

The contract:

- ``propose(ctx, n)`` returns at most ``n`` candidates, each based on the incumbent;
- ``[]`` means exhausted: once it returned nothing, it returns nothing again (and a case
  that sets ``exhausts_within`` must get there in that many rounds);
- ``tell`` is idempotent: telling the same finished experiment twice leaves the proposer
  where telling it once does (the next proposals are the same);
- no edit outside the scope: every candidate not marked rejected changes only editable,
  unprotected files and declared parameters, and proposing leaves the target's own tree
  as it was.

Needs pytest.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..bench.meter import Meter
from ..config.prices import for_target
from ..config.spec import Target
from ..errors import PatchError
from ..model import Candidate, Decision, Experiment, ExperimentState, Incumbent, Verdict
from ..proposers.base import ExperimentSummary, ProposalContext, Proposer
from ..repo.workspace import check_scope


@dataclass
class ProposerCase:
    """A proposer ready to propose for ``target`` at commit ``commit``."""

    proposer: Proposer
    target: Target
    commit: str
    files: dict[str, str] | None = None  # the editable files; None: read them from disk
    checkout: Callable[[str], Path] | None = None
    exhausts_within: int | None = None  # rounds of one candidate before it must say []
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    def proposal_context(self, history: Sequence[ExperimentSummary] = (),
                tried: frozenset[str] = frozenset()) -> ProposalContext:
        files = self.files
        if files is None:
            files = {}
            for path in _tree(self.target.root):
                if self.target.is_editable(path) and not self.target.is_protected(path):
                    files[path] = (self.target.root / path).read_text(errors="replace")
        return ProposalContext(target=self.target, incumbent=Incumbent(self.commit),
                               history=tuple(history), tried_digests=tried,
                               checkout=self.checkout, files=files, delta=0.01,
                               meter=Meter(for_target(self.target)))  # uncapped, unrecorded

    def close(self) -> None:
        self.proposer.close()
        for fn in self.cleanup:
            fn()


def _tree(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".assay")]
        for name in filenames:
            out.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    return sorted(out)


def tree_hash(root: Path) -> dict[str, str]:
    """Every file under ``root`` (but .git and .assay) with its SHA-256."""
    return {p: hashlib.sha256((root / p).read_bytes()).hexdigest() for p in _tree(root)}


def finished(cand: Candidate, seq: int, value: float = 1.0) -> Experiment:
    """``cand`` measured and discarded (a finished experiment to tell a proposer)."""
    d = Decision(Verdict.DISCARD, "no measurable effect", effect=-0.001,
                 details={"candidate_value": value, "incumbent_value": value})
    return Experiment(f"e{seq:04d}", seq, ExperimentState.DISCARDED, cand, 0.0, 0.0,
                      decision=d, note="no measurable effect", digest=cand.written_digest)


def summary(exp: Experiment) -> ExperimentSummary:
    d = exp.decision
    return ExperimentSummary(exp.id, exp.state.value, exp.candidate.hypothesis,
                             exp.candidate.proposer, dict(exp.candidate.params),
                             d.effect if d else None, None, None, exp.note)


@dataclass
class Session:
    """A kit's conversation with a proposer: what it proposed and was told."""

    case: ProposerCase
    told: list[Experiment] = field(default_factory=list)

    def ask(self, n: int) -> list[Candidate]:
        tried = frozenset(e.digest for e in self.told)  # the journal's: what was written
        ctx = self.case.proposal_context([summary(e) for e in self.told], tried)
        return self.case.proposer.propose(ctx, n)

    def tell(self, cand: Candidate, times: int = 1) -> Experiment:
        exp = finished(cand, len(self.told) + 1, 1.0 + 0.01 * len(self.told))
        for _ in range(times):
            self.case.proposer.tell(exp)
        self.told.append(exp)
        return exp


def _key(cands: Sequence[Candidate]) -> list[tuple[str, str]]:
    return [(c.digest, c.hypothesis) for c in cands]


class ProposerContract:
    """What every proposer owes the loop; override :meth:`make_case`."""

    rounds = 4  # proposal rounds each test drives

    def make_case(self, tmp_path: Path) -> ProposerCase:
        raise NotImplementedError

    @pytest.fixture
    def case(self, tmp_path: Path) -> Iterator[ProposerCase]:
        c = self.make_case(tmp_path / "one")
        try:
            yield c
        finally:
            c.close()

    def test_at_most_n_candidates_on_the_incumbent(self, case: ProposerCase) -> None:
        s = Session(case)
        for n in (1, 2, 3, *([1] * (self.rounds - 3))):
            cands = s.ask(n)
            assert len(cands) <= n, (n, cands)
            for c in cands:
                assert isinstance(c, Candidate) and c.base_commit == case.commit
                s.tell(c)

    def test_empty_means_exhausted(self, case: ProposerCase) -> None:
        s = Session(case)
        limit = case.exhausts_within if case.exhausts_within is not None else self.rounds
        for _ in range(limit + 1):
            cands = s.ask(1)
            if not cands:
                assert s.ask(1) == [] and s.ask(3) == [], "it proposed again after []"
                return
            s.tell(cands[0])
        assert case.exhausts_within is None, (
            f"still proposing after {case.exhausts_within} rounds")

    def test_tell_is_idempotent(self, tmp_path: Path) -> None:
        once, twice = self.make_case(tmp_path / "once"), self.make_case(tmp_path / "twice")
        try:
            a, b = Session(once), Session(twice)
            for _ in range(self.rounds - 1):
                ca, cb = a.ask(1), b.ask(1)
                assert _key(ca) == _key(cb), "the case is not deterministic"
                if not ca:
                    return
                a.tell(ca[0], times=1)
                b.tell(cb[0], times=2)
        finally:
            once.close()
            twice.close()

    def test_no_edit_outside_the_scope(self, case: ProposerCase) -> None:
        s = Session(case)
        before = tree_hash(case.target.root)
        declared = {p.name for p in case.target.params}
        for _ in range(self.rounds):
            cands = s.ask(2)
            assert tree_hash(case.target.root) == before, "proposing changed the target"
            if not cands:
                return
            for c in cands:
                if c.meta.get("rejected"):
                    continue  # the loop records it as invalid, with the reason
                assert set(c.params) <= declared, c.params
                if c.patch.strip():
                    try:
                        check_scope(c.patch, case.target)
                    except PatchError as exc:
                        raise AssertionError(f"an edit outside the scope: {exc}") from None
                s.tell(c)
