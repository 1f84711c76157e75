"""What an agent CLI says it used, read from its output.

Two formats are read; anything else is a run that reported nothing (unknown, never zero).
A count the output leaves out is unknown too (``None``, recorded as NULL), never 0: the
input total is unknown when any of its parts is.

- **Claude Code** (``claude -p --output-format json``): one JSON object, the result, with
  ``result`` (the final message), ``total_cost_usd`` (its own dollar figure, kept as the
  call's cost), ``usage`` (``input_tokens``, ``output_tokens``,
  ``cache_read_input_tokens``, ``cache_creation_input_tokens``) and ``modelUsage`` (the
  same per model, camel-cased: ``inputTokens``, ``outputTokens``, ``cacheReadInputTokens``,
  ``cacheCreationInputTokens``, ``costUSD``). ``modelUsage`` is preferred when present: it
  names the models and counts every one of them.
- **Codex** (``codex exec --json``): JSON lines, one event each; every
  ``{"type": "turn.completed", "usage": {"input_tokens", "cached_input_tokens",
  "output_tokens"}}`` is added up (``input_tokens`` holds the cached ones), and the last
  ``item.completed`` whose item is an ``agent_message`` gives the final text. Codex names
  no model there: the configured ``model`` prices it, and without one the price is unknown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..usage import Usage


def read_usage(stdout: str, model: str = "") -> tuple[Usage, str]:
    """The run's usage and its final text ('' when the output holds none)."""
    text = stdout.strip()
    if text.startswith("{") and "\n" not in text:
        data = _json(text)
        if isinstance(data, dict) and data.get("type") != "turn.completed":
            return _claude(data, model)
    return _codex(text.splitlines(), model)


def _json(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _n(data: Mapping[str, Any], key: str) -> int | None:
    """The count under ``key``; None when it is missing or not a whole number."""
    v = data.get(key)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _sum(counts: Iterable[int | None]) -> int | None:
    """The total of counts, unknown (None) when any of them is."""
    total = 0
    for c in counts:
        if c is None:
            return None
        total += c
    return total


def _claude(data: Mapping[str, Any], model: str) -> tuple[Usage, str]:
    final = data["result"] if isinstance(data.get("result"), str) else ""
    cost = data.get("total_cost_usd")
    cost_usd = float(cost) if isinstance(cost, (int, float)) and not isinstance(
        cost, bool) else None
    per_model = data.get("modelUsage")
    usage = data.get("usage")
    if isinstance(per_model, dict) and per_model and all(
            isinstance(v, dict) for v in per_model.values()):
        rows = list(per_model.values())
        read = _sum(_n(r, "cacheReadInputTokens") for r in rows)
        written = _sum(_n(r, "cacheCreationInputTokens") for r in rows)
        tin = _sum([_sum(_n(r, "inputTokens") for r in rows), read, written])
        out = _sum(_n(r, "outputTokens") for r in rows)
        name = model or "+".join(sorted(per_model))
    elif isinstance(usage, dict):
        read, written = _n(usage, "cache_read_input_tokens"), _n(
            usage, "cache_creation_input_tokens")
        tin = _sum([_n(usage, "input_tokens"), read, written])
        out = _n(usage, "output_tokens")
        name = model
    else:
        tin = out = read = written = None
        name = model
    return Usage(name, tin, out, read or 0, written or 0, cost_usd,
                 "reported" if cost_usd is not None else "unknown"), final


def _codex(lines: list[str], model: str) -> tuple[Usage, str]:
    tin: int | None = 0
    out: int | None = 0
    read: int | None = 0
    turns = 0
    final = ""
    for line in lines:
        event = _json(line.strip()) if line.strip().startswith("{") else None
        if not isinstance(event, dict):
            continue
        if event.get("type") == "turn.completed" and isinstance(event.get("usage"), dict):
            u = event["usage"]
            tin = _sum([tin, _n(u, "input_tokens")])
            read = _sum([read, _n(u, "cached_input_tokens")])
            out = _sum([out, _n(u, "output_tokens")])
            turns += 1
        item = event.get("item")
        if (event.get("type") == "item.completed" and isinstance(item, dict)
                and item.get("type") == "agent_message" and isinstance(item.get("text"), str)):
            final = item["text"]
    if not turns:
        return Usage(model, None, None), final
    return Usage(model, tin, out, read or 0), final
