"""A small chat client over the official ``openai`` and ``anthropic`` SDKs.

Two wire formats, chosen explicitly by ``provider`` (never guessed from the URL):

- ``"openai"``: the chat-completions API. Works with OpenAI itself, Anthropic's
  OpenAI-compatible endpoint, vLLM, Ollama, llama.cpp's server and other compatible
  servers: the SDK's ``base_url`` is pointed at the configured URL.
- ``"anthropic"``: the Anthropic Messages API (``POST {base_url}/v1/messages``).

The SDKs' own retries are switched off (``max_retries=0``) so that assay owns the policy
and can count attempts: 408, 409, 429 and 5xx replies and connection failures are retried
with exponential backoff (1 s, 2 s, 4 s ... plus jitter), a ``Retry-After`` /
``retry-after-ms`` header replaces the computed delay, and every delay is capped at
``max_backoff_s`` (the one policy of :mod:`assay.retry`). After ``http_retries``
retries, or on any other error (401, 403, 404, 400 ...),
:class:`~assay.errors.ProposerError` is raised with the status and the server's message:
those are configuration problems, not something a re-ask could fix.

The API key is read from the environment variable the config names, at construction;
it is never written anywhere.
"""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ProposerError, require
from ..retry import backoff_delay, retry_after

PROVIDERS = ("openai", "anthropic")
DEFAULT_BASE_URL = {"openai": "https://api.openai.com/v1",
                    "anthropic": "https://api.anthropic.com"}
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
RETRY_STATUS = frozenset({408, 409, 429})

Message = Mapping[str, str]  # {"role": "user" | "assistant", "content": "..."}


@dataclass(frozen=True)
class ChatReply:
    """One model reply and what it cost."""

    text: str
    tokens_in: int
    tokens_out: int
    model: str
    finish_reason: str = ""  # "length" / "max_tokens" means the reply was cut off
    attempts: int = 1  # HTTP attempts, retries included
    tokens_estimated: bool = False  # the server sent no usage: chars/4 estimates
    tokens_cached: int = 0  # part of tokens_in read from the provider's prompt cache
    tokens_cache_write: int = 0  # part of tokens_in written to it (Anthropic)

    @property
    def truncated(self) -> bool:
        return self.finish_reason in ("length", "max_tokens")


@dataclass(frozen=True)
class ChatSettings:
    provider: str
    model: str
    base_url: str
    api_key: str = ""
    temperature: float | None = None
    max_tokens: int = 4096
    max_tokens_field: str = "max_tokens"  # OpenAI reasoning models: "max_completion_tokens"
    timeout_s: float = 300.0
    http_retries: int = 5
    max_backoff_s: float = 60.0


class ChatClient(ABC):
    """``complete(system, messages) -> ChatReply`` with assay's retry policy.

    A subclass names its SDK (``sdk``, the module; ``sdk_client``, its client class): the
    client is built with the SDK's own retries off, and its errors are classified here.
    """

    sdk = ""
    sdk_client = ""

    def __init__(self, settings: ChatSettings,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings = settings
        self.sleep = sleep
        self.delays: list[float] = []  # every backoff delay taken, for logs and tests
        if self.sdk:
            mod: Any = require(self.sdk, "llm",
                               f'The llm proposer (provider = "{settings.provider}")')
            self._mod = mod
            self._client: Any = getattr(mod, self.sdk_client)(
                api_key=settings.api_key or "no-key", base_url=settings.base_url,
                max_retries=0, timeout=settings.timeout_s)

    def complete(self, system: str, messages: Sequence[Message]) -> ChatReply:
        s = self.settings
        attempt = 0
        while True:
            attempt += 1
            try:
                reply = self._call(system, messages)
            except Exception as exc:  # classified below; unknown errors re-raise
                status, wait_s, detail = self._classify(exc)
                retryable = status is None or status in RETRY_STATUS or 500 <= status <= 599
                if not retryable or attempt > s.http_retries:
                    what = f"HTTP {status}" if status is not None else "connection failed"
                    tail = (f" after {attempt} attempts" if retryable else "")
                    raise ProposerError(
                        f"{s.provider} endpoint {s.base_url} (model {s.model}): {what}"
                        f"{tail}: {detail}") from exc
                delay = backoff_delay(attempt, wait_s, s.max_backoff_s)
                self.delays.append(delay)
                self.sleep(delay)
                continue
            return dataclasses.replace(reply, attempts=attempt)

    @abstractmethod
    def _call(self, system: str, messages: Sequence[Message]) -> ChatReply:
        """One HTTP request through the SDK."""

    def _classify(self, exc: Exception) -> tuple[int | None, float | None, str]:
        """(status or None for a connection failure, Retry-After seconds, message).

        Re-raises ``exc`` when it is not an API error at all.
        """
        return _status_info(exc, self._mod.APIStatusError, self._mod.APIConnectionError)

    def _reply(self, system: str, messages: Sequence[Message], text: str,
               counts: tuple[Any, Any, int, int], model: Any, finish: Any) -> ChatReply:
        """The reply with its token counts (input, cached included; output; cache reads;
        cache writes) as the server sent them, or estimates where it sent none."""
        tin, tout, cached, written = counts
        estimated = tin is None or tout is None
        if tin is None:
            tin = _estimate(system + "".join(m["content"] for m in messages))
        if tout is None:
            tout = _estimate(text)
        return ChatReply(text, int(tin), int(tout), str(model or self.settings.model),
                         str(finish or ""), 1, estimated, cached, written)

    def close(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()


def _status_info(exc: Exception, status_error: type, conn_error: type
                 ) -> tuple[int | None, float | None, str]:
    if isinstance(exc, status_error):
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        status = int(getattr(exc, "status_code", 0))
        return status, retry_after(headers), _short(str(getattr(exc, "message", exc)))
    if isinstance(exc, conn_error):
        return None, None, _short(str(exc) or type(exc).__name__)
    raise exc


def _short(text: str, limit: int = 500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int) else 0


def _openai_counts(usage: Any) -> tuple[Any, Any, int, int]:
    """Chat completions: ``prompt_tokens`` holds the cached ones
    (``prompt_tokens_details.cached_tokens``)."""
    if usage is None:
        return None, None, 0, 0
    details = getattr(usage, "prompt_tokens_details", None)
    cached = _int(getattr(details, "cached_tokens", 0)) if details is not None else 0
    return (getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None),
            cached, 0)


def _anthropic_counts(usage: Any) -> tuple[Any, Any, int, int]:
    """Messages: ``input_tokens`` leaves out ``cache_read_input_tokens`` and
    ``cache_creation_input_tokens``; assay's input count holds all three."""
    if usage is None:
        return None, None, 0, 0
    read = _int(getattr(usage, "cache_read_input_tokens", 0))
    written = _int(getattr(usage, "cache_creation_input_tokens", 0))
    tin = getattr(usage, "input_tokens", None)
    return (None if tin is None else int(tin) + read + written,
            getattr(usage, "output_tokens", None), read, written)


def _estimate(text: str) -> int:
    return (len(text) + 3) // 4


class OpenAIChat(ChatClient):
    """Chat completions through the ``openai`` SDK, at any compatible base URL."""

    sdk, sdk_client = "openai", "OpenAI"

    def _call(self, system: str, messages: Sequence[Message]) -> ChatReply:
        s = self.settings
        body: list[dict[str, str]] = [{"role": "system", "content": system}]
        body += [{"role": m["role"], "content": m["content"]} for m in messages]
        kwargs: dict[str, Any] = {"model": s.model, "messages": body}
        if s.max_tokens_field == "max_tokens":
            kwargs["max_tokens"] = s.max_tokens
        else:
            kwargs["extra_body"] = {s.max_tokens_field: s.max_tokens}
        if s.temperature is not None:
            kwargs["temperature"] = s.temperature
        resp = self._client.chat.completions.create(**kwargs)
        choices = getattr(resp, "choices", None) or []
        if not choices:
            raise ProposerError(f"{s.base_url}: the reply holds no choices: {resp!r:.300}")
        choice = choices[0]
        text = getattr(choice.message, "content", None) or ""
        return self._reply(system, messages, text, _openai_counts(getattr(resp, "usage", None)),
                           getattr(resp, "model", ""), choice.finish_reason)


class AnthropicChat(ChatClient):
    """The Anthropic Messages API through the ``anthropic`` SDK."""

    sdk, sdk_client = "anthropic", "Anthropic"

    def _call(self, system: str, messages: Sequence[Message]) -> ChatReply:
        s = self.settings
        kwargs: dict[str, Any] = {
            "model": s.model, "max_tokens": s.max_tokens, "system": system,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages]}
        if s.temperature is not None:
            kwargs["temperature"] = s.temperature
        resp = self._client.messages.create(**kwargs)
        parts = [getattr(b, "text", "") for b in (getattr(resp, "content", None) or [])
                 if getattr(b, "type", "") == "text"]
        return self._reply(system, messages, "".join(parts),
                           _anthropic_counts(getattr(resp, "usage", None)),
                           getattr(resp, "model", ""), getattr(resp, "stop_reason", ""))


def make_client(settings: ChatSettings,
                sleep: Callable[[float], None] = time.sleep) -> ChatClient:
    """The client for ``settings.provider``; an unknown provider is an error."""
    if settings.provider == "openai":
        return OpenAIChat(settings, sleep)
    if settings.provider == "anthropic":
        return AnthropicChat(settings, sleep)
    raise ProposerError(f"unknown chat provider {settings.provider!r} "
                        f"(valid: {', '.join(PROVIDERS)})")
