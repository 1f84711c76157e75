"""Rank agreement between fidelity levels, measured from the journal's verdicts.

A multi-fidelity session (``[fidelity]``) screens candidates at a cheap level and decides at
the last one; the screen is only worth its savings when a cheap level's verdict holds at the
next. :func:`agreement` measures that, for every adjacent pair of levels ``i → i+1``, from
each candidate's verdict per level (:class:`assay.model.LevelResult`) and what it changes:

- **promoted**: candidates whose outcome at level ``i`` is ``promoted``;
- **reached**: of those, the ones with a verdict at ``i+1`` (outcome ``promoted``,
  ``stopped``, ``kept`` or ``discarded``; one still measuring, or ended invalid, crashed or
  in a conflict there has none);
- **held** ("also won"): of those, the ones that won at ``i+1``: outcome ``promoted`` or
  ``kept`` there *and* a positive effect there;
- **reversed**: the reached ones that did not win at ``i+1`` although their effect at ``i``
  was positive, named with both effects (``MODEL_DIM=768 +2.1% → −0.8%``);
- **ρ**: Spearman's rank correlation of the effects at ``i`` and ``i+1`` over the
  candidates with a verdict and an effect at both, when there are three or more. Only
  promoted candidates reach ``i+1``, so ρ is over a range the screen has already cut (which
  lowers it), and over a handful of candidates it is a rough sign, not a measurement;
- **warnings** per kind of change (each parameter a candidate sets, ``patch`` for one that
  changes files): a level misleads on a kind when two or more of its promoted candidates
  of that kind reached ``i+1`` and at most a third of them held.

Candidates stopped at level ``i`` are never measured at ``i+1``: how many wins a level
throws away is not measured here (``assay plan`` simulates it). Effects are fractions,
positive = better. Every face (``assay status``, the report, ``assay plan``) shows this one
result: :meth:`Agreement.lines` are its words, :meth:`Agreement.as_dict` its data.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

from ..config.fidelity import FidelitySpec
from ..model import Experiment, LevelResult

VERDICTS = ("promoted", "stopped", "kept", "discarded")  # outcomes that are a level's verdict
WINS = ("promoted", "kept")
MIN_RHO = 3  # candidates with effects at both levels before a rank correlation is given
FEW_RHO = 10  # below this many, ρ is called a rough sign
MISLEAD_MIN = 2  # promoted candidates of a kind that reached the next level before a warning
PATCH = "patch"


@dataclass(frozen=True)
class Reversal:
    """A promoted candidate, positive at one level, that did not win at the next."""

    experiment_id: str
    label: str  # what it changes: ``MODEL_DIM=768`` or its hypothesis
    effect: float  # at the lower level
    next_effect: float | None  # at the next level
    next_outcome: str


@dataclass(frozen=True)
class KindRow:
    """One kind of change at one pair of levels: its promoted candidates that reached the
    next level, and how many of them held."""

    kind: str
    reached: int
    held: int
    misleads: bool


@dataclass(frozen=True)
class LevelPair:
    """How a level's verdicts held at the next level."""

    level: int
    next_level: int
    label: str  # ``TIME_BUDGET=30``
    next_label: str
    promoted: int
    reached: int
    held: int
    reversed: tuple[Reversal, ...]
    rho: float | None  # Spearman's ρ of the effects (None below MIN_RHO candidates)
    rho_n: int  # candidates with an effect at both levels
    kinds: tuple[KindRow, ...]

    def summary(self) -> str:
        """``at TIME_BUDGET=30, 3 of 5 promoted candidates also won at TIME_BUDGET=300 …``"""
        if not self.promoted:
            return f"at {self.label}: no candidate promoted to {self.next_label} yet"
        if not self.reached:
            return (f"at {self.label}: {self.promoted} promoted to {self.next_label}, none "
                    "with a verdict there yet")
        text = (f"at {self.label}, {self.held} of {self.reached} promoted candidates with a "
                f"verdict at {self.next_label} also won there")
        waiting = self.promoted - self.reached
        if waiting:
            text += f" ({waiting} more promoted, no verdict there yet)"
        if self.rho is not None:
            few = " (few: a rough sign)" if self.rho_n < FEW_RHO else ""
            text += f"; ρ = {self.rho:.2f} over {self.rho_n}{few}"
        elif self.reached:
            text += f"; ρ needs {MIN_RHO} candidates with effects at both levels, " \
                    f"{self.rho_n} so far"
        if self.reversed:
            text += "; reversed: " + ", ".join(
                f"{r.label} ({pct(r.effect)} → {pct(r.next_effect)})" for r in self.reversed)
        return text

    def warnings(self) -> list[str]:
        """One line per kind of change this level misleads on."""
        return [f"{self.label} misleads on {k.kind}: {k.held} of {k.reached} promoted "
                f"{k.kind} changes also won at {self.next_label}; decide {k.kind} at "
                f"{self.next_label}" for k in self.kinds if k.misleads]


@dataclass(frozen=True)
class Agreement:
    """Every adjacent pair of levels, cheapest first."""

    param: str
    pairs: tuple[LevelPair, ...]

    def lines(self) -> list[str]:
        """The words every face shows: one summary per pair of levels."""
        return [p.summary() for p in self.pairs]

    def warnings(self) -> list[str]:
        return [w for p in self.pairs for w in p.warnings()]

    def as_dict(self) -> dict[str, object]:
        return {"param": self.param, "pairs": [asdict(p) for p in self.pairs],
                "lines": self.lines(), "warnings": self.warnings()}


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1%}"


def kinds_of(e: Experiment) -> tuple[str, ...]:
    """What kind of change an experiment is: each parameter it sets, ``patch`` when it
    changes files."""
    out = sorted(e.candidate.params)
    if e.has_patch:
        out.append(PATCH)
    return tuple(out)


def label_of(e: Experiment, limit: int = 48) -> str:
    """``MODEL_DIM=768`` for a parameter change; a patch's hypothesis (cut), else its id."""
    parts = [f"{k}={v}" for k, v in sorted(e.candidate.params.items())]
    if e.has_patch or not parts:
        hyp = " ".join(e.candidate.hypothesis.split())
        if len(hyp) > limit:
            hyp = hyp[:limit - 1].rstrip() + "…"
        parts.append(hyp or e.id)
    return f"{e.id} " + ", ".join(parts)


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation (ties share their mean rank); None when either side has
    no spread or fewer than two values."""
    if len(xs) != len(ys) or len(xs) < 2:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx <= 0 or syy <= 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def _ranks(v: Sequence[float]) -> list[float]:
    order = sorted(range(len(v)), key=lambda i: v[i])
    ranks = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _won(r: LevelResult) -> bool:
    return r.outcome in WINS and r.effect is not None and r.effect > 0


def agreement(spec: FidelitySpec, results: Iterable[LevelResult],
              experiments: Iterable[Experiment]) -> Agreement:
    """How each level's verdicts held at the next, from the journal's level results and the
    experiments they belong to (what each changes)."""
    exps = {e.id: e for e in experiments}
    by_exp: dict[str, dict[int, LevelResult]] = defaultdict(dict)
    for r in results:
        by_exp[r.experiment_id][r.level] = r
    pairs = tuple(_pair(spec, lv, by_exp, exps) for lv in range(spec.last))
    return Agreement(spec.param, pairs)


def _pair(spec: FidelitySpec, lv: int, by_exp: Mapping[str, Mapping[int, LevelResult]],
          exps: Mapping[str, Experiment]) -> LevelPair:
    promoted = reached = held = 0
    reversed_: list[Reversal] = []
    xs: list[float] = []
    ys: list[float] = []
    kinds: dict[str, list[bool]] = defaultdict(list)
    for exp_id, levels in by_exp.items():
        here, there = levels.get(lv), levels.get(lv + 1)
        if here is None or here.outcome != "promoted":
            continue
        promoted += 1
        if there is None or there.outcome not in VERDICTS:
            continue
        reached += 1
        won = _won(there)
        held += won
        e = exps.get(exp_id)
        for kind in kinds_of(e) if e is not None else ():
            kinds[kind].append(won)
        if here.effect is not None and there.effect is not None:
            xs.append(here.effect)
            ys.append(there.effect)
        if not won and here.effect is not None and here.effect > 0:
            reversed_.append(Reversal(exp_id, label_of(e) if e is not None else exp_id,
                                      here.effect, there.effect, there.outcome))
    rho = spearman(xs, ys) if len(xs) >= MIN_RHO else None
    rows = tuple(KindRow(k, len(v), sum(v), len(v) >= MISLEAD_MIN and 3 * sum(v) <= len(v))
                 for k, v in sorted(kinds.items()))
    return LevelPair(lv, lv + 1, spec.label(lv), spec.label(lv + 1), promoted, reached, held,
                     tuple(reversed_), rho, len(xs), rows)
