"""`assay finalize` on real runs: groups, branches, measurement, PR texts, rollback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assay import finalize as fin
from assay.cli.app import app
from assay.errors import FinalizeError
from assay.finalize import grouping
from assay.finalize.pr import NOT_ALONE
from assay.journal.store import Journal
from assay.repo import plumbing as branches

from .finalize_kit import edit, git, make_repo, refs, run_queue


def three_changes(tmp_path: Path) -> Path:
    root = make_repo(tmp_path / "repo", {})
    run_queue(root, [
        ("a.py: the fast path", edit(root, "a.py", "FAST_A = False", "FAST_A = True")),
        ("b.py: the fast kernel", edit(root, "b.py", "FAST_B = False", "FAST_B = True")),
        ("b.py: tuned constants", edit(root, "b.py", "TUNED = False", "TUNED = True")),
    ])
    return root


def test_three_changes_in_two_files_become_two_measured_branches(tmp_path: Path) -> None:
    root = three_changes(tmp_path)
    head, status = git(root, "rev-parse", "HEAD"), git(root, "status", "--porcelain")
    (root / "a.py").write_text("FAST_A = 'user edit, not committed'\n")  # a dirty tree
    res = fin.finalize(root, reviewer=None)

    assert [o.group.labels for o in res.outcomes] == [("e0001",), ("e0002", "e0003")]
    assert [o.group.files for o in res.outcomes] == [("a.py",), ("b.py",)]
    assert [o.branch for o in res.outcomes] == ["assay/opt-pr/a-py-the-fast-path",
                                                "assay/opt-pr/b-py"]
    a, b = res.outcomes
    # each branch is one commit on the merge-base holding exactly its group's files
    for o in res.outcomes:
        assert git(root, "rev-parse", f"{o.branch}^") .strip() == res.base
        changed = git(root, "diff", "--name-only", res.base, o.branch).split()
        assert changed == list(o.group.files)
    assert "FAST_A = True" in git(root, "show", f"{a.branch}:a.py")
    assert "FAST_B = True" in git(root, "show", f"{b.branch}:b.py")
    assert "TUNED = True" in git(root, "show", f"{b.branch}:b.py")
    assert "FAST_B = False" in git(root, "show", f"{a.branch}:b.py")
    # the union of the branches is the final tree
    union = branches.union_tree(root, res.base, [a.branch, b.branch])
    assert union == branches.tree_of(root, "assay/opt")
    # each measured on its own: a is x1.5, b is x1.3 * x1.25
    assert a.alone is not None and b.alone is not None
    assert a.alone.state == "kept" and a.alone.lo is not None and a.alone.lo > 0.4
    assert a.alone.hi is not None and a.alone.hi < 0.6
    assert b.alone.effect is not None and 0.55 < b.alone.effect < 0.075 + 0.55 + 0.02
    # leaving one out of the final tree loses what it brought
    assert a.without is not None and a.without.hi is not None
    assert -0.36 < a.without.effect < -0.30 if a.without.effect else False
    assert b.without is not None and b.without.hi is not None and b.without.hi < -0.3
    assert a.flags == [] and b.flags == [] and a.status == "stands on its own"
    # the PR text is the branch's commit message and a file
    message = git(root, "log", "-1", "--format=%B", a.branch)
    pr_file = res.folder / a.group.slug / "PR.md"
    assert pr_file.read_text().strip() == message.strip()
    assert "## Measured effect" in message and f"{a.alone.effect:+.2%}" in message
    assert "## Measured on" in message and "Python" in message
    assert "e0001" in message and "a.py: the fast path" in message
    assert "Grouped because" not in message  # one change: nothing to explain
    b_text = (res.folder / b.group.slug / "PR.md").read_text()
    assert "Grouped because they change the same files: b.py (e0002, e0003)." in b_text
    changes = (res.folder / "CHANGES.md").read_text()
    assert "| a-py-the-fast-path |" in changes and "| b-py |" in changes
    # the user's branch, index and working tree are as they were
    assert git(root, "rev-parse", "HEAD") == head
    assert git(root, "status", "--porcelain") != status  # only the user's own edit
    assert (root / "a.py").read_text() == "FAST_A = 'user edit, not committed'\n"
    # recorded in the journal
    j = Journal.open(root / ".assay" / "journal.sqlite", readonly=True)
    try:
        saved = j.get_meta("finalize:opt")
    finally:
        j.close()
    assert [g["slug"] for g in saved["groups"]] == [a.group.slug, b.group.slug]
    assert saved["groups"][0]["alone"]["effect"] == a.alone.effect


def test_a_group_that_needs_another_is_merged_with_the_reason(tmp_path: Path) -> None:
    lib = "FAST_LIB = False\n"
    root = make_repo(tmp_path / "repo", {"lib.py": lib})
    bench = (root / "bench.py").read_text().replace("import b\n", "import b\nimport lib\n")
    bench = bench.replace("if a.FAST_A:", "if lib.FAST_LIB:\n    speed *= 1.2\nif a.FAST_A:")
    (root / "bench.py").write_text(bench)
    git(root, "commit", "-qam", "bench reads lib")
    with_helper = "FAST_LIB = True\n\n\ndef fast_sum(xs):\n    return sum(xs)\n"
    lib_patch = edit(root, "lib.py", lib, with_helper)
    a_patch = edit(root, "a.py", "FAST_A = False\n",
                   "from lib import fast_sum\n\nFAST_A = fast_sum([1]) == 1\n")
    (root / ".assay").mkdir(exist_ok=True)
    j = Journal.open(root / ".assay" / "journal.sqlite")
    hid = j.add_hypothesis("a shared summing helper removes duplicate loops",
                           ["https://example.org/fusion-notes"], "paper")
    j.close()
    run_queue(root, [(f"H{hid}: lib: a summing helper", lib_patch),
                     ("a: use the helper", a_patch)])
    res = fin.finalize(root, reviewer=None, measure_groups=False)

    assert len(res.outcomes) == 1
    g = res.outcomes[0].group
    assert g.labels == ("e0001", "e0002") and set(g.files) == {"lib.py", "a.py"}
    assert len(res.notes) == 1
    note = res.notes[0]
    assert "a-use-the-helper alone fails" in note and "passes together with" in note
    assert "ImportError" in note or "cannot import" in note
    assert note in g.reason
    assert g.slug == "lib-py-a-py"
    assert g.title == "lib.py, a.py: H1: lib: a summing helper (and 1 more)"
    assert branches.rev(root, f"refs/heads/assay/opt-pr/{g.slug}") is not None
    # the PR text names the research hypothesis and its source
    text = (res.folder / g.slug / "PR.md").read_text()
    assert (f"research hypothesis H{hid} (paper): a shared summing helper removes duplicate "
            "loops") in text
    assert "source: https://example.org/fusion-notes" in text
    # --no-measure: no sentence about a measurement that was not made
    assert "Not measured: this branch was made without measuring it" in text
    assert "stands on its own" not in text and "Paired ABBA" not in text


def test_a_groups_file_replaces_the_proposal_and_is_checked(tmp_path: Path) -> None:
    root = three_changes(tmp_path)
    changes = fin.run.kept_changes(root, _journal(root), git(root, "rev-parse", "HEAD").strip(),
                                   git(root, "rev-parse", "assay/opt").strip())
    good = tmp_path / "groups.toml"
    good.write_text('[[group]]\nname = "All of it"\nexperiments = ["e0003", "e0001", '
                    '"e0002"]\n')
    (only,) = grouping.read_groups(good, changes)
    assert only.slug == "all-of-it" and only.labels == ("e0001", "e0002", "e0003")
    bad = tmp_path / "bad.toml"
    bad.write_text('[[group]]\nname = "x"\nexperiments = ["e0002"]\n'
                   '[[group]]\nname = "y"\nexperiments = ["e0001", "e0003"]\n')
    with pytest.raises(FinalizeError, match=r"both change b\.py"):
        grouping.read_groups(bad, changes)
    bad.write_text('[[group]]\nname = "x"\nexperiments = ["e0001", "e0009"]\n')
    with pytest.raises(FinalizeError, match="'e0009' is not a kept change"):
        grouping.read_groups(bad, changes)
    bad.write_text('[[group]]\nname = "x"\nexperiments = ["e0001"]\n')
    with pytest.raises(FinalizeError, match="e0002, e0003 are in no group"):
        grouping.read_groups(bad, changes)
    before = refs(root)
    out = CliRunner().invoke(app, ["finalize", "-C", str(root), "--groups", str(bad),
                                   "--no-measure"])
    assert out.exit_code == 2 and "in no group" in out.output and "Traceback" not in out.output
    assert refs(root) == before
    out = CliRunner().invoke(app, ["finalize", "-C", str(root), "--groups", str(good),
                                   "--no-measure"])
    assert out.exit_code == 0, out.output
    assert "1 group(s) from" in out.output
    assert branches.rev(root, "refs/heads/assay/opt-pr/all-of-it") is not None
    # regrouped again: the branch of the earlier grouping goes, the new ones come
    out = CliRunner().invoke(app, ["finalize", "-C", str(root), "--no-measure"])
    assert out.exit_code == 0, out.output
    assert branches.rev(root, "refs/heads/assay/opt-pr/all-of-it") is None
    folder = root / ".assay" / "finalize" / "opt"
    assert sorted(p.parent.name for p in folder.glob("*/PR.md")) == ["a-py-the-fast-path",
                                                                     "b-py"]
    assert branches.rev(root, "refs/heads/assay/opt-pr/b-py") is not None


def _journal(root: Path) -> Journal:
    return Journal.open(root / ".assay" / "journal.sqlite", readonly=True)


def test_redundant_groups_are_flagged_and_a_hand_made_commit_is_kept(tmp_path: Path) -> None:
    # Either knob gives the same x1.5 and together they give no more: each stands alone,
    # and neither matters in the final tree. The benchmark has no spread at all here.
    root = make_repo(tmp_path / "repo", {})
    bench = (root / "bench.py").read_text()
    bench = bench.replace("if a.FAST_A:\n    speed *= 1.5\nif b.FAST_B:\n    speed *= 1.3\n",
                          "if a.FAST_A or b.FAST_B:\n    speed *= 1.5\n")
    bench = bench.replace("speed *= 1 + random.Random().uniform(-0.005, 0.005)\n", "")
    (root / "bench.py").write_text(bench)
    git(root, "commit", "-qam", "either knob")
    run_queue(root, [("a.py: the fast path", edit(root, "a.py", "FAST_A = False",
                                                  "FAST_A = True"))])
    # a commit made by hand on the run branch, not by the loop
    git(root, "checkout", "-q", "assay/opt")
    (root / "b.py").write_text((root / "b.py").read_text().replace("FAST_B = False",
                                                                   "FAST_B = True"))
    git(root, "commit", "-qam", "b: the same trick by hand")
    git(root, "checkout", "-q", "main")
    res = fin.finalize(root, reviewer=None)

    a, b = res.outcomes
    assert b.group.changes[0].experiment == "" and b.group.title == "b: the same trick by hand"
    for o in (a, b):
        assert o.alone is not None and o.alone.effect is not None
        assert abs(o.alone.effect - 0.5) < 1e-9 and o.alone.distinguishable
        assert o.without is not None and o.without.effect == 0.0
        assert not o.without.distinguishable
        # the values repeat exactly: the interval is the printed digits' bound, not zero-wide
        (flag,) = o.flags
        m = re.fullmatch(re.escape(f"{NOT_ALONE} in the final tree: leaving it out of the "
                                   "final tree changes it by +0.00% [")
                         + r"(-\d+\.\d\d)%, \+(\d+\.\d\d)%\], which includes zero", flag)
        assert m is not None, flag
        assert float(m.group(1)) == -float(m.group(2)) and float(m.group(2)) > 0
        assert NOT_ALONE in (res.folder / o.group.slug / "PR.md").read_text()
    assert f"| {NOT_ALONE} in the final tree" in (res.folder / "CHANGES.md").read_text()


def test_a_long_hypothesis_becomes_a_slug_cut_between_words() -> None:
    hyp = ("normalize stems each of ~500k words though the corpus holds about 13k distinct "
           "ones")
    assert grouping.slugify(hyp) == "normalize-stems-each-of-500k-words"  # not "...-thoug"
    assert grouping.slugify(hyp, limit=20) == "normalize-stems-each"
    # one word longer than the limit is cut where the limit falls
    assert grouping.slugify("x" * 50 + " tail") == "x" * 40
    assert grouping.slugify("CHUNK=17: tuned") == "chunk-17-tuned"
    assert grouping.slugify("?!") == "change"
