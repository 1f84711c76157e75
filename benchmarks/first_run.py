"""Startup of a candidate's first run against its later runs, on examples/gpt.

A candidate's first measured run must not pay for what a later run finds ready: the
imports' bytecode, the compile caches. This runs an assay session over examples/gpt's
learning rates and schedule (``benchmarks/karpathy/schedule_session.toml``, the config of
the H200 session in ``gpt_h200.md``) with the CPU preset (``GPT_PRESET=tiny``, a few
seconds of training per run; every run imports torch), then reads the journal: every
run's wall time, split into first runs (an incumbent's first measured run, each
candidate's first run, built in a freshly materialized tree) and later runs.

Usage: python benchmarks/first_run.py [--budget N] [--seconds S]
Prints a table, then one summary line. Goal (the GPU issue's warm start): the median first
run within 20 % of the median later run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gpt"
CONFIG = ROOT / "benchmarks" / "karpathy" / "schedule_session.toml"


def session(folder: Path, budget: int, seconds: float) -> float:
    for name in ("train.py", "prepare.py", "program.md", "grid.py", "attn_bench.py",
                 "README.md"):
        shutil.copy(EXAMPLE / name, folder / name)
    shutil.copy(CONFIG, folder / "assay.toml")
    env = dict(os.environ, GPT_PRESET="tiny", GPT_TIME_BUDGET=f"{seconds:g}",
               GPT_CACHE_DIR=str(folder.parent / "gptcache"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as on a user's machine: bytecode is written
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"],
                ["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "base"]):
        subprocess.run(cmd, cwd=folder, check=True, env=env)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "assay", "run", "--budget", str(budget)],
                          cwd=folder, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the session failed ({proc.returncode}):\n{proc.stdout[-2000:]}"
                 f"\n{proc.stderr[-2000:]}")
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=4, help="experiments (default 4)")
    ap.add_argument("--seconds", type=float, default=3.0,
                    help="training seconds per run (default 3)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "gpt"
        folder.mkdir()
        wall = session(folder, args.budget, args.seconds)
        db = sqlite3.connect(folder / ".assay" / "journal.sqlite")
        rows = db.execute("SELECT experiment_id, role, wall_s FROM runs WHERE status = 'ok' "
                          "ORDER BY id").fetchall()
        db.close()
        size = sum(f.stat().st_size for f in (folder / ".assay" / "pycache").rglob("*")
                   if f.is_file())
    first: list[float] = []
    later: list[float] = []
    seen: set[tuple[str, str]] = set()
    print(f"{'experiment':<12}{'role':<6}{'run':>5}{'wall s':>9}  first?")
    for n, (exp, role, w) in enumerate(rows):
        # the incumbent's runs all come from one tree; a candidate's from its own
        key = ("incumbent", "A") if role == "A" or exp == "cal" else (exp, role)
        is_first = key not in seen
        seen.add(key)
        (first if is_first else later).append(float(w))
        print(f"{exp:<12}{role:<6}{n + 1:>5}{w:>9.2f}  {'first' if is_first else ''}")
    if not first or not later:
        print(f"SUMMARY: {len(first)} first and {len(later)} later runs: too few to compare "
              "(raise --budget): FAIL")
        return 1
    f, la = statistics.median(first), statistics.median(later)
    ok = f <= 1.2 * la
    print(f"\nsession {wall:.1f} s; bytecode folder {size / 1e6:.1f} MB")
    print(f"SUMMARY: median first run {f:.2f} s over {len(first)}, later {la:.2f} s over "
          f"{len(later)}: {f / la - 1:+.1%} (goal within +20%): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
