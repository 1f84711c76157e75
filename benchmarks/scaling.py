"""Parallel efficiency of the local and Ray executors on a fixed-cost benchmark.

The benchmark is a single-threaded CPU loop of a fixed amount of work (calibrated to about
``--work`` seconds on this machine), run in blocks of two runs (A then B). The same number
of blocks is measured on one slot and on two:

    efficiency = T1 / (2 × T2)

where T1 and T2 are the wall times from the first submission to the last result, with
at most one block and at most two blocks in flight. The local executor has two slots; the
Ray cluster has two local nodes of one CPU and one benchmark slot each (T1 keeps one node
busy, T2 both). Each executor is warmed up first (worktrees, node-local clone, Ray
workers); T1 and T2 are then measured alternately ``--repeat`` times, so a change in
background load hits both. The table shows each repetition, the summary the median.

Usage::

    python benchmarks/scaling.py                 # local and Ray, 8 blocks, 0.5 s runs
    python benchmarks/scaling.py --only local --blocks 12 --repeat 5
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from assay.config import spec as config
from assay.executors.base import Executor
from assay.model import Block, BlockKind, Candidate, Incumbent
from assay.repo.workspace import Workspace

BENCH = """\
import os
n = int(os.environ["ITERS"])
x = 0
for i in range(n):
    x += i * i
print(f"METRIC score={100 + (x % 7)}")
"""

CONFIG = """\
[metric]
name = "score"

[commands]
bench = "{python} bench.py"

[scope]
editable = ["notes.txt"]
protected = ["bench.py"]

[run]
slots = {slots}

[env]
set = {{ ITERS = "{iters}" }}

[executor.ray]
cache_dir = "{cache}"
"""

RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def calibrate(work_s: float) -> int:
    """Loop iterations that take ``work_s`` seconds in a fresh interpreter here."""
    probe = 2_000_000
    code = f"import time\nt=time.perf_counter()\nx=0\nfor i in range({probe}): x += i*i\n" \
           "print(time.perf_counter()-t)"
    best = min(float(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                    text=True, check=True).stdout) for _ in range(3))
    return int(probe * work_s / best)


def make_repo(base: Path, iters: int, slots: int) -> tuple[config.Target, Workspace]:
    root = base / f"repo{slots}"
    root.mkdir(parents=True)
    (root / "bench.py").write_text(BENCH)
    (root / "notes.txt").write_text("x\n")
    (root / "assay.toml").write_text(CONFIG.format(python=sys.executable, slots=slots,
                                                   iters=iters, cache=base / "cache"))
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "bench"]):
        subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)
    target = config.load(root)
    return target, Workspace(target, "main")


def blocks(ws: Workspace, tag: str, n: int) -> list[Block]:
    head = ws.head()
    return [Block(f"{tag}-{i}", f"e-{tag}", BlockKind.COMPARE, "AB", Incumbent(head),
                  Candidate(head), seq=i) for i in range(n)]


def _busy_s() -> float:
    """CPU seconds spent by every process on this machine so far (from /proc/stat)."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _ours_s(roots: list[int]) -> float:
    """CPU seconds used by this process, the given process trees and their reaped children."""
    import psutil

    pids = {os.getpid(), *roots}
    for pid in [*roots, os.getpid()]:
        with contextlib.suppress(psutil.Error):
            pids.update(p.pid for p in psutil.Process(pid).children(recursive=True))
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


OTHER_ROOTS: list[int] = []  # Ray node processes, whose CPU is ours too


def measure(ex: Executor, todo: list[Block], parallel: int) -> float:
    """Wall time to run every block with at most ``parallel`` slots busy at once.

    Also records in ``LAST_OTHER`` the share of the machine used by other processes
    meanwhile (other engineers' jobs), so contaminated repetitions can be told apart.
    """
    global LAST_OTHER
    pending = list(todo)
    done = running = 0
    busy0, ours0 = _busy_s(), _ours_s(OTHER_ROOTS)
    start = time.perf_counter()
    while done < len(todo):
        for _ in sorted(ex.free_slot_names())[: parallel - running]:
            if pending:
                ex.submit(pending.pop(0))
                running += 1
        for res in ex.wait(0.5):
            if res.error or len(res.runs) != 2 or any(r.status.value != "ok" for r in res.runs):
                raise SystemExit(f"block {res.block_id} failed: {res.error or res.runs}")
            done += 1
            running -= 1
    wall = time.perf_counter() - start
    others = (_busy_s() - busy0) - (_ours_s(OTHER_ROOTS) - ours0)
    LAST_OTHER = max(0.0, others / (wall * (os.cpu_count() or 1)))
    return wall


LAST_OTHER = 0.0


Row = tuple[float, float, float]  # T1, T2, the machine share others used meanwhile


def interleaved(ex: Executor, ws: Workspace, tag: str, n: int, repeat: int) -> list[Row]:
    """T1 and T2 measured alternately, so a change in background load hits both."""
    measure(ex, blocks(ws, f"{tag}-warm", 4), 2)  # worktrees, clones, workers on both slots
    out = []
    for r in range(repeat):
        t1 = measure(ex, blocks(ws, f"{tag}-r{r}-1", n), 1)
        o1 = LAST_OTHER
        t2 = measure(ex, blocks(ws, f"{tag}-r{r}-2", n), 2)
        out.append((t1, t2, max(o1, LAST_OTHER)))
    return out


def run_local(base: Path, iters: int, n: int, repeat: int) -> list[Row]:
    from assay.executors.local import LocalExecutor

    target, ws = make_repo(base / "local", iters, 2)
    ex = LocalExecutor(target, ws)
    try:
        return interleaved(ex, ws, "local", n, repeat)
    finally:
        ex.close()


def run_ray(base: Path, iters: int, n: int, repeat: int) -> list[Row]:
    """Two local Ray nodes of one CPU and one benchmark slot each; T1 uses one of them."""
    import ray

    from assay.executors.ray import RayConfig, RayExecutor
    from assay.executors.skypilot import LocalLauncher, NodeSpec, SkyConfig

    os.environ.update(RAY_ENV)
    launcher = LocalLauncher(SkyConfig(name="scale"), num_cpus=1, env=RAY_ENV)
    try:
        head = launcher.launch("scale-head", NodeSpec("head", 1))
        launcher.launch("scale-w1", NodeSpec("worker", 1, head.ray_address))
        OTHER_ROOTS[:] = [p.pid for p in launcher._procs.values()]
        target, ws = make_repo(base / "ray", iters, 2)
        cfg = RayConfig(address=head.driver_address, cache_dir=str(base / "cache"),
                        min_slots=2, connect_timeout_s=120)
        ex = RayExecutor(target, ws, cfg)
        try:
            return interleaved(ex, ws, "ray", n, repeat)
        finally:
            ex.close()
    finally:
        OTHER_ROOTS.clear()
        if ray.is_initialized():
            ray.shutdown()
        launcher.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=8, help="blocks per measurement (even)")
    ap.add_argument("--work", type=float, default=0.5, help="seconds of CPU work per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["local", "ray"], default=None)
    ap.add_argument("--quiet", type=float, default=0.05,
                    help="a repetition is quiet when other processes used at most this share")
    args = ap.parse_args()
    # `timeout` and friends send SIGTERM: unwind, so the Ray nodes started here are stopped
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    iters = calibrate(args.work)
    load = os.getloadavg()[0]
    print(f"{os.cpu_count()} CPUs, load average {load:.2f} at start; {iters} iterations "
          f"per run (~{args.work:g} s), {args.blocks} blocks of 2 runs per measurement\n")
    results: dict[str, list[Row]] = {}
    with tempfile.TemporaryDirectory(prefix="assay-scale-") as tmp:
        base = Path(tmp)
        if args.only in (None, "local"):
            results["local (1 vs 2 slots)"] = run_local(base, iters, args.blocks, args.repeat)
        if args.only in (None, "ray"):
            results["ray (1 vs 2 nodes)"] = run_ray(base, iters, args.blocks, args.repeat)
    print(f"{'executor':<22} {'rep':>3} {'T1 (s)':>8} {'T2 (s)':>8} {'efficiency':>11} "
          f"{'others':>7}")
    summary = []
    for name, rows in results.items():
        effs, quiet = [], []
        for i, (t1, t2, other) in enumerate(rows, 1):
            eff = t1 / (2 * t2)
            effs.append(eff)
            if other <= args.quiet:
                quiet.append(eff)
            print(f"{name:<22} {i:>3} {t1:>8.2f} {t2:>8.2f} {eff:>10.1%} {other:>7.0%}")
        med = statistics.median(effs)
        qmed = statistics.median(quiet) if quiet else float("nan")
        print(f"{name:<22} {'med':>3} {'':>8} {'':>8} {med:>10.1%}   (quiet reps: "
              f"{len(quiet)}, median {qmed:.1%})")
        summary.append(f"{name.split()[0]} {med:.1%} (quiet reps {qmed:.1%}, "
                       f"{len(quiet)}/{len(rows)})")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end; 'others' is the share of the "
          f"machine other processes used during a repetition (quiet: <= {args.quiet:.0%})")
    print("SUMMARY parallel efficiency, median of "
          f"{args.repeat}: " + "; ".join(summary))


if __name__ == "__main__":
    main()
