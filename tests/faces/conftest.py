"""Fixtures for the faces tests: a tiny target in a temp git repo and a journal from a real loop.

The target's benchmark prints ``METRIC speed=<value>``; the value depends on ``SIZE`` in
``knob.py`` (an assigned parameter) and on ``BONUS`` in ``fast.py`` (changed by patches).
A scripted proposer hands the loop a fixed list of candidates, so one short run yields
kept, discarded, crashed and invalid experiments in a known order.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from assay import api
from assay.model import Candidate
from assay.proposers.base import ProposalContext, Proposer
from assay.usage import Usage

BENCH = '''\
import random
import sys


def value(path, name):
    # Read NAME = value as text (importing could hit a stale bytecode cache).
    for line in open(path):
        key, _, val = line.partition("=")
        if key.strip() == name:
            return float(val)
    raise SystemExit(f"{name} not found in {path}")


size = int(value("knob.py", "SIZE"))
bonus = value("fast.py", "BONUS")
if size == 13:
    print("boom: SIZE 13 is unlucky", file=sys.stderr)
    sys.exit(3)
if size == 7:
    print("no metric today")
    sys.exit(0)
speed = 1000.0 / size * bonus * (1.0 + random.gauss(0.0, 0.025))
print(f"working with SIZE={size} BONUS={bonus}")
print(f"METRIC speed={speed:.4f}")
'''

CONFIG = '''\
[metric]
name = "speed"
direction = "maximize"
unit = "it/s"

[commands]
bench = "{python} bench.py"
bench_timeout = 30

[scope]
editable = ["knob.py", "fast.py"]
protected = ["bench.py"]

[[params]]
name = "SIZE"
type = "int"
low = 1
high = 64
apply = "assign"
file = "knob.py"
default = 32

[run]
slots = 1
gpus = [[0]]
budget = 20

[decision]
rule = "fixed"
pairs_per_block = 2
max_pairs = 4
aa_blocks = 6
'''

BONUS_PATCH = '''\
diff --git a/fast.py b/fast.py
--- a/fast.py
+++ b/fast.py
@@ -1 +1 @@
-BONUS = 1.0
+BONUS = {value}
'''


def sh(cwd: Path, *args: str) -> str:
    return subprocess.run(list(args), cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def make_target(root: Path) -> Path:
    """A git repo holding the tiny benchmark and its assay.toml."""
    root.mkdir(parents=True, exist_ok=True)
    sh(root, "git", "init", "-q", "-b", "main")
    sh(root, "git", "config", "user.email", "test@example.com")
    sh(root, "git", "config", "user.name", "test")
    sh(root, "git", "config", "commit.gpgsign", "false")
    files = {"bench.py": BENCH, "knob.py": "SIZE = 32\n", "fast.py": "BONUS = 1.0\n",
             "assay.toml": CONFIG.format(python=sys.executable),
             ".gitignore": ".assay/\n__pycache__/\n"}
    for name, text in files.items():
        (root / name).write_text(text)
    sh(root, "git", "add", "-A")
    sh(root, "git", "commit", "-q", "-m", "init")
    return root


class Scripted(Proposer):
    """Proposes the given candidates in order (filled in against the current incumbent).

    A spec's ``usage`` (tokens in, tokens out, dollars) is one model call that made it,
    charged to the loop's meter as the ``llm`` proposer charges its calls.
    """

    name = "scripted"

    def __init__(self, plan: Sequence[dict[str, Any]]) -> None:
        self.plan = list(plan)

    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        out = []
        while self.plan and len(out) < n:
            spec = dict(self.plan.pop(0))
            usage = spec.pop("usage", None)
            if usage is not None:
                assert context.meter is not None
                tin, tout, usd = usage
                _, call = context.meter.charge(Usage("gpt-4o", tin, tout, cost_usd=usd,
                                                     priced_by="reported"))
                spec["meta"] = {"model_calls": [call]}
            out.append(Candidate(base_commit=context.incumbent.commit, **spec))
        return out


def plan(hids: dict[str, int]) -> list[dict[str, Any]]:
    """Six candidates: two kept, one discarded, one crashed, one invalid, one patch kept."""
    return [
        {"params": {"SIZE": 16}, "hypothesis": "halve SIZE: less work per item",
         "proposer": "llm", "hypothesis_id": hids["paper"], "sources": ("arxiv:2401.00001",),
         "usage": (1200, 300, 0.012)},
        {"params": {"SIZE": 48}, "hypothesis": "grow SIZE: better amortisation",
         "proposer": "llm", "hypothesis_id": hids["fork"],
         "usage": (900, 250, 0.009)},
        {"params": {"SIZE": 13}, "hypothesis": "an unlucky SIZE", "proposer": "sweep"},
        {"params": {"SIZE": 7}, "hypothesis": "SIZE 7 <b>prints</b> no metric",
         "proposer": "sweep"},
        {"patch": BONUS_PATCH.format(value="1.5"), "hypothesis": "raise BONUS in fast.py",
         "proposer": "llm", "hypothesis_id": hids["profile"],
         "usage": (2000, 500, 0.03)},
        {"params": {"SIZE": 8}, "hypothesis": "SIZE 8", "proposer": "sweep"},
    ]


def add_hypotheses(root: Path) -> dict[str, int]:
    target = api.load(root)
    journal = api.open_journal(target)
    try:
        return {kind: journal.add_hypothesis(f"{kind} idea", [f"{kind}:ref"], kind, 0.5)
                for kind in ("paper", "fork", "profile")}
    finally:
        journal.close()


def run_plan(root: Path, candidates: Sequence[dict[str, Any]]) -> None:
    api.run(root, budget=len(candidates) + _count(root), proposer_obj=Scripted(candidates))


def _count(root: Path) -> int:
    if not (root / ".assay" / "journal.sqlite").exists():
        return 0
    return len(api.log(root))


@pytest.fixture(scope="session")
def ran_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A target whose journal holds six experiments from a real loop (shared, read-only)."""
    root = make_target(tmp_path_factory.mktemp("faces") / "repo")
    hids = add_hypotheses(root)
    run_plan(root, plan(hids))
    return root


@pytest.fixture
def bare_target(tmp_path: Path) -> Path:
    """The target before any run (no journal)."""
    return make_target(tmp_path / "bare")


@pytest.fixture
def fresh_target(tmp_path: Path) -> Path:
    """A private target with the same six experiments (for tests that add more).

    Built by its own run rather than copied: a copy's worktrees would still point at the
    original repository's git directory.
    """
    root = make_target(tmp_path / "repo")
    run_plan(root, plan(add_hypotheses(root)))
    return root


SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    exe = chromium_path()
    if exe is None:
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            yield b
        finally:
            b.close()
