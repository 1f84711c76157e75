"""The decision-rule conformance kit: what any :class:`~assay.decision.rule.DecisionRule` owes.

A rule is driven through :func:`~assay.decision.next_step.decide_next` with scripted values (no
repository, no journal): :func:`drive` measures the blocks the rule asks for, with values
from a function of (role, pair index), until the rule keeps, discards or gives up.
Subclass :class:`DecisionRuleContract` as ``Test...`` and give the rule::

    class TestMyRule(DecisionRuleContract):
        def make_rule(self) -> DecisionRule:
            return MyRule()

The contract: no keep on identical values; a keep on a large, clean effect; the same
verdict for the same pairs; for a lower-is-better metric, the same (a drop is a gain).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..config.spec import DecisionSpec
from ..decision.next_step import Action, BlockEvidence, Evidence, Keep, Measure, Rerun, decide_next
from ..decision.rule import DecisionContext, DecisionRule
from ..model import Direction, Incumbent, NextBlock, Role, RunResult, RunStatus

Values = Callable[[str, int], float]  # (role 'A' or 'B', run number) -> benchmark value
INCUMBENT = Incumbent("0" * 40)


@dataclass(frozen=True)
class Driven:
    """How a scripted experiment ended."""

    action: Action  # the terminal action (Keep, Discard or Invalid)
    actions: tuple[Action, ...]  # every action, in order
    runs: int


@dataclass
class _Script:
    values: Values
    runs: int = 0
    blocks: list[BlockEvidence] = field(default_factory=list)

    def measure(self, nb: NextBlock, slot: str) -> None:
        bid = f"e0001-b{len(self.blocks) + 1}"
        runs = []
        for i, ch in enumerate(nb.run_order(), start=1):
            self.runs += 1
            runs.append(RunResult(f"{bid}-r{i}", bid, "e0001", Role(ch), i, RunStatus.OK,
                                  {"t": self.values(ch, self.runs)}, slot=slot))
        self.blocks.append(BlockEvidence(bid, nb.kind, INCUMBENT.commit, slot, tuple(runs)))


def drive(rule: DecisionRule, values: Values, spec: DecisionSpec, *,
          direction: Direction = Direction.MAXIMIZE, slots: tuple[str, ...] = ("s0", "s1"),
          history: Mapping[str, tuple[float, ...]] | None = None,
          noise: Mapping[str, float] | None = None, max_actions: int = 200) -> Driven:
    """Measure what ``rule`` asks for until it decides; every value from ``values``."""
    ctx = DecisionContext(direction=direction, spec=spec, delta=spec.delta, slots=slots,
                          noise=dict(noise or {}), incumbent_history=dict(history or {}))
    script = _Script(values)
    actions: list[Action] = []
    for _ in range(max_actions):
        ev = Evidence("e0001", tuple(script.blocks), INCUMBENT, ctx, "t")
        act = decide_next(ev, rule)
        actions.append(act)
        if not isinstance(act, Measure | Rerun):
            return Driven(act, tuple(actions), script.runs)
        slot = slots[len(script.blocks) % len(slots)]
        if act.avoid_slot is not None:
            slot = next((s for s in slots if s != act.avoid_slot), slot)
        script.measure(act.block, slot)
    raise AssertionError(f"{rule.name}: no decision after {max_actions} actions")


def noisy(effect: float, noise: float, seed: int,
          direction: Direction = Direction.MAXIMIZE) -> Values:
    """Values around 100 with relative ``noise``; the candidate is ``effect`` better."""
    rng = random.Random(seed)
    gain = 1.0 + effect if direction is Direction.MAXIMIZE else 1.0 / (1.0 + effect)

    def values(role: str, run: int) -> float:
        base = 100.0 * (gain if role == "B" else 1.0)
        return base * (1.0 + rng.gauss(0.0, noise))

    return values


class DecisionRuleContract:
    """What every decision rule owes; override :meth:`make_rule` (and :meth:`spec`)."""

    def make_rule(self) -> DecisionRule:
        raise NotImplementedError

    def spec(self) -> DecisionSpec:
        return DecisionSpec(rule=self.make_rule().name, delta=0.02, max_pairs=16,
                            pairs_per_block=2, aa_blocks=0)

    def history(self, value: float = 100.0) -> dict[str, tuple[float, ...]]:
        """The incumbent's recent values per slot (for rules that use them)."""
        return {s: (value * 0.999, value, value * 1.001, value) for s in ("s0", "s1")}

    def drive(self, values: Values, direction: Direction = Direction.MAXIMIZE,
              history: float = 100.0) -> Driven:
        return drive(self.make_rule(), values, self.spec(), direction=direction,
                     history=self.history(history), noise={"s0": 0.01, "s1": 0.01})

    def test_no_keep_on_identical_values(self) -> None:
        done = self.drive(lambda role, run: 100.0)
        assert not isinstance(done.action, Keep), done.action

    def test_no_keep_when_both_sides_draw_from_one_distribution(self) -> None:
        for seed in range(5):
            done = self.drive(noisy(0.0, 0.01, seed))
            assert not isinstance(done.action, Keep), (seed, done.action)

    def test_keep_on_a_large_clean_effect(self) -> None:
        done = self.drive(noisy(0.30, 0.002, seed=1))
        assert isinstance(done.action, Keep), done.action
        effect = done.action.decision.effect
        assert effect is not None and 0.2 < effect < 0.4

    def test_a_drop_is_a_gain_when_lower_is_better(self) -> None:
        done = self.drive(noisy(0.30, 0.002, seed=2, direction=Direction.MINIMIZE),
                          direction=Direction.MINIMIZE)
        assert isinstance(done.action, Keep), done.action
        worse = self.drive(noisy(0.30, 0.002, seed=2), direction=Direction.MINIMIZE)
        assert not isinstance(worse.action, Keep), worse.action

    def test_same_pairs_same_verdict(self) -> None:
        first = self.drive(noisy(0.02, 0.01, seed=3))
        again = self.drive(noisy(0.02, 0.01, seed=3))
        assert again.actions == first.actions and again.runs == first.runs

