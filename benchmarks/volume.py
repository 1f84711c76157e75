"""assay on long campaigns: journals of 1k, 5k and 20k experiments.

Each journal is written through assay's own ``Journal`` API the way the loop writes it
(experiment, blocks, leases, runs with their log files, decisions, final state), 8.5 runs
per experiment on average, realistic patches and log files. Journals are cached between
runs under ``~/.cache/assay-volume/<n>`` (``--rebuild`` writes them again).

For each size it times:

- ``assay status`` and the first page of ``assay log`` (``--limit 50``), as commands;
- ``assay report``: time, size, and in headless Chromium the time until the page is
  interactive (the table drawn, the filter answers, a detail opens);
- the dashboard during a live run: while another thread writes experiments through the
  ``Journal`` API, the update request ``/api/status.json?since=<version>`` (median, max);
- the loop's overhead per experiment outside the benchmark (fast bench, 2 slots), on top of
  the journal and on top of an empty one.

Usage: python benchmarks/volume.py [--sizes 1000,5000,20000] [--rebuild] [--loop N]
[--rounds R]
Prints a table, then one summary line: PASS when the largest size meets status <= 0.5 s,
log first page <= 0.5 s, report <= 15 s and <= 30 MB and interactive <= 3 s, dashboard
update <= 100 ms, loop overhead <= 1.25x that on an empty journal.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from assay.journal.store import Journal
from assay.model import (
    BlockKind,
    BlockResult,
    Candidate,
    Decision,
    ExperimentState,
    Incumbent,
    Role,
    RunResult,
    RunStatus,
    Verdict,
)
from assay.records import CalibrationRecord

BUILT = "built-2"  # the builder's version: a journal cached by an older one is built again
CACHE = Path(os.environ.get("ASSAY_VOLUME_CACHE", Path.home() / ".cache" / "assay-volume"))
GIT_ENV = {"GIT_AUTHOR_NAME": "v", "GIT_AUTHOR_EMAIL": "v@v", "GIT_COMMITTER_NAME": "v",
           "GIT_COMMITTER_EMAIL": "v@v", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
CONFIG = """\
[metric]
name = "speed"
direction = "maximize"
unit = "it/s"

[commands]
bench = "{python} bench.py"

[scope]
editable = ["kernel.py"]
protected = ["bench.py"]

[[params]]
name = "X"
type = "int"
low = 1
high = 1000000
apply = "assign"
file = "kernel.py"
default = 1

[run]
slots = 2
budget = 20

[proposer.sweep]
sampler = "random"

[decision]
rule = "fixed"
pairs_per_block = 1
min_pairs = 1
max_pairs = 1
aa_blocks = 0
delta = 0.01
"""
BENCH = "import random\nprint('METRIC speed=%f' % (1000 + random.random()))\n"
LOG_LINE = "step {i:5d}  loss {loss:.4f}  tokens/s {tps:9.1f}  lr 3.0e-04  grad-norm 0.93\n"


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                   env={**os.environ, **GIT_ENV})


def make_repo(root: Path) -> None:
    """A tiny target whose first commit is the same everywhere (fixed dates and authors)."""
    root.mkdir(parents=True)
    (root / "kernel.py").write_text("X = 1\n" + "".join(f"def f{i}(x):\n    return x + {i}\n"
                                                     for i in range(40)))
    (root / "bench.py").write_text(BENCH)
    (root / "assay.toml").write_text(CONFIG.format(python=sys.executable))
    (root / ".gitignore").write_text(".assay/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")


def head(root: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                          text=True, check=True).stdout.strip()


def patch_for(i: int, rng: random.Random) -> str:
    lines = rng.randint(3, 30)
    body = "".join(f"-    return x + {k}\n+    return x + {k} * {i % 7 + 1}\n"
                   for k in range(lines))
    return ("diff --git a/kernel.py b/kernel.py\n--- a/kernel.py\n+++ b/kernel.py\n"
            f"@@ -2,{lines} +2,{lines} @@\n" + body)


def build(root: Path, n: int, seed: int = 0) -> None:
    """Write ``n`` experiments through the Journal API, as the loop does."""
    rng = random.Random(seed)
    base = head(root)
    journal = Journal.open(root / ".assay" / "journal.sqlite")
    logs = root / ".assay" / "logs"
    inc = Incumbent(base, {"X": 1})
    journal.set_incumbent(inc)
    journal.set_run_name("main")
    journal.set_base_commit(base)
    journal.set_calibration(CalibrationRecord(noise={"s0": 0.01, "s1": 0.012}, pooled=0.011,
                                              delta=0.01, message="volume"))
    for s in ("s0", "s1"):
        journal.set_slot(s, "localhost", [], 0.011)
    value = 1000.0
    t0 = time.time() - n * 30.0
    for i in range(1, n + 1):
        with journal.tx():  # the loop's calls, batched per experiment
            params = {"X": rng.randint(1, 10**6)} if i % 3 else {}
            cand = Candidate(base, "" if params else patch_for(i, rng), params,
                             f"H{i % 40}: try variant {i} of the counter loop"
                             + (" with X" if params else " (patch)"), rng.choice(
                                 ["sweep", "llm", "agent"]),
                             meta={"tokens_in": 1200, "tokens_out": 300, "cost_usd": 0.01}
                             if i % 5 == 0 else {})
            exp = journal.add_experiment(cand)
            journal.set_state(exp.id, ExperimentState.RUNNING)
            nblocks = 3 if i % 8 == 0 else 2  # 8.5 runs per experiment on average
            runs_all: list[RunResult] = []
            for b in range(nblocks):
                kind = BlockKind.COMPARE if b < 2 else BlockKind.CONFIRM
                bid = journal.add_block(exp.id, kind, "ABBA" if b < 2 else "AB", inc)
                slot = f"s{(i + b) % 2}"
                journal.lease_block(bid, slot, "volume", 60)
                runs = []
                order = "ABBA" if b < 2 else "AB"
                for k, role in enumerate(order, start=1):
                    d = logs / exp.id / bid
                    d.mkdir(parents=True, exist_ok=True)
                    out = d / f"r{k}-{role}.out"
                    v = value * (1 + rng.gauss(0, 0.01)) * (1.01 if role == "B" else 1.0)
                    out.write_text("".join(LOG_LINE.format(i=s, loss=3 - s / 100, tps=v)
                                           for s in range(12)) + f"METRIC speed={v:.3f}\n")
                    runs.append(RunResult(f"{bid}-r{k}", bid, exp.id, Role(role), k,
                                          RunStatus.OK, {"speed": v}, wall_s=1.0 + rng.random(),
                                          stdout_path=str(out), slot=slot))
                journal.record_block(BlockResult(bid, exp.id, slot, tuple(runs), True,
                                                 wall_s=sum(r.wall_s for r in runs) + 0.5))
                journal.set_block_noise(bid, 0.01 + 0.004 * rng.random())  # as the loop does
                runs_all += runs
                if b == 0:
                    journal.set_decision(exp.id, Decision(Verdict.CONTINUE, "1 of 2 pairs",
                                                          None, None, None, 2, 4, 0.01,
                                                          rule="fixed"))
            eff = rng.gauss(-0.01, 0.02)
            kept = eff - 0.01 > 0.01
            state = (ExperimentState.KEPT if kept else ExperimentState.INVALID if i % 50 == 0
                     else ExperimentState.DISCARDED)
            verdict = Verdict.KEEP if kept else Verdict.DISCARD
            a = [r.metrics["speed"] for r in runs_all if r.role is Role.INCUMBENT]
            b_ = [r.metrics["speed"] for r in runs_all if r.role is Role.CANDIDATE]
            journal.set_decision(exp.id, Decision(
                verdict, "volume", eff, eff - 0.01, eff + 0.01, len(runs_all) // 2,
                len(runs_all), 0.01, rule="fixed",
                details={"incumbent_value": statistics.median(a),
                         "candidate_value": statistics.median(b_),
                         "runs_total": len(runs_all)}))
            if kept:
                value *= 1 + eff
            journal.set_state(exp.id, state, note="volume", commit=base if kept else None)
            journal.conn.execute("UPDATE experiments SET created_at = ?, updated_at = ? "
                                 "WHERE id = ?", (t0 + 30 * i, t0 + 30 * i + 25, exp.id))
    journal.close()


def cached(n: int, rebuild: bool) -> Path:
    root = CACHE / str(n)
    done = root / ".assay" / BUILT
    if rebuild and root.exists():
        shutil.rmtree(root)
    if not done.exists():
        if root.exists():
            shutil.rmtree(root)
        make_repo(root)
        t = time.perf_counter()
        build(root, n)
        done.write_text(f"{time.perf_counter() - t:.1f}\n")
    Journal.open(root / ".assay" / "journal.sqlite").close()  # a cached one: migrate it
    return root


def cli(*args: str) -> float:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "assay", *args], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"assay {' '.join(args)} failed: {proc.stderr[-2000:]}")
    return time.perf_counter() - t


def chromium_interactive(report: Path) -> float | None:
    """Seconds until the report's table is drawn, its filter answers and a detail opens."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            t = time.perf_counter()
            page.goto(report.as_uri(), timeout=120_000)
            page.wait_for_selector("body[data-ready='1']", timeout=120_000)
            page.wait_for_selector("#experiments-table tbody tr", timeout=120_000)
            filt = page.locator("#filter")
            if filt.count():
                filt.fill("kept")
                page.wait_for_function("document.body.dataset.filtered === 'kept'",
                                       timeout=60_000)
            first = page.locator("#experiments-table tbody tr a").first
            exp_id = first.inner_text()
            first.click()
            page.wait_for_selector(f"details#{exp_id}[open] table.runs", timeout=60_000)
            return time.perf_counter() - t
        finally:
            browser.close()


def dashboard_update(root: Path, writes: int = 20) -> tuple[float, float, int]:
    """(median, max seconds, bytes of the last answer) of the dashboard's update request
    while another thread writes experiments into the journal."""
    from assay import api
    from assay.faces import serve

    work = Path(tempfile.mkdtemp(prefix="assay-volume-live-"))
    try:
        live = work / "repo"
        make_repo(live)
        (live / ".assay").mkdir()
        for name in ("journal.sqlite", "journal.sqlite-key"):  # the seal key goes with it
            shutil.copy2(root / ".assay" / name, live / ".assay" / name)
        target = api.load(live)
        server = serve.make_server(target, port=0)
        port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{port}/api/status.json"
        import json

        def get(u: str) -> tuple[float, bytes]:
            t = time.perf_counter()
            with urllib.request.urlopen(u, timeout=120) as r:
                body = r.read()
            return time.perf_counter() - t, body

        _, body = get(url)  # the page's first load
        version = json.loads(body)["version"]
        stop = threading.Event()

        def writer() -> None:
            j = Journal.open(live / ".assay" / "journal.sqlite")
            inc = j.incumbent()
            assert inc is not None
            k = 0
            while not stop.is_set() and k < writes:
                k += 1
                exp = j.add_experiment(Candidate(inc.commit, "", {"X": 10**7 + k}, f"live {k}",
                                                 "sweep"))
                bid = j.add_block(exp.id, BlockKind.COMPARE, "AB", inc)
                j.lease_block(bid, "s0", "live", 60)
                j.record_block(BlockResult(bid, exp.id, "s0", (
                    RunResult(f"{bid}-r1", bid, exp.id, Role.INCUMBENT, 1, RunStatus.OK,
                              {"speed": 1000.0}, wall_s=1.0, slot="s0"),
                    RunResult(f"{bid}-r2", bid, exp.id, Role.CANDIDATE, 2, RunStatus.OK,
                              {"speed": 990.0}, wall_s=1.0, slot="s0"))))
                j.set_decision(exp.id, Decision(Verdict.DISCARD, "live", -0.01, -0.02, 0.0,
                                                1, 2, 0.01))
                j.set_state(exp.id, ExperimentState.DISCARDED)
                time.sleep(0.05)
            j.close()

        w = threading.Thread(target=writer)
        w.start()
        times: list[float] = []
        size = 0
        while w.is_alive() or not times:
            dt, body = get(f"{url}?since={version}")
            version = json.loads(body)["version"]
            times.append(dt)
            size = len(body)
            time.sleep(0.1)
        stop.set()
        w.join()
        server.shutdown()
        server.server_close()
        return statistics.median(times), max(times), size
    finally:
        shutil.rmtree(work, ignore_errors=True)


def loop_overhead(root: Path | None, experiments: int) -> float:
    """Seconds per experiment the loop adds outside benchmark processes (2 slots)."""
    from assay import api

    work = Path(tempfile.mkdtemp(prefix="assay-volume-loop-"))
    try:
        live = work / "repo"
        make_repo(live)
        before = 0
        if root is not None:
            (live / ".assay").mkdir()
            for name in ("journal.sqlite", "journal.sqlite-key"):  # the key goes with it
                shutil.copy2(root / ".assay" / name, live / ".assay" / name)
            j = Journal.open(live / ".assay" / "journal.sqlite")
            before = j.count_experiments()
            j.set_incumbent(Incumbent(head(live), {"X": 1}))  # this copy's own commit
            j.close()
        # A session's budget counts its own experiments (the journal's are not spent).
        api.run(live, budget=2, proposer="sweep")  # warm: worktrees, imports
        decided: list[tuple[float, str]] = []

        def on_event(kind: str, message: str, exp: Any) -> None:
            if exp is not None and exp.state.is_finished() and kind != "queued":
                decided.append((time.perf_counter(), exp.id))

        api.run(live, budget=experiments, proposer="sweep", on_event=on_event)
        if len(decided) < 2:
            raise RuntimeError(f"the loop decided {len(decided)} experiment(s) of {experiments}"
                               f" on top of {before:,d}; nothing to time")
        # Between the first and the last decision of the session (its start-up left out):
        # wall time per experiment minus the benchmark time the two slots spent per one.
        ids = [i for _, i in decided[1:]]
        span = decided[-1][0] - decided[0][0]
        j = Journal.open(live / ".assay" / "journal.sqlite", readonly=True)
        marks = ",".join("?" * len(ids))
        inside = float(j.conn.execute(f"SELECT COALESCE(SUM(wall_s), 0) FROM runs WHERE "
                                      f"experiment_id IN ({marks})", ids).fetchone()[0])
        j.close()
        return (span - inside / 2) / max(len(ids), 1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measured(fn: Any, *args: Any) -> Any:
    """The measurement, or None (printed as "-", a FAIL) when it could not finish."""
    try:
        return fn(*args)
    except Exception as exc:  # a timeout in a loaded browser must not hide the rest
        print(f"measurement failed: {type(exc).__name__}: {str(exc).splitlines()[0]}",
              file=sys.stderr)
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="1000,5000,20000")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--loop", type=int, default=10, help="experiments per loop measurement")
    ap.add_argument("--no-loop", action="store_true")
    ap.add_argument("--rounds", type=int, default=3,
                    help="loop measurements per journal, alternating (the median is shown)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    cols: dict[int, dict[str, Any]] = {}
    for n in sizes:
        root = cached(n, args.rebuild)
        c: dict[str, Any] = {"build": float((root / ".assay" / BUILT).read_text())}
        c["status"] = min(cli("status", "-C", str(root)) for _ in range(3))
        c["log"] = min(cli("log", "-C", str(root), "--limit", "50") for _ in range(3))
        out = root / ".assay" / "report.html"
        c["report"] = cli("report", "-C", str(root), "--out", str(out))
        c["report_mb"] = out.stat().st_size / 1e6
        c["interactive"] = measured(chromium_interactive, out)
        dash = measured(dashboard_update, root)
        c["dash_median"], c["dash_max"], c["dash_bytes"] = dash or (None, None, None)
        cols[n] = c
    # The loop's overhead is a few milliseconds per experiment, so one measurement is mostly
    # the machine's noise: empty and full journals alternate, ``--rounds`` times, medians.
    empty = None
    if not args.no_loop:
        tries: dict[int | None, list[float]] = {None: [], **{n: [] for n in sizes}}
        for _ in range(args.rounds):
            for n in [None, *sizes]:
                v = measured(loop_overhead, None if n is None else cached(n, False), args.loop)
                if v is not None:
                    tries[n].append(v)
        empty = statistics.median(tries[None]) if tries[None] else None
        for n in sizes:
            cols[n]["loop"] = statistics.median(tries[n]) if tries[n] else None
    else:
        for n in sizes:
            cols[n]["loop"] = None

    def fmt(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    rows = [
        ("journal build (cached)", "build", ".1f", " s"),
        ("assay status", "status", ".2f", " s"),
        ("assay log --limit 50", "log", ".2f", " s"),
        ("assay report", "report", ".1f", " s"),
        ("report size", "report_mb", ".1f", " MB"),
        ("report interactive in Chromium", "interactive", ".2f", " s"),
        ("dashboard update (median)", "dash_median", ".3f", " s"),
        ("dashboard update (max)", "dash_max", ".3f", " s"),
        ("dashboard update answer", "dash_bytes", ",d", " B"),
        ("loop overhead per experiment", "loop", ".4f", " s"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'':<{width}}  " + "  ".join(f"{n:>12,d}" for n in sizes))
    for label, key, spec, suffix in rows:
        print(f"{label:<{width}}  " + "  ".join(
            f"{fmt(cols[n][key], spec) + suffix:>12}" for n in sizes))
    if empty is not None:
        print(f"{'loop overhead, empty journal':<{width}}  {empty:>10.4f} s")
    big = cols[max(sizes)]
    checks = {
        "status <= 0.5 s": big["status"] <= 0.5,
        "log first page <= 0.5 s": big["log"] <= 0.5,
        "report <= 15 s": big["report"] <= 15,
        "report <= 30 MB": big["report_mb"] <= 30,
        "interactive <= 3 s": big["interactive"] is not None and big["interactive"] <= 3,
        "dashboard update <= 100 ms": big["dash_max"] is not None and big["dash_max"] <= 0.1,
    }
    if empty is not None:
        checks["loop overhead <= 1.25x empty"] = (big["loop"] is not None
                                                  and big["loop"] <= 1.25 * empty)
    failed = [k for k, ok in checks.items() if not ok]
    verdict = "PASS" if not failed else "FAIL"
    print(f"volume at {max(sizes):,d} experiments: " + ", ".join(
        f"{k} {'ok' if ok else 'MISSED'}" for k, ok in checks.items()) + f": {verdict}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
