"""The llm proposer against a real local HTTP server speaking both providers' wire formats."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from proposer_helpers import (
    APP,
    BENCH,
    GOOD_EDIT,
    Err,
    LLMServer,
    Reply,
    applies,
    calls_of,
    config_text,
    context_of,
    journaled,
    make_repo,
    target_of,
)

from assay.bench.meter import Caps, Meter, prompt_tokens
from assay.config.prices import for_target
from assay.errors import CapReached, ConfigError, ProposerError
from assay.model import patch_digest
from assay.proposers.edits import rejection
from assay.proposers.llm import LLMProposer

KEY = "sk-test-not-a-real-key"
PRICED = '\n[prices."test-model"]\ninput = 3.0\noutput = 15.0\ncached = 0.3\ncache_write = 3.75\n'


def setup(tmp_path: Path, server: LLMServer, provider: str = "openai", extra: str = "",
          tables: str = "") -> tuple[LLMProposer, object, str, list[float]]:
    base = f"{server.url}/v1" if provider == "openai" else server.url
    llm = (f'provider = "{provider}"\nmodel = "test-model"\nbase_url = "{base}"\n'
           f'api_key_env = "ASSAY_TEST_KEY"\nmax_backoff_s = 2\n' + extra)
    root = tmp_path / "repo"
    commit = make_repo(root, {"src/app.py": APP, "bench.py": BENCH,
                              "program.md": "Make work() faster.\n",
                              "README.md": "readme\n"}, config_text(llm=llm, extra=tables))
    target = target_of(root)
    delays: list[float] = []
    proposer = LLMProposer.from_target(target, sleep=delays.append,
                                       environ={"ASSAY_TEST_KEY": KEY})
    return proposer, target, commit, delays


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_good_edit_becomes_an_applicable_candidate(tmp_path: Path, provider: str) -> None:
    with LLMServer([GOOD_EDIT]) as server:
        proposer, target, commit, _ = setup(tmp_path, server, provider, tables=PRICED)
        journal, meter = journaled(target)
        [cand] = proposer.propose(context_of(target, commit, meter=meter), 1)
        proposer.close()
    assert rejection(cand) is None
    assert cand.hypothesis.startswith("a closed-form sum of squares")
    assert cand.proposer == "llm" and cand.base_commit == commit
    assert cand.patch.startswith("diff --git a/src/app.py b/src/app.py")
    assert "+    return (n - 1) * n * (2 * n - 1) // 6" in cand.patch
    assert applies(target.root, cand.patch)
    meta = cand.meta
    spent, [call] = calls_of(journal, cand)
    assert call.tokens_in == 1000 and call.tokens_out == 200
    assert call.cost_usd == pytest.approx(1000 * 3 / 1e6 + 200 * 15 / 1e6)
    assert call.priced_by == "table" and spent.unpriced == 0
    assert meta["attempts"] == 1 and meta["model"] == "test-model"
    assert not {"tokens_in", "tokens_out", "tokens_cached", "cost_usd", "priced"} & set(meta)
    [req] = server.requests
    if provider == "openai":
        assert req.path == "/v1/chat/completions"
        assert req.headers["authorization"] == f"Bearer {KEY}"
        assert req.body["messages"][0]["role"] == "system"
        assert req.body["max_tokens"] == 4096
    else:
        assert req.path == "/v1/messages"
        # the SDK sends the key as x-api-key or as a bearer token, by version
        sent = req.headers.get("x-api-key") or req.headers["authorization"].split()[-1]
        assert sent == KEY and "anthropic-version" in req.headers
        assert "SEARCH" in req.body["system"]
        assert [m["role"] for m in req.body["messages"]] == ["user"]
    prompt = req.last_user
    assert "Make work() faster." in prompt and "src/app.py" in prompt
    assert "def work(n):" in prompt and "## Measurement" in prompt


def test_unpriced_model_keeps_its_tokens_and_no_cost(tmp_path: Path) -> None:
    with LLMServer([GOOD_EDIT]) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        journal, meter = journaled(target)
        [cand] = proposer.propose(context_of(target, commit, meter=meter), 1)
    spent, [call] = calls_of(journal, cand)
    assert call.cost_usd is None and spent.unpriced == 1 and spent.usd == 0
    assert call.tokens_in == 1000 and call.tokens_out == 200


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_cached_tokens_are_read_and_priced_at_the_cached_price(tmp_path: Path,
                                                               provider: str) -> None:
    # 1000 input tokens of which 600 read from the cache (and, for Anthropic, 100 written)
    write = 100 if provider == "anthropic" else 0
    with LLMServer([Reply(GOOD_EDIT, cached=600, cache_write=write)]) as server:
        proposer, target, commit, _ = setup(tmp_path, server, provider, tables=PRICED)
        journal, meter = journaled(target)
        [cand] = proposer.propose(context_of(target, commit, meter=meter), 1)
    fresh = 1000 - 600 - write
    want = (fresh * 3.0 + 600 * 0.3 + write * 3.75 + 200 * 15.0) / 1e6
    spent, [call] = calls_of(journal, cand)
    assert call.tokens_in == 1000 and call.tokens_cached == 600
    assert call.tokens_cache_write == write
    assert call.cost_usd == pytest.approx(want) and spent.usd == pytest.approx(want)
    assert meter.session.tokens_cached == 600 and meter.session.usd == pytest.approx(want)


def test_a_dated_model_name_finds_its_price(tmp_path: Path) -> None:
    with LLMServer([GOOD_EDIT]) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        server.model = "gpt-4o-mini-2024-07-18"  # what the server says it served
        journal, meter = journaled(target)
        [cand] = proposer.propose(context_of(target, commit, meter=meter), 1)
    assert cand.meta["model"] == "gpt-4o-mini-2024-07-18"
    _, [call] = calls_of(journal, cand)
    assert call.model == "gpt-4o-mini-2024-07-18"
    assert call.cost_usd == pytest.approx((1000 * 0.15 + 200 * 0.6) / 1e6)


def test_a_cap_is_checked_before_the_call_with_its_worst_case(tmp_path: Path) -> None:
    with LLMServer(default=GOOD_EDIT) as server:
        proposer, target, commit, _ = setup(tmp_path, server, tables=PRICED)
        ctx = context_of(target, commit)
        proposer.propose(ctx, 1)  # an uncapped ask, to see the first request's prompt
        prices = for_target(target)
        # worst case: the prompt's conservative count at $3/Mtok plus 4096 reply tokens at
        # $15/Mtok; the call itself costs $0.006 (1000 in, 200 out)
        worst = prices.worst_case("test-model", prompt_tokens(*server.requests[0].texts()),
                                  4096)
        assert worst is not None and worst > 0.06
        server.requests.clear()
        # the cap allows the first call, but not a second: 0.006 + (its worst >= worst)
        meter = Meter(prices, Caps(max_usd=round(worst + 0.003, 6)))
        cands = proposer.propose(dataclasses.replace(ctx, meter=meter), 3)
    assert len(server.requests) == 1 and len(cands) == 1  # the wave ends with what it made
    assert "[run] max_usd = $0.0" in meter.reached and "is reached" in meter.reached
    assert "$0.006000 on 1 model call" in meter.reached
    with pytest.raises(CapReached, match="max_usd"):
        proposer.propose(dataclasses.replace(ctx, meter=meter), 1)
    assert len(server.requests) == 1  # nothing is sent once a cap is reached


def test_a_token_cap_counts_prompt_and_reply(tmp_path: Path) -> None:
    with LLMServer(default=GOOD_EDIT) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        meter = Meter(for_target(target), Caps(session_max_tokens=4000))
        with pytest.raises(CapReached, match=r"session_max_tokens = 4,000 is reached"):
            proposer.propose(context_of(target, commit, meter=meter), 1)
    assert server.requests == []  # max_tokens = 4096 alone passes the cap


def test_a_dollar_cap_with_an_unpriced_model_is_an_error_before_any_call(
        tmp_path: Path) -> None:
    with LLMServer(default=GOOD_EDIT) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        meter = Meter(for_target(target), Caps(max_usd=5.0))
        with pytest.raises(CapReached, match=r'cannot be kept: model test-model has no price'
                           r'.*\[prices."test-model"\]'):
            proposer.propose(context_of(target, commit, meter=meter), 1)
    assert server.requests == []


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_malformed_reply_is_fed_back_then_fixed(tmp_path: Path, provider: str) -> None:
    bad = "I would make work() faster by using a formula."
    with LLMServer([bad, GOOD_EDIT]) as server:
        proposer, target, commit, _ = setup(tmp_path, server, provider)
        journal, meter = journaled(target)
        [cand] = proposer.propose(context_of(target, commit, meter=meter), 1)
    assert rejection(cand) is None and cand.meta["attempts"] == 2
    assert cand.meta["feedback"] == ["malformed"]
    spent, calls = calls_of(journal, cand)
    assert spent.tokens_in == 2000 and [c.tokens_in for c in calls] == [1000, 1000]
    second = server.requests[1]
    roles = [m["role"] for m in second.body["messages"] if m["role"] != "system"]
    assert roles == ["user", "assistant", "user"]
    assert "no edit block" in second.last_user
    assert "None of your edits were applied" in second.last_user


def test_missing_hypothesis_is_malformed(tmp_path: Path) -> None:
    no_hyp = GOOD_EDIT.split("\n", 2)[2]
    with LLMServer([no_hyp, GOOD_EDIT]) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        [cand] = proposer.propose(context_of(target, commit), 1)
    assert rejection(cand) is None
    assert "HYPOTHESIS" in server.requests[1].last_user


def test_non_matching_block_is_fed_back_with_the_closest_lines(tmp_path: Path) -> None:
    wrong = GOOD_EDIT.replace("total += i * i", "total += i ** 2")
    with LLMServer([wrong, GOOD_EDIT]) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        [cand] = proposer.propose(context_of(target, commit), 1)
    assert rejection(cand) is None and cand.meta["feedback"] == ["no_match"]
    fb = server.requests[1].last_user
    assert "does not match" in fb and "total += i * i" in fb


def test_non_matching_forever_gives_a_rejected_candidate(tmp_path: Path) -> None:
    wrong = GOOD_EDIT.replace("total += i * i", "total += i ** 2")
    with LLMServer(default=wrong) as server:
        proposer, target, commit, _ = setup(tmp_path, server, extra="retries = 2\n")
        [cand] = proposer.propose(context_of(target, commit), 1)
    reason = rejection(cand)
    assert reason is not None and reason.startswith("no_match")
    assert len(server.requests) == 3 and cand.meta["attempts"] == 3
    assert cand.meta["feedback"] == ["no_match"] * 3
    assert cand.patch == ""


def test_truncated_reply_says_it_was_cut_off(tmp_path: Path) -> None:
    cut = GOOD_EDIT[: GOOD_EDIT.index("=======")]
    with LLMServer([Reply(cut, finish="length"), GOOD_EDIT]) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        [cand] = proposer.propose(context_of(target, commit), 1)
    assert rejection(cand) is None and cand.meta["feedback"] == ["unterminated"]
    assert "cut off at the output token limit" in server.requests[1].last_user


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_429_with_retry_after_then_success(tmp_path: Path, provider: str) -> None:
    with LLMServer([Err(429, {"retry-after": "1"}), GOOD_EDIT]) as server:
        proposer, target, commit, delays = setup(tmp_path, server, provider)
        [cand] = proposer.propose(context_of(target, commit), 1)
    assert rejection(cand) is None
    assert delays == [1.0]
    assert cand.meta["http_attempts"] == 2 and cand.meta["attempts"] == 1


def test_retry_after_is_capped_and_5xx_backs_off(tmp_path: Path) -> None:
    steps = [Err(503), Err(429, {"retry-after": "3600"}), Err(500), GOOD_EDIT]
    with LLMServer(steps) as server:
        proposer, target, commit, delays = setup(tmp_path, server)
        [cand] = proposer.propose(context_of(target, commit), 1)
    assert rejection(cand) is None and len(delays) == 3
    assert delays[1] == 2.0  # Retry-After of an hour, capped at max_backoff_s
    assert 1.0 <= delays[0] <= 1.25 and delays[2] == 2.0  # 2^2 = 4 s, capped at 2


def test_retries_exhausted_raise(tmp_path: Path) -> None:
    with LLMServer(default=Err(429, {"retry-after": "0"})) as server:
        proposer, target, commit, delays = setup(tmp_path, server, extra="http_retries = 2\n")
        with pytest.raises(ProposerError, match=r"HTTP 429 after 3 attempts"):
            proposer.propose(context_of(target, commit), 1)
    assert len(server.requests) == 3 and delays == [0.0, 0.0]


def test_auth_error_is_not_retried(tmp_path: Path) -> None:
    with LLMServer(default=Err(401, message="invalid x-api-key")) as server:
        proposer, target, commit, delays = setup(tmp_path, server, "anthropic")
        with pytest.raises(ProposerError, match=r"HTTP 401.*invalid x-api-key"):
            proposer.propose(context_of(target, commit), 1)
    assert len(server.requests) == 1 and delays == []


def test_connection_refused_is_retried_then_raises(tmp_path: Path) -> None:
    with LLMServer() as server:
        proposer, target, commit, delays = setup(tmp_path, server, extra="http_retries = 1\n")
    # the server is gone: nothing listens on that port any more
    with pytest.raises(ProposerError, match="connection failed"):
        proposer.propose(context_of(target, commit), 1)
    assert len(delays) == 1


@pytest.mark.parametrize(("path", "words"), [
    ("bench.py", "is protected"),
    ("README.md", "outside the editable scope"),
    ("../outside.py", "not a path inside the repository"),
])
def test_out_of_scope_edit_is_fed_back(tmp_path: Path, path: str, words: str) -> None:
    bad = ("HYPOTHESIS: edit elsewhere\n\n" + path + "\n<<<<<<< SEARCH\nx\n=======\ny\n"
           ">>>>>>> REPLACE\n")
    with LLMServer([bad, GOOD_EDIT]) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        [cand] = proposer.propose(context_of(target, commit), 1)
    assert rejection(cand) is None and cand.meta["feedback"] == ["scope"]
    assert words in server.requests[1].last_user
    assert "bench.py" not in cand.patch


def test_protected_edit_forever_is_rejected_with_the_reason(tmp_path: Path) -> None:
    bad = ("HYPOTHESIS: cheat\n\nbench.py\n<<<<<<< SEARCH\nmain()\n=======\npass\n"
           ">>>>>>> REPLACE\n")
    with LLMServer(default=bad) as server:
        proposer, target, commit, _ = setup(tmp_path, server, extra="retries = 0\n")
        [cand] = proposer.propose(context_of(target, commit), 1)
    reason = rejection(cand)
    assert reason is not None and "bench.py is protected" in reason
    assert cand.hypothesis == "cheat" and cand.patch == ""
    assert len(server.requests) == 1


def test_duplicate_is_reasked_once_with_a_note(tmp_path: Path) -> None:
    other = GOOD_EDIT.replace("// 6", "// 6  # closed form").replace(
        "HYPOTHESIS: a closed-form", "HYPOTHESIS: again, a closed-form")
    with LLMServer([GOOD_EDIT, GOOD_EDIT, other]) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        [first] = proposer.propose(context_of(target, commit), 1)
        tried = frozenset({first.digest})
        [cand] = proposer.propose(context_of(target, commit, tried_digests=tried), 1)
    assert rejection(cand) is None and cand.digest != first.digest
    assert cand.meta["feedback"] == ["duplicate"]
    assert "already tried" in server.requests[2].last_user


def test_duplicate_twice_is_rejected(tmp_path: Path) -> None:
    with LLMServer(default=GOOD_EDIT) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        [first] = proposer.propose(context_of(target, commit), 1)
        ctx = context_of(target, commit, tried_digests=frozenset({first.digest}))
        [cand] = proposer.propose(ctx, 1)
    reason = rejection(cand)
    assert reason is not None and reason.startswith("duplicate")
    assert cand.digest == patch_digest(first.patch, {})
    assert len(server.requests) == 3


def test_wave_asks_for_different_ideas_and_skips_in_wave_duplicates(tmp_path: Path) -> None:
    second = GOOD_EDIT.replace("HYPOTHESIS: a closed-form sum of squares replaces the loop",
                               "HYPOTHESIS: sum() over a generator").replace(
        "    return (n - 1) * n * (2 * n - 1) // 6",
        "    return sum(i * i for i in range(n))")
    with LLMServer([GOOD_EDIT, second]) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        cands = proposer.propose(context_of(target, commit), 2)
    assert [rejection(c) for c in cands] == [None, None]
    assert cands[0].digest != cands[1].digest
    ask2 = server.requests[1].last_user
    assert "candidate 2 of 2" in ask2 and "a closed-form sum of squares" in ask2


def test_no_more_ideas_ends_the_wave(tmp_path: Path) -> None:
    with LLMServer([GOOD_EDIT, "NO_MORE_IDEAS"]) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        cands = proposer.propose(context_of(target, commit), 3)
        assert len(cands) == 1 and len(server.requests) == 2
        server.steps = ["NO_MORE_IDEAS"]
        assert proposer.propose(context_of(target, commit), 2) == []


def test_new_file_and_whole_file_blocks(tmp_path: Path) -> None:
    reply = """HYPOTHESIS: move the formula into its own module

src/fast.py
<<<<<<< SEARCH
=======
def squares(n):
    return (n - 1) * n * (2 * n - 1) // 6
>>>>>>> REPLACE

src/app.py
<<<<<<< FILE
from src.fast import squares


def work(n):
    return squares(n)
>>>>>>> FILE
"""
    with LLMServer([reply]) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        [cand] = proposer.propose(context_of(target, commit), 1)
    assert rejection(cand) is None
    assert "new file mode 100644" in cand.patch and "b/src/fast.py" in cand.patch
    assert applies(target.root, cand.patch)


def test_whole_file_over_the_limit_is_fed_back(tmp_path: Path) -> None:
    reply = "HYPOTHESIS: rewrite\n\nsrc/app.py\n<<<<<<< FILE\npass\n>>>>>>> FILE\n"
    with LLMServer([reply, GOOD_EDIT]) as server:
        proposer, target, commit, _ = setup(tmp_path, server,
                                            extra="whole_file_max_bytes = 100\n")
        [cand] = proposer.propose(context_of(target, commit), 1)
    assert rejection(cand) is None and cand.meta["feedback"] == ["too_large"]
    assert "at most 100 bytes" in server.requests[1].last_user


def test_usage_missing_is_estimated(tmp_path: Path) -> None:
    with LLMServer([Reply(GOOD_EDIT, tokens_in=None)]) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        journal, meter = journaled(target)
        [cand] = proposer.propose(context_of(target, commit, meter=meter), 1)
    _, [call] = calls_of(journal, cand)
    assert cand.meta["tokens_estimated"] is True
    assert call.estimated is True and call.tokens_in is not None and call.tokens_in > 100


def test_context_files_default_to_the_incumbent_tree(tmp_path: Path) -> None:
    with LLMServer([GOOD_EDIT]) as server:
        proposer, target, commit, _ = setup(tmp_path, server)
        [cand] = proposer.propose(context_of(target, commit, files={}), 1)
    assert rejection(cand) is None
    assert "def work(n):" in server.requests[0].last_user


# ------------------------------------------------------------------ configuration


def _cfg(tmp_path: Path, llm: str) -> None:
    root = tmp_path / "repo"
    make_repo(root, {"src/app.py": APP, "bench.py": BENCH}, config_text(llm=llm))
    LLMProposer.from_target(target_of(root), environ={"K": "v"})


@pytest.mark.parametrize(("llm", "match"), [
    ('model = "m"\n', r"proposer\.llm\.provider\] is required"),
    ('provider = "gemini"\nmodel = "m"\n', r"'gemini' is not one of the choices"),
    ('provider = "openai"\n', r"proposer\.llm\.model\] is required"),
    ('provider = "openai"\nmodel = "m"\napi_key_env = "K"\ntemprature = 1\n',
     r"temprature\] is not a known key"),
    ('provider = "openai"\nmodel = "m"\napi_key_env = "NOT_SET_ANYWHERE"\n',
     r"names NOT_SET_ANYWHERE, which is not set"),
    ('provider = "openai"\nmodel = "m"\nbase_url = "localhost:8000"\n',
     r"not an http\(s\) URL"),
    ('provider = "anthropic"\nmodel = "m"\napi_key_env = "K"\nretries = -1\n',
     r"retries\] -1 is out of range"),
    ('provider = "openai"\nmodel = "m"\napi_key_env = "K"\nprice_in_per_mtok = 3\n',
     r'price_in_per_mtok\] prices are read from the price table now \(valid: \[prices."m"\]'),
])
def test_config_errors(tmp_path: Path, llm: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _cfg(tmp_path, llm)


def test_config_error_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _cfg(tmp_path, 'provider = "gemini"\nmodel = "m"\n')
    assert info.value.line is not None and info.value.key == "proposer.llm.provider"


def test_no_key_for_a_local_server(tmp_path: Path) -> None:
    with LLMServer([GOOD_EDIT]) as server:
        root = tmp_path / "repo"
        llm = (f'provider = "openai"\nmodel = "qwen"\nbase_url = "{server.url}/v1"\n'
               'api_key_env = ""\n')
        commit = make_repo(root, {"src/app.py": APP, "bench.py": BENCH}, config_text(llm=llm))
        target = target_of(root)
        proposer = LLMProposer.from_target(target, environ={})
        [cand] = proposer.propose(context_of(target, commit), 1)
    assert rejection(cand) is None
