"""Stop rules on the real loop (in-memory twins, scripted benchmark values): a spending cap,
a run of discards, the metric's target; and `--continue` after each."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from assay.bench.meter import prompt_tokens
from assay.config.spec import Target, parse
from assay.errors import ConfigError, StoppedRun
from assay.executors.function import FunctionExecutor, values
from assay.journal.meta import STOP_KEY
from assay.journal.store import Journal
from assay.loop.progress import Summary
from assay.loop.sessions import SessionOptions
from assay.loop.stops import discard_streak
from assay.measure import spend
from assay.model import Block, BlockResult, Candidate, Experiment, ExperimentState, Slot
from assay.proposers.base import ProposalContext, Proposer
from assay.proposers.llm import SYSTEM_PROMPT
from assay.testing import ROOT_COMMIT, memory_loop
from assay.usage import Usage

CONFIG = """\
[metric]
name = "speed"
direction = "maximize"
{metric}

[commands]
bench = "true"

[scope]
editable = ["work.py"]

[[params]]
name = "GAIN"
type = "float"
low = 0.5
high = 2.0

[run]
slots = 1
{run}

[decision]
delta = 0.02
aa_blocks = 0

[prices."scripted-model"]
input = 1.0
output = 2.0
"""


NULLS = [1.0 + i / 1000 for i in range(1, 12)]  # changes too small to keep


def target(tmp: Path, run: str = "", metric: str = "") -> Target:
    return parse(CONFIG.format(run=run, metric=metric), tmp)


class Scripted(Proposer):
    """Candidates with the GAIN values given, in order; each ask is one metered model call
    of 10,000 input and 1,000 output tokens ($0.012 at the scripted model's prices)."""

    name = "scripted"

    def __init__(self, gains: list[float]) -> None:
        self.gains = list(gains)
        self.asks = 0

    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        out = []
        for _ in range(n):
            if not self.gains:
                break
            assert context.meter is not None
            context.meter.check("scripted-model", 10_000, 1_000)
            self.asks += 1
            _, call = context.meter.charge(Usage("scripted-model", 10_000, 1_000))
            gain = self.gains.pop(0)
            out.append(Candidate(ROOT_COMMIT, params={"GAIN": gain},
                                 hypothesis=f"gain {gain}", proposer=self.name,
                                 meta={"model_calls": [call]}))
        return out


def executor(seed: int = 3, ceiling: float = float("inf")) -> FunctionExecutor:
    """Candidate speed 100 * GAIN with 0.5% noise, the incumbent's at the kept gain; no
    value above ``ceiling`` (a metric that saturates, as an accuracy does at 1)."""
    rng = random.Random(seed)
    gains: dict[str, float] = {}
    state = {"kept": 1.0}

    def value(role: str, slot: str) -> float:
        base = 100.0 * (state["cand"] if role == "B" else state["kept"])
        return min(base * (1.0 + rng.gauss(0.0, 0.005)), ceiling)

    fn = values("speed", value)

    def per_block(block: Block, slot: Slot) -> BlockResult:
        params = dict(block.candidate.params) if block.candidate else {}
        gains.setdefault(block.experiment_id, float(params.get("GAIN", 1.0)))
        state["cand"] = gains[block.experiment_id]
        state["kept"] = float(block.incumbent.params.get("GAIN", 1.0))
        return fn(block, slot)

    return FunctionExecutor(per_block, slots=[Slot("s0")])


def run(t: Target, proposer: Proposer, journal: Journal | None = None,
        carry_on: bool = False, events: list[str] | None = None,
        ceiling: float = float("inf")) -> tuple[Summary, Journal]:
    j = journal or Journal.memory()
    record: Callable[[str, str, object], None] = (
        (lambda k, m, e: events.append(f"{k}: {m}")) if events is not None
        else (lambda k, m, e: None))
    loop = memory_loop(t, executor(ceiling=ceiling), proposer, journal=j, on_event=record)
    loop.session = SessionOptions(carry_on=carry_on)
    return loop.run(budget=20), j


def test_a_dollar_cap_stops_proposing_and_says_what_was_spent(tmp_path: Path) -> None:
    # each call's worst case is $0.012; at $0.05 the fifth call would pass the cap
    prop = Scripted([1.25, *NULLS])
    events: list[str] = []
    summary, j = run(target(tmp_path, "max_usd = 0.05"), prop, events=events)
    assert prop.asks == 4
    assert j.spent().calls == 4 and j.spent().usd == pytest.approx(0.048)
    stopped = summary.stopped
    assert stopped.startswith("the cap [run] max_usd = $0.05 is reached")
    assert "$0.0480 on 4 model calls" in stopped
    assert any(e.startswith("stop: stopping (cap)") for e in events)
    # the blocks in flight were measured and decided: nothing is left open
    exps = j.experiments()
    assert len(exps) == 4 and all(e.state.is_finished() for e in exps)
    assert [e.id for e in exps if e.state is ExperimentState.KEPT] == ["e0001"]
    # every call is linked to the experiment it became
    assert [len(j.model_calls(experiment_id=e.id)) for e in exps] == [1, 1, 1, 1]
    assert j.get_meta(STOP_KEY)["kind"] == "cap"


def test_a_token_cap_counts_the_whole_run_across_sessions(tmp_path: Path) -> None:
    t = target(tmp_path, "max_tokens = 40000")
    summary, j = run(t, Scripted(NULLS[:2]))
    assert j.spent().tokens == 22_000 and not summary.stopped.startswith("the cap")
    summary, j = run(t, Scripted(NULLS[2:5]), journal=j)
    assert j.spent().tokens == 33_000  # one more call fits: 33,000 + 11,000 > 40,000
    assert "max_tokens = 40,000 is reached" in summary.stopped


def test_stop_after_discards_and_continue(tmp_path: Path) -> None:
    t = target(tmp_path, "stop_after_discards = 3")
    summary, j = run(t, Scripted([1.0, 1.25, *NULLS]))
    states = [e.state for e in j.experiments()]
    # the keep broke the first run of discards; three in a row after it stop the run
    assert states == [ExperimentState.DISCARDED, ExperimentState.KEPT] + [
        ExperimentState.DISCARDED] * 3
    assert summary.stopped.startswith("3 decided experiments in a row were not kept")
    with pytest.raises(StoppedRun, match=r"the last run stopped: 3 decided .* `assay run "
                       r"--continue` goes on \(the run of discards counts afresh\)"):
        run(t, Scripted(NULLS[6:7]), journal=j)
    summary, j = run(t, Scripted(NULLS[6:10]), journal=j, carry_on=True)
    assert len(j.experiments()) == 8  # three more discards, counted from --continue
    assert j.get_meta(STOP_KEY)["kind"] == "discards"


def test_the_metric_target_stops_the_run_at_the_keep_that_reaches_it(tmp_path: Path) -> None:
    t = target(tmp_path, metric="target = 120")
    summary, j = run(t, Scripted([1.1, 1.3, *NULLS]))
    assert [e.state for e in j.experiments()] == [ExperimentState.KEPT] * 2
    assert summary.stopped.startswith("the best speed 1")
    assert "reached [metric] target = 120" in summary.stopped
    with pytest.raises(StoppedRun, match=r"raise \[metric\] target first"):
        run(t, Scripted(NULLS[:1]), journal=j)


def test_a_declared_bound_is_a_target_too(tmp_path: Path) -> None:
    t = target(tmp_path, metric="bounds = [0, 115]")
    summary, _ = run(t, Scripted([1.25, *NULLS]), ceiling=115.0)
    assert "reached the high bound of [metric] bounds = 115" in summary.stopped


def test_discard_streak_counts_since_the_last_keep() -> None:
    j = Journal.memory()
    kinds = [ExperimentState.DISCARDED, ExperimentState.KEPT, ExperimentState.DISCARDED,
             ExperimentState.DISCARDED]
    exps: list[Experiment] = []
    for i, k in enumerate(kinds):
        e = j.add_experiment(Candidate(ROOT_COMMIT, params={"GAIN": 1 + i / 10}))
        j.set_state(e.id, k)
        done = j.experiment(e.id)
        assert done is not None
        exps.append(done)
    assert discard_streak(exps) == 2
    assert discard_streak(exps[:2]) == 0


@pytest.mark.parametrize(("run_keys", "metric_keys", "match"), [
    ("max_usd = -1", "", r"\[run.max_usd\] -1(\.0)? is out of range"),
    ("max_tokens = 0.5", "", r"\[run.max_tokens\] must be"),
    ("stop_after_discards = 0", "", r"\[run.stop_after_discards\] 0 is out of range"),
    ("", 'target = "fast"', r"\[metric.target\] must be"),
])
def test_bad_stop_settings_name_the_key(tmp_path: Path, run_keys: str, metric_keys: str,
                                        match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        target(tmp_path, run_keys, metric_keys)
    assert info.value.line is not None


def test_settings_are_read(tmp_path: Path) -> None:
    t = target(tmp_path, "max_usd = 2.5\nsession_max_tokens = 1000\nstop_after_discards = 20",
               "target = 150")
    assert (t.run.max_usd, t.run.session_max_tokens, t.run.stop_after_discards) == (2.5, 1000,
                                                                                    20)
    assert t.metric.target == 150.0 and t.run.max_tokens is None


def test_the_plan_estimate_reads_the_llm_settings_as_the_proposer_does(tmp_path: Path) -> None:
    llm = '\n[proposer.llm]\nprovider = "openai"\nmodel = "scripted-model"\n'
    t = parse(CONFIG.format(run='proposer = "llm"\nbudget = 10', metric="") + llm
              + "retries = 1\ncontext_tokens = 2000\nmax_tokens = 500\n", tmp_path)
    [head, worst, caps] = spend.estimate(t, Journal.memory())
    tin = 2000 + prompt_tokens(SYSTEM_PROMPT)
    assert f"at most 3 calls per experiment, each at most {tin:,} prompt and 500 reply" in head
    assert f"({30 * (tin + 500):,} tokens)" in worst and caps.startswith("  caps: none")
    bad = parse(CONFIG.format(run='proposer = "llm"', metric="") + llm + 'retries = "two"\n',
                tmp_path)
    with pytest.raises(ConfigError, match=r"proposer\.llm\.retries") as info:
        spend.estimate(bad, None)
    assert info.value.line is not None
