"""`assay serve`: live pages and their JSON twins, checked in a real headless Chromium.

The server runs as a real `python -m assay serve` process; a real loop adds an experiment
while the page is open, and the page must show it without a reload.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import run_plan


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, timeout: float = 10.0) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("Content-Type", "")


class Server:
    def __init__(self, root: Path, tmp: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log = tmp / "serve.log"
        self._log = self.log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "assay", "serve", "--root", str(root), "--port",
             str(self.port), "--poll-ms", "300"],
            stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + 30
        while True:
            try:
                status, _, _ = get(self.url + "api/status.json", timeout=2)
                if status == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"serve did not start: {self.log.read_text()}")
            time.sleep(0.1)

    def json(self, path: str) -> Any:
        status, body, ctype = get(self.url + path)
        assert status == 200 and ctype.startswith("application/json"), (status, body[:200])
        return json.loads(body)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


@pytest.fixture
def server(ran_target: Path, tmp_path: Path) -> Iterator[Server]:
    """A server on the shared target (it only reads)."""
    srv = Server(ran_target, tmp_path)
    try:
        yield srv
    finally:
        srv.stop()


def test_json_twins(server: Server) -> None:
    status = server.json("api/status.json")
    assert [r["id"] for r in status["experiments"]] == [f"e000{i}" for i in range(1, 7)]
    assert status["lock"]["running"] is False
    assert server.json("index.json")["version"] == status["version"]
    exp = server.json("experiments/e0005.json")
    assert exp["id"] == "e0005" and exp["state"] == "kept" and "+BONUS = 1.5" in exp["patch"]
    assert len(server.json("api/experiments.json")) == 6
    page = server.json("api/experiments.json?limit=4&offset=1")  # newest first
    assert [r["id"] for r in page] == ["e0005", "e0004", "e0003", "e0002"]
    assert [r["id"] for r in server.json("api/experiments.json?offset=4")] == ["e0002", "e0001"]
    code, body, _ = get(server.url + "api/experiments.json?limit=-1")
    assert code == 400 and b"whole numbers" in body
    events = server.json("api/events.json?since=0")
    assert events and all("message" in e for e in events)
    code, body, ctype = get(server.url + "experiments/e0999.json")
    assert code == 404 and json.loads(body)["error"].startswith("not found")
    code, body, ctype = get(server.url + "experiments/e0999")
    assert code == 404 and ctype.startswith("text/html")
    code, body, _ = get(server.url + "experiments/e0003")
    assert code == 200 and b'"page": "experiment"' in body
    code, body, _ = get(server.url + "static/plotly.min.js")
    assert code == 200 and len(body) > 1_000_000
    code, body, _ = get(server.url + "report.html")
    assert code == 200 and b"assay report" in body
    code, _, _ = get(server.url + "static/../../etc/passwd")
    assert code == 404
    log = server.log.read_text()
    assert f"http://127.0.0.1:{server.port}/" in log


def _rows(page: Any) -> list[str]:
    return list(page.locator("#experiments-table tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.id)"))


@pytest.fixture
def live_server(fresh_target: Path, tmp_path: Path) -> Iterator[Server]:
    srv = Server(fresh_target, tmp_path)
    try:
        yield srv
    finally:
        srv.stop()


def test_live_page_shows_a_new_experiment_without_reload(
        browser: Any, live_server: Server, fresh_target: Path, screenshots: Path) -> None:
    server = live_server
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    navigations: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("framenavigated", lambda f: navigations.append(f.url) if f == page.main_frame
            else None)
    worker: threading.Thread | None = None
    failure: list[BaseException] = []
    try:
        page.goto(server.url, timeout=30_000)
        page.wait_for_selector("#progress-chart[data-rendered='1']", timeout=30_000)
        page.wait_for_selector("#live.on", timeout=15_000)  # the first poll came back
        assert _rows(page) == [f"e000{i}" for i in range(1, 7)]
        assert page.locator("#progress-chart").get_attribute("data-points") == "6"
        page.evaluate("window.__notReloaded = true")
        page.screenshot(path=str(screenshots / "serve-live-overview-before-new-experiment.png"),
                        full_page=True)

        def one_more() -> None:
            try:
                run_plan(fresh_target, [{"params": {"SIZE": 4}, "hypothesis": "SIZE 4, live",
                                         "proposer": "sweep"}])
            except BaseException as exc:  # reported by the test thread
                failure.append(exc)

        worker = threading.Thread(target=one_more, daemon=True)
        worker.start()
        page.wait_for_selector("#experiments-table tr[data-id='e0007']", timeout=60_000)
        page.wait_for_selector("#experiments-table tr[data-id='e0007'][data-state='kept']",
                               timeout=60_000)
        worker.join(timeout=60)
        assert not worker.is_alive() and not failure, failure
        page.wait_for_function(
            "document.getElementById('progress-chart').dataset.points === '7'", timeout=15_000)
        assert page.evaluate("window.__notReloaded") is True
        assert len(navigations) == 1, navigations  # the first load only
        assert int(page.evaluate("document.body.dataset.updates")) >= 1
        assert _rows(page)[-1] == "e0007"
        page.screenshot(path=str(screenshots / "serve-live-overview-after-e0007-appeared.png"),
                        full_page=True)

        # The experiment's own live page, and the link to it.
        page.click("#experiments-table a:text('e0007')")
        page.wait_for_selector("#experiment h2", timeout=15_000)
        assert page.url.endswith("/experiments/e0007")
        text = page.locator("#experiment").inner_text()
        assert "SIZE=4" in text and "keep" in text
        assert page.locator("#experiment table.runs tbody tr").count() == 8
        page.screenshot(path=str(screenshots / "serve-live-experiment-e0007.png"),
                        full_page=True)
        assert errors == [], errors
    finally:
        if worker is not None:
            worker.join(timeout=60)
        context.close()


def test_serve_before_any_run(bare_target: Path, tmp_path: Path) -> None:
    srv = Server(bare_target, tmp_path)
    try:
        status = srv.json("api/status.json")
        assert status["journal"] is False and status["experiments"] == []
        code, body, ctype = get(srv.url)
        assert code == 200 and ctype.startswith("text/html") and b"assay-data" in body
        code, _, _ = get(srv.url + "experiments/e0001.json")
        assert code == 404
        assert not (bare_target / ".assay" / "journal.sqlite").exists()  # read-only
    finally:
        srv.stop()


def test_status_since_sends_only_what_changed(fresh_target: Path) -> None:
    from assay import api
    from assay.faces import serve
    from assay.model import Candidate, ExperimentState

    target = api.load(fresh_target)
    server = serve.make_server(target, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/api/status.json"
    try:
        _, body, _ = get(url)
        full = json.loads(body)
        assert len(full["experiments"]) == 6
        _, body, _ = get(f"{url}?since={full['version']}")
        same = json.loads(body)
        assert "rows" in same, same.get("error")
        assert same["rows"] == [] and same["version"] == full["version"]

        journal = api.open_journal(target)
        try:
            inc = journal.incumbent()
            assert inc is not None
            exp = journal.add_experiment(Candidate(inc.commit, "", {"SIZE": 3}, "SIZE 3",
                                                   "sweep"))
            journal.set_state(exp.id, ExperimentState.INVALID, note="scripted")
        finally:
            journal.close()
        _, body, _ = get(f"{url}?since={full['version']}")
        delta = json.loads(body)
        assert "rows" in delta, delta.get("error")
        assert [r["id"] for r in delta["rows"]] == ["e0007"]
        assert delta["rows"][0]["state"] == "invalid" and delta["total"] == 7
        assert delta["counts"]["invalid"] == full["counts"].get("invalid", 0) + 1
        assert [p["id"] for p in delta["points"]] == ["e0007"]
        assert delta["points"][0]["y"] == pytest.approx(full["best"])  # at the incumbent
        assert len(body) < len(json.dumps(full)) / 2
        _, body, _ = get(url)  # a full load afterwards holds the change too
        assert [r["id"] for r in json.loads(body)["experiments"]][-1] == "e0007"
    finally:
        server.shutdown()
        server.server_close()


def test_folded_updates_equal_a_fresh_overview(fresh_target: Path) -> None:
    """The dashboard's cached overview, updated by folding in only the changed rows (new
    experiments, a discarded one now kept, a cost), says what a full reload says."""
    from assay import api
    from assay.faces import serve
    from assay.faces.data import status_data
    from assay.model import Candidate, Decision, ExperimentState, Verdict
    from assay.usage import Usage

    target = api.load(fresh_target)
    pages = serve.Pages(target)
    version = pages.status()["version"]
    journal = api.open_journal(target)
    try:
        inc = journal.incumbent()
        assert inc is not None
        first = journal.add_experiment(Candidate(inc.commit, "", {"SIZE": 9}, "k", "sweep"))
        version = pages.status_since(version)["version"]  # folded in while it is running
        keep = Decision(Verdict.KEEP, "scripted keep", 0.5, 0.4, 0.6, 4, 8, 0.01,
                        details={"candidate_value": 123.0, "incumbent_value": 82.0})
        journal.set_decision(first.id, keep)  # the folded row changes state: counts move
        journal.set_state(first.id, ExperimentState.KEPT)
        for k in range(3):
            exp = journal.add_experiment(Candidate(inc.commit, "", {"SIZE": 10 + k}, f"k{k}",
                                                   "sweep", meta={"cost_usd": 0.25}))
            journal.set_state(exp.id, ExperimentState.INVALID, note="scripted")
        journal.add_model_call(Usage("gpt-4o", 1000, 100, cost_usd=0.5, priced_by="table"),
                               "propose", "s1")
        delta = pages.status_since(version)
        assert [r["id"] for r in delta["rows"]] == ["e0007", "e0008", "e0009", "e0010"]
        fresh = status_data(target, journal)
    finally:
        journal.close()
    folded = pages.status()
    assert [r["id"] for r in folded["experiments"]] == [r["id"] for r in fresh["experiments"]]
    assert folded["experiments"] == fresh["experiments"]
    assert folded["counts"] == fresh["counts"] and delta["counts"] == fresh["counts"]
    assert folded["best"] == fresh["best"] == delta["best"] == 123.0
    def flat(cost: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in cost.items() if k != "resources"} | {
            f"{r['key']}:{k}": v for r in cost["resources"] for k, v in r.items()
            if isinstance(v, float)}

    assert flat(folded["cost"]) == pytest.approx(flat(fresh["cost"]))
    # the card's tokens and dollars are the journal's model calls, the call that gave no
    # experiment included; a candidate's own meta (the sweeps' cost_usd above) adds nothing
    assert fresh["cost"]["cost_usd"] == pytest.approx(fresh["spend"]["usd"])
    assert fresh["cost"]["cost_usd"] == pytest.approx(0.012 + 0.009 + 0.03 + 0.5)
    assert fresh["cost"]["tokens"] == fresh["spend"]["tokens"] == 1500 + 1150 + 2500 + 1100
    assert fresh["counts"]["kept"] == folded["cost"]["kept"]
    assert delta["total"] == len(fresh["experiments"])
    # the spend on model calls is read from the journal's sums on every update
    assert folded["spend"] == fresh["spend"] == delta["spend"]
    assert fresh["spend"]["calls"] == 4  # the fixture's three, and the one above


def test_a_model_call_alone_reaches_the_dashboard_and_the_report_cache(
        fresh_target: Path) -> None:
    """A call that gives no experiment (a NO_MORE_IDEAS reply) writes no experiment and no
    event; the dashboard's update and the cached overview still carry its cost."""
    from assay import api
    from assay.faces import serve
    from assay.usage import Usage

    target = api.load(fresh_target)
    pages = serve.Pages(target)
    before = pages.status()
    journal = api.open_journal(target)
    try:
        journal.add_model_call(Usage("gpt-4o", 1000, 100, cost_usd=0.5, priced_by="table"),
                               "propose", "s1")
    finally:
        journal.close()
    delta = pages.status_since(before["version"])
    assert delta["version"] != before["version"] and delta["rows"] == []
    assert delta["spend"]["calls"] == before["spend"]["calls"] + 1
    assert delta["cost"]["cost_usd"] == pytest.approx(before["cost"]["cost_usd"] + 0.5)
    again = pages.status()
    assert again["spend"] == delta["spend"]
    assert again["cost"]["cost_usd"] == pytest.approx(delta["cost"]["cost_usd"])
