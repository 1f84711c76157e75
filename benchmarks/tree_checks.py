"""What the slot trees' checks cost per benchmark run, on the quickstart's tree.

A copy of ``examples/quickstart`` is made a git repository with two worktrees (the
incumbent's and the candidate's, as a slot holds them) and a bytecode folder each; then,
per simulated run, the two checks a block makes around every run (:class:`assay.repo.treestate.
Guard`: the wait before it, and the run itself in its own tree) are timed. Prints the
median and 90th percentile in milliseconds, beside a print's size.

Usage: python benchmarks/tree_checks.py [--runs N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from assay.repo import treestate

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "quickstart"


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", *args], cwd=cwd,
                   check=True, capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="assay-tree-checks-") as tmp:
        root = Path(tmp) / "repo"
        shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__", ".assay"))
        git(root, "init", "-q", "-b", "main")
        git(root, "add", "-A")
        git(root, "commit", "-qm", "quickstart")
        trees = [Path(tmp) / "s0-a", Path(tmp) / "s0-b"]
        for tree in trees:
            git(root, "worktree", "add", "-q", "--detach", str(tree), "HEAD")
            # the bytecode of one import of the kernel, as after a first run
            pyc = Path(tmp) / "pycache" / tree.name
            subprocess.run([sys.executable, "-c", "import kernel"], cwd=tree, check=True,
                           env={"PYTHONPYCACHEPREFIX": str(pyc), "PATH": "/usr/bin:/bin"})
        user = treestate.watched_files(root, lambda p: p in ("bench.py", "checks.py"))
        guard = treestate.Guard(trees[0], trees[1], user,
                                lambda t: Path(tmp) / "pycache" / t.name, str)
        guard.settle()
        took: list[float] = []
        for i in range(args.runs):
            t0 = time.perf_counter()
            assert guard.check("the wait before a run") == ""
            assert guard.check("a run", [trees[i % 2]]) == ""
            took.append(time.perf_counter() - t0)
        took.sort()
        size = len(guard.prints[trees[0]].entries)
        print(f"tree checks per run on the quickstart ({size} entries per tree, "
              f"{len(user)} watched files of the checkout, {args.runs} runs): median "
              f"{statistics.median(took) * 1e3:.2f} ms, p90 "
              f"{took[int(0.9 * len(took))] * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
