"""`assay report`: a self-contained HTML file, checked in a real headless Chromium."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from assay import api
from assay.faces import data as data_mod
from assay.faces import report

EXPECTED = ["e0001", "e0002", "e0003", "e0004", "e0005", "e0006"]


@pytest.fixture(scope="module")
def report_file(ran_target: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    proc = subprocess.run([sys.executable, "-m", "assay", "report", "-C", str(ran_target),
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout
    return out


def test_report_is_self_contained(report_file: Path) -> None:
    text = report_file.read_text()
    # No external scripts, styles or fonts: everything is inline.
    assert not re.search(r"<script[^>]+src=", text)
    assert not re.search(r"<link[^>]+href=", text)
    assert "Plotly" in text and len(text) > 1_000_000  # plotly.js inlined
    # Journal text is embedded as JSON, never as markup.
    assert "<b>prints</b>" not in text


def test_report_default_path(ran_target: Path, tmp_path: Path) -> None:
    root = tmp_path / "copy"
    import shutil

    shutil.copytree(ran_target, root)
    path = report.write(api.load(root))
    assert path == root / ".assay" / "report.html" and path.stat().st_size > 1_000_000


def _open(browser: Any, url: str) -> tuple[Any, Any, list[str], list[str]]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(url, timeout=30_000)
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    page.wait_for_selector("#progress-chart[data-rendered='1']", timeout=30_000)
    return context, page, errors, requests


def test_report_renders_in_chromium(browser: Any, report_file: Path, ran_target: Path,
                                    screenshots: Path) -> None:
    from playwright.sync_api import expect

    context, page, errors, requests = _open(browser, report_file.as_uri())
    try:
        # The chart: plotly drew an SVG with a marker per experiment and the step line.
        assert page.locator("#progress-chart .main-svg").count() >= 1
        assert page.locator("#progress-chart").get_attribute("data-points") == "6"
        n_markers = page.evaluate(
            "document.querySelectorAll('#progress-chart .scatterlayer .points path').length")
        assert n_markers == 6
        legend = page.locator("#progress-chart .legendtext").evaluate_all(
            "nodes => nodes.map(n => n.textContent)")
        assert {"kept", "discarded", "crashed", "invalid", "running best (kept)"} <= set(legend)
        assert any("noise" in t for t in legend)
        # The table lists every experiment.
        ids = page.locator("#experiments-table tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.id)")
        assert ids == EXPECTED
        # Win rates and cost are drawn.
        assert page.locator("#rates tr[data-name='llm']").inner_text().strip().endswith("67%")
        assert "$0.0170" in page.locator("#costs").inner_text()
        # Escaped, not interpreted.
        assert "SIZE 7 <b>prints</b> no metric" in page.locator(
            "#experiments-table tr[data-id='e0004']").inner_text()
        page.screenshot(path=str(screenshots / "report-overview.png"), full_page=True)

        # Sorting by clicking headers (plain JS).
        effects = {r["id"]: r["decision"]["effect"] for r in api.log(ran_target)
                   if r["decision"] and r["decision"]["effect"] is not None}
        rows = "rows => rows.map(r => r.dataset.id)"
        page.click("#experiments-table th[data-key='effect']")
        by_effect = page.locator("#experiments-table tbody tr").evaluate_all(rows)
        assert by_effect[:4] == sorted(effects, key=lambda i: effects[i])
        assert by_effect[0] == "e0002"
        assert set(by_effect[4:]) == {"e0003", "e0004"}  # no effect: last
        page.click("#experiments-table th[data-key='effect']")
        desc = page.locator("#experiments-table tbody tr").evaluate_all(rows)
        assert desc[:4] == sorted(effects, key=lambda i: -effects[i])
        page.click("#experiments-table th[data-key='state']")
        states = page.locator("#experiments-table tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.state)")
        assert states == sorted(states)
        page.locator("#experiments-table").screenshot(
            path=str(screenshots / "report-table-sorted-by-state.png"))

        # An experiment's details: diff, decision with its interval, runs, logs.
        page.click("#experiments-table a:text('e0005')")
        detail = page.locator("details#e0005")
        assert detail.get_attribute("open") is not None
        assert "+BONUS = 1.5" in detail.locator("pre.diff .add").inner_text()
        assert "keep" in detail.locator("table.decisions").inner_text()
        assert detail.locator("svg.bar").count() == 1
        # The interval is drawn against 0 and δ, each threshold with its own label.
        labels = detail.locator("svg.bar text").evaluate_all("ns => ns.map(n => n.textContent)")
        last = api.show("e0005", ran_target)["decisions"][-1]
        assert "0" in labels and f"δ {last['delta']:+.2%}" in labels
        assert f"{last['lo']:+.2%}" in labels and f"{last['hi']:+.2%}" in labels
        assert detail.locator("table.runs tbody tr").count() == 8
        # each block with its build seconds and checks runs, as `assay show` gives them
        shown = api.show("e0005", ran_target)["blocks"]
        assert detail.locator("table.blocks tbody tr").count() == len(shown)
        first = detail.locator("table.blocks tbody tr").first.inner_text()
        head = detail.locator("table.blocks thead").inner_text()
        assert shown[0]["id"] in first and "build" in head and "checks" in head
        detail.locator("details.log").first.locator("summary").click()
        assert "METRIC speed=" in detail.locator("details.log pre").first.inner_text()
        detail.screenshot(path=str(screenshots / "report-experiment-e0005-kept-patch.png"))

        crashed = page.locator("details#e0003")
        crashed.locator("summary").first.click()
        logs = crashed.locator("details.log")
        # a detail opened before the page unpacked all of them is drawn when its data is
        # unpacked (asynchronously): wait for its logs, not for a fixed time
        logs.first.wait_for(state="attached", timeout=30_000)
        for i in range(logs.count()):
            logs.nth(i).locator("summary").click()
        expect(crashed).to_contain_text("boom: SIZE 13 is unlucky", timeout=30_000)
        crashed.screenshot(path=str(screenshots / "report-experiment-e0003-crashed-logs.png"))

        assert errors == []
        assert all(u.startswith(("file:", "data:", "about:", "blob:")) for u in requests), \
            requests
    finally:
        context.close()


def test_empty_report_renders(browser: Any, tmp_path: Path, screenshots: Path) -> None:
    from .conftest import make_target

    root = make_target(tmp_path / "empty")
    path = report.write(api.load(root), tmp_path / "empty.html")
    context, page, errors, _ = _open(browser, path.as_uri())
    try:
        assert page.locator("#experiments-table tbody tr").count() == 0
        assert errors == []
        page.screenshot(path=str(screenshots / "report-empty-journal.png"))
    finally:
        context.close()


FIGURE = """id => { const d = document.getElementById(id);
  return JSON.stringify({traces: d.data.map(t => ({name: t.name, x: t.x, y: t.y,
                                                   ids: t.customdata || null,
                                                   text: t.text || null})),
                         ticks: (d._fullLayout.xaxis._vals || []).map(v => v.x),
                         dtick: d._fullLayout.xaxis.dtick}); }"""


def test_charts_agree_with_the_journal(browser: Any, report_file: Path, ran_target: Path,
                                       screenshots: Path) -> None:
    import json

    target = api.load(ran_target)
    journal = api.open_journal(target, readonly=True)
    try:
        exps = journal.experiments()
        noise = data_mod.noise_data(target, journal)
        decisions = {e.id: journal.decisions(e.id) for e in exps}
        said = [ev.message for ev in journal.events_of_kind("noise") if ": δ " in ev.message]
        cal = journal.get_meta("calibration") or {}
    finally:
        journal.close()
    # The running best from the journal: the baseline, then each kept candidate's value.
    best_at: dict[str, float] = {}
    best = next(float(e.decision.details["incumbent_value"]) for e in exps
                if e.decision and "incumbent_value" in e.decision.details)
    for e in exps:
        best_at[e.id] = best
        if e.state.value == "kept":
            assert e.decision is not None
            best = float(e.decision.details["candidate_value"])

    context, page, errors, _ = _open(browser, report_file.as_uri())
    try:
        page.wait_for_selector("#noise-chart[data-rendered='1']", timeout=30_000)
        fig = json.loads(page.evaluate(FIGURE, "progress-chart"))
        points = {}
        for t in fig["traces"]:
            for x, y, i in zip(t["x"], t["y"], t["ids"] or [None] * len(t["x"]), strict=True):
                if i is not None:
                    points[i] = (t["name"], x, y)
        assert sorted(points) == EXPECTED
        by_id = {e.id: e for e in exps}
        for exp_id, (name, x, y) in points.items():
            e = by_id[exp_id]
            assert x == e.seq
            if e.state.value in ("invalid", "crashed"):  # at the incumbent's value
                assert name == e.state.value and y == pytest.approx(best_at[exp_id])
            elif e.state.value == "discarded":
                assert e.decision is not None and e.decision.effect is not None
                assert y == pytest.approx(best_at[exp_id] * (1 + e.decision.effect))
                # Never on the better side of the running best without its own marker.
                assert y <= best_at[exp_id] or name.startswith("discarded: gain within")
        assert fig["ticks"] and all(float(t).is_integer() for t in fig["ticks"])
        assert float(fig["dtick"]).is_integer()

        nfig = json.loads(page.evaluate(FIGURE, "noise-chart"))
        slots = [t for t in nfig["traces"] if str(t["name"]).startswith("slot ")]
        assert [t["y"] for t in slots] == [pytest.approx(s["noise"]) for s in noise["slots"]]
        assert len(slots) == len(noise["slots"]) >= 1
        delta = next(t for t in nfig["traces"] if str(t["name"]).startswith("δ"))
        assert delta["x"] == list(range(1, noise["blocks"] + 1))  # δ of each block
        used = {d.delta for e in exps for d in decisions[e.id]} | {noise["delta"]}
        assert all(any(y == pytest.approx(u) for u in used) for y in delta["y"])
        # every change of δ is a marker: the one at calibration (the configured band raised
        # to what the measured noise lets the budget resolve), then each one said after a
        # block, at that block, with its old and new value and its reason
        # the calibration record names the run's noise regime, and its message says it
        assert cal["regime"]["name"] in ("quiet", "a minority of wild pairs",
                                         "disturbed throughout")
        assert f"noise regime {cal['regime']['name']}" in cal["message"]
        raised = f"{cal['start']['delta']:.2%}" != f"{target.decision.delta:.2%}"
        steps = noise["steps"]
        assert len(steps) == int(raised) + len(said) >= 1
        marks = next(t for t in nfig["traces"] if str(t["name"]).startswith("δ step"))
        assert marks["x"] == [s["x"] for s in steps]
        assert marks["y"] == [pytest.approx(s["new"]) for s in steps]
        for text, step, line in zip(marks["text"][int(raised):], steps[int(raised):], said,
                                    strict=True):
            assert f"{step['old']:.2%} → {step['new']:.2%}" in text
            assert f"δ {step['old']:.2%} -> {step['new']:.2%}" in line
            assert f"after block {step['block']} " in line and step["block"] in text
        if raised:
            assert marks["x"][0] == 0 and "pooled pair noise" in marks["text"][0]

        # Resources: this target's slot has a GPU, and LLM tokens were spent; nothing is "0".
        res = page.locator("#costs").inner_text()
        assert "GPU-h" in res and "tokens" in res and "0.0 s" not in res
        # One hypothesis text, not repeated with its parameters.
        row = page.locator("#experiments-table tr[data-id='e0001']").inner_text()
        assert row.count("SIZE=16") <= 1
        assert "kept commits on assay/main" in page.locator("#summary").inner_text()

        page.screenshot(path=str(screenshots / "report-overview.png"), full_page=True)
        page.locator("#noise-section").screenshot(path=str(screenshots / "report-noise.png"))
        for exp_id, name in (("e0001", "kept"), ("e0004", "invalid")):
            page.click(f"#experiments-table a:text('{exp_id}')")
            detail = page.locator(f"details#{exp_id}")
            assert detail.get_attribute("open") is not None
            detail.screenshot(path=str(screenshots / f"report-experiment-{exp_id}-{name}.png"))
        assert errors == []
    finally:
        context.close()


def test_report_table_pages_and_filters(browser: Any, report_file: Path) -> None:
    context, page, errors, _ = _open(browser, report_file.as_uri())
    try:
        page.fill("#filter", "kept")
        page.wait_for_function("document.body.dataset.filtered === 'kept'")
        ids = page.locator("#experiments-table tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.id)")
        assert ids == ["e0001", "e0005", "e0006"]
        assert "of 3 (filtered from 6)" in page.locator(".pager").inner_text()
        # Details exist for the page's rows only, and are drawn when opened.
        assert page.locator("#details details.exp").count() == 3
        assert page.locator("details#e0005 table.runs").count() == 0
        page.locator("details#e0005 summary").click()
        page.wait_for_selector("details#e0005[open] table.runs tbody tr", timeout=30_000)
        assert page.locator("details#e0005 table.runs tbody tr").count() == 8
        assert errors == []
    finally:
        context.close()


def test_details_are_packed_in_chunks_and_unpacked_when_opened(
        browser: Any, ran_target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A report keeps its experiments' details in packed chunks (here 2 experiments each),
    and the page unpacks only the chunk of the experiment that is opened."""
    from assay.faces import page as page_mod

    monkeypatch.setattr(page_mod, "DETAIL_CHUNK", 2)
    out = report.write(api.load(ran_target), tmp_path / "chunked.html")
    text = out.read_text()
    assert [f'id="assay-details-{k}"' in text for k in range(4)] == [True, True, True, False]
    context, page, errors, _ = _open(browser, out.as_uri())
    try:
        page.evaluate("""() => {  // count the chunks the page unpacks from now on
            window.unpacked = 0;
            const text = Object.getOwnPropertyDescriptor(Node.prototype, 'textContent');
            Object.defineProperty(HTMLScriptElement.prototype, 'textContent', {get() {
                if (this.id.startsWith('assay-details-')) window.unpacked += 1;
                return text.get.call(this); }});
        }""")
        page.locator("details#e0005 summary").click()  # the third chunk (e0005, e0006)
        page.wait_for_selector("details#e0005[open] table.runs tbody tr", timeout=30_000)
        assert page.locator("details#e0005 table.runs tbody tr").count() == 8
        page.locator("details#e0006 summary").click()  # same chunk: nothing more unpacked
        page.wait_for_selector("details#e0006[open] table.runs tbody tr", timeout=30_000)
        assert page.evaluate("window.unpacked") == 1
        page.locator("details#e0001 summary").click()
        page.wait_for_selector("details#e0001[open] table.runs tbody tr", timeout=30_000)
        assert page.evaluate("window.unpacked") == 2 and errors == []
    finally:
        context.close()


def test_overlapping_chart_points_are_merged_and_isolated_ones_kept(
        browser: Any, ran_target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above 3,000 points of one kind the chart draws each 3 x 3 pixel cell once: a dense
    band of discarded points is merged, points alone in their cell are all drawn, and the
    legend says how many were drawn of how many."""
    real = data_mod.report_data

    def crowded(target: Any, journal: Any) -> dict[str, Any]:
        d = real(target, journal)
        def point(pid: str, seq: int, y: float) -> dict[str, Any]:
            return {"id": pid, "seq": seq, "state": "discarded", "y": y, "measured": True,
                    "hypothesis": "h", "effect": -0.01, "lo": -0.02, "hi": 0.0,
                    "within_noise": False, "value": None}

        # seq 1..5000, y in a band 0.0006 wide: many share a cell; then twelve points far
        # from the band and from each other
        pts = [point(f"x{i}", i + 1, 100.0 + (i % 7) * 0.0001) for i in range(5000)]
        pts += [point(f"o{k}", 400 * k + 1, 150.0 + 4 * k) for k in range(12)]
        d["progress"] = {"points": pts, "best": {"x": [0, 5000], "y": [100.0, 100.0]},
                         "band": None}
        return d

    monkeypatch.setattr(report, "report_data", crowded)
    out = report.write(api.load(ran_target), tmp_path / "crowded.html")
    context, page, errors, _ = _open(browser, out.as_uri())
    try:
        legend = page.locator("#progress-chart .legendtext").evaluate_all(
            "nodes => nodes.map(n => n.textContent)")
        [label] = [t for t in legend if t.startswith("discarded")]
        m = re.search(r"\((\d+) of 5012 drawn: overlapping points merged\)", label)
        assert m is not None, label
        drawn = int(m.group(1))
        # the band is one cell high and spans the width, 400 cells of 3 px; the twelve
        # isolated points keep a cell each
        assert 12 + 390 <= drawn <= 12 + 401, drawn
        ys = page.evaluate("""() => {
            const gd = document.getElementById('progress-chart');
            const t = gd.data.find(t => (t.name || '').startsWith('discarded'));
            return t.y.filter(y => y >= 150);
        }""")
        assert sorted(ys) == [150.0 + 4 * k for k in range(12)]
        assert errors == []
    finally:
        context.close()
