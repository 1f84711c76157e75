"""`assay plan`: can these settings answer the question, before a costly run?

Given the run-to-run noise (measured in the journal, or ``--noise 3%``), the band δ and the
pair budget, :func:`plan` simulates decisions with the decision code a run uses
(:class:`assay.planning.simulate.Session`: calibration, noise tracking, the rule, confirmations)
on normal noise, and reports the false-keep rate (true effect 0), the keep rate at δ, 2δ
and 4δ, the mean runs per decision, the δ floor this noise and budget allow, and the
smallest effect kept with the requested power (searched by simulation, starting from the
normal approximation at the last look).

With ``[fidelity]`` it also simulates the multi-fidelity session against deciding every
candidate at the last level (:mod:`assay.planning.fidelity`): keeps, false keeps, missed
wins and device-hours, at a correlation ρ between the cheapest level's effects and the
last's (``--rho``, else the rank agreement measured in the journal, else 0.8).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from scipy.special import ndtri

from ..assemble import journal_path, load, open_journal
from ..config.fidelity import FidelitySpec
from ..config.spec import DecisionSpec
from ..decision.agreement import agreement
from ..decision.rule import DecisionContext
from ..decision.stats import SequentialRule
from ..decision.stats.bounds import efficacy_bounds
from ..decision.stats.noise import resolvable
from ..errors import ConfigError
from ..journal.store import Journal
from ..measure import spend
from ..model import BlockState, Direction, Verdict
from ..records import CalibrationRecord
from . import fidelity as fid_plan
from .simulate import Session

DEFAULT_RHO = 0.8  # the cheap level's correlation when neither --rho nor the journal gives one


@dataclass(frozen=True)
class Cell:
    effect: float
    keep: float
    runs: float


@dataclass(frozen=True)
class Plan:
    run_noise: float  # sd of one run, log scale
    spec: DecisionSpec
    trials: int
    power: float
    cells: tuple[Cell, ...]  # effects 0, δ, 2δ, 4δ
    floor: float  # the smallest δ the budget resolves at this noise
    smallest: float  # the smallest effect the simulation keeps with ``power``
    smallest_keep: float  # its simulated keep rate


def _cell(noise: float, spec: DecisionSpec, effect: float, trials: int, slots: int,
          seed: int) -> Cell:
    rng = random.Random(seed)
    theta = math.log1p(effect)
    keeps = 0
    runs = 0
    for _ in range(trials):
        def run(role: str, slot: int) -> float:
            return 100.0 * math.exp(noise * rng.gauss(0.0, 1.0) + (theta if role == "B"
                                                                    else 0.0))

        sim = Session(run, spec, slots=slots)
        sim.calibrate()
        d, used = sim.decide()
        keeps += d.verdict is Verdict.KEEP
        runs += used
    return Cell(effect, keeps / trials, runs / trials)


def plan(run_noise: float, spec: DecisionSpec, trials: int = 200, power: float = 0.9,
         slots: int = 1, seed: int = 0) -> Plan:
    """Simulated operating characteristics of ``spec`` at ``run_noise`` (sd of one run)."""
    if not (math.isfinite(run_noise) and run_noise > 0):
        raise ConfigError("the noise must be a positive number (e.g. --noise 3%)")
    delta = spec.delta
    cells = tuple(_cell(run_noise, spec, e, trials, slots, seed + k)
                  for k, e in enumerate((0.0, delta, 2 * delta, 4 * delta)))
    pair = run_noise * math.sqrt(2)
    rule = SequentialRule()
    looks = rule.looks(DecisionContext(Direction.MAXIMIZE, spec, spec.delta))
    c = efficacy_bounds(looks, (1 - spec.confidence) / 2, rule.rho)[
        max(i for i, n in enumerate(looks) if n <= spec.max_pairs)]
    z = float(ndtri(power))
    eff_delta = max(delta, resolvable(pair, spec))
    guess = math.expm1(math.log1p(eff_delta) + (c + z) * pair / math.sqrt(spec.max_pairs))
    smallest, keep = _smallest(run_noise, spec, guess, power, trials, slots, seed + 10)
    return Plan(run_noise, spec, trials, power, cells, resolvable(pair, spec), smallest, keep)


def _smallest(noise: float, spec: DecisionSpec, guess: float, power: float, trials: int,
              slots: int, seed: int) -> tuple[float, float]:
    """The smallest effect the simulation keeps with ``power``, searched from ``guess`` (the
    normal approximation at the last look, which leaves out futility and confirmation):
    up or down by a quarter until the keep rate crosses ``power``, then two bisections."""
    def rate(e: float) -> float:
        return _cell(noise, spec, e, trials, slots, seed).keep

    e, r = guess, rate(guess)
    lo: tuple[float, float] | None = None  # an effect below power, and its rate
    hi: tuple[float, float] | None = None  # one at or above
    for _ in range(8):
        if r >= power:
            hi = (e, r)
            if lo is not None:
                break
            e = e / 1.25
        else:
            lo = (e, r)
            if hi is not None:
                break
            e = e * 1.25
        r = rate(e)
    if hi is None:
        return e, r  # not reached within the search: the last effect tried, and its rate
    if lo is None:
        return hi
    for _ in range(2):
        mid = math.sqrt(lo[0] * hi[0])
        rm = rate(mid)
        if rm >= power:
            hi = (mid, rm)
        else:
            lo = (mid, rm)
    return hi


def render(p: Plan) -> str:
    s = p.spec
    lines = [
        f"plan: run noise {p.run_noise:.2%} (pair noise {p.run_noise * math.sqrt(2):.2%}), "
        f"δ {s.delta:.2%}, at most {s.max_pairs} pairs, confidence {s.confidence:.0%}; "
        f"{p.trials} simulated decisions per row",
        f"{'':14s} {'effect':>7s} {'kept':>7s} {'mean runs':>9s}"]
    names = ("0 (false keep)", "δ", "2δ", "4δ")
    for name, c in zip(names, p.cells, strict=True):
        lines.append(f"{name:>14s} {c.effect:+7.2%} {c.keep:7.1%} {c.runs:9.1f}")
    mean = sum(c.runs for c in p.cells) / len(p.cells)
    lines.append(f"mean runs per decision: {mean:.1f} (the start-up A/A calibration is "
                 "charged once per run, not here)")
    lines.append(f"the budget resolves δ down to {p.floor:.2%} at this noise (a finer δ is "
                 "raised to it)")
    lines.append(f"smallest effect kept with {p.power:.0%} power: about {p.smallest:+.2%} "
                 f"(simulated: kept {p.smallest_keep:.0%} of the time)")
    verdict = "can" if p.cells[3].keep >= p.power and p.cells[0].keep <= 0.02 else "cannot"
    lines.append(f"these settings {verdict} keep a +4δ change with {p.power:.0%} power while "
                 "holding false keeps at 2% or less")
    return "\n".join(lines)


def _fraction(text: str, name: str) -> float:
    t = text.strip()
    try:
        return float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ConfigError(f"--{name} {text!r} is not a number; give e.g. --{name} 3% or "
                          f"--{name} 0.03") from None


@dataclass(frozen=True)
class Levels:
    """``assay plan``'s options for a multi-fidelity session (used with ``[fidelity]``)."""

    rho: str = ""  # the cheapest level's correlation with the last; "": measured, else 0.8
    candidates: int = 20
    sessions: int = 20
    costs: str = ""  # seconds per run per level, "30,300"; "": measured pace or the values
    spread: str = ""  # sd of the true effects; "": 2δ


def for_repository(root: Path, noise: str = "", delta: str = "", pairs: int = 0,
                   power: float = 0.9, trials: int = 200, levels: Levels | None = None
                   ) -> list[str]:
    """What ``assay plan`` prints for the repository at ``root``: the plan, the
    multi-fidelity plan with ``[fidelity]``, then the spend estimate. The settings are the
    config's (defaults without one), the noise the one measured in its journal unless
    ``noise`` is given; ``delta`` and ``pairs`` replace the config's. Raises
    :class:`ConfigError` on a bad value or when no noise is known."""
    st = _settings(root, read_noise=not noise)
    spec = st.spec
    if noise:
        run_noise = _fraction(noise, "noise")
    elif st.measured is not None:
        run_noise = st.measured
    else:
        raise ConfigError("no noise measured in this journal yet: give --noise (e.g. "
                          "--noise 3%) or run `assay run` first")
    if delta:
        spec = replace(spec, delta=_fraction(delta, "delta"))
    if pairs:
        spec = replace(spec, max_pairs=pairs)
    if not 0.5 <= power < 1:
        raise ConfigError("--power must be between 0.5 and 1 (e.g. 0.9)")
    if trials < 10:
        raise ConfigError("--trials must be at least 10")
    out = [render(plan(run_noise, spec, trials=trials, power=power, slots=st.slots))]
    if st.fidelity is not None:
        out += fidelity_plan(st, spec, run_noise, levels or Levels())
    return [*out, *st.spend_lines]


def fidelity_plan(st: Settings, spec: DecisionSpec, run_noise: float, opts: Levels
                  ) -> list[str]:
    """The multi-fidelity plan's lines for the settings ``st`` (which hold a fidelity)."""
    assert st.fidelity is not None
    fid = st.fidelity
    if opts.rho:
        rho, rho_from = _number(opts.rho, "rho"), "given"
    elif st.rho is not None:
        rho, rho_from = st.rho, f"the rank agreement measured in the journal, over {st.rho_n}"
    else:
        rho, rho_from = DEFAULT_RHO, "assumed: give --rho, or measure it in a session"
    if opts.costs:
        costs = tuple(_number(c, "level-costs") for c in opts.costs.split(","))
        costs_from = "given"
    else:
        try:
            costs, costs_from = fid_plan.level_costs(fid, st.paces)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if opts.candidates < 1 or opts.sessions < 1:
        raise ConfigError("--candidates and --sessions must be at least 1")
    # each level's own noise where the journal measured it (a 300 s run is far less noisy
    # than a 30 s one), else the run noise of the plan
    measured = [st.level_noise[i] if i < len(st.level_noise) else None
                for i in range(len(fid.levels))]
    noises = tuple(run_noise if n is None else n for n in measured)
    scenario = fid_plan.Scenario(
        fid, costs, rho, noises, candidates=opts.candidates,
        spread=_fraction(opts.spread, "spread") if opts.spread else 0.0)
    try:
        result = fid_plan.simulate(scenario, spec, sessions=opts.sessions)
    except ValueError as exc:
        raise ConfigError(f"{exc} (check --rho, --level-costs)") from None
    per_level = ", ".join(f"{fid.label(i)} {n:.2%}" for i, n in enumerate(noises))
    at = [fid.label(i) for i, n in enumerate(measured) if n is not None]
    noise_from = (f"run noise per level: {per_level} ("
                  + (f"measured at {', '.join(at)}; any other: the plan's)" if at
                     else "the plan's at every level)"))
    return [*fid_plan.render(result, costs_from, rho_from), noise_from, *st.agreement]


def _number(text: str, name: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise ConfigError(f"--{name} {text!r} is not a number; give e.g. --rho 0.8 or "
                          "--level-costs 30,300") from None


@dataclass(frozen=True)
class Settings:
    """What ``assay plan`` reads from the config and its journal."""

    spec: DecisionSpec = field(default_factory=DecisionSpec)
    slots: int = 1
    measured: float | None = None  # the run noise measured in the journal
    spend_lines: Sequence[str] = ()
    fidelity: FidelitySpec | None = None
    paces: Sequence[float | None] = ()  # seconds per run measured at each level
    rho: float | None = None  # the cheapest level's rank agreement measured in the journal
    rho_n: int = 0
    agreement: Sequence[str] = ()  # the rank agreement measured in the journal, in words
    level_noise: Sequence[float | None] = ()  # the run noise measured at each level


def _settings(root: Path, read_noise: bool) -> Settings:
    """The decision settings and slots of the config at ``root`` (defaults without one), the
    run noise measured in its journal (when ``read_noise``), its spend estimate and, with
    ``[fidelity]``, each level's measured pace and the cheapest level's rank agreement."""
    if not (root / "assay.toml").exists():
        return Settings()
    target = load(root)
    fid = target.fidelity
    j = open_journal(target, readonly=True) if journal_path(target).exists() else None
    paces: list[float | None] = [None] * (len(fid.levels) if fid else 0)
    level_noise: list[float | None] = list(paces)
    rho: tuple[float | None, int] = (None, 0)
    measured_lines: list[str] = []
    try:
        cal = j.calibration() if j is not None else None
        spend_lines = spend.estimate(target, j)
        if fid is not None and j is not None:
            paces = _paces(j, len(fid.levels))
            level_noise = [_run_noise(j.calibration(i)) for i in range(len(fid.levels))]
            agreed = agreement(fid, j.level_results(), j.experiments(patches=False))
            rho = (agreed.pairs[0].rho, agreed.pairs[0].rho_n)
            measured_lines = ([f"measured: {line}" for line in agreed.lines()]
                              + [f"warning: {line}" for line in agreed.warnings()])
    finally:
        if j is not None:
            j.close()
    measured = _run_noise(cal) if read_noise else None
    return Settings(target.decision, target.run.slots, measured, spend_lines, fid, paces,
                    rho[0], rho[1], measured_lines,
                    level_noise if read_noise else [None] * len(level_noise))


def _run_noise(cal: CalibrationRecord | None) -> float | None:
    """One run's noise from a calibration: its pair noise over the square root of two."""
    pooled = cal.pooled if cal is not None else None
    if isinstance(pooled, int | float) and math.isfinite(pooled):
        return float(pooled) / math.sqrt(2)
    return None


def _paces(j: Journal, n: int) -> list[float | None]:
    """Seconds per run at each level: the finished blocks' wall time over their runs."""
    wall, runs = [0.0] * n, [0] * n
    for b in j.blocks(states=[BlockState.DONE]):
        if b.wall_s and b.wall_s > 0 and b.order and 0 <= b.level < n:
            wall[b.level] += b.wall_s
            runs[b.level] += len(b.order)
    return [w / r if r else None for w, r in zip(wall, runs, strict=True)]
