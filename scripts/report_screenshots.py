#!/usr/bin/env python3
"""Screenshots of `assay report` for a real run of the quickstart, into ``artifacts/``.

    .venv/bin/python scripts/report_screenshots.py               # a fresh quickstart run
    .venv/bin/python scripts/report_screenshots.py --root DIR    # the journal of DIR

Without ``--root`` it copies ``examples/quickstart`` into a temporary git repository, queues
one more patch that edits the protected ``bench.py`` (so one experiment is invalid), runs
``assay run --proposer queue --budget 3`` (the invalid patch and the two shipped ones), then
``assay run --proposer sweep --budget 3``: a few minutes on two free cores. It writes the
report and opens it in headless Chromium (Debian's ``chromium``; ``apt-get install
chromium``), checks that the progress chart agrees with the journal, and saves:

    report-overview.png   the cards, the progress chart and the noise chart
    report-kept.png       the first kept experiment, opened
    report-invalid.png    the first invalid experiment, opened
    report-noise.png      the noise chart: each slot's noise and δ per block, quarantines

Each PNG is checked to be under 300 KB. The last line is PASS or FAIL.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"
MAX_BYTES = 300_000
PROTECTED_PATCH = """\
# hypothesis: Halve the benchmark corpus so that every run finishes sooner.
diff --git a/bench.py b/bench.py
--- a/bench.py
+++ b/bench.py
@@ -29,3 +29,3 @@ import kernel
 SEED = 20240601
-DOCS = 10_000
+DOCS = 5_000
 VOCABULARY = 4_000
"""
FIGURE = """id => { const d = document.getElementById(id);
  return JSON.stringify(d.data.map(t => ({name: t.name, x: t.x, y: t.y,
                                          ids: t.customdata || null}))); }"""
PAGE_BOX = """([top, last]) => { const t = document.querySelector(top).getBoundingClientRect();
  const l = (document.querySelector(last) || document.querySelector(top)).getBoundingClientRect();
  return {x: t.left + scrollX, y: t.top + scrollY, width: t.width,
          height: l.bottom - t.top + 8}; }"""


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=assay", "-c", "user.email=assay@localhost",
                    "-c", "commit.gpgsign=false", *args], cwd=root, check=True,
                   capture_output=True)


def assay(root: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    print(f"$ assay {' '.join(args)}", flush=True)
    proc = subprocess.run([sys.executable, "-m", "assay", *args, "-C", str(root)], env=env)
    if proc.returncode != 0:
        raise SystemExit(f"assay {' '.join(args)} exited {proc.returncode}")


def quickstart_run(where: Path) -> Path:
    """A quickstart repository with kept, discarded and invalid experiments."""
    root = where / "quickstart"
    shutil.copytree(QUICKSTART, root, ignore=shutil.ignore_patterns(
        ".assay", "__pycache__", "demo.py"))
    (root / "patches" / "00-smaller-corpus.patch").write_text(PROTECTED_PATCH)
    (root / ".gitignore").write_text(".assay/\n__pycache__/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "quickstart with a patch that edits the benchmark")
    assay(root, "run", "--proposer", "queue", "--budget", "3")
    assay(root, "run", "--proposer", "sweep", "--budget", "3")
    return root


def check_chart(page: Any, exps: list[dict[str, Any]]) -> list[str]:
    """What the progress chart draws that the journal contradicts."""
    traces = json.loads(page.evaluate(FIGURE, "progress-chart"))
    best = next(t for t in traces if t["name"] == "running best (kept)")
    points = {i: (t["name"], y) for t in traces for i, y in zip(t["ids"] or [], t["y"],
                                                                 strict=False)}
    problems = []

    def best_at(seq: int) -> float:
        xs = [x for x in best["x"] if x <= seq - 1] or [best["x"][0]]
        return float(best["y"][best["x"].index(xs[-1])])

    for e in exps:
        name, y = points.get(e["id"], ("", None))
        if e["state"] == "invalid" and y != best_at(e["seq"]):
            problems.append(f"{e['id']} invalid drawn at {y}, not the incumbent's value")
        if (e["state"] == "discarded" and y is not None and y > best_at(e["seq"])
                and not name.startswith("discarded: gain within")):
            problems.append(f"{e['id']} discarded drawn above the running best, unmarked")
    return problems


def clip(page: Any, top: str, last: str, path: Path) -> None:
    """A screenshot from the top of ``top`` to the bottom of ``last`` (or of ``top``)."""
    box = page.evaluate(PAGE_BOX, [top, last])  # in page coordinates, whatever the scroll
    page.screenshot(path=str(path), full_page=True, clip=box)


def shoot(root: Path, out: Path) -> int:
    from playwright.sync_api import sync_playwright

    from assay import api
    from assay.faces import report

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise SystemExit("no chromium on PATH: apt-get install chromium")
    target = api.load(root)
    html = report.write(target, out / "report.html.tmp-page.html")
    exps = api.log(root, newest_first=False)
    kept = next(e["id"] for e in exps if e["state"] == "kept")
    invalid = next(e["id"] for e in exps if e["state"] == "invalid")
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(html.as_uri())
            page.wait_for_selector("body[data-ready='1']")
            page.wait_for_selector("#progress-chart[data-rendered='1']")
            page.wait_for_selector("#noise-chart[data-rendered='1']")
            problems = check_chart(page, exps)
            # The overview: the cards, both charts and the table (what follows is text).
            clip(page, "#app", "#experiments-table", out / "report-overview.png")
            page.locator("#noise-section").screenshot(path=str(out / "report-noise.png"))
            for exp_id, name in ((kept, "report-kept.png"), (invalid, "report-invalid.png")):
                page.click(f"#experiments-table a:text('{exp_id}')")
                page.locator(f"details#{exp_id} .exp-body").wait_for()
                # Its head, decision, diff and runs (the list of log files is cut off).
                clip(page, f"details#{exp_id}", f"details#{exp_id} table.runs", out / name)
        finally:
            browser.close()
    html.unlink()
    shots = ("report-overview.png", "report-kept.png", "report-invalid.png",
             "report-noise.png")
    print(f"{'screenshot':<22} {'bytes':>8}  result")
    for name in sorted(shots):
        size = (out / name).stat().st_size
        ok = size < MAX_BYTES
        problems += [] if ok else [f"{name} is {size} bytes (limit {MAX_BYTES})"]
        print(f"{name:<22} {size:>8}  {'ok' if ok else 'too large'}")
    for line in problems:
        print(f"problem: {line}")
    print(f"{len(shots)} screenshots of {root.name} (kept {kept}, invalid {invalid}) in {out}: "
          + ("PASS" if not problems else "FAIL"))
    return 0 if not problems else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, help="a target whose journal to show")
    parser.add_argument("--out", type=Path, default=REPO / "artifacts")
    args = parser.parse_args()
    if args.root is not None:
        return shoot(args.root.resolve(), args.out.resolve())
    with tempfile.TemporaryDirectory(prefix="assay-screens-") as tmp:
        return shoot(quickstart_run(Path(tmp)), args.out.resolve())


if __name__ == "__main__":
    sys.exit(main())
