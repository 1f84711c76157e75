"""A slot that appears after calibration (a pool node replacing a quarantined one) measures
its noise with A/A blocks before it measures anything else."""

from __future__ import annotations

import random
from pathlib import Path

from assay.config.spec import parse
from assay.decision.stats.noise import CALIBRATION_PAIRS
from assay.executors.function import FunctionExecutor, values
from assay.model import Block, BlockKind, BlockResult, Candidate, ExperimentState, Slot
from assay.testing import ROOT_COMMIT, memory_loop

CONFIG = """\
[metric]
name = "speed"
direction = "maximize"

[commands]
bench = "true"

[scope]
editable = ["work.py"]

[[params]]
name = "GAIN"
type = "float"
low = 0.5
high = 2.0

[run]
slots = 3

[decision]
delta = 0.02
aa_blocks = 1
"""


class Pool(FunctionExecutor):
    """Function-backed slots that behave like a provisioned pool: a quarantined slot's node
    is replaced by a fresh one, whose slot has a new name."""

    def __init__(self, fn: object, slots: list[Slot]) -> None:
        self.ran: list[tuple[str, BlockKind, str]] = []  # slot, kind, experiment per block
        self.replaced: list[tuple[str, str]] = []

        def record(block: Block, slot: Slot) -> BlockResult:
            self.ran.append((slot.name, block.kind, block.experiment_id))
            return fn(block, slot)  # type: ignore[operator, no-any-return]

        super().__init__(record, slots)

    def quarantine(self, slot: str) -> None:
        super().quarantine(slot)
        new = Slot(f"n{len(self.replaced) + 1}", host="fresh-node")
        self._slots.append(new)
        self.replaced.append((slot, new.name))


def test_a_replacement_slot_is_calibrated_before_it_measures(tmp_path: Path) -> None:
    rng = random.Random(3)
    sd = {"s0": 0.005, "s1": 0.005, "s2": 0.12}  # s2 sits on a noisy host

    def value(role: str, slot: str) -> float:
        gain = state["gain"] if role == "B" else 1.0
        return 100.0 * gain * (1.0 + rng.gauss(0.0, sd.get(slot, 0.005)))

    state = {"gain": 1.3}
    pool = Pool(values("speed", value), [Slot("s0"), Slot("s1"), Slot("s2")])
    events: list[tuple[str, str]] = []
    loop = memory_loop(parse(CONFIG, tmp_path), pool,
                       on_event=lambda kind, msg, exp: events.append((kind, msg)),
                       candidates=[Candidate(ROOT_COMMIT, params={"GAIN": 1.3 + i / 1000},
                                             hypothesis=f"faster {i}") for i in range(6)])
    loop.run(budget=6)

    assert pool.replaced == [("s2", "n1")]
    on_new = [(kind, exp) for slot, kind, exp in pool.ran if slot == "n1"]
    aa = [k for k, _ in on_new if k is BlockKind.AA]
    # enough A/A pairs for a stable estimate, and all of them before anything else
    pairs = loop.target.decision.pairs_per_block
    assert len(aa) * pairs >= CALIBRATION_PAIRS
    first_other = next(i for i, (k, _) in enumerate(on_new) if k is not BlockKind.AA)
    assert first_other == len(aa), on_new
    # the fresh slot took part once calibrated, and its noise is in the journal
    assert any(exp.startswith("e") for _, exp in on_new[first_other:])
    cal = loop.journal.get_meta("calibration")
    assert "n1" in cal["noise"] and "s2" in cal["quarantined"]
    slots = {s.name: s for s in loop.journal.slots()}
    assert slots["n1"].noise is not None and not slots["n1"].quarantined
    assert slots["s2"].quarantined
    said = [m for k, m in events if "n1" in m]
    assert any(k == "calibrate" and "slot n1 is new" in m for k, m in events)
    assert any(k == "calibrated" and m.startswith("slot n1 calibrated") for k, m in events)
    assert said.index(next(m for m in said if "is new" in m)) == 0
    exps = loop.journal.experiments()
    assert all(e.state is ExperimentState.KEPT or e.state is ExperimentState.DISCARDED
               for e in exps)
