"""Queued patches written against the base, merged onto the incumbent an earlier keep moved:
a patch whose lines are untouched is measured; one that changes the same lines is a
conflict, exported as a discard that says so (never a crash)."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from assay import api

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
    assert clash["state"] == "invalid"
    assert clash["note"].startswith("conflict: b.py: the patch and the incumbent ")
    df = pd.read_csv(io.StringIO(api.export("tsv", root)), sep="\t")
    row = df[df["description"].str.startswith("the fast kernel, undecided")].iloc[0]
    assert row["status"] == "discard" and "conflict: b.py" in row["description"]
    jsonl = [line for line in api.export("jsonl", root).splitlines() if "undecided" in line]
    assert len(jsonl) == 1 and '"status": "discard"' in jsonl[0]
