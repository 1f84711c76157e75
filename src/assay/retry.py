"""When to try an HTTP request again: the server's ``Retry-After``, else exponential back-off.

One policy for every client assay has (the LLM chat clients, the arXiv and GitHub search
clients): a ``retry-after-ms`` or ``Retry-After`` header (seconds or an HTTP date) names the
delay; without one, retry ``k`` (1-based) waits ``base * 2**(k-1)`` seconds, optionally with
up to a quarter of that added as jitter. Every delay is capped.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from typing import Protocol


class HeaderLookup(Protocol):
    """Anything with a case-insensitive ``get`` (httpx headers, ``email.message.Message``)."""

    def get(self, key: str, /) -> str | None: ...


def retry_after(headers: HeaderLookup | Mapping[str, str] | None) -> float | None:
    """Seconds from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date); None."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def backoff_delay(attempt: int, retry_after_s: float | None, cap: float, *,
                  base: float = 1.0, jitter: bool = True) -> float:
    """The delay before retry number ``attempt`` (1-based), never above ``cap``."""
    if retry_after_s is not None:
        return max(0.0, min(retry_after_s, cap))
    delay = base * 2.0 ** (attempt - 1)
    if jitter:
        delay += random.uniform(0, delay / 4)
    return min(cap, delay)
