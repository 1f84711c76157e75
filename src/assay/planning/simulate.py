"""Decisions simulated from a benchmark function, with the decision code the loop uses.

:class:`Session` is the decision side of a run without the machinery around it: start-up
A/A calibration (:func:`assay.decision.stats.calibrate`), the noise tracker after every block
(:func:`assay.decision.stats.noise.track`, blocks weighted by their noise), and the rule's
``first_block``/``decide`` with ABBA blocks, confirmations on another slot and the
re-measurements it asks for. ``run(role, slot)`` returns one benchmark value for ``"A"``
(incumbent) or ``"B"`` (candidate) on a slot and is called in the order the runs happen.
It serves ``assay plan`` and ``benchmarks/decisions.py``, where thousands of decisions
must be cheap.

:func:`decide` is the exact path: one experiment through :class:`assay.loop.driver.Loop` itself
(``Loop.step``) on its twins (an in-memory journal and repository, a function-backed
executor), so calibration, noise tracking, triage, re-runs, confirmation and the rule are
the loop's own objects. It is slower (the journal is real SQLite), and is what a test
checks against a real run.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..config.spec import DecisionSpec, parse
from ..decision.rule import DecisionContext, DecisionRule
from ..decision.stats import calibrate, make_rule
from ..decision.stats.noise import (
    CALIBRATION_PAIRS,
    WINDOW,
    NoiseState,
    block_scale,
    changes,
    side_samples,
    track,
)
from ..executors.function import FunctionExecutor, values
from ..model import (
    Block,
    BlockKind,
    BlockResult,
    Candidate,
    Decision,
    Direction,
    NextBlock,
    Pair,
    Slot,
    Verdict,
)
from ..testing import ROOT_COMMIT, memory_loop

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

    def decision_context(self, block_ids: Sequence[str] = ()) -> DecisionContext:
        noise: Mapping[str, float] = self.state.noise if self.state is not None else {}
        return DecisionContext(
            direction=self.direction, spec=self.spec, delta=self.delta,
            slots=tuple(self.name(s) for s in self.usable()), noise=noise,
            block_noise={b: self.block_noise[b] for b in block_ids if b in self.block_noise},
            pooled=self.state.pooled if self.state is not None else math.nan,
            noise_samples=self.state.samples if self.state is not None else {})

    def _track(self, slot: int, block_id: str, a: Sequence[float], b: Sequence[float]) -> None:
        name = self.name(slot)
        new = side_samples(a, b)
        if new:
            self.samples[name] = (self.samples.get(name, []) + new)[-WINDOW:]
            self.recent = (self.recent + [(name, v) for v in new])[-4 * WINDOW:]
        before = self.state
        q = before.quarantined if before is not None else {}
        self.state = track(self.samples, self.spec, q, self.recent)
        noise = block_scale(self.state.noise.get(name, self.state.raw.get(name, math.nan)), new)
        if math.isfinite(noise):
            self.block_noise[block_id] = noise
        self.log += changes(before, self.state, self.spec)
        self.deltas.append(self.delta)

    def decide(self, home: int | None = None) -> tuple[Decision, int]:
        """One experiment, measured as the loop measures it; (decision, runs used)."""
        usable = self.usable()
        slot = home if home is not None and home in usable else usable[
            self.blocks % len(usable)]
        ctx = self.decision_context()
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
            d = self.rule.decide(pairs, self.decision_context(ids))
            if d.verdict is not Verdict.CONTINUE:
                return d, self.runs - start
            nb = d.next_block or NextBlock(self.spec.pairs_per_block)
        raise RuntimeError(f"no decision after {MAX_BLOCKS} blocks")


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def decide(run: RunFn, spec: Mapping[str, object], slots: int = 1,
           on_block: Callable[[], None] | None = None,
           direction: str = "minimize") -> SimDecision:
    """One candidate decided by the loop's own code, on values from ``run(role, slot)``.

    ``spec`` is the ``[decision]`` table as a mapping (``{"delta": 0.01}``), validated as in
    ``assay.toml`` (a bad key or value raises :class:`assay.errors.ConfigError`), every
    other key at its default. ``run`` is called in the order the loop runs: ``"A"`` for the
    incumbent (both sides of an A/A block), ``"B"`` for the candidate, ``slot`` from 0.
    ``on_block()`` is called at the start of every block. The effect and interval are
    relative improvements (``B/A − 1`` to maximize, ``A/B − 1`` to minimize)."""
    lines = [f"{k} = {_toml(v)}" for k, v in spec.items()]
    text = (f'[metric]\nname = "value"\ndirection = {json.dumps(direction)}\n'
            '[commands]\nbench = "true"\n[scope]\neditable = ["candidate.py"]\n'
            '[[params]]\nname = "CANDIDATE"\ntype = "int"\nlow = 0\nhigh = 1\n'
            f"[run]\nslots = {int(slots)}\n[decision]\n" + "\n".join(lines) + "\n")
    with tempfile.TemporaryDirectory(prefix="assay-simulate-") as tmp:
        target = parse(text, Path(tmp))
        index = {f"s{i}": i for i in range(target.run.slots)}
        counted = {"calibration": 0, "experiment": 0}
        fn = values("value", lambda role, slot: float(run(role, index[slot])))

        def block(b: Block, slot: Slot) -> BlockResult:
            if on_block is not None:
                on_block()
            counted["calibration" if b.kind is BlockKind.AA else "experiment"] += len(b.order)
            return fn(b, slot)

        exe = FunctionExecutor(block, slots=[Slot(n) for n in index])
        loop = memory_loop(target, exe, candidates=[
            Candidate(ROOT_COMMIT, params={"CANDIDATE": 1}, hypothesis="the candidate")])
        loop.run(budget=1, propose=False)
        exp = loop.journal.experiment("e0001")
        loop.journal.close()
    if exp is None:
        raise RuntimeError("the loop recorded no experiment")
    d = exp.decision
    verdict = {"kept": "keep", "discarded": "discard"}.get(exp.state.value, exp.state.value)
    if d is None:
        return SimDecision(verdict, None, None, counted["experiment"], exp.note)
    interval = (d.lo, d.hi) if d.lo is not None and d.hi is not None else None
    return SimDecision(verdict=verdict, effect=d.effect, interval=interval,
                       runs=counted["experiment"], reason=exp.note or d.reason, delta=d.delta,
                       decision=d)
