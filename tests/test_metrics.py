"""Metric readers: each format, every failure reason, and a fuzz that only MetricError escapes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.bench.metrics import (
    check_bounds,
    follow_json_path,
    parse_json,
    parse_metric_lines,
    parse_summary_block,
    read_metric,
)
from assay.config.spec import MetricSpec
from assay.errors import MetricError
from assay.model import Direction


def spec(name: str = "tps", reader: str = "metric_lines", **kw: object) -> MetricSpec:
    return MetricSpec(name=name, reader=reader, **kw)  # type: ignore[arg-type]


def read(text: str, name: str = "tps", reader: str = "metric_lines", tmp: Path | None = None,
         **kw: object) -> float:
    return read_metric(spec(name, reader, **kw), text, tmp or Path("."))


# --------------------------------------------------------------------- metric_lines


def test_metric_lines_basic_and_whitespace() -> None:
    out = "warming up\n  METRIC tps = 52.5  \nMETRIC latency_ms=3e-2\nMETRIC n=-4\n"
    assert read(out) == 52.5
    assert read(out, "latency_ms") == pytest.approx(0.03)
    assert read(out, "n") == -4.0
    assert read("METRIC x=+1.5E+3", "x") == 1500.0
    assert read("METRIC x=.5", "x") == 0.5


def test_metric_lines_parse_groups_by_name_with_lines() -> None:
    found = parse_metric_lines("a\nMETRIC a=1\nb\nMETRIC a=2\nMETRIC b=3")
    assert [r.line for r in found["a"]] == [2, 4]
    assert found["b"][0].raw == "3"


def test_metric_lines_missing_names_what_was_seen() -> None:
    with pytest.raises(MetricError) as err:
        read("METRIC tokens=5\nMETRIC latency_ms=2\n")
    msg = str(err.value)
    assert "'tps' not found" in msg and "tokens, latency_ms" in msg
    assert "metric_lines" in msg and "stdout" in msg


def test_metric_lines_empty_output_said_so() -> None:
    with pytest.raises(MetricError, match="output is empty"):
        read("")


def test_metric_lines_printed_twice_refused() -> None:
    out = "\n" * 11 + "METRIC tps=52\n" + "\n" * 27 + "METRIC tps=900\n"
    with pytest.raises(MetricError) as err:
        read(out)
    assert "printed 2 times (lines 12 and 40)" in str(err.value)
    assert "refusing to pick one" in str(err.value)


@pytest.mark.parametrize("raw", ["inf", "-inf", "nan", "NaN", "Infinity"])
def test_metric_lines_non_finite(raw: str) -> None:
    with pytest.raises(MetricError, match="not finite"):
        read(f"METRIC tps={raw}")


@pytest.mark.parametrize("raw", ["52 tok/s", "fast", "", "1,5", "0x10", "1_000", "5e"])
def test_metric_lines_non_numeric(raw: str) -> None:
    with pytest.raises(MetricError, match="not a number"):
        read(f"METRIC tps={raw}")


def test_metric_lines_is_case_sensitive_and_anchored() -> None:
    with pytest.raises(MetricError, match="not found"):
        read("metric tps=5\nxMETRIC tps=5\n")


# --------------------------------------------------------------------- summary_block

KARPATHY = """\
step 00950 | loss: 3.1
---
val_bpb:          0.997900
training_seconds: 300.1
peak_vram_mb:     45060.2

num_steps:        953
"""


def test_summary_block_reads_karpathy_output() -> None:
    assert read(KARPATHY, "val_bpb", "summary_block") == pytest.approx(0.9979)
    assert read(KARPATHY, "num_steps", "summary_block") == 953.0  # after a blank line


def test_summary_block_takes_the_last_block() -> None:
    out = "---\nval_bpb: 9.0\n---\nval_bpb: 1.25\n"
    assert read(out, "val_bpb", "summary_block") == 1.25


def test_summary_block_ends_at_first_other_line() -> None:
    out = "---\nval_bpb: 1.0\nDone training.\nextra: 5\n"
    assert "extra" not in parse_summary_block(out)
    with pytest.raises(MetricError, match="'extra' not found"):
        read(out, "extra", "summary_block")


def test_summary_block_missing_names_earlier_blocks() -> None:
    out = "---\nval_bpb: 1.0\n---\nother: 2\n"
    with pytest.raises(MetricError) as err:
        read(out, "val_bpb", "summary_block")
    msg = str(err.value)
    assert "last '---' block (line 3)" in msg and "only the last block counts" in msg
    assert "other" in msg


def test_summary_block_without_separator() -> None:
    with pytest.raises(MetricError, match="no '---' line"):
        read("val_bpb: 1.0\n", "val_bpb", "summary_block")


def test_summary_block_repeated_key_and_bad_values() -> None:
    with pytest.raises(MetricError, match=r"printed 2 times \(lines 2 and 3\)"):
        read("---\nval_bpb: 1.0\nval_bpb: 0.5\n", "val_bpb", "summary_block")
    with pytest.raises(MetricError, match="not a number"):
        read("---\nval_bpb: low\n", "val_bpb", "summary_block")
    with pytest.raises(MetricError, match="not finite"):
        read("---\nval_bpb: nan\n", "val_bpb", "summary_block")


# --------------------------------------------------------------------- json


def test_json_whole_output() -> None:
    doc = {"results": [{"tokens_per_s": 52.0}, {"tokens_per_s": 14}]}
    out = json.dumps(doc, indent=2)
    assert read(out, "tps", "json", json_path="results.0.tokens_per_s") == 52.0
    assert read(out, "tps", "json", json_path="results.-1.tokens_per_s") == 14.0


def test_json_last_object_in_mixed_stdout() -> None:
    out = ('[info] starting {not json}\n{"tps": 1}\nlog line\n'
           + json.dumps({"tps": 2, "nested": {"tps": 3}}, indent=1) + "\nbye [done]\n")
    assert read(out, "tps", "json", json_path="tps") == 2.0
    assert read(out, "tps", "json", json_path="nested.tps") == 3.0


def test_json_missing_step_lists_available_keys() -> None:
    out = json.dumps({"results": [{"tokens_per_s": 52, "latency": 3}]})
    with pytest.raises(MetricError) as err:
        read(out, "tps", "json", json_path="results.0.tok_s")
    msg = str(err.value)
    assert "'tok_s' does not exist at 'results.0'" in msg
    assert "keys available there: latency, tokens_per_s" in msg


def test_json_top_level_and_index_errors() -> None:
    out = json.dumps({"a": [1, 2]})
    with pytest.raises(MetricError, match="'b' does not exist at the top level"):
        read(out, "x", "json", json_path="b")
    with pytest.raises(MetricError, match=r"index 5 does not exist at 'a'.*0\.\.1"):
        read(out, "x", "json", json_path="a.5")
    with pytest.raises(MetricError, match="not a list index"):
        read(out, "x", "json", json_path="a.first")
    with pytest.raises(MetricError, match="cannot take step 'deeper'"):
        read(out, "x", "json", json_path="a.0.deeper")
    with pytest.raises(MetricError, match="empty step"):
        read(out, "x", "json", json_path="a..0")


@pytest.mark.parametrize(("value", "reason"), [
    ("true", "a boolean"), ('"52"', "a string"), ("null", "null"), ("{}", "an object"),
    ("[1]", "a list"), ("NaN", "non-finite"), ("Infinity", "non-finite"),
    ("1" + "0" * 400, "too large"),
])
def test_json_value_not_a_finite_number(value: str, reason: str) -> None:
    with pytest.raises(MetricError, match=reason):
        read('{"x": ' + value + "}", "x", "json", json_path="x")


def test_json_duplicate_key_along_the_path() -> None:
    with pytest.raises(MetricError, match="appears more than once"):
        read('{"r": {"tps": 52, "tps": 900}}', "tps", "json", json_path="r.tps")
    # a repeated key off the path does not matter
    assert read('{"r": {"tps": 52}, "x": 1, "x": 2}', "tps", "json", json_path="r.tps") == 52


def test_json_no_json_at_all() -> None:
    with pytest.raises(MetricError, match="holds no JSON"):
        read("just text", "x", "json", json_path="x")
    with pytest.raises(MetricError, match="holds no JSON"):
        read("   ", "x", "json", json_path="x")


def test_parse_json_helpers() -> None:
    assert parse_json(' [1, 2] ') == [1, 2]
    assert follow_json_path({"0": {"a": 1}}, "0.a") == 1  # object keys win over indices
    with pytest.raises(ValueError):
        parse_json("[[[[")


def test_json_reader_without_path() -> None:
    with pytest.raises(MetricError, match="needs a json_path"):
        read("{}", "x", "json")


# --------------------------------------------------------------------- sources


def test_source_file(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "r.json").write_text('{"tps": 7.5}')
    assert read("ignored", "tps", "json", tmp_path, json_path="tps",
                source="out/r.json") == 7.5
    (tmp_path / "m.txt").write_text("METRIC tps=3\n")
    assert read("METRIC tps=1", "tps", "metric_lines", tmp_path, source="m.txt") == 3.0


def test_source_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MetricError, match=r"did not write 'r\.json'"):
        read("", "tps", "json", tmp_path, json_path="tps", source="r.json")


@pytest.mark.parametrize("source", ["/etc/passwd", "../secret.txt", "a/../../b", "C:\\x"])
def test_source_escapes_refused(tmp_path: Path, source: str) -> None:
    with pytest.raises(MetricError, match=r"absolute|leaves"):
        read("", "tps", "metric_lines", tmp_path, source=source)


def test_source_symlink_escape_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("METRIC tps=1\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link.txt").symlink_to(outside)
    with pytest.raises(MetricError, match="outside the work directory"):
        read("", "tps", "metric_lines", work, source="link.txt")


def test_source_directory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(MetricError, match="cannot read"):
        read("", "tps", "metric_lines", tmp_path, source="d")


def test_unknown_reader() -> None:
    with pytest.raises(MetricError, match="unknown reader"):
        read("METRIC tps=1", "tps", "csv")


# --------------------------------------------------------------------- bounds


def test_check_bounds() -> None:
    s = spec(bounds=(0.0, 100.0), unit="tok/s", direction=Direction.MAXIMIZE)
    assert check_bounds(s, 50.0) is None
    assert check_bounds(s, 0.0) is None and check_bounds(s, 100.0) is None
    above = check_bounds(s, 1e6)
    assert above is not None and "above its bounds [0, 100]" in above and "tok/s" in above
    below = check_bounds(s, -1.0)
    assert below is not None and "below" in below
    assert check_bounds(spec(), 1e300) is None
    assert check_bounds(spec(), math.nan) is not None


# --------------------------------------------------------------------- fuzz

_LINES = st.sampled_from([
    "METRIC tps=1", "METRIC tps=nan", "METRIC tps=x", "---", "tps: 2", "tps: inf",
    '{"tps": 3}', '{"r": [1, {"tps": 4}]}', "[", "{", "}", "]", '"', "METRIC tps=1e999",
    "tps:", ":", "METRIC =", '{"tps": "5"}', '{"tps": true}', "",
])


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(st.text(max_size=300), st.lists(_LINES, max_size=12).map("\n".join)),
    reader=st.sampled_from(["metric_lines", "summary_block", "json"]),
    path=st.sampled_from(["tps", "r.1.tps", "r.0", "0", "r.-1.tps"]),
)
def test_fuzz_only_metric_error(text: str, reader: str, path: str) -> None:
    try:
        value = read(text, "tps", reader, json_path=path)
    except MetricError:
        return
    assert math.isfinite(value)


@pytest.mark.parametrize("text", ["[" * 100_000, "[" * 100_000 + "]", "[ " * 50_000 + "]",
                                  '{"a": ' * 20_000 + "}", "[]" * 50_000 + "{"])
def test_json_hostile_output_is_cheap(text: str) -> None:
    import time

    start = time.perf_counter()
    with pytest.raises(MetricError):
        read(text, "x", "json", json_path="x")
    assert time.perf_counter() - start < 5.0
