"""End to end: the real loop with the llm proposer talking to a local scripted server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from proposer_helpers import LLMServer, make_repo, sh
from tests.scripted import DRAW

from assay import api

WORK = """\
WORK = 1000000
UNITS = 1000


def run():
    total = 0
    for i in range(WORK * REPEAT):
        total += i % 7
    return total + 1


REPEAT = 1  # far from WORK: an edit of each applies after the other was kept
"""

# The work runs for real; the speed is scripted from the loop's length (tests/scripted.py).
BENCH = DRAW + """
import work

checksum = work.run()
assert checksum > 0
print(f"METRIC speed={work.UNITS * 1e6 / (work.WORK * work.REPEAT) * draw():.3f}")
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
bench_timeout = 30

[scope]
editable = ["work.py"]
protected = ["bench.py"]

[run]
slots = 2
budget = 3
proposer = "llm"

[decision]
rule = "fixed"
max_pairs = 6
pairs_per_block = 2
aa_blocks = 0
delta = 0.02

[proposer.llm]
provider = "{provider}"
model = "scripted"
base_url = "{url}"
api_key_env = "ASSAY_E2E_KEY"

[prices.scripted]
input = 1.0
output = 2.0
"""


def edit(hyp: str, new: str) -> str:
    return (f"HYPOTHESIS: {hyp}\n\nwork.py\n```python\n<<<<<<< SEARCH\nWORK = 1000000\n"
            f"=======\nWORK = {new}\n>>>>>>> REPLACE\n```\n")


FASTER = edit("do a tenth of the work", "100000")
# a different hunk, so it still applies when the gain was kept first
SLOWER = ("HYPOTHESIS: do four times the work\n\nwork.py\n<<<<<<< SEARCH\n"
          "REPEAT = 1  # far from WORK: an edit of each applies after the other was kept\n"
          "=======\nREPEAT = 4\n>>>>>>> REPLACE\n")
OUT_OF_SCOPE = ("HYPOTHESIS: make the benchmark report more\n\nbench.py\n<<<<<<< SEARCH\n"
                "checksum = work.run()\n=======\nchecksum = 1\n>>>>>>> REPLACE\n")


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_loop_keeps_a_real_gain_and_discards_a_loss(tmp_path: Path, provider: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # wave 1 (two slots): the gain and the loss; wave 2: an edit of the protected
    # benchmark, fed back twice and then recorded as rejected without any run
    with LLMServer([FASTER, SLOWER], default=OUT_OF_SCOPE) as server:
        url = f"{server.url}/v1" if provider == "openai" else server.url
        root = tmp_path / "repo"
        make_repo(root, {
            "work.py": WORK, "bench.py": BENCH,
            "program.md": "Make the loop in work.py faster without changing its result.\n"},
            CONFIG.format(python=sys.executable, provider=provider, url=url))
        monkeypatch.setenv("ASSAY_E2E_KEY", "sk-e2e")
        user_head = sh(root, "git", "rev-parse", "HEAD")
        events: list[str] = []
        summary = api.run(root, on_event=lambda k, m, e: events.append(f"{k}: {m}"))

    log = api.log(root)
    trace = "\n".join(events)  # shown when an assertion fails
    by_hyp = {e["hypothesis"]: e for e in log}
    assert by_hyp["do a tenth of the work"]["state"] == "kept", trace
    assert by_hyp["do four times the work"]["state"] == "discarded", trace
    rejected = [e for e in log if e["meta"].get("rejected")]
    assert len(rejected) == 1 and rejected[0]["state"] == "invalid"
    assert "bench.py is protected" in rejected[0]["note"]
    assert summary.best is not None and summary.baseline is not None
    assert summary.best > summary.baseline * 3
    kept = by_hyp["do a tenth of the work"]
    [call] = api.show(kept["id"], root)["model_calls"]
    assert call["tokens_in"] == 1000 and kept["meta"]["model"] == "scripted"
    assert call["cost_usd"] == pytest.approx((1000 * 1.0 + 200 * 2.0) / 1e6)
    assert "WORK = 100000" in sh(root, "git", "show", "assay/main:work.py")
    assert sh(root, "git", "rev-parse", "HEAD") == user_head
    # the second ask of wave 1 was told about the first candidate
    assert "do a tenth of the work" in server.requests[1].last_user
    assert len(server.requests) == 5  # 2 + the protected edit asked 3 times (2 re-asks)
    # the second wave reads the first in the journal summary
    assert "- e0001 [" in server.requests[2].last_user
    assert "is protected" in server.requests[3].last_user
