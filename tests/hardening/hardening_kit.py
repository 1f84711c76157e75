"""Shared helpers for the hardening suite: a tiny real target in a temporary git repo.

The target: ``work.py`` (editable) holds ``SIZE = ...`` and does real work proportional to
it; ``bench.py`` (protected) runs that work and prints ``METRIC speed=<1e9/SIZE>`` (times a
bounded seeded jitter, never a timing). Every
benchmark process appends its pid to the file named by ``$ASSAY_TEST_PIDS`` so tests can
check that none outlives the loop.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.scripted import DRAW

from assay.model import Candidate, Experiment
from assay.proposers.base import ProposalContext, Proposer

# The work runs for real (runs take time and can be killed); the speed printed is scripted
# from SIZE and a bounded seeded jitter (tests/scripted.py), never timed.
BENCH = DRAW + """
import os
import sys

sys.path.insert(0, os.getcwd())
pids = os.environ.get("ASSAY_TEST_PIDS")
if pids:
    with open(pids, "a") as fh:
        fh.write(f"{os.getpid()}\\n")
import work

work.run(work.SIZE)
print(f"METRIC speed={1e9 / max(work.SIZE, 1) * draw():.6f}")
"""

WORK = """\
SIZE = 200000


def run(n):
    s = 0
    for i in range(n):
        s += i * i
    return s
"""

# The same real work, but the metric counts operations instead of timing them: decisions are
# then exactly reproducible (used where a test needs keeps and discards to happen for sure).
BENCH_COUNTED = """\
import os
import sys

sys.path.insert(0, os.getcwd())
pids = os.environ.get("ASSAY_TEST_PIDS")
if pids:
    with open(pids, "a") as fh:
        fh.write(f"{os.getpid()}\\n")
import work

ops = work.run(work.SIZE)
print(f"METRIC speed={1e9 / max(ops, 1):.6f}")
"""

WORK_COUNTED = """\
SIZE = 200000


def run(n):
    s = ops = 0
    for i in range(n // 20):
        s += i * i
        ops += 2
    return ops
"""

CONFIG = """\
[metric]
name = "speed"
direction = "maximize"

[commands]
bench = "{python} bench.py"
bench_timeout = 30
{extra_commands}

[scope]
editable = ["work.py", "src/**"]
protected = ["bench.py", "data/**"]

[[params]]
name = "SIZE"
type = "int"
low = 1000
high = 400000
apply = "assign"
file = "work.py"
default = 200000

[decision]
rule = "fixed"
aa_blocks = 0
pairs_per_block = 2
max_pairs = 2
min_pairs = 1
delta = 0.05

[run]
slots = 2
budget = 4

[env]
set = {{ ASSAY_TEST_PIDS = "{pids}" }}
{extra}
"""


def git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True, env=env).stdout


@dataclass
class Repo:
    root: Path
    pids: Path
    base: str = ""
    files: dict[str, str] = field(default_factory=dict)

    def write_config(self, extra: str = "", extra_commands: str = "", commit: bool = True
                     ) -> None:
        text = CONFIG.format(python=sys.executable, pids=self.pids, extra=extra,
                             extra_commands=extra_commands)
        (self.root / "assay.toml").write_text(text)
        if commit:
            git(self.root, "add", "-A")
            git(self.root, "commit", "-qm", "config")
            self.base = git(self.root, "rev-parse", "HEAD").strip()

    def bench_pids(self) -> list[int]:
        if not self.pids.exists():
            return []
        return [int(x) for x in self.pids.read_text().split() if x.strip().isdigit()]

    @property
    def journal(self) -> Path:
        return self.root / ".assay" / "journal.sqlite"


def make_repo(path: Path, extra: str = "", extra_commands: str = "",
              files: dict[str, str] | None = None, counted: bool = False) -> Repo:
    root = path / "target"
    root.mkdir(parents=True)
    (root / "bench.py").write_text(BENCH_COUNTED if counted else BENCH)
    (root / "work.py").write_text(WORK_COUNTED if counted else WORK)
    (root / "data").mkdir()
    (root / "data" / "input.txt").write_text("fixed input\n")
    for name, text in (files or {}).items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    git(root, "init", "-q", "-b", "main")
    repo = Repo(root=root, pids=path / "pids.txt")
    repo.write_config(extra, extra_commands)
    return repo


class ListProposer(Proposer):
    """Proposes the given candidates in order (rebased on the incumbent), skipping tried ones."""

    name = "list"

    def __init__(self, items: list[dict[str, object]]) -> None:
        self.items = items
        self.contexts: list[ProposalContext] = []
        self.told: list[Experiment] = []

    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        self.contexts.append(context)
        out: list[Candidate] = []
        for item in self.items:
            if len(out) >= n:
                break
            cand = Candidate(base_commit=context.incumbent.commit,
                             patch=str(item.get("patch", "")),
                             params=dict(item.get("params", {})),  # type: ignore[call-overload]
                             hypothesis=str(item.get("hypothesis", "a change")),
                             proposer=self.name)
            if cand.digest in context.tried_digests:
                continue
            out.append(cand)
        return out

    def tell(self, experiment: Experiment) -> None:
        self.told.append(experiment)


def alive(pid: int) -> bool:
    """True when ``pid`` is a live (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_dead(pids: list[int], timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    live = [p for p in pids if alive(p)]
    while live and time.monotonic() < deadline:
        time.sleep(0.05)
        live = [p for p in live if alive(p)]
    return live


def procs_under(root: Path) -> list[int]:
    """Live processes whose working directory is inside ``root`` (left-behind work)."""
    out: list[int] = []
    root_s = str(root.resolve())
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cwd = os.readlink(d / "cwd")
        except OSError:
            continue
        if (cwd == root_s or cwd.startswith(root_s + "/")) and alive(int(d.name)):
            out.append(int(d.name))
    return out


def cmdline(pid: int) -> str:
    """A process's command line, '' once it has exited (it can between listing and reading)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return ""


CLI = [sys.executable, "-c", "from assay.cli.app import main; main()"]


def set_bench(repo: Repo, command: str) -> None:
    """Replace the bench command in assay.toml (and commit it)."""
    cfg = repo.root / "assay.toml"
    lines = [f"bench = {command!r}" if ln.startswith("bench = ") else ln
             for ln in cfg.read_text().splitlines()]
    cfg.write_text("\n".join(lines) + "\n")
    git(repo.root, "add", "-A")
    git(repo.root, "commit", "-qm", "bench command")
    repo.base = git(repo.root, "rev-parse", "HEAD").strip()


def journal_rows(repo: Repo, sql: str) -> list[tuple[object, ...]]:
    import sqlite3

    con = sqlite3.connect(repo.journal)
    try:
        return list(con.execute(sql))
    finally:
        con.close()


def wait_for(pred: object, timeout: float = 60.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(step)
    return False


def running_blocks(repo: Repo) -> int:
    """Blocks the journal marks running (0 while the journal is missing or being created)."""
    if not repo.journal.exists():
        return 0
    try:
        return int(journal_rows(repo, "SELECT COUNT(*) FROM blocks WHERE state = 'running'")
                   [0][0])
    except Exception:
        return 0
