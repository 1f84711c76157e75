"""The quickstart with a CPU hog started halfway: what δ and quarantine did, and whether a
real keep still happens once the hog has stopped.

A fresh copy of ``examples/quickstart`` (its sweep over the kernel's knobs, two slots on
two cores) runs with ``assay run``. When ``--start-after`` experiments have finished, two
CPU-bound processes (``while True: pass``) start beside it and run for ``--hog-s`` seconds,
so both slots' benchmarks share their cores with a hog. From the journal, per phase (before
the hog, during it, after it): the decisions made, the δ in force (median and highest),
the pair noise of the blocks measured, and the keeps; then every δ change and quarantine
the run reported, with its reason.

Usage: python benchmarks/hog_midrun.py [--budget 30] [--start-after 8] [--hog-s 60]
Prints a table, the run's noise events, then one summary line: PASS when decisions were
made while the hog ran and a change was kept after it stopped.

A steady hog that slows both runs of a pair alike barely moves the pair noise: ABBA pairs
cancel it (on a 2-core machine with both slots busy the quickstart's pair noise is already
15-25% before any hog). What the hog changes is the run's speed and its timing; the table
shows whether δ and the keeps follow the noise or the load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples" / "quickstart"))

from demo import prepare  # noqa: E402

from assay import api  # noqa: E402
from assay.config.spec import Target  # noqa: E402
from assay.model import ExperimentState  # noqa: E402

HOG = "while True:\n    pass\n"
FINISHED = (ExperimentState.KEPT, ExperimentState.DISCARDED, ExperimentState.INVALID,
            ExperimentState.CRASHED)


def finished(target: Target) -> int:
    """Experiments the run has finished so far (0 before its journal exists)."""
    if not api.journal_path(target).exists():
        return 0
    journal = api.open_journal(target, readonly=True)
    try:
        return len(journal.experiments(list(FINISHED), patches=False))
    finally:
        journal.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=30, help="experiments (default 30)")
    ap.add_argument("--start-after", type=int, default=8,
                    help="finished experiments before the hog starts (default 8)")
    ap.add_argument("--hog-s", type=float, default=60.0, help="the hog's seconds (default 60)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="assay-hog-") as tmp:
        root = prepare(Path(tmp) / "quickstart")
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        log = Path(tmp) / "run.log"
        t0 = time.time()
        with open(log, "w") as out:
            run = subprocess.Popen([sys.executable, "-m", "assay", "run", "-C", str(root),
                                    "--budget", str(args.budget)], stdout=out,
                                   stderr=subprocess.STDOUT, env=env)
            hogs: list[subprocess.Popen[bytes]] = []
            on = off = None
            target = api.load(root)
            try:
                while run.poll() is None:
                    time.sleep(0.5)
                    if on is None and finished(target) >= args.start_after:
                        hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2)]
                        on = time.time()
                        print(f"hog on at {on - t0:.0f} s, after {args.start_after} "
                              "experiments", flush=True)
                    if on is not None and off is None and time.time() - on >= args.hog_s:
                        for h in hogs:
                            h.kill()
                            h.wait()
                        off = time.time()
                        print(f"hog off at {off - t0:.0f} s", flush=True)
            finally:
                for h in hogs:
                    if h.poll() is None:
                        h.kill()
                        h.wait()
                if run.poll() is None:
                    run.kill()
                    run.wait()
        if off is None:
            off = time.time()
        print(f"run ended at {time.time() - t0:.0f} s (exit {run.returncode}); its output:")
        print("".join("  " + line for line in log.read_text().splitlines(True)[-8:]))
        if on is None:
            print(f"the run finished before {args.start_after} experiments were done: FAIL")
            return 1
        return report(root, on, off)


def _median(v: list[float]) -> str:
    return f"{statistics.median(v):.2%}" if v else "-"


def report(root: Path, on: float, off: float) -> int:
    target = api.load(root)
    journal = api.open_journal(target, readonly=True)
    try:
        deltas = journal.delta_history()
        exps = journal.experiments(list(FINISHED), patches=False)
        blocks = [(b.finished_at, b.noise) for b in journal.blocks()
                  if b.noise is not None and b.finished_at is not None]
        events = [e for e in journal.events() if e.kind in ("noise", "quarantine", "calibrated")]
    finally:
        journal.close()

    def phase(t: float) -> str:
        return "before" if t < on else "during" if t < off else "after"

    rows = []
    for name in ("before", "during", "after"):
        ds = [d for t, d in deltas if phase(t) == name]
        ns = [noise for t, noise in blocks if phase(t) == name]
        keeps = [e for e in exps if e.state is ExperimentState.KEPT
                 and phase(e.updated_at) == name]
        rows.append((name, ds, ns, keeps))
    print(f"{'phase':8} {'decisions':>9} {'δ median':>9} {'δ max':>8} {'blocks':>6} "
          f"{'pair noise':>10} {'keeps':>5}")
    print("-" * 62)
    for name, ds, ns, keeps in rows:
        top = f"{max(ds):.2%}" if ds else "-"
        print(f"{name:8} {len(ds):9d} {_median(ds):>9} {top:>8} {len(ns):6d} "
              f"{_median(ns):>10} {len(keeps):5d}")
    print("\nwhat the run said about noise:")
    for e in events:
        print(f"  [{phase(e.ts)}] {e.kind}: {e.message}")

    before, during, after = rows
    fails = []
    if not during[1]:
        fails.append("no decision was made while the hog ran")
    if not after[3]:
        fails.append("nothing was kept after the hog stopped")
    verdict = "PASS" if not fails else "FAIL"
    said = "; ".join(fails) if fails else (
        f"pair noise {_median(before[2])} before the hog, {_median(during[2])} under it, "
        f"{_median(after[2])} after; δ {_median(before[1])} -> {_median(during[1])} -> "
        f"{_median(after[1])} (medians); {len(after[3])} keep(s) after the hog")
    print(f"\nSUMMARY: {said}: {verdict}")
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())
