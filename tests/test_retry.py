"""The one retry policy: Retry-After first, else exponential back-off, always capped."""

from __future__ import annotations

import email.message
import time
from email.utils import formatdate

import pytest

from assay.retry import backoff_delay, retry_after


def test_retry_after_reads_milliseconds_seconds_and_dates() -> None:
    assert retry_after({"retry-after-ms": "250"}) == pytest.approx(0.25)
    assert retry_after({"retry-after": "3"}) == 3.0
    soon = formatdate(time.time() + 30, usegmt=True)
    assert 25 < (retry_after({"retry-after": soon}) or 0) <= 30
    assert retry_after({"retry-after": "soon, maybe"}) is None
    assert retry_after({}) is None and retry_after(None) is None
    # urllib's headers are an email message: looked up without regard to case
    msg = email.message.Message()
    msg["Retry-After"] = "7"
    assert retry_after(msg) == 7.0


def test_backoff_doubles_is_capped_and_yields_to_the_server() -> None:
    assert [backoff_delay(k, None, 60, base=0.5, jitter=False) for k in (1, 2, 3)] == \
        [0.5, 1.0, 2.0]
    assert backoff_delay(10, None, 5.0, jitter=False) == 5.0
    assert backoff_delay(1, 120.0, 60.0) == 60.0  # the server's wait, capped
    assert backoff_delay(3, 0.2, 60.0) == 0.2
    jittered = [backoff_delay(2, None, 60) for _ in range(50)]
    assert all(2.0 <= d <= 2.5 for d in jittered) and len(set(jittered)) > 1
