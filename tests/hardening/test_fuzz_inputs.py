"""Fuzz round over the inputs added since the first round: every bad one is an AssayError.

- each ``assay.toml`` section, read by its own consumer (the proposers, research, the
  finalize reviewers), with wrong types, out-of-range numbers and unknown keys;
- the arguments of every MCP tool a proposer (or any MCP client) can call;
- ``[commands] compare`` outputs (any text on either side);
- the files ``assay init`` reads (pi-autoresearch's scripts, pyproject.toml, train.py),
  with the property that init never writes a config that does not load.

Never a traceback: each input passes, or raises an AssayError whose message names the
file or section and what to do. ``FUZZED`` counts what was tried (printed at the end).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hardening_kit import make_repo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assay import api
from assay.config import parse
from assay.errors import AssayError

FUZZED: Counter[str] = Counter()
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))

BASE = """\
[metric]
name = "speed"
[commands]
bench = "python bench.py"
[scope]
editable = ["work.py"]
protected = ["bench.py"]
[[params]]
name = "SIZE"
type = "int"
low = 1
high = 10
apply = "env"
"""

# section -> its keys (plus one no section knows)
SECTIONS: dict[str, tuple[str, ...]] = {
    "proposer.sweep": ("sampler", "n_startup"),
    "proposer.queue": ("path", "order"),
    "proposer.llm": ("provider", "model", "base_url", "api_key_env", "temperature",
                     "max_tokens", "context_tokens", "price_in_per_mtok", "timeout_s"),
    "proposer.agent": ("preset", "command", "model", "timeout_s", "env", "ignore",
                       "context_tokens", "include_files", "parallel"),
    "research": ("sources", "profile", "enabled", "max_sources"),
    "finalize.review": ("kind", "command", "timeout_s"),
    "decision": ("rule", "delta", "max_pairs", "min_pairs", "pairs_per_block", "aa_blocks"),
    "run": ("slots", "budget", "max_hours", "proposer", "executor", "seed", "gpus"),
    "limits": ("memory_mb", "cpu_s", "network"),
    "hooks": ("on_keep", "on_experiment_timeout"),
    "scope": ("holdout",),
}
VALUES = st.sampled_from([
    '"x"', '""', "0", "-1", "1", "1e309", "-1e309", "nan", "inf", "true", "[]", "[1]",
    '["a", 1]', "{}", '{ a = 1 }', '"gp"', '"tpe"', '"claude"', '"openai"', '"[bold]x[/]"',
    '"../../etc/passwd"', '"/abs"', "99999999999999999999", "1.5", '"\\u0000"', '"{brief}"',
    '"sequential"', '"local"', '["**"]', '["*.py"]'])


def _consume(target: Any, section: str) -> None:
    """Read ``section`` the way the run would (each consumer validates its own table)."""
    if section == "proposer.sweep":
        from assay.proposers.sweep import SweepProposer
        SweepProposer.from_target(target)
    elif section == "proposer.queue":
        from assay.proposers.queue import QueueProposer
        QueueProposer.from_target(target)
    elif section == "proposer.llm":
        from assay.proposers.llm import LLMProposer
        LLMProposer.from_target(target)
    elif section == "proposer.agent":
        from assay.proposers.agent import AgentProposer
        AgentProposer.from_target(target)
    elif section == "research":
        from assay.research.config import ResearchConfig
        ResearchConfig.from_target(target)
    elif section == "finalize.review":
        from assay.finalize import review
        review.from_target(target)


@SETTINGS
@given(st.sampled_from(sorted(SECTIONS)), st.data())
def test_every_section_rejects_bad_values_with_an_assay_error(section: str,
                                                              data: st.DataObject) -> None:
    keys = (*SECTIONS[section], "no_such_key")
    key = data.draw(st.sampled_from(keys))
    value = data.draw(VALUES)
    FUZZED[f"[{section}] values"] += 1
    if section == "scope":
        text = BASE.replace('protected = ["bench.py"]\n',
                            f'protected = ["bench.py"]\n{key} = {value}\n')
    else:
        text = BASE + f"[{section}]\n{key} = {value}\n"
    try:
        target = parse(text, Path("/nonexistent/repo"))
        _consume(target, section)
    except AssayError as exc:
        msg = str(exc)
        assert msg.strip()
        head = section.split(".")[0]
        assert head in msg or key in msg or "assay.toml" in msg, (section, key, value, msg)


# -- MCP tools ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mcp_target(tmp_path_factory: pytest.TempPathFactory) -> Any:
    repo = make_repo(tmp_path_factory.mktemp("mcp"), counted=True)
    from hardening_kit import ListProposer

    api.run(repo.root, budget=1, proposer_obj=ListProposer([{"params": {"SIZE": 100000}}]))
    return api.load(repo.root)


TEXT = st.one_of(st.text(max_size=30), st.sampled_from(
    ["e0001", "e9999", "", "../e0001", "kept", "KEPT", "queued", "nope", "e0001; DROP",
     "\x00", "[red]x"]))


@SETTINGS
@given(st.integers(min_value=-10**12, max_value=10**12), st.one_of(st.none(), TEXT), TEXT)
def test_mcp_read_tools_on_any_arguments(mcp_target: Any, last: int, state: str | None,
                                         exp_id: str) -> None:
    from assay.faces import mcp

    FUZZED["MCP log/show/best/status arguments"] += 1
    for call in (lambda: mcp.log(mcp_target, last=last, state=state),
                 lambda: mcp.show(mcp_target, exp_id), lambda: mcp.best(mcp_target),
                 lambda: mcp.status(mcp_target)):
        try:
            out = call()
        except AssayError as exc:
            assert str(exc).strip()
            continue
        assert isinstance(out, (dict, list))


@SETTINGS
@given(TEXT, st.lists(TEXT, max_size=3), st.one_of(TEXT, st.sampled_from(["paper", "fork"])),
       st.one_of(st.floats(allow_nan=True), st.integers(-5, 5)))
def test_mcp_add_hypothesis_on_any_arguments(mcp_target: Any, text: str, sources: list[str],
                                             kind: str, score: float) -> None:
    from assay.faces import mcp

    FUZZED["MCP add_hypothesis arguments"] += 1
    try:
        out = mcp.add_hypothesis(mcp_target, text, sources, kind, score)
    except AssayError as exc:
        assert str(exc).strip()
        return
    assert isinstance(out, dict)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.one_of(TEXT, st.sampled_from(["diff --git a/bench.py b/bench.py\n", "--- a\n+++ b\n",
                                        "diff --git a/work.py b/work.py\n--- a/work.py\n"
                                        "+++ b/work.py\n@@ -1 +1 @@\n-x\n+y\n"])),
       st.dictionaries(st.sampled_from(["SIZE", "nope", ""]),
                       st.one_of(st.integers(-5, 10**9), st.text(max_size=5), st.none(),
                                 st.floats(allow_nan=True)), max_size=2))
def test_mcp_run_experiment_on_any_arguments(mcp_target: Any, patch: str,
                                             params: dict[str, Any]) -> None:
    from assay.faces import mcp

    FUZZED["MCP run_experiment arguments"] += 1
    try:
        out = mcp.run_experiment(mcp_target, patch=patch, hypothesis="fuzz", params=params,
                                 timeout_s=120)
    except AssayError as exc:
        assert str(exc).strip()
        return
    assert isinstance(out, dict)


# -- compare outputs ----------------------------------------------------------------------
LINE = st.one_of(st.text(max_size=40), st.builds(
    lambda toks: " ".join(toks), st.lists(st.sampled_from(
        ["1", "1.0", "-0", "1e309", "-1e999", "nan", "NaN", "inf", "-inf", ".5", "5.", "1e-400",
         "x", "=", "[", "]", ",", "0x10", "1_000", "١", "\x00", "\t"]), max_size=8)))
OUTPUT = st.lists(LINE, max_size=6).map("\n".join)


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(OUTPUT, OUTPUT, st.sampled_from([0.0, 1e-9, 0.5, 1e308]),
       st.sampled_from([0.0, 1e-12, 1.0]))
def test_compare_outputs_on_any_text(a: str, b: str, rtol: float, atol: float) -> None:
    from assay.compare import compare_outputs

    FUZZED["compare outputs"] += 1
    assert compare_outputs(a, a, rtol, atol) == []  # an output always agrees with itself
    found = compare_outputs(a, b, rtol, atol)
    assert bool(found) == bool(compare_outputs(b, a, rtol, atol))  # agreement is symmetric
    for m in found:
        assert m.line >= 1 and m.why and m.describe().startswith(f"line {m.line}: ")


# -- files init reads -------------------------------------------------------------------
SCRIPT = st.one_of(st.text(max_size=200), st.builds(
    lambda name, val, extra: f"#!/bin/bash\n{extra}\necho \"METRIC {name}={val}\"\n",
    st.sampled_from(["tok_s", "", "a b", "x=y", "µs", "[x]", "1abc", "loss"]),
    st.sampled_from(["1", "nan", "", "$X"]), st.text(max_size=40)))


JSONL = st.lists(st.one_of(st.text(max_size=40), st.sampled_from([
    '{"type": "config", "name": "x", "metricName": "tok_s", "bestDirection": "higher"}',
    '{"type": "config", "metricName": 3}', '{"run": "one", "metric": "x"}',
    '{"run": 1, "metric": 1e999, "status": "keep"}', "[1, 2]", "null", "{", '"str"',
    '{"run": 1, "commit": null, "description": {"nested": true}}'])), max_size=5
    ).map("\n".join)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.sampled_from(["autoresearch.sh", "autoresearch.checks.sh",
                                        "autoresearch.md", "autoresearch.jsonl",
                                        "pyproject.toml", "train.py", "prepare.py",
                                        "program.md", "CMakeLists.txt", ".auto/measure.sh",
                                        ".auto/checks.sh", ".auto/prompt.md",
                                        ".auto/log.jsonl"]),
                       st.one_of(SCRIPT, JSONL), min_size=1, max_size=5))
def test_init_on_fuzzed_project_files_writes_a_config_that_loads(
        tmp_path_factory: pytest.TempPathFactory, files: dict[str, str]) -> None:
    FUZZED["init on fuzzed project files"] += 1
    root = tmp_path_factory.mktemp("init")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        path = api.init(root, ask=None)
    except AssayError as exc:
        assert str(exc).strip()
        return
    text = path.read_text()
    try:
        parse(text, root)
    except AssayError as exc:  # init wrote a config it cannot read back
        raise AssertionError(f"init wrote an invalid assay.toml for {files!r}:\n{text}\n"
                             f"-> {exc}") from None


def teardown_module() -> None:
    if FUZZED:
        print("\nfuzz round 2:", dict(sorted(FUZZED.items())), file=sys.stderr)
