"""Spend on model calls, end to end: the llm proposer against a local server speaking
OpenAI's chat-completions format (usage included), a dollar cap that stops the run midway,
and the spend where people look: the run's summary, `assay status`, `assay plan`, the MCP
status tool and the report in a real headless Chromium."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from assay import api
from assay.faces import mcp
from assay.journal.store import Journal
from assay.loop.progress import Summary
from assay.model import Candidate, ExperimentState
from assay.usage import Usage
from tests.proposers.proposer_helpers import APP, LLMServer, Reply, config_text, make_repo
from tests.proposers.proposer_helpers import BENCH as PLAIN_BENCH
from tests.scripted import DRAW

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"

WORK = """\
WORK = 1000000
PAD = 0  # a constant nothing reads


def run():
    total = 0
    for i in range(WORK):
        total += i % 7
    return total + 1
"""

BENCH = DRAW + """
import work

checksum = work.run()
assert checksum > 0
print(f"METRIC speed={1e9 / work.WORK * draw():.3f}")
"""

CONFIG = """\
[target]
brief = "program.md"

[metric]
name = "speed"
direction = "maximize"
unit = "units/s"

[commands]
bench = "{python} bench.py"

[scope]
editable = ["work.py"]
protected = ["bench.py"]

[run]
slots = 1
budget = 8
proposer = "llm"
max_usd = 0.04
verify = false

[decision]
rule = "fixed"
max_pairs = 4
pairs_per_block = 2
aa_blocks = 0
delta = 0.02

[proposer.llm]
provider = "openai"
model = "gpt-4.1"
base_url = "{url}"
api_key_env = ""
max_tokens = 1024
"""

# gpt-4.1 in the bundled table: $2 input, $0.50 cached, $8 output per Mtok. Each reply
# reports 3,000 prompt tokens (1,000 of them cached) and 400 completion tokens:
# (2,000 * 2 + 1,000 * 0.5 + 400 * 8) / 1e6 = $0.0077 a call.
CALL_USD = 0.0077


def step_of() -> Any:
    counter = itertools.count(1)

    def step(req: Any) -> Reply:
        k = next(counter)
        if k == 1:
            text = ("HYPOTHESIS: do a tenth of the work\n\nwork.py\n<<<<<<< SEARCH\n"
                    "WORK = 1000000\n=======\nWORK = 100000\n>>>>>>> REPLACE\n")
        else:
            text = (f"HYPOTHESIS: retune the unused constant to {k}\n\nwork.py\n"
                    "<<<<<<< SEARCH\nPAD = 0  # a constant nothing reads\n=======\n"
                    f"PAD = {k}  # a constant nothing reads\n>>>>>>> REPLACE\n")
        return Reply(text, tokens_in=3000, tokens_out=400, cached=1000)

    return step


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Summary, int, list[str]]:
    root = tmp_path_factory.mktemp("spend") / "repo"
    events: list[str] = []
    with LLMServer(default=step_of()) as server:
        make_repo(root, {"work.py": WORK, "bench.py": BENCH,
                         "program.md": "Make work.py faster without changing its result.\n"},
                  CONFIG.format(python=sys.executable, url=f"{server.url}/v1"))
        summary = api.run(root, on_event=lambda k, m, e: events.append(f"{k}: {m}"))
        sent = len(server.requests)
    return root, summary, sent, events


def assay(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "assay", *args, "-C", str(root)],
                          capture_output=True, text=True, timeout=300,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_a_dollar_cap_stops_the_run_midway(capped: tuple[Path, Summary, int, list[str]]
                                           ) -> None:
    root, summary, sent, events = capped
    trace = "\n".join(events)
    # each call's worst case is its prompt at $2/Mtok plus 1,024 reply tokens at $8/Mtok
    # (about $0.011): after four calls ($0.0308) the fifth could pass $0.04
    assert sent == 4, trace
    assert summary.stopped.startswith("the cap [run] max_usd = $0.04 is reached"), trace
    assert "$0.0308 on 4 model calls (13,600 tokens) are spent" in summary.stopped
    assert summary.finished == 4 and [e.id for e in summary.kept] == ["e0001"]
    assert any(e.startswith("stop: stopping (cap)") for e in events), trace
    sp = summary.spend
    assert sp is not None and sp["calls"] == 4 and sp["kept"] == 1 and sp["complete"]
    assert sp["usd"] == pytest.approx(4 * CALL_USD) and sp["tokens_cached"] == 4000
    assert sp["usd_per_kept"] == pytest.approx(4 * CALL_USD)
    assert sp["caps"] == {"max_usd": 0.04} and sp["stop"]["kind"] == "cap"
    journal = Journal.open(root / ".assay" / "journal.sqlite", readonly=True)
    try:
        for e in journal.experiments():
            [call] = journal.model_calls(experiment_id=e.id)
            assert (call.model, call.tokens_in, call.tokens_cached, call.priced_by) == (
                "gpt-4.1", 3000, 1000, "table")
            assert call.cost_usd == pytest.approx(CALL_USD)
            assert "cost_usd" not in e.candidate.meta and "tokens_in" not in e.candidate.meta
        assert all(e.state.is_finished() for e in journal.experiments())
        assert journal.experiments([ExperimentState.KEPT])[0].id == "e0001"
    finally:
        journal.close()
    [call] = api.show("e0002", root)["model_calls"]
    assert call["tokens_out"] == 400 and call["cost_usd"] == pytest.approx(CALL_USD)


def test_an_older_journal_with_spend_in_meta_still_shows(tmp_path: Path) -> None:
    # journals written before the spend left candidates' meta keep tokens and dollars there:
    # they open, and show only the journal's model calls
    root = tmp_path / "repo"
    commit = make_repo(root, {"src/app.py": APP, "bench.py": PLAIN_BENCH}, config_text())
    journal = Journal.open(root / ".assay" / "journal.sqlite")
    cid = journal.add_model_call(Usage("gpt-4.1", 3000, 400, 1000, 0, CALL_USD, "table"),
                                 "propose", "s1")
    journal.add_experiment(Candidate(
        base_commit=commit, patch="p", hypothesis="h", proposer="llm",
        meta={"model_calls": [cid], "attempts": 1, "tokens_in": 99, "tokens_out": 1,
              "tokens_cached": 0, "cost_usd": 9.99, "priced": True}))
    journal.close()
    data = api.show("e0001", root)
    assert data["meta"] == {"model_calls": [cid], "attempts": 1}
    assert [(c["tokens_in"], c["tokens_out"]) for c in data["model_calls"]] == [(3000, 400)]
    out = assay(root, "show", "e0001")
    assert out.returncode == 0, out.stderr
    assert "model calls: $0.007700 on 1 model call (3,400 tokens)" in out.stdout
    assert "9.99" not in out.stdout and "9.99" not in assay(root, "show", "e0001",
                                                           "--json").stdout


def test_status_and_the_mcp_tool_give_the_spend(
        capped: tuple[Path, Summary, int, list[str]]) -> None:
    root = capped[0]
    proc = assay(root, "status")
    assert proc.returncode == 0, proc.stderr
    assert ("spend: $0.0308 on 4 model calls (13,600 tokens); $0.0308 per kept change "
            "(1 kept)") in proc.stdout
    assert "(caps: max_usd $0.04)" in proc.stdout
    assert "stopped by a rule (cap); `assay run --continue` goes on" in proc.stdout
    st = mcp.status(api.load(root))
    assert st["spend"]["calls"] == 4 and st["spend"]["usd"] == pytest.approx(4 * CALL_USD)
    # the improvement is the kept effects compounded (nothing verified: verify = false)
    assert st["spend"]["improvement_source"] == "compounded"
    assert st["spend"]["usd_per_percent"] == pytest.approx(
        4 * CALL_USD / (100 * st["spend"]["improvement"]))


def test_run_again_needs_continue(capped: tuple[Path, Summary, int, list[str]]) -> None:
    root = capped[0]
    proc = assay(root, "run")
    assert proc.returncode == 2
    err = " ".join(proc.stderr.split())
    assert "the last run stopped: the cap [run] max_usd = $0.04 is reached" in err
    assert "`assay run --continue` goes on (raise the cap in assay.toml first" in err
    # --continue goes on; with the cap unchanged the first check stops it again, before
    # any call (no server is listening any more: a call would fail)
    proc = assay(root, "run", "--continue", "--verbose")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "going on after the last run's stop (cap)" in proc.stdout
    assert "stopping (cap): the cap [run] max_usd = $0.04 is reached" in " ".join(
        proc.stdout.split())
    assert api.status(root)["experiments"] == 4


def test_plan_estimates_the_spend(capped: tuple[Path, Summary, int, list[str]]) -> None:
    proc = assay(capped[0], "plan", "--noise", "1%", "--trials", "20")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "spend: llm proposer, model gpt-4.1 ($2 in / $8 out per Mtok): at most 4 calls " \
           "per experiment" in out
    assert "worst case for 8 experiments: $" in out
    assert ("measured: $0.0308 on 4 model calls (13,600 tokens) over 4 experiments: "
            "$0.007700 and 3,400 tokens per experiment; 8 more: about $0.0616") in out
    assert "caps: max_usd $0.04 (checked before each call with its worst case)" in out


def test_the_report_shows_the_spend_in_chromium(
        browser: Any, capped: tuple[Path, Summary, int, list[str]], tmp_path: Path) -> None:
    root = capped[0]
    out = tmp_path / "report.html"
    proc = assay(root, "report", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(out.as_uri(), timeout=30_000)
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        section = page.locator("#spend")
        section.wait_for(timeout=30_000)
        cells = {key: page.locator(f"#spend tr[data-spend='{key}'] td.num").inner_text()
                 for key in ("usd", "calls", "tokens", "per_kept", "per_percent", "caps",
                             "stop")}
        assert cells["usd"] == "$0.0308" and cells["calls"] == "4"
        assert cells["tokens"] == "12,000 · 4,000 · 1,600"
        assert cells["per_kept"] == "$0.0308" and cells["caps"] == "max_usd $0.04"
        assert cells["per_percent"].startswith("$0.0000") and len(cells["per_percent"]) > 7
        assert cells["stop"] == "cap"
        reason = page.locator("#spend p[data-spend='stop-reason']").inner_text()
        assert reason.startswith("The run stopped: the cap [run] max_usd = $0.04 is reached")
        assert not errors
        ARTIFACTS.mkdir(exist_ok=True)
        section.scroll_into_view_if_needed()
        section.screenshot(path=str(ARTIFACTS / "report-spend.png"))
    finally:
        context.close()
