"""How fast the real Loop decides on its twins (in-memory journal, repository and a
function-backed executor): the speed a simulator driving ``Loop.step()`` gets.

    PYTHONPATH=src python benchmarks/loop_speed.py [--experiments 400]

Each experiment is a candidate with no true effect, measured with 1% noise by the default
sequential rule on two slots: once as one long run (one journal, calibrated first,
candidates proposed as slots free up), once with a fresh loop and journal per decision.
PASS when each mode decides at least 10 experiments a second.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from assay.config.spec import Target, parse
from assay.executors.function import FunctionExecutor, values
from assay.model import Candidate, Slot
from assay.proposers.base import ProposalContext, Proposer
from assay.testing import ROOT_COMMIT, memory_loop

CONFIG = """\
[metric]
name = "t"
direction = "minimize"

[commands]
bench = "true"

[scope]
editable = ["x.py"]

[[params]]
name = "K"
type = "int"
low = 0
high = 1000000

[run]
slots = 2

[decision]
delta = 0.02
"""
FLOOR = 10.0  # decisions a second, in each mode (a thousand in under two minutes)


class Stream(Proposer):
    """Null candidates, as many as asked, until ``total`` were proposed."""

    name = "stream"

    def __init__(self, total: int) -> None:
        self.left = total
        self.n = 0

    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        out = []
        while self.left > 0 and len(out) < n:
            self.left -= 1
            self.n += 1
            out.append(Candidate(context.incumbent.commit, params={"K": self.n},
                                 hypothesis=f"null {self.n}"))
        return out


def executor(rng: random.Random) -> FunctionExecutor:
    return FunctionExecutor(values("t", lambda role, slot: 100.0 * (1 + rng.gauss(0, 0.01))),
                            slots=[Slot("s0"), Slot("s1")])


def one_journal(target: Target, n: int) -> tuple[int, int, int]:
    """One loop, one journal: n experiments proposed as slots free up."""
    loop = memory_loop(target, executor(random.Random(0)), Stream(n))
    loop.run(budget=n)
    exps = loop.journal.experiments()
    return (sum(1 for e in exps if e.state.is_finished()), len(loop.journal.blocks()),
            len(loop.journal.runs()))


def fresh_loops(target: Target, n: int) -> tuple[int, int, int]:
    """A fresh loop and journal per decision (as a simulator of one decision does)."""
    decided = blocks = runs = 0
    rng = random.Random(1)
    for i in range(n):
        loop = memory_loop(target, executor(rng), candidates=[
            Candidate(ROOT_COMMIT, params={"K": i + 1}, hypothesis="null")])
        loop.run(budget=1)
        decided += sum(1 for e in loop.journal.experiments() if e.state.is_finished())
        blocks += len(loop.journal.blocks())
        runs += len(loop.journal.runs())
        loop.journal.close()
    return decided, blocks, runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", type=int, default=400)
    args = ap.parse_args()
    n = args.experiments
    print(f"{'mode':<24} {'decided':>8} {'blocks':>7} {'runs':>7} {'seconds':>8} "
          f"{'dec/s':>7} {'runs/s':>8}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for label, fn, text in (
                ("one journal, calibrated", one_journal, CONFIG),
                ("fresh loop per decision", fresh_loops,
                 CONFIG.replace("delta = 0.02", "delta = 0.02\naa_blocks = 0"))):
            target = parse(text, Path(tmp))
            start = time.perf_counter()
            decided, blocks, runs = fn(target, n)
            wall = time.perf_counter() - start
            rate = decided / wall
            ok = ok and decided == n and rate >= FLOOR
            print(f"{label:<24} {decided:>8} {blocks:>7} {runs:>7} {wall:>8.2f} {rate:>7.1f} "
                  f"{runs / wall:>8.1f}")
    print(f"summary: {2 * n} decisions on the loop's twins, floor {FLOOR:g} decisions/s in "
          f"each mode: {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
