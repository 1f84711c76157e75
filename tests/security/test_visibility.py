"""What a sandboxed run can see: nothing of assay, the other side, the user, git or holdout.

One run of a probing candidate (its bench lists what it finds and prints it as JSON); each
test reads one property of what it saw. The probe looks for the orchestrator in ``/proc``
(by the run name on its command line), the journal, the other slot's tree, the user's
checkout, a writable ``.git``, the holdout file (by its content), and a listener on the
host's loopback (by the connections that listener received). The agent proposer's command
runs the same probe and says what it saw in its hypothesis (it may use the network: a coding
agent talks to its model's API).
"""

from __future__ import annotations

import pytest

from tests.security.attacks import BY_NAME
from tests.security.judges import probe_seen
from tests.security.kit import Outcome, run_attack


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, list[str]], Outcome]:
    _, outcome = run_attack(BY_NAME["visibility"], tmp_path_factory.mktemp("visibility"))
    seen = probe_seen(outcome)
    assert seen, f"the probe printed nothing: {outcome.summary()}"
    return seen, outcome


def test_no_assay_process_is_visible(probed: tuple[dict[str, list[str]], Outcome]) -> None:
    assert probed[0]["assay_process"] == []


def test_the_journal_is_hidden(probed: tuple[dict[str, list[str]], Outcome]) -> None:
    assert probed[0]["journal"] == []


def test_the_other_slots_tree_is_hidden(probed: tuple[dict[str, list[str]], Outcome]) -> None:
    assert probed[0]["other_tree"] == []


def test_the_users_checkout_is_hidden(probed: tuple[dict[str, list[str]], Outcome]) -> None:
    assert probed[0]["user_checkout"] == []


def test_the_git_folder_is_not_writable(probed: tuple[dict[str, list[str]], Outcome]) -> None:
    assert probed[0]["git_writable"] == []


def test_the_holdout_is_unreadable(probed: tuple[dict[str, list[str]], Outcome]) -> None:
    seen, outcome = probed
    assert not [t for t in seen["holdout"] if outcome.repo.token in t]


def test_no_network_by_default(probed: tuple[dict[str, list[str]], Outcome]) -> None:
    seen, outcome = probed
    assert seen["network"] == [] and outcome.notes["connections"] == []


@pytest.fixture(scope="module")
def agent_probed(tmp_path_factory: pytest.TempPathFactory
                 ) -> tuple[dict[str, list[str]], Outcome]:
    _, outcome = run_attack(BY_NAME["agent-visibility"], tmp_path_factory.mktemp("agent"))
    seen = probe_seen(outcome)
    assert seen, f"the agent reported nothing: {outcome.summary()}"
    return seen, outcome


# The network is left out: a coding agent talks to its model's API.
@pytest.mark.parametrize("what", ["assay_process", "journal", "other_tree", "user_checkout",
                                  "git_writable", "holdout"])
def test_the_agent_proposer_sees_none_of_it(
        agent_probed: tuple[dict[str, list[str]], Outcome], what: str) -> None:
    seen, outcome = agent_probed
    found = seen.get(what, [])
    if what == "holdout":
        found = [t for t in found if outcome.repo.token in t]
    assert found == [], f"the agent saw {what}: {found}"
