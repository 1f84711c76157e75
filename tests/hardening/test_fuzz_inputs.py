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
from assay.config.spec import parse
from assay.errors import AssayError, ConfigError

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
    "commands": ("compare", "compare_rtol", "compare_atol", "holdout"),
    "holdout_metric": ("name", "direction", "tolerance", "unit", "reader"),
    "platforms": ("name", "slots", "env", "primary", "sky", "ray_resource"),
    "executor.ray": ("address", "num_cpus", "num_gpus", "slot_resource", "cache_dir",
                     "min_slots", "connect_timeout_s", "max_attempts"),
    "executor.skypilot": ("name", "nodes", "accelerators", "slots_per_node", "cloud",
                          "use_spot", "disk_size", "autostop_minutes", "setup", "down"),
    "env": ("allow", "set", "fingerprint"),
    "target": ("brief", "name"),
    "prices": ("gpt-4o", "my-model"),
}
# keys added since the first round to sections it already covered
NEW_KEYS: dict[str, tuple[str, ...]] = {
    "decision": ("keep_on", "platform_tolerance", "confidence", "confirm"),
    "run": ("compile_cache", "warm_up", "verify", "max_usd", "max_tokens", "session_max_usd",
            "session_max_tokens", "stop_after_discards"),
    "research": ("offline", "max_papers", "top", "queries", "github", "measure"),
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
    elif section == "executor.ray":
        from assay.executors.ray import RayConfig
        RayConfig.from_target(target)
    elif section == "executor.skypilot":
        from assay.executors.skypilot import SkyConfig
        SkyConfig.from_target(target)
    elif section == "prices":
        from assay.config.prices import for_target
        for_target(target)


def _config_with(section: str, key: str, value: str) -> str:
    """BASE with ``key = value`` in ``section`` (a table, an array of tables, or BASE's own)."""
    if section == "scope":
        return BASE.replace('protected = ["bench.py"]\n',
                            f'protected = ["bench.py"]\n{key} = {value}\n')
    if section == "commands":
        return BASE.replace('bench = "python bench.py"\n',
                            f'bench = "python bench.py"\n{key} = {value}\n')
    if section == "platforms":
        return BASE + f"[[platforms]]\n{key} = {value}\n"
    return BASE + f"[{section}]\n{key} = {value}\n"


def _says_what_and_where(exc: AssayError, section: str, key: str) -> None:
    """The message names the file and the section or key (what, where); a ConfigError also
    carries them as fields, and says what would be valid when the value itself is wrong."""
    msg = str(exc)
    assert msg.strip() and "Traceback" not in msg
    head = section.split(".")[0]
    assert head in msg or key in msg, (section, key, msg)
    assert "assay.toml" in msg, msg
    if isinstance(exc, ConfigError):
        assert exc.file and exc.key, msg


@settings(max_examples=800, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(SECTIONS)), st.data())
def test_every_section_rejects_bad_values_with_an_assay_error(section: str,
                                                              data: st.DataObject) -> None:
    keys = (*SECTIONS[section], *NEW_KEYS.get(section, ()), "no_such_key")
    key = data.draw(st.sampled_from(keys))
    value = data.draw(VALUES)
    FUZZED[f"[{section}] values"] += 1
    try:
        target = parse(_config_with(section, key, value), Path("/nonexistent/repo"))
        _consume(target, section)
    except AssayError as exc:
        _says_what_and_where(exc, section, key)


# One bad value per section through the command line, as a user meets it: exit 2, one
# `error:` line naming the file, the section and what would be valid; never a traceback;
# refused before anything is measured (no experiment in the journal).
CLI_CASES: list[tuple[str, str, str, list[str], str]] = [
    # (section, key, value, the command reading it, a word of what to do)
    ("proposer.sweep", "sampler", '"nope"', ["run"], "tpe"),
    ("proposer.queue", "path", "5", ["run", "--proposer", "queue"], "string"),
    ("proposer.llm", "provider", '"nope"', ["run", "--proposer", "llm"], "openai, anthropic"),
    ("proposer.agent", "parallel", "-1", ["run", "--proposer", "agent"], ">= 0"),
    ("decision", "keep_on", '"all"', ["run"], "primary, any"),
    ("decision", "confidence", "2", ["run"], "<= 0.9999"),
    ("run", "warm_up", '"lots"', ["run"], "none"),
    ("limits", "memory_mb", "0", ["run"], ">= 1"),
    ("hooks", "on_keep", "1", ["run"], "string"),
    ("scope", "holdout", "3", ["run"], "a list of strings"),
    ("commands", "compare_rtol", "-1", ["run"], ">= 0"),
    ("holdout_metric", "name", '""', ["run"], "METRIC"),
    ("env", "set", '"x"', ["run"], "key = value"),
    ("platforms", "name", "3", ["run"], "string"),
    ("target", "name", "[1]", ["run"], "string"),
    ("research", "max_papers", '"x"', ["research"], "integer"),
]


@pytest.mark.parametrize("section,key,value,verb,fix", CLI_CASES,
                         ids=[f"{c[0]}.{c[1]}" for c in CLI_CASES])
def test_a_bad_value_in_each_new_section_exits_2_from_the_cli(
        tmp_path: Path, section: str, key: str, value: str, verb: list[str], fix: str) -> None:
    from typer.testing import CliRunner

    from assay.cli.app import app

    FUZZED["CLI runs on a bad new section"] += 1
    repo = make_repo(tmp_path)
    text = _config_with(section, key, value)
    if section == "holdout_metric":
        text = text.replace('bench = "python bench.py"\n',
                            'bench = "python bench.py"\nholdout = "python bench.py"\n')
    (repo.root / "assay.toml").write_text(text)
    r = CliRunner().invoke(app, [*verb, "-C", str(repo.root)])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, r.output
    line = errors[0]
    assert "assay.toml" in line and (section.split(".")[0] in line or key in line), line
    assert fix in line, line
    if repo.journal.exists():  # refused before the first trial
        from assay.journal.store import Journal

        journal = Journal.open(repo.journal, readonly=True)
        try:
            assert journal.experiments() == []
        finally:
            journal.close()


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
    from assay.bench.outputs import compare_outputs

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
