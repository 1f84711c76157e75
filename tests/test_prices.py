"""The price table (bundled data, assay.toml over it), usage records and their journal table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from assay.config.prices import bundled, for_target
from assay.config.spec import parse
from assay.errors import ConfigError
from assay.journal.store import Journal
from assay.model import Candidate
from assay.usage import Spent, Usage

BASE = """\
[metric]
name = "speed"

[commands]
bench = "true"

[scope]
editable = ["*.py"]
"""


def test_bundled_table_prices_known_models_and_leaves_others_unknown() -> None:
    table = bundled()
    sonnet = table.find("claude-sonnet-4-5")
    assert sonnet is not None and (sonnet.input, sonnet.output) == (3.0, 15.0)
    assert table.find("claude-sonnet-4-5-20250929") is sonnet  # a dated name
    assert table.find("gpt-4o-2024-08-06") is table.find("gpt-4o")
    assert table.find("my-local-qwen") is None
    u = table.priced(Usage("my-local-qwen", 1000, 100))
    assert u.cost_usd is None and u.priced_by == "unknown" and u.tokens == 1100


def test_cost_splits_input_into_fresh_cached_and_written() -> None:
    price = bundled().find("claude-opus-4-5")
    assert price is not None
    # 10,000 input tokens: 6,000 read from the cache, 1,000 written to it
    cost = price.cost(10_000, 500, cached=6_000, cache_write=1_000)
    assert cost == pytest.approx((3_000 * 5.0 + 6_000 * 0.5 + 1_000 * 6.25 + 500 * 25.0) / 1e6)
    # a model with no cache-write price cannot price written tokens: unknown, not guessed
    gpt = bundled().find("gpt-4.1")
    assert gpt is not None and gpt.cost(1000, 10, cache_write=100) is None


def test_assay_toml_adds_and_replaces_models(tmp_path: Path) -> None:
    text = BASE + '\n[prices."gpt-4o"]\ninput = 1.0\noutput = 2.0\n' \
                  '\n[prices."my-local-qwen"]\ninput = 0.0\noutput = 0.0\n'
    table = for_target(parse(text, tmp_path))
    gpt = table.find("gpt-4o")
    assert gpt is not None and (gpt.input, gpt.output, gpt.cached) == (1.0, 2.0, None)
    assert gpt.source.endswith("assay.toml")
    assert table.priced(Usage("my-local-qwen", 5000, 500)).cost_usd == 0.0
    assert table.find("claude-haiku-4-5") == bundled().find("claude-haiku-4-5")


@pytest.mark.parametrize(("table", "match"), [
    ('[prices."m"]\ninput = 1.0\n', r'\[prices.m\] needs `output`'),
    ('[prices."m"]\ninput = 1.0\noutput = -2\n', r"`output` must be a number >= 0"),
    ('[prices."m"]\ninput = 1.0\noutput = 2\ncache = 0.1\n', r"unknown key\(s\) \['cache'\]"),
    ('[prices]\nm = 3\n', r"\[prices.m\] must be a table"),
])
def test_bad_price_overrides_name_the_key_and_line(tmp_path: Path, table: str,
                                                   match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        for_target(parse(BASE + "\n" + table, tmp_path))
    assert info.value.line is not None


def test_spent_adds_calls_and_names_what_has_no_price() -> None:
    s = Spent.of([Usage("a", 100, 10, cost_usd=0.5, priced_by="table"),
                  Usage("b", 200, 20), Usage("c", None, None), Usage("d", 40, None)])
    assert (s.calls, s.usd, s.tokens, s.unpriced, s.unknown) == (4, 0.5, 370, 1, 2)
    assert s.words() == ("$0.5000 on 4 model calls (370 tokens); 1 with price unknown, "
                         "not counted in the dollars; 2 calls of unknown usage, "
                         "not fully counted")


def test_journal_records_calls_and_links_them_to_their_experiment(tmp_path: Path) -> None:
    j = Journal.open(tmp_path / "journal.sqlite")
    a = j.add_model_call(Usage("gpt-4o", 1000, 100, 400, 0, 0.002, "table"), "propose", "s1")
    b = j.add_model_call(Usage("gpt-4o", 1200, 90, 0, 0, 0.003, "table"), "propose", "s1")
    j.add_model_call(Usage("", None, None), "propose", "s2")
    exp = j.add_experiment(Candidate(base_commit="c0", patch="p", hypothesis="h",
                                     proposer="llm", meta={"model_calls": [a, b]}))
    assert [u.tokens_in for u in j.model_calls(experiment_id=exp.id)] == [1000, 1200]
    assert j.model_calls(experiment_id=exp.id)[0].tokens_cached == 400
    whole, s1 = j.spent(), j.spent("s1")
    assert (whole.calls, whole.unknown, whole.usd) == (3, 1, pytest.approx(0.005))
    assert (s1.calls, s1.tokens, s1.unknown) == (2, 2390, 0)
    assert j.spent("nobody") == Spent()
    j.close()
    with sqlite3.connect(tmp_path / "journal.sqlite") as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM migrations")}
    assert "0010_model_calls" in names


def test_an_older_journal_gets_the_calls_table_when_read(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    Journal.open(path).close()
    with sqlite3.connect(path) as conn:  # as an assay before model calls were recorded
        conn.execute("DROP TABLE model_calls")
        conn.execute("DELETE FROM migrations WHERE name = '0010_model_calls'")
    conn.close()
    j = Journal.open(path, readonly=True)
    try:
        assert j.spent() == Spent()
    finally:
        j.close()
