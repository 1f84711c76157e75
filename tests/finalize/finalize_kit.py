"""Real runs to finalize: temp git repositories with a scripted benchmark.

The benchmark's value comes from the code it imports (each knob multiplies it by a fixed
factor) times a small random spread, never from wall-clock speed, so every decision here
is certain however busy the machine is.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from assay import api

BENCH = """\
import random

import a
import b

speed = 1000.0
if a.FAST_A:
    speed *= 1.5
if b.FAST_B:
    speed *= 1.3
if b.TUNED:
    speed *= 1.25
speed *= 1 + random.Random().uniform(-0.005, 0.005)
print(f"METRIC speed={speed:.3f}")
"""

A = "FAST_A = False\n"
B = """\
FAST_B = False


def helper(x):
    return x + 1


def other(x):
    return x * 2


TUNED = False
"""
CHECKS = "import a\nimport b\n\nassert b.helper(1) == 2\nprint('ok')\n"

CONFIG = """\
[target]
name = "{name}"

[metric]
name = "speed"
direction = "maximize"

[commands]
bench = "{python} bench.py"
checks = "{python} checks.py"

[scope]
editable = ["a.py", "b.py", "kernel.py", "lib.py"]
protected = ["bench.py", "checks.py"]

[run]
slots = 1

[decision]
rule = "fixed"
max_pairs = 4
pairs_per_block = 2
aa_blocks = 0
delta = 0.02
{extra}
"""


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True).stdout


def make_repo(root: Path, files: dict[str, str], name: str = "opt", extra: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "dev@example.org")
    git(root, "config", "user.name", "dev")
    base = {"bench.py": BENCH, "a.py": A, "b.py": B, "checks.py": CHECKS,
            "assay.toml": CONFIG.format(name=name, python=sys.executable, extra=extra)}
    for rel, text in {**base, **files}.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (root / ".gitignore").write_text("__pycache__/\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "initial")
    return root


def edit(root: Path, path: str, old: str, new: str) -> str:
    """The git diff of one textual replacement (the file is put back after)."""
    f = root / path
    before = f.read_text()
    assert old in before, (path, old)
    f.write_text(before.replace(old, new))
    diff = git(root, "diff", "--", path)
    f.write_text(before)
    return diff


def run_queue(root: Path, patches: list[tuple[str, str]]) -> None:
    """`assay run` with the queue proposer over ``patches`` (hypothesis, diff), in order."""
    folder = root / ".queue"
    folder.mkdir(exist_ok=True)
    for i, (hyp, diff) in enumerate(patches):
        (folder / f"{i:02d}.patch").write_text(f"# hypothesis: {hyp}\n{diff}")
    cfg = root / "assay.toml"
    cfg.write_text(cfg.read_text() + '\n[proposer.queue]\npath = ".queue"\n')
    git(root, "commit", "-qam", "queue the patches")
    summary = api.run(root, proposer="queue", budget=len(patches))
    assert len(summary.kept) == len(patches), api_log(root)


def api_log(root: Path) -> list[object]:
    return [r["note"] for r in api.log(root)]


def refs(root: Path) -> str:
    return git(root, "for-each-ref", "--format=%(refname) %(objectname)")
