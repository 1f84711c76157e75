"""Shared fixtures: tiny real targets in temporary git repositories."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.scripted import DRAW

# The work runs for real; the speed printed is scripted (see tests/scripted.py): units per
# million loop steps, times a bounded seeded jitter, so decisions do not depend on the load.
BENCH = DRAW + """
import work

checksum = work.run()
assert checksum > 0
print(f"METRIC speed={work.UNITS * 1e6 / work.WORK * draw():.3f}")
print(f"METRIC mem_kb={work.MEM_KB}")
"""

WORK = """\
WORK = {work}
UNITS = 1000
MEM_KB = 100


def run():
    total = 0
    for i in range(WORK):
        total += i % 7
    return total + 1
"""

CONFIG = """\
[metric]
name = "speed"
direction = "maximize"
unit = "units/s"

[[guards]]
name = "mem_kb"
direction = "minimize"
tolerance = 0.10

[commands]
bench = "{python} bench.py"
bench_timeout = 30

[scope]
editable = ["work.py", "src/**/*.py"]
protected = ["bench.py"]

[[params]]
name = "WORK"
type = "int"
low = 1000
high = 400000
log = true
apply = "assign"
file = "work.py"

[run]
slots = {slots}
budget = {budget}

[decision]
rule = "fixed"
max_pairs = {pairs}
pairs_per_block = 2
aa_blocks = 0
delta = 0.02
{extra}
"""


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True).stdout


def make_repo(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "dev@example.org")
    git(root, "config", "user.name", "dev")
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "initial")
    return root


TinyFactory = Callable[..., Path]


@pytest.fixture
def tiny_target(tmp_path: Path) -> TinyFactory:
    """A real benchmarkable repository: `work.py` loops WORK times; speed = 1e9/WORK (scripted)."""

    def make(work: int = 200_000, slots: int = 1, budget: int = 3, pairs: int = 4,
             extra: str = "", name: str = "repo", files: dict[str, str] | None = None) -> Path:
        config = CONFIG.format(python=sys.executable, slots=slots, budget=budget, pairs=pairs,
                               extra=textwrap.dedent(extra))
        base = {"bench.py": BENCH, "work.py": WORK.format(work=work), "assay.toml": config,
                "README.md": "tiny target\n"}
        base.update(files or {})
        return make_repo(tmp_path / name, base)

    return make


def patch_work(root: Path, new_work: int) -> str:
    """A git diff changing WORK in work.py (made in the repo, then reverted)."""
    p = root / "work.py"
    old = p.read_text()
    p.write_text(old.replace(old.splitlines()[0], f"WORK = {new_work}"))
    diff = git(root, "diff")
    p.write_text(old)
    return diff
