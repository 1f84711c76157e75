"""A journal measured under one ``[fidelity]`` is never measured into under another.

Blocks, calibrations and decisions keep a level by its place in ``levels``; a session, a
verification or a finalize that measures refuses to start when ``[fidelity]`` changed since
the journal's blocks were measured, and leaves the journal as it was. The scripted target
is :mod:`tests.test_fidelity_loop`'s (levels ``BUDGET = 1, 3``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from assay import api
from assay.config.fidelity import FidelitySpec, check_setup, setup_record
from assay.errors import AssayError, ConfigError
from assay.finalize import finalize
from assay.loop.levels import at_level, level_of
from assay.model import Block, BlockKind, Incumbent

from .conftest import git
from .test_fidelity_loop import Listed, journal, target

LEVELS = "levels = [1, 3]"


def contents(root: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table of the journal: what "unchanged" means."""
    conn = sqlite3.connect(root / ".assay" / "journal.sqlite")
    try:
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {n: sorted(map(tuple, conn.execute(f"SELECT * FROM {n}")), key=repr)
                for n in names}
    finally:
        conn.close()


def edit(root: Path, old: str, new: str) -> None:
    cfg = root / "assay.toml"
    text = cfg.read_text()
    assert old in text
    cfg.write_text(text.replace(old, new))
    git(root, "commit", "-qam", f"assay.toml: {new.strip() or 'without ' + old.strip()}")


def refused(root: Path) -> str:
    """Run a session that must refuse; the journal's rows are the same before and after."""
    before = contents(root)
    with pytest.raises(ConfigError) as err:
        api.run(root, proposer_obj=Listed("c"), carry_on=True)
    assert contents(root) == before
    return str(err.value)


def test_changed_levels_are_refused_and_the_unchanged_config_resumes(tmp_path: Path) -> None:
    """Scenario A: levels [1, 3] become [1, 2, 3]; the decisive level's calibration and
    blocks (measured at 3) would be reused for 2. Refused by run and by verify, naming the
    old and new levels and what to do; with the old levels back, the run goes on."""
    root = target(tmp_path, aa=1)
    api.run(root, budget=1, proposer_obj=Listed("x"))
    j = journal(root)
    try:
        assert j.fidelity_setup() == {"param": "BUDGET", "levels": [1, 3],
                                      "promote": "interval", "top": 2}
        assert sorted(j.calibrations()) == [0, 1]
    finally:
        j.close()
    edit(root, LEVELS, "levels = [1, 2, 3]")
    words = refused(root)
    assert str(root / "assay.toml") in words and "[fidelity] changed" in words
    assert ('measured under param = "BUDGET", levels = [1, 3], promote = "interval", '
            'assay.toml now has param = "BUDGET", levels = [1, 2, 3]') in words
    assert "restore the [fidelity] the journal was measured under" in words
    assert "`assay reset`" in words
    before = contents(root)
    with pytest.raises(ConfigError, match=r"levels = \[1, 2, 3\]"):
        api.verify(root)
    with pytest.raises(ConfigError, match=r"levels = \[1, 2, 3\]"):
        finalize(root, reviewer=None)  # it measures each group at the last level
    assert contents(root) == before

    edit(root, "levels = [1, 2, 3]", "levels = [3, 1000]")  # shrunk, then a new list
    assert "levels = [3, 1000]" in refused(root)

    edit(root, "levels = [3, 1000]", LEVELS)
    n = len(api.log(root))
    api.run(root, budget=1, proposer_obj=Listed("c"), carry_on=True)
    log = api.log(root)
    assert len(log) == n + 1 and log[-1]["state"] == "kept"


def test_a_removed_fidelity_is_refused(tmp_path: Path) -> None:
    """Scenario B: without [fidelity] the cheap level's blocks would decide keeps."""
    root = target(tmp_path)
    api.run(root, budget=1, proposer_obj=Listed("x"))
    cfg = (root / "assay.toml").read_text()
    fidelity = cfg[cfg.index("[fidelity]"):]
    edit(root, fidelity, "")
    words = refused(root)
    assert ('measured under param = "BUDGET", levels = [1, 3], promote = "interval", '
            "assay.toml now has no [fidelity]") in words


def test_a_fidelity_added_to_a_journal_measured_without_one_is_refused(
        tmp_path: Path) -> None:
    """Scenario C: the journal's blocks ran at the parameter's own value (3 here), not at
    the new first level; a journal with nothing measured may take any [fidelity]."""
    root = target(tmp_path)
    cfg = (root / "assay.toml").read_text()
    fidelity = cfg[cfg.index("[fidelity]"):]
    edit(root, "high = 100\n", "high = 100\ndefault = 3\n")
    edit(root, fidelity, "")
    api.run(root, budget=1, proposer_obj=Listed("x"))
    j = journal(root)
    try:
        assert j.fidelity_setup() == "none" and j.deepest_level() == 0
    finally:
        j.close()
    edit(root, "verify = false\n", "verify = false\n\n" + fidelity)
    words = refused(root)
    assert "measured under no [fidelity], assay.toml now has param = \"BUDGET\"" in words
    assert "remove [fidelity] from assay.toml to go on with this run" in words


SPEC = FidelitySpec("BUDGET", (30, 300))


def test_the_setup_check_compares_every_part_that_changes_a_measurement() -> None:
    rec = setup_record(SPEC)
    check_setup(rec, SPEC, 1, "assay.toml")  # the same
    check_setup(rec, FidelitySpec("BUDGET", (30, 300), top=5), 1, "assay.toml")  # top unused
    check_setup(rec, FidelitySpec("T", (1, 2, 3)), None, "assay.toml")  # nothing measured
    for other in (FidelitySpec("BUDGET", (30, 300, 1000)), FidelitySpec("BUDGET", (30.0, 300)),
                  FidelitySpec("STEPS", (30, 300)), FidelitySpec("BUDGET", (30, 300), "top"),
                  None):
        with pytest.raises(ConfigError, match=r"\[fidelity\] changed"):
            check_setup(rec, other, 0, "assay.toml")
    top = setup_record(FidelitySpec("BUDGET", (30, 300), "top", 2))
    with pytest.raises(ConfigError, match=r"top = 2, assay.toml now has .* top = 3"):
        check_setup(top, FidelitySpec("BUDGET", (30, 300), "top", 3), 0, "assay.toml")
    # a journal older than the record: only a level the config lacks can be seen
    check_setup(None, SPEC, 1, "assay.toml")
    with pytest.raises(ConfigError, match="blocks measured at fidelity level 2"):
        check_setup(None, SPEC, 2, "assay.toml")
    with pytest.raises(ConfigError, match=r"no \[fidelity\] has only level 0"):
        check_setup(None, None, 1, "assay.toml")


def test_a_level_beyond_the_config_is_an_error_never_clamped(tmp_path: Path) -> None:
    inc = Incumbent("abc", {})
    block = Block(block_id="e0001-b3", experiment_id="e0001", kind=BlockKind.AA, order="ABBA",
                  incumbent=inc, candidate=None, level=2)
    with pytest.raises(AssayError, match="block e0001-b3 is at fidelity level 2"):
        at_level(block, SPEC)
    with pytest.raises(AssayError, match=r"and assay.toml has no \[fidelity\]"):
        at_level(block, None)
    assert at_level(block, FidelitySpec("B", (1, 2, 3))).incumbent.params == {"B": 3}
    root = target(tmp_path)
    api.run(root, budget=1, proposer_obj=Listed("x"))
    j = journal(root)
    try:
        assert level_of(j, "e0001", SPEC) == 1
        with pytest.raises(AssayError, match="e0001 is at fidelity level 1"):
            level_of(j, "e0001", None)
    finally:
        j.close()
