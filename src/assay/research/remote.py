"""arXiv and GitHub search clients: cached on disk, rate-limited, backing off on 429.

Both are thin: one GET per query through :class:`HttpClient`, which

* answers from the disk cache (``.assay/research/cache``) while an entry is fresh,
* waits so two requests to one client are at least ``min_interval_s`` apart (arXiv asks
  for three seconds),
* on 429 or 503 waits ``Retry-After`` seconds (or an exponential backoff) and retries
  (the one policy of :mod:`assay.retry`),
* raises :class:`RemoteUnavailable` with a message naming the service, the URL and the
  cause when the network or the service cannot be reached. Research catches it and
  carries on with the local sources; it is never a crash.

The base URLs are parameters so tests (and mirrors) can point them elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import keys
from ..errors import AssayError
from ..retry import backoff_delay, retry_after

ARXIV_URL = "https://export.arxiv.org/api/query"
GITHUB_URL = "https://api.github.com"
USER_AGENT = "assay-research/0.1 (+https://pypi.org/project/assay)"
_ATOM = "{http://www.w3.org/2005/Atom}"


class RemoteUnavailable(AssayError):
    """A remote service could not be reached or kept refusing; research continues without it."""


@dataclass(frozen=True)
class Paper:
    id: str  # arXiv id, e.g. 2401.12345v1
    title: str
    summary: str
    url: str
    published: str = ""
    authors: tuple[str, ...] = ()


@dataclass(frozen=True)
class RepoHit:
    full_name: str
    url: str
    description: str
    stars: int


class HttpClient:
    """GET with a disk cache, a minimum interval between requests, and 429 backoff."""

    def __init__(self, service: str, cache_dir: Path | None, *, min_interval_s: float = 1.0,
                 timeout_s: float = 20.0, retries: int = 4, backoff_s: float = 2.0,
                 max_wait_s: float = 60.0, ttl_s: float = 7 * 86400.0,
                 headers: Mapping[str, str] | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.service = service
        self.cache_dir = cache_dir
        self.min_interval_s = min_interval_s
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_wait_s = max_wait_s
        self.ttl_s = ttl_s
        self.headers = {"User-Agent": USER_AGENT, **(headers or {})}
        self.sleep = sleep
        self.clock = clock
        self._last = 0.0
        self.requests = 0  # network requests made (not cache hits)
        self.waits: list[float] = []  # backoff waits, for reporting and tests

    def _cache_path(self, url: str) -> Path | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / f"{hashlib.sha256(url.encode()).hexdigest()[:24]}.json"

    def cached(self, url: str) -> str | None:
        path = self._cache_path(url)
        if path is None or not path.exists():
            return None
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if entry.get("url") != url or time.time() - float(entry.get("at", 0)) > self.ttl_s:
            return None
        body = entry.get("body")
        return str(body) if isinstance(body, str) else None

    def _store(self, url: str, body: str) -> None:
        path = self._cache_path(url)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": url, "at": time.time(), "body": body}),
                       encoding="utf-8")
        tmp.replace(path)

    def get(self, url: str) -> str:
        hit = self.cached(url)
        if hit is not None:
            return hit
        attempt = 0
        while True:
            gap = self.min_interval_s - (self.clock() - self._last)
            if self._last and gap > 0:
                self.sleep(gap)
            self._last = self.clock()
            self.requests += 1
            try:
                req = urllib.request.Request(url, headers=self.headers)
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    body = resp.read().decode("utf-8", errors="replace")
            except urllib.error.HTTPError as exc:
                if exc.code in (429, 503) and attempt < self.retries:
                    wait = backoff_delay(attempt + 1, retry_after(exc.headers),
                                         self.max_wait_s, base=self.backoff_s, jitter=False)
                    self.waits.append(wait)
                    self.sleep(wait)
                    attempt += 1
                    continue
                hint = ("it is rate-limiting; try again later"
                        if exc.code in (403, 429, 503) else "the query was refused")
                raise RemoteUnavailable(
                    f"{self.service} answered HTTP {exc.code} for {url} "
                    f"after {attempt + 1} attempt(s): {hint}"
                ) from None
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise RemoteUnavailable(
                    f"{self.service} is unreachable ({_base(url)}: {reason}); research "
                    "continues with local sources only. Use --offline (or offline = true "
                    "in [research]) to skip it"
                ) from None
            self._store(url, body)
            return str(body)


def _base(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


class ArxivClient:
    """The arXiv export API (Atom). One query → up to ``max_results`` papers."""

    def __init__(self, cache_dir: Path | None, *, base_url: str = ARXIV_URL,
                 min_interval_s: float = 3.0, **kw: Any) -> None:
        self.base_url = base_url
        self.http = HttpClient("arXiv", cache_dir, min_interval_s=min_interval_s, **kw)

    def url(self, query: str, max_results: int) -> str:
        terms = " AND ".join(f"all:{w}" for w in query.split() if w)
        params = {"search_query": terms or "all:performance", "start": "0",
                  "max_results": str(max_results), "sortBy": "relevance"}
        return f"{self.base_url}?{urllib.parse.urlencode(params)}"

    def search(self, query: str, max_results: int = 5) -> list[Paper]:
        return parse_arxiv(self.http.get(self.url(query, max_results)))


def parse_arxiv(body: str) -> list[Paper]:
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise RemoteUnavailable(f"arXiv answered something that is not Atom XML: {exc}"
                                ) from None
    papers = []
    for entry in root.iter(f"{_ATOM}entry"):
        url = (entry.findtext(f"{_ATOM}id") or "").strip()
        title = " ".join((entry.findtext(f"{_ATOM}title") or "").split())
        if not url or not title:
            continue
        summary = " ".join((entry.findtext(f"{_ATOM}summary") or "").split())
        authors = tuple(" ".join((a.findtext(f"{_ATOM}name") or "").split())
                        for a in entry.findall(f"{_ATOM}author"))
        papers.append(Paper(id=url.rsplit("/abs/", 1)[-1], title=title, summary=summary,
                            url=url, published=(entry.findtext(f"{_ATOM}published") or "")
                            .strip(), authors=authors))
    return papers


class GithubClient:
    """GitHub repository search (finds forks and competing implementations to read)."""

    def __init__(self, cache_dir: Path | None, *, base_url: str = GITHUB_URL,
                 min_interval_s: float = 6.0, token: str | None = None, **kw: Any) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Accept": "application/vnd.github+json"}
        token = token if token is not None else keys.get("GITHUB_TOKEN") or ""
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.http = HttpClient("GitHub", cache_dir, min_interval_s=min_interval_s,
                               headers=headers, **kw)

    def search_repos(self, query: str, max_results: int = 5) -> list[RepoHit]:
        params = {"q": query, "sort": "stars", "order": "desc",
                  "per_page": str(max_results)}
        url = f"{self.base_url}/search/repositories?{urllib.parse.urlencode(params)}"
        try:
            data = json.loads(self.http.get(url))
        except ValueError as exc:
            raise RemoteUnavailable(f"GitHub answered something that is not JSON: {exc}"
                                    ) from None
        items = data.get("items", []) if isinstance(data, dict) else []
        return [RepoHit(str(i.get("full_name", "")), str(i.get("html_url", "")),
                        str(i.get("description") or ""), int(i.get("stargazers_count") or 0))
                for i in items if isinstance(i, dict) and i.get("full_name")]
