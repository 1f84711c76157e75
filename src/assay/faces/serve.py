"""`assay serve`: the report's pages, live, while a run writes the journal.

Stdlib only (:class:`http.server.ThreadingHTTPServer`). Every page has a JSON twin, and
the pages poll their twin and redraw in place (no reload):

====================================  ======================================
``/``                                  ``/api/status.json`` (also ``/index.json``)
``/experiments/e0003``                 ``/experiments/e0003.json``
``/report.html``                       the static report, built on request
``/api/experiments.json``              every experiment's row (``?limit=&offset=``: a
                                       page of them, newest first)
``/api/events.json?since=<id>``        the journal's events after ``id``
====================================  ======================================

Each request opens the journal read-only (SQLite WAL lets it read while the loop writes)
and closes it again. Binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from ..config.spec import Target
from ..errors import AssayError
from ..journal.store import Journal
from ..measure import spend
from ..strictjson import dumps
from . import page, report
from .data import (
    Overview,
    changes,
    experiment_data,
    lock_state,
    open_readonly,
    parse_version,
    status_data,
    version_of,
)
from .terminal import improvement

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
POLL_MS = 1000
_EXP = re.compile(r"^/experiments/(?P<id>[A-Za-z0-9_-]+?)(?P<json>\.json)?/?$")
_STATIC = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8",
           "plotly.min.js": "text/javascript; charset=utf-8"}


class Pages:
    """Builds every page and JSON twin for one target (thread-safe, read-only)."""

    def __init__(self, target: Target, poll_ms: int = POLL_MS) -> None:
        self.target = target
        self.poll_ms = poll_ms
        self._lock = threading.Lock()
        self._cache: tuple[Any, Overview] | None = None

    def _key(self, journal: Journal) -> Any:
        return journal.change_key()

    def status(self) -> dict[str, Any]:
        journal = open_readonly(self.target)
        try:
            if journal is None:
                return status_data(self.target, None)
            key = self._key(journal)
            with self._lock:
                cached = self._cache
            if cached is not None and cached[0] == key:
                data = dict(cached[1].data)
                data["lock"] = lock_state(self.target)
                return data
            data = status_data(self.target, journal)
            with self._lock:
                self._cache = (key, Overview(data))
            return data
        finally:
            if journal is not None:
                journal.close()

    def status_since(self, since: str) -> dict[str, Any]:
        """What changed after version ``since``: the changed rows and chart points, plus the
        small summary (counts, best, cost, events). Nothing here reads or walks every
        experiment: the cached overview folds the changed rows in."""
        after = parse_version(since)
        journal = open_readonly(self.target)
        if journal is None or after is None:
            if journal is not None:
                journal.close()
            return self.status()
        try:
            with self._lock:
                cached = self._cache
            if cached is None:
                journal.close()
                journal = None
                return self.status()
            version = version_of(journal)
            if version == since:
                return {"since": since, "version": version, "rows": [], "points": [],
                        "lock": lock_state(self.target)}
            events = [{"id": e.id, "ts": e.ts, "kind": e.kind,
                       "experiment_id": e.experiment_id, "message": e.message}
                      for e in journal.recent_events(12)]
            inc = journal.incumbent()
            key = self._key(journal)
            with self._lock:  # one fold at a time, on the latest overview
                overview = (self._cache or cached)[1]
                baseline = overview.data["baseline"]
                delta = changes(self.target, journal, after, overview.kept_steps(), baseline)
                new = overview.fold(delta["rows"], version, events, journal.spent())
                new["spend"] = spend.of_journal(journal, self.target)  # sums in SQL
                self._cache = (key, overview)
            return {"since": since, "version": version, "rows": delta["rows"],
                    "points": delta["points"], "counts": new["counts"], "best": new["best"],
                    "baseline": baseline,
                    "improvement": improvement(baseline, new["best"],
                                               self.target.metric.direction),
                    "incumbent": None if inc is None else {
                        "commit": inc.commit, "params": dict(inc.params),
                        "experiment": inc.experiment_id},
                    "events": events, "cost": new["cost"], "spend": new["spend"],
                    "lock": lock_state(self.target),
                    "total": len(new["experiments"])}
        finally:
            if journal is not None:
                journal.close()

    def experiment(self, exp_id: str) -> dict[str, Any] | None:
        journal = open_readonly(self.target)
        if journal is None:
            return None
        try:
            return experiment_data(self.target, journal, exp_id)
        finally:
            journal.close()

    def events(self, since: int) -> list[dict[str, Any]]:
        journal = open_readonly(self.target)
        if journal is None:
            return []
        try:
            return [dataclasses.asdict(e) for e in journal.events(since_id=since, limit=500)]
        finally:
            journal.close()

    def _config(self, page_name: str, exp: str | None = None) -> dict[str, Any]:
        return {"mode": "live", "page": page_name, "exp": exp, "base": "/",
                "interval": self.poll_ms}

    def overview_html(self) -> str:
        data = self.status()
        return page.render(title=f"assay: {self.target.root.name}",
                           subtitle=f"{data['metric']['name']} · live",
                           config=self._config("overview"), data=data, inline=False, live=True)

    def experiment_html(self, data: dict[str, Any]) -> str:
        return page.render(title=f"assay: {self.target.root.name} · {data['id']}",
                           subtitle=f"{data['metric']['name']} · live",
                           config=self._config("experiment", str(data["id"])), data=data,
                           inline=False, live=True)


class PagesHandler(BaseHTTPRequestHandler):
    """Serves :attr:`pages`, a class attribute :func:`make_handler` sets."""

    pages: ClassVar[Pages]
    server_version = "assay"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, body: bytes, ctype: str, cache: str = "no-store") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, value: Any, status: int = 200) -> None:
        self._send(status, dumps(value).encode(), "application/json")

    def _html(self, text: str, status: int = 200) -> None:
        self._send(status, text.encode(), "text/html; charset=utf-8")

    def _not_found(self, what: str, as_json: bool) -> None:
        if as_json:
            self._json({"error": f"not found: {what}"}, 404)
        else:
            self._html(f"<!doctype html><title>not found</title><p>not found: "
                       f"{_escape(what)}</p><p><a href=\"/\">all experiments</a></p>", 404)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        route = url.path
        try:
            self._route(route, parse_qs(url.query))
        except (BrokenPipeError, ConnectionResetError):
            return
        except AssayError as exc:
            self._json({"error": str(exc)}, 500)
        except Exception as exc:  # a page bug must not kill the server
            self._json({"error": f"{type(exc).__name__}: {exc}"}, 500)

    def _route(self, route: str, query: dict[str, list[str]]) -> None:
        pages = self.pages
        if route in ("/", "/index.html"):
            self._html(pages.overview_html())
        elif route in ("/api/status.json", "/index.json", "/status.json"):
            version = query.get("since", [""])[0]
            self._json(pages.status_since(version) if version else pages.status())
        elif route == "/api/experiments.json":
            self._experiments(query)
        elif route == "/api/events.json":
            try:
                since = int(query.get("since", ["0"])[0])
            except ValueError:
                since = 0
            self._json(pages.events(since))
        elif route == "/favicon.ico":
            self._send(204, b"", "image/x-icon", cache="max-age=86400")
        elif route == "/report.html":
            self._html(report.build(pages.target))
        elif route.startswith("/static/"):
            self._static(route)
        elif m := _EXP.match(route):
            self._experiment(m.group("id"), bool(m.group("json")))
        else:
            self._not_found(route, route.endswith(".json"))

    def _experiments(self, query: dict[str, list[str]]) -> None:
        """Every experiment's row, or a page of them, newest first."""
        rows = self.pages.status()["experiments"]
        if "limit" in query or "offset" in query:  # a page, newest first
            limit, offset = _count(query, "limit", 100), _count(query, "offset", 0)
            if limit is None or offset is None:
                self._json({"error": "limit and offset must be whole numbers >= 0, "
                                     "e.g. /api/experiments.json?limit=100&offset=0"}, 400)
                return
            end = len(rows) - offset
            rows = rows[max(0, end - limit):max(0, end)][::-1]
        self._json(rows)

    def _static(self, route: str) -> None:
        name = route[len("/static/"):]
        if name not in _STATIC:
            self._not_found(route, False)
            return
        text = page.plotly_js() if name == "plotly.min.js" else page.asset(name)
        self._send(200, text.encode(), _STATIC[name], cache="max-age=3600")

    def _experiment(self, exp_id: str, as_json: bool) -> None:
        data = self.pages.experiment(exp_id)
        if data is None:
            self._not_found(f"experiment {exp_id}", as_json)
        elif as_json:
            self._json(data)
        else:
            self._html(self.pages.experiment_html(data))


def make_handler(pages: Pages) -> type[BaseHTTPRequestHandler]:
    """A request handler class serving ``pages``."""
    class Handler(PagesHandler):
        pass

    Handler.pages = pages
    return Handler


def _count(query: dict[str, list[str]], key: str, default: int) -> int | None:
    """A whole number >= 0 from the query string (None when it is not one)."""
    raw = query.get(key, [str(default)])[0]
    return int(raw) if raw.isdigit() else None


def _escape(text: str) -> str:
    import html

    return html.escape(text)


def make_server(target: Target, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                poll_ms: int = POLL_MS) -> ThreadingHTTPServer:
    """A bound server (port 0 picks a free one: read ``server.server_address``)."""
    server = ThreadingHTTPServer((host, port), make_handler(Pages(target, poll_ms)))
    server.daemon_threads = True
    return server


def serve(target: Target, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          poll_ms: int = POLL_MS, ready: Callable[[str], None] | None = None) -> None:
    """Serve until interrupted (Ctrl-C)."""
    server = make_server(target, host, port, poll_ms)
    bound_host, bound_port = server.server_address[:2]
    url = f"http://{_url_host(str(bound_host))}:{bound_port}/"
    if ready is not None:
        ready(url)
    try:
        server.serve_forever(poll_interval=0.25)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
