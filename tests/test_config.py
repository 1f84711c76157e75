"""assay.toml errors name the file, the key, the line and what is valid."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.config.spec import load, parse
from assay.errors import ConfigError

FILE = "conf/assay.toml"

BASE = """\
[metric]
name = "tps"
direction = "maximize"

[commands]
bench = "python bench.py"

[scope]
editable = ["src/**/*.py"]
protected = ["bench.py"]
"""


def error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(text, Path("."), FILE)
    return info.value


def line_of(text: str, needle: str, nth: int = 0) -> int:
    lines = [i for i, line in enumerate(text.splitlines(), start=1) if needle in line]
    return lines[nth]


def check(exc: ConfigError, key: str, line: int | None, valid: str) -> None:
    msg = str(exc)
    assert exc.file == FILE and msg.startswith(FILE)
    assert exc.key == key and f"[{key}]" in msg
    assert exc.line == line
    if line is not None:
        assert f"{FILE}:{line}:" in msg
    if valid:
        assert valid in exc.valid and f"(valid: {exc.valid})" in msg
    else:  # a type error says what is valid in the message itself
        assert "must be" in msg


def test_minimal_config_parses() -> None:
    target = parse(BASE, Path("."), FILE)
    assert target.metric.name == "tps" and target.editable == ("src/**/*.py",)


def test_missing_metric_table() -> None:
    text = BASE.replace('[metric]\nname = "tps"\ndirection = "maximize"\n', "")
    exc = error(text)
    assert exc.key == "metric" and "table is required" in str(exc) and exc.file == FILE


def test_missing_metric_name() -> None:
    exc = error(BASE.replace('name = "tps"\n', ""))
    assert exc.key == "metric.name" and "required but missing" in str(exc)


def test_wrong_type() -> None:
    text = BASE.replace('name = "tps"', "name = 5")
    check(error(text), "metric.name", line_of(text, "name = 5"), "")
    assert "must be a string, got int 5" in str(error(text))
    text = BASE + "\n[run]\nslots = true\n"
    exc = error(text)
    check(exc, "run.slots", line_of(text, "slots = true"), "an integer >= 1")
    assert "got a boolean" in str(exc)
    text = BASE + "\n[run]\nslots = 1.5\n"
    check(error(text), "run.slots", line_of(text, "slots = 1.5"), "an integer")


def test_unknown_key() -> None:
    text = BASE.replace('direction = "maximize"', 'direction = "maximize"\ndirectoin = 1')
    exc = error(text)
    check(exc, "metric.directoin", line_of(text, "directoin"), "direction")
    assert "is not a known key" in str(exc)
    text = BASE + "\n[commandz]\nx = 1\n"
    exc = error(text)
    assert exc.key == "commandz" and "metric" in exc.valid


def test_bad_choice() -> None:
    text = BASE.replace('direction = "maximize"', 'direction = "up"')
    exc = error(text)
    check(exc, "metric.direction", line_of(text, '"up"'), "maximize, minimize")
    assert "'up' is not one of the choices" in str(exc)
    text = BASE.replace('direction = "maximize"', 'reader = "csv"')
    check(error(text), "metric.reader", line_of(text, "csv"),
          "metric_lines, summary_block, json")
    text = BASE + '\n[run]\nproposer = "magic"\n'
    check(error(text), "run.proposer", line_of(text, "magic"), "sweep, queue, llm, agent")


def test_json_reader_needs_path() -> None:
    text = BASE.replace('direction = "maximize"', 'reader = "json"')
    exc = error(text)
    assert exc.key == "metric.json_path" and "results.0.tokens_per_s" in exc.valid


@pytest.mark.parametrize(("bounds", "why"), [
    ("[1]", "two numbers"), ('[1, "x"]', "two numbers"), ("[5, 1]", "low must be below"),
    ("[1, 1]", "low must be below"), ('"wide"', "must be a list"),
    ("[nan, 1]", "two numbers"), ("[true, 5]", "two numbers"),
])
def test_bounds(bounds: str, why: str) -> None:
    text = BASE.replace('direction = "maximize"', f"bounds = {bounds}")
    exc = error(text)
    check(exc, "metric.bounds", line_of(text, "bounds ="), "[low, high]")
    assert why in str(exc)


def test_out_of_range_number() -> None:
    text = BASE + "\n[decision]\nconfidence = 1.5\n"
    exc = error(text)
    check(exc, "decision.confidence", line_of(text, "confidence"), ">= 0.5 <= 0.9999")
    assert "out of range" in str(exc)


PARAM = """
[[params]]
name = "CHUNK"
type = "int"
"""


def test_params_without_range() -> None:
    text = BASE + PARAM
    exc = error(text)
    check(exc, "params[0].low", line_of(text, "[[params]]"), "low and high numbers")
    assert "is required for a int parameter" in str(exc)
    text = BASE + PARAM + "low = 1\n"
    check(error(text), "params[0].high", line_of(text, "[[params]]"), "low and high")
    text = BASE + PARAM + "low = 5\nhigh = 2\n"
    check(error(text), "params[0].high", line_of(text, "high = 2"), "a number > 5")


def test_second_param_points_at_its_own_entry() -> None:
    text = BASE + PARAM + "low = 1\nhigh = 4\n" + PARAM.replace("CHUNK", "B") + "low = 1\n"
    check(error(text), "params[1].high", line_of(text, "[[params]]", 1), "low and high")


def test_categorical_without_choices_and_bad_names() -> None:
    text = BASE + '\n[[params]]\nname = "algo"\ntype = "categorical"\n'
    check(error(text), "params[0].choices", line_of(text, "[[params]]"), "a non-empty list")
    text = BASE + '\n[[params]]\nname = "2x"\ntype = "bool"\n'
    check(error(text), "params[0].name", line_of(text, '"2x"'), "letters, digits")
    text = BASE + '\n[[params]]\nname = "x"\ntype = "complex"\n'
    check(error(text), "params[0].type", line_of(text, "complex"),
          "int, float, categorical, bool")


def test_log_needs_positive_low() -> None:
    text = BASE + PARAM + "low = 0\nhigh = 4\nlog = true\n"
    check(error(text), "params[0].low", line_of(text, "low = 0"), "a positive number")


def test_assign_without_file() -> None:
    text = BASE + PARAM + 'low = 1\nhigh = 4\napply = "assign"\n'
    exc = error(text)
    check(exc, "params[0].file", line_of(text, "[[params]]"), "NAME = value")
    assert 'required when apply = "assign"' in str(exc)


def test_assign_to_protected_file() -> None:
    text = BASE + PARAM + 'low = 1\nhigh = 4\napply = "assign"\nfile = "bench.py"\n'
    exc = error(text)
    check(exc, "params[0].file", line_of(text, 'file = "bench.py"'), "editable scope")
    assert "rewrites bench.py, a protected path" in str(exc)


def test_duplicate_params() -> None:
    text = BASE + PARAM + "low = 1\nhigh = 4\n" + PARAM + "low = 1\nhigh = 4\n"
    exc = error(text)
    assert "parameter names repeat: ['CHUNK']" in str(exc) and exc.valid == "unique names"


def test_scope_errors() -> None:
    text = BASE.replace('editable = ["src/**/*.py"]', "editable = []")
    check(error(text), "scope.editable", line_of(text, "editable = []"), "src/**/*.py")
    text = BASE.replace('protected = ["bench.py"]', 'protected = ["../x"]')
    exc = error(text)
    check(exc, "scope.protected", line_of(text, "../x"), "relative to the repository")
    assert "escapes the repository" in str(exc)
    text = BASE.replace('editable = ["src/**/*.py"]', 'editable = ["a", 3]')
    check(error(text), "scope.editable", line_of(text, '"a", 3'), "a list of strings")


def test_commands_errors() -> None:
    text = BASE.replace('bench = "python bench.py"', 'bench = "  "')
    check(error(text), "commands.bench", line_of(text, 'bench = "  "'), "a shell command")
    text = BASE.replace('bench = "python bench.py"', 'build = "make"')
    check(error(text), "commands.bench", line_of(text, "[commands]"), "python bench.py")
    text = BASE.replace('bench = "python bench.py"',
                        'bench = "python bench.py"\nbench_timeout = 0')
    check(error(text), "commands.bench_timeout", line_of(text, "bench_timeout"), ">= 0.001")


def test_holdout_metric_without_command() -> None:
    text = BASE + '\n[holdout_metric]\nname = "tps"\n'
    exc = error(text)
    assert exc.key == "holdout_metric" and "commands.holdout" in exc.valid


def test_gpus_per_slot() -> None:
    text = BASE + "\n[run]\nslots = 2\ngpus = [0]\n"
    check(error(text), "run.gpus", line_of(text, "gpus"), "one entry per slot")


def test_invalid_toml() -> None:
    exc = error("[metric\nname = 1\n")
    assert exc.file == FILE and "is not valid TOML" in str(exc) and "toml.io" in exc.valid


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="assay init"):
        load(tmp_path)


def test_load_reads_file(tmp_path: Path) -> None:
    (tmp_path / "assay.toml").write_text(BASE)
    target = load(tmp_path)
    assert target.root == tmp_path.resolve() and target.bench.cmd == "python bench.py"


# --------------------------------------------------------------------- fuzz

_FRAGMENTS = st.sampled_from([
    "[metric]", "[commands]", "[scope]", "[run]", "[decision]", "[[params]]", "[[guards]]",
    "[env]", "[env.set]", "[limits]", "[hooks]", "[target]", "[holdout_metric]",
    'name = "tps"', "name = 5", 'direction = "minimize"', 'reader = "json"',
    'json_path = "a.0"', "bounds = [0, 1]", "bounds = [nan, 1]", "bounds = [1, 2, 3]",
    'bench = "x"', "bench_timeout = -1", 'editable = ["**"]', 'protected = ["/etc"]',
    'type = "int"', 'type = "categorical"', "choices = [1, {a = 1}]", "low = 1", "high = 0",
    "log = true", 'apply = "assign"', 'file = "f.py"', "slots = 3", "gpus = [[0], 1]",
    "budget = 0", "max_pairs = 1", "min_pairs = 5", "confidence = inf", 'rule = "x"',
    "memory_mb = 1.5", 'on_keep = "true"', "x = 1979-05-27", "a.b.c = 1", "tolerance = -1",
    'default = [1]', "seed = -3", "network = 1", "allow = []", 'PATH = "/bin"', "k = true",
    '"quoted key" = 1', "= 1", "[", "]]", "'''", '"""', "# comment", "",
])


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.lists(_FRAGMENTS, max_size=30).map("\n".join), st.text(max_size=200)))
def test_fuzz_only_config_error(text: str) -> None:
    try:
        parse(text, Path("."), FILE)
    except ConfigError as exc:
        assert str(exc).startswith(FILE)


@settings(max_examples=200, deadline=None)
@given(st.lists(_FRAGMENTS, max_size=20).map("\n".join))
def test_fuzz_on_a_valid_base(extra: str) -> None:
    try:
        parse(BASE + "\n" + extra, Path("."), FILE)
    except ConfigError as exc:
        assert str(exc).startswith(FILE)


@pytest.mark.parametrize(("ptype", "extra", "want"), [
    ("int", "low = 1\nhigh = 8\ndefault = 2", 2),
    ("categorical", "choices = [0, 32]\ndefault = 32", 32),
    ("float", "low = 1\nhigh = 8\ndefault = 2", 2.0),
    ("bool", "default = true", True),
])
def test_param_default_keeps_its_type(ptype: str, extra: str, want: object) -> None:
    text = BASE + f'\n[[params]]\nname = "N"\ntype = "{ptype}"\n{extra}\n'
    default = parse(text, Path("."), FILE).params[0].default
    assert default == want and type(default) is type(want)
