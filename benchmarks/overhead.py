"""assay's fixed cost per experiment, and parallel efficiency of the local executor.

1. On a generated repository of 1,000 files, times the pieces assay adds around every
   experiment: worktree reset + patch apply + parameter rewrite, protected-path hashing,
   and the journal writes of one experiment (experiment, block, lease, runs, decision, state).
2. Runs N experiments end to end with a trivial benchmark (a shell `echo`), and reports the
   wall time per experiment minus the time spent inside benchmark processes.
3. Runs the same N experiments with a fixed-cost CPU benchmark on 1 slot and on 2 slots:
   efficiency = T(1 slot) / (2 x T(2 slots)).

Usage: python benchmarks/overhead.py [--experiments N] [--work SECONDS]
Prints a table, then one summary line. Goal: <= 0.2 s per experiment, >= 95% efficiency.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from assay import api
from assay.config import spec as config
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
from assay.repo.workspace import Workspace, hash_paths

CONFIG = """\
[metric]
name = "t"
direction = "maximize"

[commands]
bench = "{bench}"

[scope]
editable = ["src/**/*.py"]
protected = ["bench/**", "data/**"]

[[params]]
name = "X"
type = "int"
low = 1
high = 1000000
apply = "{apply}"
{file}

[run]
slots = {slots}
budget = {budget}
seed = {seed}

[proposer.sweep]
sampler = "random"

[decision]
rule = "fixed"
pairs_per_block = 1
min_pairs = 1
max_pairs = 1
aa_blocks = 0
delta = 0.0
"""

BUSY = (
    "import sys, time\n"
    "n = 0\n"
    "end = time.process_time() + {work}\n"
    "while time.process_time() < end:\n"
    "    n += 1\n"
    "print('METRIC t=' + str(n))\n"
)


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def make_repo(root: Path, files: int, bench: str, slots: int, budget: int, seed: int,
              apply: str = "env") -> Path:
    root.mkdir(parents=True)
    for i in range(files):
        d = root / "src" / f"pkg{i // 50}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i}.py").write_text(f"VALUE_{i} = {i}\n" + "# filler line\n" * 20)
    (root / "src" / "knob.py").write_text("X = 1\n")
    (root / "bench").mkdir()
    (root / "bench" / "busy.py").write_text(BUSY.format(work=0.0))
    (root / "data").mkdir()
    (root / "data" / "input.txt").write_text("fixed input\n" * 1000)
    file_line = 'file = "src/knob.py"' if apply == "assign" else ""
    (root / "assay.toml").write_text(CONFIG.format(bench=bench, slots=slots, budget=budget,
                                                   seed=seed, apply=apply, file=file_line))
    git(root, "init", "-q", "-b", "main")
    git(root, "-c", "user.name=b", "-c", "user.email=b@b", "add", "-A")
    git(root, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "init")
    return root


def time_pieces(root: Path, reps: int) -> dict[str, float]:
    target = config.load(root)
    ws = Workspace(target, "bench")
    head = ws.head()
    tree = ws.tree("s0-b")
    patch_src = root / "src" / "pkg0" / "mod0.py"
    old = patch_src.read_text()
    patch_src.write_text(old.replace("VALUE_0 = 0", "VALUE_0 = 1"))
    patch = subprocess.run(["git", "diff"], cwd=root, capture_output=True, text=True).stdout
    patch_src.write_text(old)
    out: dict[str, list[float]] = {"reset + patch + params": [], "hash protected": [],
                                   "journal writes": []}
    journal = Journal.open(root / ".assay" / "bench.sqlite")
    inc = Incumbent(head)
    for i in range(reps):
        t = time.perf_counter()
        ws.materialize(tree, head, patch, {"X": i})
        out["reset + patch + params"].append(time.perf_counter() - t)
        t = time.perf_counter()
        hash_paths(tree, target.protected)
        out["hash protected"].append(time.perf_counter() - t)
        t = time.perf_counter()
        exp = journal.add_experiment(Candidate(head, patch, {"X": i}, "h", "bench"))
        bid = journal.add_block(exp.id, BlockKind.COMPARE, "ABBA", inc)
        journal.lease_block(bid, "s0", "me", 60)
        runs = tuple(RunResult(f"{bid}-r{k}", bid, exp.id, Role(c), k, RunStatus.OK, {"t": 1.0})
                     for k, c in enumerate("ABBA", start=1))
        journal.record_block(BlockResult(bid, exp.id, "s0", runs))
        journal.set_decision(exp.id, Decision(Verdict.DISCARD, "bench", 0.0, 0.0, 0.0, 2, 4))
        journal.set_state(exp.id, ExperimentState.DISCARDED)
        out["journal writes"].append(time.perf_counter() - t)
    journal.close()
    return {k: statistics.median(v) for k, v in out.items()}


def run_loop(root: Path, warm: int = 0) -> tuple[float, float, int]:
    """(wall seconds, seconds inside benchmark processes, experiments) of one session.

    With ``warm`` > 0, a first session of ``warm`` experiments creates the worktrees and
    imports everything; the figures are those of a second session that adds the rest.
    """
    target = config.load(root)
    done_before, inside_before = 0, 0.0
    if warm:
        api.run(root, budget=warm)
        j = Journal.open(target.state_dir / "journal.sqlite", readonly=True)
        inside_before = sum(r.wall_s for r in j.runs())
        done_before = len(j.experiments())
        j.close()
    t = time.perf_counter()
    api.run(root)
    wall = time.perf_counter() - t
    j = Journal.open(target.state_dir / "journal.sqlite", readonly=True)
    inside = sum(r.wall_s for r in j.runs()) - inside_before
    n = len(j.experiments()) - done_before
    j.close()
    return wall, inside, n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", type=int, default=20)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--work", type=float, default=0.25, help="CPU seconds per benchmark run")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    n = args.experiments
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        trivial = make_repo(base / "trivial", args.files, "echo METRIC t=$X", 1, n, 1,
                            apply="assign")
        pieces = time_pieces(trivial, args.reps)
        for k, v in pieces.items():
            rows.append((f"{k} ({args.files} files), median", f"{v * 1000:.1f} ms"))
        wall, inside, done = run_loop(trivial, warm=2)
        per_exp = (wall - inside) / max(done, 1)
        rows.append((f"end to end, trivial bench, {done} experiments (warm)", f"{wall:.2f} s"))
        rows.append(("  of which inside benchmark processes", f"{inside:.2f} s"))
        rows.append(("assay's fixed cost per experiment (2 runs)", f"{per_exp * 1000:.0f} ms"))

        busy = f"{sys.executable} bench/busy.py"
        one = make_repo(base / "one", 50, busy, 1, n, 2)
        two = make_repo(base / "two", 50, busy, 2, n, 2)
        for r in (one, two):
            (r / "bench" / "busy.py").write_text(BUSY.format(work=args.work))
            git(r, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qam", "work")
        t1, _, n1 = run_loop(one, warm=2)
        t2, _, n2 = run_loop(two, warm=2)
        eff = t1 / (2 * t2)
        rows.append((f"{n1} experiments x 2 runs of {args.work:g} s CPU, 1 slot", f"{t1:.2f} s"))
        rows.append((f"{n2} experiments x 2 runs of {args.work:g} s CPU, 2 slots", f"{t2:.2f} s"))
        rows.append(("parallel efficiency T1 / (2 T2)", f"{eff:.1%}"))
    width = max(len(r[0]) for r in rows)
    print(f"{'measure'.ljust(width)}  value")
    print(f"{'-' * width}  -----")
    for k, v in rows:
        print(f"{k.ljust(width)}  {v}")
    ok = per_exp <= 0.2 and eff >= 0.95
    print(f"SUMMARY: fixed cost {per_exp * 1000:.0f} ms/experiment (goal <= 200), "
          f"local 2-slot efficiency {eff:.1%} (goal >= 95%): {'PASS' if ok else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
