"""Decisions simulated from a benchmark function, with the decision code the loop uses.

:class:`Session` is the decision side of a run without the machinery around it: start-up
A/A calibration (:func:`assay.stats.calibrate`), the noise tracker after every block
(:func:`assay.stats.noise.track`, blocks weighted by their noise), and the rule's
``first_block``/``decide`` with ABBA blocks, confirmations on another slot and the
re-measurements it asks for. ``run(role, slot)`` returns one benchmark value for ``"A"``
(incumbent) or ``"B"`` (candidate) on a slot and is called in the order the runs happen.
It serves ``assay plan`` and ``benchmarks/decisions.py``, where thousands of decisions
must be cheap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import DecisionSpec
from .decision import DecisionContext, DecisionRule
from .model import BlockKind, Decision, Direction, NextBlock, Pair, Verdict
from .stats import calibrate, make_rule
from .stats.noise import CALIBRATION_PAIRS, WINDOW, NoiseState, changes, side_samples, track

RunFn = Callable[[str, int], float]
MAX_BLOCKS = 400


def order_for(next_block: NextBlock) -> str:
    """ABBA repeated: 1 pair -> AB, 2 -> ABBA, 3 -> ABBAAB ... (as the loop runs them)."""
    if next_block.order:
        return next_block.order
    return "".join("AB" if i % 2 == 0 else "BA" for i in range(max(1, next_block.pairs)))


@dataclass(frozen=True)
class SimDecision:
    """A simulated decision. ``effect`` and ``interval`` are relative improvements:
    ``B/A − 1`` for a metric to maximize, ``A/B − 1`` for one to minimize."""

    verdict: str  # keep, discard or invalid
    effect: float | None
    interval: tuple[float, float] | None
    runs: int
    reason: str
    delta: float = 0.0
    decision: Decision | None = field(default=None, compare=False, repr=False)


def _block(run: RunFn, slot: int, order: str, kind: BlockKind, block_id: str,
           name: str) -> tuple[list[Pair], list[float], list[float]]:
    a: list[float] = []
    b: list[float] = []
    for role in order:
        (b if role == "B" else a).append(float(run(role, slot)))
    if not a:
        return [Pair(math.nan, v, name, block_id, kind) for v in b], a, b
    return [Pair(x, y, name, block_id, kind) for x, y in zip(a, b, strict=False)], a, b


class Session:
    """The noise picture of one run and the decisions made in it."""

    def __init__(self, run: RunFn, spec: DecisionSpec, slots: int = 1,
                 direction: Direction = Direction.MAXIMIZE,
                 on_block: Callable[[], None] | None = None,
                 rule: DecisionRule | None = None) -> None:
        self.run = run
        self.spec = spec
        self.slots = max(1, slots)
        self.direction = direction
        self.on_block = on_block or (lambda: None)
        self.rule = rule or make_rule(spec)
        self.samples: dict[str, list[float]] = {}
        self.recent: list[tuple[str, float]] = []
        self.state: NoiseState | None = None
        self.block_noise: dict[str, float] = {}
        self.log: list[str] = []
        self.runs = 0
        self.blocks = 0
        self.deltas: list[float] = []  # δ after every block, for inspection

    @staticmethod
    def name(slot: int) -> str:
        return f"slot{slot}"

    def calibrate(self) -> int:
        """A/A blocks on every slot, as the loop queues them; returns the runs used."""
        if self.spec.aa_blocks <= 0:
            return 0
        per_block = self.spec.pairs_per_block
        per_slot = max(self.spec.aa_blocks,
                       -(-CALIBRATION_PAIRS // max(1, self.slots * max(1, per_block))))
        aa: dict[str, list[Pair]] = {}
        used = 0
        for s in range(self.slots):
            for k in range(per_slot):
                self.on_block()
                order = order_for(NextBlock(per_block))
                ps, _, _ = _block(lambda role, slot: self.run("A", slot), s, order,
                                  BlockKind.AA, f"aa-{s}-{k}", self.name(s))
                aa.setdefault(self.name(s), []).extend(ps)
                used += len(order)
        cal = calibrate(aa, self.spec, self.direction)
        self.samples = {s: list(v)[-WINDOW:] for s, v in cal.samples.items()}
        self.recent = [(s, v) for s, vs in cal.samples.items() for v in vs][-WINDOW:]
        self.state = track(self.samples, self.spec, recent=self.recent)
        self.runs += used
        self.deltas.append(self.delta)
        return used

    @property
    def delta(self) -> float:
        return self.state.delta if self.state is not None else self.spec.delta

    def usable(self) -> list[int]:
        q = self.state.quarantined if self.state is not None else {}
        return [s for s in range(self.slots) if self.name(s) not in q] or [0]

    def context(self, block_ids: Sequence[str] = ()) -> DecisionContext:
        noise: Mapping[str, float] = self.state.noise if self.state is not None else {}
        return DecisionContext(
            direction=self.direction, spec=self.spec, delta=self.delta,
            slots=tuple(self.name(s) for s in self.usable()), noise=noise,
            block_noise={b: self.block_noise[b] for b in block_ids if b in self.block_noise})

    def _track(self, slot: int, block_id: str, a: Sequence[float], b: Sequence[float]) -> None:
        name = self.name(slot)
        new = side_samples(a, b)
        if new:
            self.samples[name] = (self.samples.get(name, []) + new)[-WINDOW:]
            self.recent = (self.recent + [(name, v) for v in new])[-4 * WINDOW:]
        before = self.state
        q = before.quarantined if before is not None else {}
        self.state = track(self.samples, self.spec, q, self.recent)
        noise = self.state.noise.get(name, self.state.raw.get(name))
        if noise is not None and math.isfinite(noise):
            self.block_noise[block_id] = noise
        self.log += changes(before, self.state, self.spec)
        self.deltas.append(self.delta)

    def decide(self, home: int | None = None) -> tuple[Decision, int]:
        """One experiment, measured as the loop measures it; (decision, runs used)."""
        usable = self.usable()
        slot = home if home is not None and home in usable else usable[
            self.blocks % len(usable)]
        ctx = self.context()
        nb = self.rule.first_block(ctx)
        pairs: list[Pair] = []
        ids: list[str] = []
        start = self.runs
        for _ in range(MAX_BLOCKS):
            usable = self.usable()
            if nb.other_slot:
                others = [s for s in usable if s != slot]
                slot = others[0] if others else slot
            elif slot not in usable:
                slot = usable[0]
            self.on_block()
            bid = f"b{self.blocks}"
            self.blocks += 1
            order = order_for(nb)
            ps, a, b = _block(self.run, slot, order, nb.kind, bid, self.name(slot))
            self.runs += len(order)
            self._track(slot, bid, a, b)
            pairs += ps
            ids.append(bid)
            d = self.rule.decide(pairs, self.context(ids))
            if d.verdict is not Verdict.CONTINUE:
                return d, self.runs - start
            nb = d.next_block or NextBlock(self.spec.pairs_per_block)
        raise RuntimeError(f"no decision after {MAX_BLOCKS} blocks")


def sim_decision(d: Decision, runs: int) -> SimDecision:
    interval = (d.lo, d.hi) if d.lo is not None and d.hi is not None else None
    return SimDecision(verdict=d.verdict.value, effect=d.effect, interval=interval, runs=runs,
                       reason=d.reason, delta=d.delta, decision=d)


def details_of(d: SimDecision) -> Mapping[str, Any]:
    return d.decision.details if d.decision is not None else {}
