"""Multi-fidelity sessions simulated: screen cheap, decide at the level that counts.

A scenario (:class:`Scenario`) is a session of ``candidates`` changes whose true effects at
the last level are drawn normal around 0 with sd ``spread``; at a level ``i`` below the last,
a candidate's true effect is correlated ``ρ_i`` with its last-level one, where ``ρ_0 = rho``
(the cheapest level) and ``ρ_i`` rises linearly to 1 at the last level (independent draws
per level otherwise, so the marginal spread is the same at every level).

:func:`simulate` runs such sessions, seeded, with the decision code a run uses
(:class:`assay.planning.simulate.Session`: per level its own A/A calibration and noise
tracking, the rule, confirmations): each candidate is decided at level 0; the level's
screen (``[fidelity] promote``) then promotes it or stops it: ``interval`` promotes when its
interval's upper end is above the level's δ, ``top`` when its lower bound is among the
``top`` best of the candidates screened at that level so far. A promoted candidate is
decided again at the next level, against the incumbent there; at the last level the rule's
verdict is the keep. Beside it, the same candidates (the same true effects) are each decided
at the last level only. Device-hours count every run, the calibration's included, at its
level's cost per run.

A **true win** is a last-level effect of δ or more; a **false keep** a keep whose true
last-level effect is 0 or less; a **missed win** a true win not kept.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..config.fidelity import FidelitySpec
from ..config.spec import DecisionSpec
from ..model import Verdict
from .simulate import Session


@dataclass(frozen=True)
class Scenario:
    """A multi-fidelity session to simulate."""

    fidelity: FidelitySpec
    costs: tuple[float, ...]  # seconds per run at each level
    rho: float  # the correlation of the cheapest level's true effects with the last's
    noise: tuple[float, ...]  # sd of one run (log scale) at each level
    candidates: int = 20
    spread: float = 0.0  # sd of the true effects; 0: 2δ

    def correlation(self, level: int) -> float:
        """ρ_i: ``rho`` at level 0, rising linearly to 1 at the last level."""
        last = self.fidelity.last
        return self.rho + (1.0 - self.rho) * level / last


@dataclass
class Tally:
    """One way of running the sessions, summed over them."""

    keeps: float = 0.0
    false_keeps: float = 0.0
    missed_wins: float = 0.0
    device_s: float = 0.0
    decided: list[float] = field(default_factory=list)  # decisions made at each level

    def mean(self, sessions: int) -> Tally:
        n = max(1, sessions)
        return Tally(self.keeps / n, self.false_keeps / n, self.missed_wins / n,
                     self.device_s / n, [d / n for d in self.decided])

    @property
    def device_hours(self) -> float:
        return self.device_s / 3600.0


@dataclass(frozen=True)
class FidelityPlan:
    """The means per session of both ways of running it."""

    scenario: Scenario
    spec: DecisionSpec
    sessions: int
    true_wins: float
    multi: Tally
    last_only: Tally


def _check(sc: Scenario) -> None:
    n = len(sc.fidelity.levels)
    if len(sc.costs) != n or len(sc.noise) != n:
        raise ValueError(f"{n} levels need {n} costs and {n} noises, got {len(sc.costs)} "
                         f"and {len(sc.noise)}")
    if not -1.0 <= sc.rho <= 1.0:
        raise ValueError(f"rho {sc.rho} is not a correlation (between -1 and 1)")
    if any(not (math.isfinite(c) and c > 0) for c in (*sc.costs, *sc.noise)):
        raise ValueError("level costs and noises must be positive numbers")


def _effects(sc: Scenario, spread: float, rng: random.Random) -> list[list[float]]:
    """Each candidate's true effect (a fraction) at every level, the last level's first
    drawn, then each lower level's correlated with it."""
    out = []
    for _ in range(sc.candidates):
        last = rng.gauss(0.0, spread)
        row = []
        for lv in range(sc.fidelity.last):
            r = sc.correlation(lv)
            row.append(r * last + math.sqrt(max(0.0, 1.0 - r * r)) * rng.gauss(0.0, spread))
        row.append(last)
        out.append([max(e, -0.9) for e in row])  # an effect is a ratio: keep it above -1
    return out


class _Level:
    """One level's session: its own calibration, noise tracking and screen."""

    def __init__(self, sc: Scenario, spec: DecisionSpec, level: int, rng: random.Random
                 ) -> None:
        self.theta = 0.0
        self.rng = rng
        self.noise = sc.noise[level]
        self.cost = sc.costs[level]
        self.session = Session(self._run, spec)
        self.screened: list[float] = []  # lower bounds seen at this level (for ``top``)
        self.started = False

    def _run(self, role: str, slot: int) -> float:
        shift = self.theta if role == "B" else 0.0
        return 100.0 * math.exp(self.noise * self.rng.gauss(0.0, 1.0) + shift)

    def decide(self, effect: float, tally: Tally, level: int) -> tuple[Verdict, float, float]:
        """Decide one candidate of true ``effect`` here: (verdict, lo, hi); its runs (and
        the level's calibration, the first time) are charged to ``tally``."""
        if not self.started:
            self.started = True
            tally.device_s += self.session.calibrate() * self.cost
        self.theta = math.log1p(effect)
        d, used = self.session.decide()
        tally.device_s += used * self.cost
        tally.decided[level] += 1
        lo = d.lo if d.lo is not None else -math.inf
        hi = d.hi if d.hi is not None else -math.inf
        return d.verdict, lo, hi

    def promotes(self, fid: FidelitySpec, lo: float, hi: float) -> bool:
        """The level's screen on one decision."""
        if fid.promote == "top":
            self.screened.append(lo)
            return sum(1 for x in self.screened if x > lo) < fid.top
        return hi > self.session.delta


def _count(tally: Tally, kept: bool, truth: float, delta: float) -> None:
    tally.keeps += kept
    tally.false_keeps += kept and truth <= 0
    tally.missed_wins += (not kept) and truth >= delta


def _session(sc: Scenario, spec: DecisionSpec, spread: float, seed: int,
             multi: Tally, last_only: Tally) -> int:
    """One simulated session both ways; returns its number of true wins."""
    rng = random.Random(seed)
    effects = _effects(sc, spread, rng)
    fid = sc.fidelity
    levels = [_Level(sc, spec, lv, random.Random(rng.random())) for lv in range(fid.last + 1)]
    alone = _Level(sc, spec, fid.last, random.Random(rng.random()))
    for eff in effects:
        kept = False
        for lv, level in enumerate(levels):
            verdict, lo, hi = level.decide(eff[lv], multi, lv)
            if lv == fid.last:
                kept = verdict is Verdict.KEEP
            elif not level.promotes(fid, lo, hi):
                break
        _count(multi, kept, eff[-1], spec.delta)
        verdict, _, _ = alone.decide(eff[-1], last_only, fid.last)
        _count(last_only, verdict is Verdict.KEEP, eff[-1], spec.delta)
    return sum(1 for e in effects if e[-1] >= spec.delta)


def simulate(sc: Scenario, spec: DecisionSpec, sessions: int = 20, seed: int = 0
             ) -> FidelityPlan:
    """``sessions`` simulated sessions of ``sc``, multi-fidelity and at the last level
    only, on the same candidates; the means per session."""
    _check(sc)
    spread = sc.spread or 2 * spec.delta
    n = len(sc.fidelity.levels)
    multi, last_only = Tally(decided=[0.0] * n), Tally(decided=[0.0] * n)
    wins = 0
    for k in range(sessions):
        wins += _session(sc, spec, spread, seed * 7919 + k, multi, last_only)
    return FidelityPlan(sc, spec, sessions, wins / max(1, sessions), multi.mean(sessions),
                        last_only.mean(sessions))


def _hours(h: float) -> str:
    return f"{h:.2f}" if h >= 0.1 else f"{h * 60:.1f} min"


def render(p: FidelityPlan, costs_from: str, rho_from: str) -> list[str]:
    """What ``assay plan`` prints for a multi-fidelity session."""
    sc, fid = p.scenario, p.scenario.fidelity
    screen = (f"top {fid.top} by lower bound" if fid.promote == "top"
              else "interval: upper end above δ")
    spread = sc.spread or 2 * p.spec.delta
    costs = ", ".join(f"{fid.label(i)} {c:g} s" for i, c in enumerate(sc.costs))
    last = fid.label(fid.last)
    lines = [
        f"fidelity plan: {' → '.join(fid.label(i) for i in range(len(fid.levels)))}, "
        f"screen {screen}; {sc.candidates} candidates a session, true effects at {last} "
        f"normal around 0 with sd {spread:.2%} ({p.true_wins:.1f} true wins of δ or more a "
        f"session), the cheapest level's correlated ρ = {sc.rho:.2f} ({rho_from}); "
        f"{p.sessions} simulated sessions",
        f"cost per run: {costs} ({costs_from})",
        f"{'':24s} {'keeps':>6s} {'false keeps':>11s} {'missed wins':>11s} "
        f"{'device-hours':>12s}"]
    for name, t in (("multi-fidelity", p.multi), (f"all at {last}", p.last_only)):
        lines.append(f"{name:>24s} {t.keeps:6.2f} {t.false_keeps:11.2f} "
                     f"{t.missed_wins:11.2f} {_hours(t.device_hours):>12s}")
    per = ", ".join(f"{d:.1f} at {fid.label(i)}" for i, d in enumerate(p.multi.decided))
    lines.append(f"decisions a session (multi-fidelity): {per}")
    lines.append(verdict_line(p))
    return lines


def verdict_line(p: FidelityPlan) -> str:
    """One sentence: keeps found and device-hours spent, against the last level only."""
    m, a = p.multi, p.last_only
    share = m.keeps / a.keeps if a.keeps else math.nan
    cost = m.device_s / a.device_s if a.device_s else math.nan
    found = f"{share:.0%} of the keeps" if math.isfinite(share) else f"{m.keeps:.2f} keeps"
    more = m.missed_wins - a.missed_wins
    miss = (f"; it misses {more:.2f} more true wins a session (stopped at a cheap level)"
            if more > 0.05 else "")
    return f"the multi-fidelity session finds {found} in {cost:.0%} of the device-hours{miss}"


def level_costs(fid: FidelitySpec, paces: Sequence[float | None]) -> tuple[tuple[float, ...], str]:
    """Seconds per run at each level, and where they come from: the measured pace where the
    journal has one; the other levels scaled from a measured one by their values, or the
    values themselves taken as seconds when none is measured."""
    values = [v for v in fid.levels if isinstance(v, int | float)]
    measured = [(i, p) for i, p in enumerate(paces) if p is not None and p > 0]
    if len(measured) == len(fid.levels):
        return tuple(float(p) for _, p in measured), "measured pace of each level"
    if len(values) != len(fid.levels):
        raise ValueError(f"the levels {list(fid.levels)} are not numbers and not every level "
                         "has a measured pace: give --level-costs, e.g. --level-costs 30,300")
    if measured:
        i, pace = measured[0]
        scale = pace / float(values[i])
        out = tuple(float(p) if p else float(v) * scale
                    for p, v in zip(paces, values, strict=True))
        return out, (f"measured pace at {fid.label(i)}, the other levels scaled by their "
                     "values")
    return tuple(float(v) for v in values), ("the level values taken as seconds a run: no "
                                             "pace measured yet")
