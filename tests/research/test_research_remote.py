"""arXiv and GitHub clients against real local servers: offline, 429, cache, rate limit."""

from __future__ import annotations

import itertools
import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from research_helpers import ATOM, closed_port

from assay.research.remote import ArxivClient, GithubClient, RemoteUnavailable

Make = Callable[[list[tuple[int, dict[str, str], str]]], Any]


def test_offline_arxiv_gives_a_clear_message(tmp_path: Path) -> None:
    port = closed_port()
    client = ArxivClient(tmp_path / "cache", base_url=f"http://127.0.0.1:{port}/api/query",
                         min_interval_s=0, timeout_s=5)
    with pytest.raises(RemoteUnavailable) as info:
        client.search("rms norm fusion")
    msg = str(info.value)
    assert "arXiv is unreachable" in msg
    assert f"127.0.0.1:{port}" in msg
    assert "--offline" in msg
    assert "Traceback" not in msg


def test_429_then_success_honours_retry_after(tmp_path: Path, http_server: Make) -> None:
    srv = http_server([(429, {"Retry-After": "1"}, "slow down"), (200, {}, ATOM)])
    waits: list[float] = []
    client = ArxivClient(tmp_path / "cache", base_url=f"{srv.url}/api/query",
                         min_interval_s=0, sleep=waits.append)
    papers = client.search("rms norm")
    assert [p.id for p in papers] == ["2401.00001v1"]
    assert papers[0].title == "Fused RMS Normalization for Memory-Bound Decoding"
    assert papers[0].authors == ("A. Author",)
    assert len(srv.paths) == 2
    assert waits == [1.0]
    assert "search_query=all%3Arms+AND+all%3Anorm" in srv.paths[0]


def test_429_without_header_backs_off_exponentially(tmp_path: Path, http_server: Make) -> None:
    srv = http_server([(429, {}, ""), (429, {}, ""), (200, {}, ATOM)])
    start = time.monotonic()
    client = ArxivClient(tmp_path / "cache", base_url=f"{srv.url}/q", min_interval_s=0,
                         backoff_s=0.05)
    assert len(client.search("x")) == 1
    assert client.http.waits == [0.05, 0.1]
    assert time.monotonic() - start >= 0.15  # it really waited
    assert len(srv.paths) == 3


def test_persistent_429_gives_up_with_a_message(tmp_path: Path, http_server: Make) -> None:
    srv = http_server([(429, {"Retry-After": "0"}, "")])
    client = ArxivClient(tmp_path / "cache", base_url=f"{srv.url}/q", min_interval_s=0,
                         retries=2)
    with pytest.raises(RemoteUnavailable, match=r"HTTP 429 .* after 3 attempt"):
        client.search("x")
    assert len(srv.paths) == 3


def test_answers_are_cached_on_disk(tmp_path: Path, http_server: Make) -> None:
    srv = http_server([(200, {}, ATOM)])
    cache = tmp_path / "cache"
    ArxivClient(cache, base_url=f"{srv.url}/q", min_interval_s=0).search("norm")
    again = ArxivClient(cache, base_url=f"{srv.url}/q", min_interval_s=0)
    assert len(again.search("norm")) == 1
    assert len(srv.paths) == 1  # the second client answered from disk
    assert again.http.requests == 0
    assert list(cache.glob("*.json"))


def test_requests_are_spaced_by_the_rate_limit(tmp_path: Path, http_server: Make,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Each request starts at least ``min_interval_s`` after the one before, however long
    the requests take. The client's clock is a fake one that its sleeps and its requests
    move, so the spacing is exact whatever the machine's load (the server's receipt times
    are not: a busy machine delays one receipt and not the next)."""
    now = [1000.0]

    def sleep(s: float) -> None:
        now[0] += s

    sent: list[float] = []
    real = urllib.request.urlopen

    def urlopen(*args: Any, **kwargs: Any) -> Any:
        sent.append(now[0])
        now[0] += 0.05  # the request's own time
        return real(*args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    srv = http_server([(200, {}, ATOM)])
    client = ArxivClient(tmp_path / "c", base_url=f"{srv.url}/q", min_interval_s=0.3,
                         sleep=sleep, clock=lambda: now[0])
    client.search("one")
    client.search("two")
    now[0] += 1.0  # a pause longer than the interval: no wait
    client.search("three")
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert len(srv.paths) == 3
    assert gaps == [pytest.approx(0.3), pytest.approx(1.05)]


def test_github_repository_search(tmp_path: Path, http_server: Make) -> None:
    body = json.dumps({"items": [
        {"full_name": "fast/fork", "html_url": "https://github.com/fast/fork",
         "description": "a faster fork", "stargazers_count": 42}]})
    srv = http_server([(200, {"Content-Type": "application/json"}, body)])
    gh = GithubClient(tmp_path / "c", base_url=srv.url, min_interval_s=0, token="")
    hits = gh.search_repos("rms norm fusion")
    assert [(h.full_name, h.stars) for h in hits] == [("fast/fork", 42)]
    assert srv.paths[0].startswith("/search/repositories?q=rms+norm+fusion")


def test_garbage_answer_is_a_clear_error(tmp_path: Path, http_server: Make) -> None:
    srv = http_server([(200, {}, "<html>maintenance</html")])
    client = ArxivClient(tmp_path / "c", base_url=f"{srv.url}/q", min_interval_s=0)
    with pytest.raises(RemoteUnavailable, match="not Atom XML"):
        client.search("x")
