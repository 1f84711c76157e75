"""A keyed journal: a row written without the key is refused at open (finding 5).

The forger re-creates main's unkeyed seal in six lines, rewrites every decision's effect,
adds an event, deletes a run, and rewrites the mark that lets an open skip the check. From
inside a run it must not reach the journal at all, or be caught; from outside (a writer
that has the file but not the key), every command that opens the journal exits 2 and names
the table and the row.
"""

from __future__ import annotations

from pathlib import Path

from tests.security.attacks import BY_NAME
from tests.security.kit import run_attack


def test_a_forgery_from_inside_a_run_never_shows(tmp_path: Path) -> None:
    verdict, outcome = run_attack(BY_NAME["journal-in-run"], tmp_path)
    assert verdict.blocked, verdict.line
    if outcome.status.code == 0:  # the forger never reached the journal: all views agree
        assert "REDTEAM-FORGED" not in outcome.log.text


def test_a_row_forged_without_the_key_is_refused_at_open(tmp_path: Path) -> None:
    verdict, outcome = run_attack(BY_NAME["journal-without-key"], tmp_path)
    assert verdict.blocked, verdict.line
    assert outcome.status.code == 2
    assert all(show.code == 2 for show in outcome.shows.values())
