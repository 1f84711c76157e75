"""The chain of keeps measured together, so that its steps compound to its total.

Each kept change's effect was measured against the incumbent of its time, under the load
of its time, so the product of the kept effects need not agree with the paired total of
:mod:`assay.measure.verify`: on a busy machine it missed it by tens of points either way. Here the
baseline, every kept commit in order and the final best are run once each per **round** on
one slot, the order reversed every other round (``A B C``, ``C B A``, ...: the ABBA block
widened to the chain, so a linear drift weighs equally on neighbours over two rounds).

Within a round, the step of keep ``i`` is the signed log-ratio of its run against the run
of the commit before it (positive: better; ``log B/A`` to maximize, ``log A/B`` to
minimize). The steps of one round sum exactly to that round's log-ratio of the final best
against the baseline, so their means over the rounds compound exactly to the chain's
total: ``prod(1 + step) = 1 + total``. Rounds are independent paired measurements; each
step and the total get a two-sided Student t interval at the run's confidence over the
rounds. A round with a failed or unreadable run is set aside whole, and listed.

It runs inside a verification (``assay verify``, or the end of ``assay run``) when two or
more changes were kept and the executor is ``local``, ``[run] chain_rounds`` rounds (0 turns
it off), on the first local slot, after one unmeasured run of every commit when
``[run] warm_up`` is not ``"none"``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scipy.stats import t as student_t

from ..bench.steps import run_step
from ..bench.worker import read_metrics, run_bench, tree_env
from ..config.spec import Target
from ..decision.rule import rounding_bound
from ..errors import AssayError
from ..executors.local import local_slots
from ..journal.store import Journal
from ..model import Direction, ExperimentState, ParamValue
from ..repo.workspace import Workspace

Report = Callable[[str], None]


@dataclass(frozen=True)
class Link:
    """One commit of the chain: the baseline, a kept change, or the final best."""

    label: str  # "baseline" or the kept experiment's id
    commit: str
    params: Mapping[str, ParamValue]


@dataclass(frozen=True)
class Step:
    """A kept change's effect against the commit before it, measured in the rounds."""

    label: str
    commit: str
    effect: float  # relative improvement, positive = better
    lo: float
    hi: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ChainResult:
    rounds: int  # rounds used
    runs: int  # benchmark runs made (warm-ups excluded)
    confidence: float
    total: float  # the final best against the baseline in the same rounds
    lo: float
    hi: float
    steps: tuple[Step, ...]
    set_aside: tuple[str, ...]  # why a round was left out

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["steps"] = [s.as_dict() for s in self.steps]
        d["set_aside"] = list(self.set_aside)
        return d


def links(target: Target, journal: Journal) -> list[Link]:
    """The baseline (its parameters at their defaults) and every kept commit, in order;
    the final incumbent last. With ``[fidelity]`` every link runs at the last level."""
    base = journal.base_commit()
    if base is None:
        raise AssayError("the journal holds no run yet; `assay run` first")
    params: dict[str, ParamValue] = {p.name: p.default for p in target.params
                                     if p.default is not None}
    fid = target.fidelity
    if fid is not None:  # measured where keeps are decided, as the verification is
        params[fid.param] = fid.value(fid.last)
    chain = [Link("baseline", base, dict(params))]
    for e in journal.experiments([ExperimentState.KEPT], patches=False):
        if not e.commit:
            continue
        params = {**params, **e.candidate.params}
        chain.append(Link(e.id, e.commit, dict(params)))
    inc = journal.incumbent()
    if inc is not None and inc.commit != chain[-1].commit:
        chain.append(Link("final best", inc.commit, {**params, **inc.params}))
    return chain


def summarize(chain: Sequence[Link], values: Sequence[Sequence[float]], direction: Direction,
              confidence: float) -> ChainResult:
    """Steps and total from ``values[round][link]`` (see the module docstring)."""
    sign = 1.0 if direction is Direction.MAXIMIZE else -1.0
    used: list[Sequence[float]] = []  # the values as read (their digits count too)
    aside: list[str] = []
    for r, row in enumerate(values):
        if len(row) != len(chain):
            raise ValueError(f"round {r + 1} has {len(row)} values for {len(chain)} commits")
        bad = [chain[i].label for i, v in enumerate(row) if not (math.isfinite(v) and v > 0)]
        if bad:
            aside.append(f"round {r + 1}: no usable value for {', '.join(bad)}")
            continue
        used.append(row)
    if len(used) < 2:
        raise AssayError(f"measuring the chain of keeps: {len(used)} usable round(s) of "
                         f"{len(values)}, at least 2 needed"
                         + (f" ({'; '.join(aside)})" if aside else ""))
    n = len(used)
    q = float(student_t.ppf(0.5 + confidence / 2.0, n - 1))

    def interval(i: int, j: int) -> tuple[float, float, float]:
        """From link ``i`` to link ``j``, widened by what the printed digits leave open."""
        xs = [sign * math.log(row[j] / row[i]) for row in used]
        m = math.fsum(xs) / n
        half = q * statistics.stdev(xs) / math.sqrt(n) + rounding_bound(
            [row[i] for row in used], [row[j] for row in used])
        return math.expm1(m), math.expm1(m - half), math.expm1(m + half)

    steps = []
    for i in range(1, len(chain)):
        eff, lo, hi = interval(i - 1, i)
        steps.append(Step(chain[i].label, chain[i].commit, eff, lo, hi))
    total, lo, hi = interval(0, len(chain) - 1)
    return ChainResult(rounds=n, runs=len(values) * len(chain), confidence=confidence,
                       total=total, lo=lo, hi=hi, steps=tuple(steps),
                       set_aside=tuple(aside))


def measure(target: Target, journal: Journal, rounds: int,
            report: Report = lambda m: None) -> ChainResult:
    """Build every commit of the chain in a tree of its own and run the rounds."""
    chain = links(target, journal)
    if len(chain) < 3:
        raise AssayError("measuring the chain of keeps: fewer than two kept changes")
    if rounds < 2:
        raise AssayError(f"[run] chain_rounds = {rounds}: at least 2 rounds are needed")
    ws = Workspace(target, journal.run_name() or target.run.name or "main")
    slot = local_slots(target)[0]
    logs = target.state_dir / "logs" / "chain"
    logs.mkdir(parents=True, exist_ok=True)
    trees: list[tuple[Path, dict[str, str]]] = []
    for i, link in enumerate(chain):
        tree = ws.tree(f"chain-{i}")
        ws.materialize(tree, link.commit, "", link.params)
        env = tree_env(target, ws, slot, tree, link.params)
        step = run_step(target.build, tree, env, logs, f"build-{i}", target, None)
        if step.why:
            raise AssayError(f"measuring the chain of keeps: {link.label} "
                             f"({link.commit[:12]}) does not build: {step.why}")
        trees.append((tree, env))

    def bench(i: int, name: str) -> tuple[float, str]:
        tree, env = trees[i]
        r = run_bench(target, tree, env, logs, name)
        if r.timed_out or r.exit_code != 0:
            return math.nan, (f"exited {r.exit_code}" if not r.timed_out else "timed out")
        values, _, why = read_metrics((target.metric,), r.stdout or "", tree)
        value = values.get(target.metric.name)
        return (math.nan, why) if value is None else (value, "")

    report(f"measuring the chain of keeps together: {len(chain)} commits (the baseline, "
           f"{len(chain) - 1} kept), {rounds} rounds, the order reversed every other round")
    if target.run.warm_up != "none":
        for i in range(len(chain)):
            bench(i, f"warm-up-{i}")
    values: list[list[float]] = []
    for r in range(rounds):
        order = range(len(chain)) if r % 2 == 0 else range(len(chain) - 1, -1, -1)
        row = [math.nan] * len(chain)
        for i in order:
            row[i], why = bench(i, f"r{r + 1}-{i}")
            if why:
                report(f"  round {r + 1}: {chain[i].label} ({chain[i].commit[:12]}): {why} "
                       f"(logs: {logs / f'r{r + 1}-{i}'}.out)")
        values.append(row)
        report(f"  round {r + 1}/{rounds} done")
    return summarize(chain, values, target.metric.direction, target.decision.confidence)


def words(chain: Mapping[str, Any]) -> str:
    """``measured together in 6 rounds, the kept changes e0001 +12.0% [..], ... compound
    to +30.1% [..]`` (the chain's own total of the final best against the baseline), or
    why it was not measured."""
    if chain.get("error"):
        return f"the chain of keeps was not measured together: {chain['error']}"

    def pc(v: Any) -> str:
        return "-" if v is None else f"{float(v):+.2%}"

    steps = ", ".join(f"{s['label']} {pc(s['effect'])} [{pc(s['lo'])}, {pc(s['hi'])}]"
                      for s in chain.get("steps") or ())
    text = (f"measured together in {chain.get('rounds')} rounds, the kept changes {steps} "
            f"compound to {pc(chain.get('total'))} [{pc(chain.get('lo'))}, "
            f"{pc(chain.get('hi'))}]")
    aside = chain.get("set_aside") or ()
    if aside:
        text += f" ({len(aside)} round(s) set aside: {'; '.join(aside)})"
    return text
