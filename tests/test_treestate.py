"""The slot trees' file state between blocks: a change made while no block ran on the slot
(by another slot's candidate, a process left behind) is said and undone before the next
block measures anything. Real git worktrees, real benchmark processes."""

from __future__ import annotations

from assay.bench.worker import SlotTrees, run_block
from assay.config import spec as config
from assay.model import Block, BlockKind, Candidate, Incumbent, Slot
from assay.repo.workspace import Workspace

from .conftest import TinyFactory, patch_work


def test_a_tree_changed_between_blocks_is_said_and_restored(tiny_target: TinyFactory) -> None:
    root = tiny_target()
    target = config.load(root)
    ws = Workspace(target, "t")
    trees = SlotTrees(ws.tree("s0-a"), ws.tree("s0-b"))
    inc = Incumbent(ws.head())
    cand = Candidate(inc.commit, patch_work(root, 100_000), hypothesis="half the work")
    slot = Slot("s0")

    first = run_block(Block("e0001-b1", "e0001", BlockKind.COMPARE, "AB", inc, cand), target,
                      ws, slot, trees)
    assert first.error == "" and first.restored == (), first
    work = trees.a / "work.py"
    work.write_text(work.read_text().replace("WORK = 200000", "WORK = 400000"))

    second = run_block(Block("e0001-b2", "e0001", BlockKind.COMPARE, "AB", inc, cand),
                       target, ws, slot, trees)
    assert second.error == "", second
    (said,) = second.restored
    assert "s0-a/work.py" in said and "restored" in said, said
    assert work.read_text().startswith("WORK = 200000")
    a_first, a_second = (r.metrics["speed"] for b in (first, second) for r in b.runs
                         if r.role.value == "A")
    # the incumbent measured its own code both times (the scripted jitter is bounded far
    # below the halving the change would have caused)
    assert 0.8 < a_second / a_first < 1.25, (a_first, a_second)
