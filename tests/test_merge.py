"""Queued patches written against the base, merged onto the incumbent an earlier keep moved
(when they are queued, or before their next block when a keep moved it while they were
measured): a patch whose lines are untouched is measured; one that changes the same lines
is a conflict, exported as a discard that says so (never a crash). The patch as the
proposer wrote it stays its identity: proposed again, it is a duplicate."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from assay import api
from assay.model import Candidate, ExperimentState, patch_digest
from assay.proposers.queue import QueueProposer

from .finalize.finalize_kit import edit, git, make_repo


def test_queued_patches_merge_onto_the_incumbent_and_a_real_conflict_is_its_own_outcome(
        tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {})
    patches = [  # all three written against the base
        ("the fast kernel", edit(root, "b.py", "FAST_B = False", "FAST_B = True")),
        ("a note on helper", edit(root, "b.py", "def helper(x):", "def helper(x):  # +1")),
        ("the fast kernel, undecided", edit(root, "b.py", "FAST_B = False", "FAST_B = None")),
    ]
    folder = root / ".queue"
    folder.mkdir()
    for i, (hyp, diff) in enumerate(patches):
        (folder / f"{i:02d}.patch").write_text(f"# hypothesis: {hyp}\n{diff}")
    cfg = root / "assay.toml"
    cfg.write_text(cfg.read_text() + '\n[proposer.queue]\npath = ".queue"\n')
    git(root, "commit", "-qam", "queue the patches")
    # the second patch's context holds the line the first changes: it applies only merged
    assert "FAST_B = False" in patches[1][1]
    api.run(root, proposer="queue", budget=3)
    log = {e["hypothesis"]: e for e in api.log(root)}
    assert log["the fast kernel"]["state"] == "kept"
    assert log["a note on helper"]["state"] in ("kept", "discarded"), log["a note on helper"]
    shown = api.show(log["a note on helper"]["id"], root)
    assert "FAST_B = True" in shown["patch"]  # measured as merged onto the incumbent
    clash = log["the fast kernel, undecided"]
    assert clash["state"] == "conflict"
    assert clash["note"].startswith("conflict: b.py: the patch and the incumbent ")
    df = pd.read_csv(io.StringIO(api.export("tsv", root)), sep="\t")
    row = df[df["description"].str.startswith("the fast kernel, undecided")].iloc[0]
    assert row["status"] == "discard" and "conflict: b.py" in row["description"]
    jsonl = [line for line in api.export("jsonl", root).splitlines() if "undecided" in line]
    assert len(jsonl) == 1 and '"status": "discard"' in jsonl[0]


# FAST_B and TUNED two lines apart: a patch to one holds the other in its context, so after
# a keep of one the other applies only merged
NEAR = "FAST_B = False\n\n\nTUNED = False\n\n\ndef helper(x):\n    return x + 1\n"


def test_a_keep_under_a_measured_patch_merges_it_before_its_next_block(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"b.py": NEAR})
    fast = edit(root, "b.py", "FAST_B = False", "FAST_B = True")
    tuned = edit(root, "b.py", "TUNED = False", "TUNED = True")
    clash = edit(root, "b.py", "FAST_B = False", "FAST_B = 1")
    with api.session(api.load(root), proposer=QueueProposer([])) as loop:
        inc = loop.start()
        # all three queued against the base, before any keep: each applies as written
        exps = [loop.submit_candidate(Candidate(inc.commit, patch=p, hypothesis=h))
                for h, p in (("fast", fast), ("tuned", tuned), ("fast, spelled 1", clash))]
        assert [e.state for e in exps] == [ExperimentState.QUEUED] * 3
        loop.run(budget=3, propose=False)
        done = {e.candidate.hypothesis: e for e in loop.journal.experiments()}
        events = [e.message for e in loop.journal.events() if e.kind in ("rebase", "conflict")]
    assert done["fast"].state is ExperimentState.KEPT, done["fast"].note
    moved = done["tuned"]
    assert moved.state is ExperimentState.KEPT, (moved.note, events)
    assert "FAST_B = True" in moved.candidate.patch  # measured, and kept, as merged
    assert moved.digest == moved.candidate.written_digest == patch_digest(tuned, {})
    assert moved.candidate.digest != moved.digest
    assert "FAST_B = True" in api.show(moved.id, root)["patch"]
    assert (root / "b.py").read_text() == NEAR  # merged in a private index
    lost = done["fast, spelled 1"]
    assert lost.state is ExperimentState.CONFLICT, (lost.note, events)
    assert lost.note.startswith("conflict: b.py: the patch and the incumbent ")
    assert lost.candidate.patch == clash  # the patch it was measured with
    assert not any("does not apply" in e.note for e in done.values())


def test_the_same_text_proposed_again_after_a_merge_is_a_duplicate(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"b.py": NEAR})
    fast = edit(root, "b.py", "FAST_B = False", "FAST_B = True")
    tuned = edit(root, "b.py", "TUNED = False", "TUNED = True")
    with api.session(api.load(root), proposer=QueueProposer([])) as loop:
        base = loop.start()
        loop.submit_candidate(Candidate(base.commit, patch=fast, hypothesis="fast"))
        loop.run(budget=1, propose=False)
        first = loop.submit_candidate(Candidate(base.commit, patch=tuned, hypothesis="tuned"))
        again = loop.submit_candidate(Candidate(base.commit, patch=tuned, hypothesis="again"))
    assert first.state is ExperimentState.QUEUED
    assert first.candidate.patch != tuned  # merged onto the kept fast patch
    assert again.state is ExperimentState.INVALID
    assert again.note == f"identical to {first.id}, already tried"
