"""`llm`: a chat model reads the context and answers with SEARCH/REPLACE edit blocks.

Configuration (``[proposer.llm]`` in assay.toml; every key is checked, unknown keys are
errors)::

    [proposer.llm]
    provider = "anthropic"            # required: "openai" (chat completions, any
                                      # compatible server) or "anthropic" (Messages API)
    model = "claude-sonnet-4-5"       # required
    base_url = "https://api.anthropic.com"   # default per provider
    api_key_env = "ANTHROPIC_API_KEY" # the variable holding the key; "" = no key
    max_tokens = 4096                 # reply limit
    max_tokens_field = "max_tokens"   # or "max_completion_tokens" (OpenAI o-series)
    temperature = 0.7                 # default: not sent (the server's default)
    timeout_s = 300                   # per HTTP request
    http_retries = 5                  # retries on 408/409/429/5xx and connection errors
    max_backoff_s = 60                # cap on one backoff delay (Retry-After included)
    retries = 2                       # re-asks after a bad reply (see below)
    context_tokens = 24000            # budget of the context text (see context.py)
    whole_file_max_bytes = 8000       # largest file a FILE block may replace whole

Prices come from the price table (:mod:`assay.config.prices`: bundled, with ``[prices."<model>"]``
in assay.toml over it). Before each request the meter (:mod:`assay.bench.meter`) checks the
request's worst case against the ``[run]`` caps: the prompt's tokens (a conservative
count, :func:`~assay.bench.meter.prompt_tokens`) at the input price plus ``max_tokens`` at the
output price; a cap reached ends the wave with the candidates already made.

One wave: ``propose(context, n)`` asks the model n times, one candidate each; every ask
after the first lists the hypotheses already proposed in this wave and asks for a
different idea.

A bad reply is never skipped silently. Each of these is sent back to the model with the
reason, and the model is asked again, at most ``retries`` times per candidate:

- malformed: no edit block, no ``HYPOTHESIS:`` line, a block without a file path, a
  marker out of place, a block never closed (if the reply was cut off at ``max_tokens``,
  the feedback says so and asks for smaller edits);
- no_match / ambiguous: a SEARCH text that matches nothing, or several places (the feedback
  quotes the closest lines of the file);
- no_file: SEARCH/REPLACE on a file that does not exist (an empty SEARCH creates it);
- too_large: a FILE block for a file over ``whole_file_max_bytes``;
- scope: a path outside the editable scope, a protected path, or one escaping the tree;
- no_change: edits that leave every file as it was.

A reply whose diff digest equals an experiment already tried (``context.tried_digests``)
or another candidate of this wave is re-asked once with a note, outside the ``retries``
count. When the attempts run out, the proposer returns a *rejected* candidate:
``meta["rejected"]`` holds the last reason (see :func:`assay.proposers.edits.rejection`),
so the loop records it without running it, and the wave's other candidates go on.
A reply of only ``NO_MORE_IDEAS`` ends the wave; a wave with no candidate at all returns
``[]`` (the proposer is exhausted).

HTTP errors that are not retried (401, 403, 404, 400 ...) and retries exhausted raise
:class:`~assay.errors.ProposerError`: no re-ask can fix a wrong key, URL or model.

``Candidate.meta`` records ``provider``, ``model``, ``model_calls`` (the journal's ids of
its calls: their tokens and dollars are read there, nowhere else), ``attempts``
(model replies), ``http_attempts``, ``feedback`` (the kinds of problems fed back),
``context_tokens`` and ``tokens_estimated`` (the server sent no usage).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import keys
from ..bench.meter import Meter, prompt_tokens
from ..config.spec import Target
from ..errors import CapReached, ProposerError
from ..journal.store import Journal
from ..model import Candidate
from ..repo.git import git
from ..usage import Usage
from .base import ProposalContext, Proposer
from .chat import (
    DEFAULT_BASE_URL,
    DEFAULT_KEY_ENV,
    PROVIDERS,
    ChatClient,
    ChatReply,
    ChatSettings,
    make_client,
)
from .context import BuiltContext, build_context, incumbent_files
from .edits import (
    FORMAT_RULES,
    WHOLE_FILE_MAX_BYTES,
    EditError,
    ParsedReply,
    apply_blocks,
    parse_reply,
    path_problem,
    rejected,
    unified_diff,
)

SYSTEM_PROMPT = """\
You improve a software project's benchmark metric by proposing one code change at a time.
Every change is measured against the current best version with paired benchmark runs and
kept only if its effect is credibly larger than the threshold δ given below; small or
unmeasurable changes are discarded. Read the task brief, the measurements and the journal
of past experiments: do not repeat what was tried, learn from what was discarded and why,
and keep the program correct (its checks must still pass).

""" + FORMAT_RULES

# defaults of [proposer.llm], read here and by `assay plan`'s spend estimate (assay.measure.spend)
RETRIES = 2
CONTEXT_TOKENS = 24_000
MAX_TOKENS = 4096


@dataclass
class _Tally:
    """What the model calls for one candidate met: its calls, attempts and feedback."""

    provider: str
    model: str  # the model the endpoint last said it served
    context_tokens: int
    calls: list[int] = field(default_factory=list)  # the meter's call ids
    attempts: int = 0
    http_attempts: int = 0
    feedback: list[str] = field(default_factory=list)  # the kind of each rejected reply
    estimated: bool = False  # some token count was estimated

    def add(self, reply: ChatReply, call_id: int | None) -> None:
        if call_id is not None:
            self.calls.append(call_id)
        self.attempts += 1
        self.http_attempts += reply.attempts
        self.estimated = self.estimated or reply.tokens_estimated
        self.model = reply.model or self.model

    def meta(self) -> dict[str, Any]:
        """The candidate's meta: what its model calls were and what they met."""
        return {"provider": self.provider, "model": self.model,
                "model_calls": list(self.calls),
                "attempts": self.attempts,
                "http_attempts": self.http_attempts, "feedback": list(self.feedback),
                "context_tokens": self.context_tokens, "tokens_estimated": self.estimated}


class LLMProposer(Proposer):
    """Proposals from a chat model, as SEARCH/REPLACE edits turned into git diffs."""

    name = "llm"

    def __init__(self, target: Target, client: ChatClient, *, retries: int = RETRIES,
                 context_tokens: int = CONTEXT_TOKENS,
                 whole_file_max_bytes: int = WHOLE_FILE_MAX_BYTES) -> None:
        self.target = target
        self.client = client
        self.retries = retries
        self.context_tokens = context_tokens
        self.whole_file_max_bytes = whole_file_max_bytes
        self.last_context: BuiltContext | None = None

    @classmethod
    def from_target(cls, target: Target, *, sleep: Callable[[float], None] = time.sleep,
                    environ: Mapping[str, str] | None = None) -> LLMProposer:
        """Read and validate ``[proposer.llm]``; the API key comes from the environment."""
        env = keys.environ() if environ is None else environ
        sec = target.section("proposer.llm")
        provider = sec.choice("provider", PROVIDERS)
        model = sec.get("model", str, valid="the model name the endpoint serves")
        if not model.strip():
            raise sec.error("model", "must not be empty", "the model name the endpoint serves")
        base_url = sec.get("base_url", str, DEFAULT_BASE_URL[provider],
                           valid="an http(s) URL")
        if not base_url.startswith(("http://", "https://")):
            raise sec.error("base_url", f"{base_url!r} is not an http(s) URL",
                            "e.g. http://127.0.0.1:8000/v1")
        key_env = sec.get("api_key_env", str, DEFAULT_KEY_ENV[provider],
                          valid="the name of an environment variable, or \"\" for no key")
        settings_kw: dict[str, Any] = dict(
            temperature=sec.number("temperature", None, low=0.0, high=2.0),
            max_tokens=sec.number("max_tokens", MAX_TOKENS, low=1, integer=True),
            max_tokens_field=sec.choice("max_tokens_field",
                                        ("max_tokens", "max_completion_tokens"), "max_tokens"),
            timeout_s=float(sec.number("timeout_s", 300.0, low=1.0)),
            http_retries=sec.number("http_retries", 5, low=0, high=20, integer=True),
            max_backoff_s=float(sec.number("max_backoff_s", 60.0, low=0.0)),
        )
        retries = sec.number("retries", RETRIES, low=0, high=10, integer=True)
        context_tokens = sec.number("context_tokens", CONTEXT_TOKENS, low=1000, integer=True)
        whole = sec.number("whole_file_max_bytes", WHOLE_FILE_MAX_BYTES, low=0, integer=True)
        for old in ("price_in_per_mtok", "price_out_per_mtok"):
            if sec.has(old):
                raise sec.error(old, "prices are read from the price table now",
                                f'[prices."{model}"] with input = ... and output = ... '
                                "(dollars per million tokens)")
        sec.reject_unknown()
        api_key = ""
        if key_env:
            api_key = env.get(key_env, "")
            if not api_key:
                raise sec.error("api_key_env", f"names {key_env}, which is not set in the "
                                "environment", f"export {key_env}=..., or api_key_env = \"\" "
                                "for a server that needs no key")
        settings = ChatSettings(provider=provider, model=model, base_url=base_url,
                                api_key=api_key, **settings_kw)
        return cls(target, make_client(settings, sleep), retries=retries,
                   context_tokens=context_tokens, whole_file_max_bytes=whole)

    # ------------------------------------------------------------------ proposing

    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        if n <= 0:
            return []
        files = dict(context.files) or incumbent_files(self.target, context.incumbent.commit)
        built = build_context(context, self.context_tokens, files=files)
        self.last_context = built
        seen = set(context.tried_digests)
        out: list[Candidate] = []
        wave: list[str] = []
        meter = context.metered(self.name)
        for i in range(n):
            try:
                cand = self._one(context, built, files, i, n, wave, seen, meter)
            except CapReached:
                if out:  # the wave ends with what it made; the loop reads meter.reached
                    break
                raise
            if cand is None:  # NO_MORE_IDEAS
                break
            out.append(cand)
            if not cand.meta.get("rejected"):
                seen.add(cand.digest)
                wave.append(cand.hypothesis)
        return out

    def _ask(self, built: BuiltContext, i: int, n: int, wave: list[str]) -> str:
        lines = ["## Your turn",
                 f"Propose one change (candidate {i + 1} of {n} in this round; the round's "
                 "candidates are measured side by side)."]
        if wave:
            lines.append("Candidates already proposed in this round (propose a different "
                         "idea):")
            lines += [f"- {h}" for h in wave]
        return built.text + "\n" + "\n".join(lines) + "\n"

    def _one(self, context: ProposalContext, built: BuiltContext, files: Mapping[str, str],
             i: int, n: int, wave: list[str], seen: set[str], meter: Meter
             ) -> Candidate | None:
        commit = context.incumbent.commit
        messages: list[dict[str, str]] = [{"role": "user", "content": self._ask(built, i, n,
                                                                                wave)}]
        tally = _Tally(self.client.settings.provider, self.client.settings.model, built.tokens)
        read = self._reader(files, commit)
        retries_left = self.retries
        dup_reasked = False
        while True:
            reply = self._complete(messages, meter, tally)
            hypothesis = ""
            try:
                parsed = parse_reply(reply.text)
                if parsed.no_more_ideas:
                    return None
                hypothesis = parsed.hypothesis
                patch = self._patch(parsed, read)
            except EditError as exc:
                problem = str(exc)
                if reply.truncated:
                    problem = ("Your reply was cut off at the output token limit. Make fewer, "
                               "smaller edit blocks.\n" + problem)
                tally.feedback.append(exc.kind)
                if retries_left <= 0:
                    return rejected(commit, self.name, f"{exc.kind}: {problem}",
                                    hypothesis=hypothesis, meta=tally.meta())
                retries_left -= 1
                messages += [{"role": "assistant", "content": reply.text or "(empty reply)"},
                             {"role": "user", "content":
                              f"Your reply could not be used:\n{problem}\n\nNone of your edits "
                              "were applied. Reply again in full: the HYPOTHESIS line and the "
                              "complete set of edit blocks, against the files as they were "
                              "shown to you."}]
                continue
            cand = Candidate(base_commit=commit, patch=patch, hypothesis=hypothesis,
                             proposer=self.name, meta=tally.meta())
            if cand.digest in seen:
                tally.feedback.append("duplicate")
                if dup_reasked:
                    return rejected(commit, self.name, "duplicate: the same change as an "
                                    "experiment already tried", patch=patch,
                                    hypothesis=hypothesis, meta=tally.meta())
                dup_reasked = True
                messages += [{"role": "assistant", "content": reply.text},
                             {"role": "user", "content":
                              "That exact change was already tried (it is in the journal or "
                              "in this round). Propose a different change, in full."}]
                continue
            return cand

    def _complete(self, messages: list[dict[str, str]], meter: Meter, tally: _Tally
                  ) -> ChatReply:
        """The model's reply to ``messages``, within the spending caps, charged and tallied."""
        meter.check(tally.model, prompt_tokens(SYSTEM_PROMPT, *(m["content"] for m in messages)),
                    self.client.settings.max_tokens)
        reply: ChatReply = self.client.complete(SYSTEM_PROMPT, messages)
        _, call_id = meter.charge(Usage(
            reply.model or tally.model, reply.tokens_in, reply.tokens_out, reply.tokens_cached,
            reply.tokens_cache_write, estimated=reply.tokens_estimated))
        tally.add(reply, call_id)
        return reply

    def _reader(self, files: Mapping[str, str], commit: str) -> Callable[[str], str | None]:
        """The text of a file at ``commit`` (``files`` first); None when absent or binary."""
        def read(path: str) -> str | None:
            if path in files:
                return files[path]
            proc = git(["show", f"{commit}:{path}"], self.target.root, check=False, plain=True,
                       binary=True, error=ProposerError)
            if proc.returncode != 0:
                return None
            try:
                return proc.stdout.decode()
            except UnicodeDecodeError:
                return None

        return read

    def _patch(self, parsed: ParsedReply, read: Callable[[str], str | None]) -> str:
        """The reply's edits as a diff; :class:`EditError` when one is out of scope or
        cannot be applied."""
        bad = [f"edit block {b.index} ({b.path}): {why}" for b in parsed.blocks
               if (why := path_problem(self.target, b.path))]
        if bad:
            raise EditError("\n".join(bad) + "\nEdit only files matching: "
                            + ", ".join(self.target.editable) + ".", "scope")
        applied = apply_blocks(parsed.blocks, read, self.whole_file_max_bytes)
        return unified_diff(applied.changes)

    def close(self) -> None:
        try:
            self.client.close()
        except Exception as exc:  # pragma: no cover - best effort
            raise ProposerError(f"closing the chat client failed: {exc}") from exc


def make_proposer(target: Target, journal: Journal) -> LLMProposer:
    """The proposer ``[proposer.llm]`` describes (it needs no history)."""
    return LLMProposer.from_target(target)
