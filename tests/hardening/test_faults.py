"""Fault injection: kill -9 the orchestrator at many points of a real loop, restart, check.

Each cycle forks a real orchestrator (``assay.api.run`` on a tiny git target with two slots
and real benchmark processes). The child arms one named fault point and SIGKILLs itself at
its n-th pass, or the parent SIGKILLs it after a random delay. After every kill the test
checks the invariants on what the dead run left behind, and the next cycle restarts the run
from the same journal. When a run reaches its budget a fresh target starts the next round;
at the end every round's target is run to completion without faults and checked strictly.

Invariants (any failure is a violation; the test requires zero):

- ``PRAGMA integrity_check`` is ``ok``;
- experiments are numbered 1..N without gaps; no two measured experiments share a digest
  (nothing counted twice); every run belongs to a finished (``done``) block and a block
  that finished without error holds exactly one run per letter of its order;
- the run branch ``assay/<name>`` holds only commits of kept experiments, each exactly once
  and equal to the experiment's recorded commit (between a commit and its journal record,
  the tip may hold one commit of a still-undecided experiment: it is re-decided on resume);
- no benchmark process is alive after a kill (benchmarks write their pids);
- at the end: every experiment finished, the budget exactly used, no block queued or
  running, every finished experiment's ``on_experiment`` hook ran (at least once) and every
  ``on_keep`` hook saw the kept commit.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hardening_kit import ListProposer, Repo, alive, git, make_repo, wait_dead

import assay.api as api
from assay.bench import process
from assay.journal.store import Journal
from assay.loop.hooks import Hooks
from assay.loop.outcomes import Outcomes
from assay.repo.workspace import Workspace

FASTER_LOOP = """\
diff --git a/work.py b/work.py
--- a/work.py
+++ b/work.py
@@ -4,6 +4,6 @@ SIZE = 200000
 def run(n):
     s = ops = 0
     for i in range(n // 20):
-        s += i * i
-        ops += 2
+        s += i
+        ops += 1
     return ops
"""

NEW_FILE = """\
diff --git a/src/extra.py b/src/extra.py
new file mode 100644
--- /dev/null
+++ b/src/extra.py
@@ -0,0 +1 @@
+X = 1
"""

TOUCH_BENCH = """\
diff --git a/bench.py b/bench.py
--- a/bench.py
+++ b/bench.py
@@ -1,3 +1,3 @@
-import os
+import os  # faster, promise
 import sys
 import time
"""

ITEMS: list[dict[str, Any]] = [
    {"params": {"SIZE": 20000}, "hypothesis": "smaller problem"},
    {"params": {"SIZE": 400000}, "hypothesis": "bigger problem"},
    {"patch": FASTER_LOOP, "hypothesis": "cheaper loop body"},
    {"patch": TOUCH_BENCH, "hypothesis": "edit the benchmark"},
    {"params": {"SIZE": 3000}, "hypothesis": "much smaller problem"},
    {"patch": NEW_FILE, "hypothesis": "add a module"},
    {"params": {"SIZE": 300000}, "hypothesis": "larger problem"},
    {"params": {"SIZE": 1000}, "hypothesis": "tiny problem"},
    {"params": {"SIZE": 150000}, "hypothesis": "a bit smaller"},
    {"params": {"SIZE": 2500}, "hypothesis": "back up a little"},
    {"params": {"SIZE": 50000}, "hypothesis": "medium problem"},
    {"params": {"SIZE": 1500}, "hypothesis": "small again"},
]
BUDGET = len(ITEMS)

POINTS = ("propose", "queue", "lease", "run", "record", "decide", "commit", "finish", "tx",
          "hook", "external")
KILLS_WANTED = int(os.environ.get("ASSAY_FAULT_KILLS", "50"))
MAX_CYCLES = 4 * KILLS_WANTED  # a count, not a clock: a busy machine gets the same kills


def hooks_config(tmp: Path) -> str:
    return (f"[hooks]\n"
            f"on_experiment = 'echo \"$ASSAY_HOOK_KEY\" >> {tmp / 'hooks.log'}'\n"
            f"on_keep = 'echo \"$ASSAY_HOOK_KEY $ASSAY_COMMIT\" >> {tmp / 'keeps.log'}'\n")


# -- the child: arm one fault point, run the real loop ------------------------------------
def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _arm(point: str, nth: int, rng: random.Random) -> None:
    """Patch the named place so that its ``nth`` pass kills this process (SIGKILL)."""
    passes = Counter[str]()

    def hit(name: str) -> bool:
        if name != point:
            return False
        passes[name] += 1
        return passes[name] == nth

    def before(owner: Any, attr: str, name: str) -> None:
        orig = getattr(owner, attr)

        def wrapped(*a: Any, **k: Any) -> Any:
            if hit(name):
                _die()
            return orig(*a, **k)

        setattr(owner, attr, wrapped)

    def after(owner: Any, attr: str, name: str, when: Any = lambda r: True) -> None:
        orig = getattr(owner, attr)

        def wrapped(*a: Any, **k: Any) -> Any:
            out = orig(*a, **k)
            if when(out) and hit(name):
                _die()
            return out

        setattr(owner, attr, wrapped)

    before(ListProposer, "propose", "propose")          # during a proposal
    before(Outcomes, "queue_first", "queue")            # experiment stored, block not yet
    after(Journal, "lease_block", "lease", bool)        # leased, not yet submitted
    after(Journal, "record_block", "record", bool)      # results stored, not yet decided
    before(Journal, "set_decision", "decide")           # during a decision
    after(Workspace, "commit_candidate", "commit")      # branch moved, journal not yet
    before(Outcomes, "told", "finish")                  # decided, hooks/proposer not yet
    before(Hooks, "_run", "hook")                       # hook recorded pending, not run

    orig_run = process.run

    def run(*a: Any, **k: Any) -> Any:                  # during a benchmark run
        if hit("run"):
            threading.Timer(rng.uniform(0.0, 0.03), _die).start()
        return orig_run(*a, **k)

    process.run = run  # type: ignore[assignment]

    orig_tx = Journal.tx

    @contextlib.contextmanager
    def tx(self: Journal) -> Iterator[sqlite3.Connection]:  # inside a journal write
        with orig_tx(self) as conn:
            yield conn
            if self._depth == 1 and hit("tx"):
                _die()

    Journal.tx = tx  # type: ignore[method-assign]


def _child(root: Path, point: str, nth: int, seed: int, errlog: Path) -> None:
    code = 0
    try:
        _arm(point, nth, random.Random(seed))
        api.run(root, budget=BUDGET, proposer_obj=ListProposer(ITEMS))
    except BaseException:
        errlog.write_text(traceback.format_exc())
        code = 3
    finally:
        os._exit(code)


def _spawn(repo: Repo, point: str, nth: int, seed: int, errlog: Path,
           rng: random.Random) -> int:
    """Run one cycle; return the raw wait status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        _child(repo.root, point, nth, seed, errlog)
    if point == "external":
        deadline = time.monotonic() + rng.uniform(0.05, 1.5)
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


# -- invariants ----------------------------------------------------------------------------
def check(repo: Repo, final: bool = False) -> list[str]:
    out: list[str] = []
    if not repo.journal.exists():
        return out
    con = sqlite3.connect(repo.journal)
    con.row_factory = sqlite3.Row
    try:
        if (ic := con.execute("PRAGMA integrity_check").fetchone()[0]) != "ok":
            out.append(f"integrity_check: {ic}")
        exps = {r["id"]: dict(r) for r in con.execute("SELECT * FROM experiments ORDER BY seq")}
        seqs = [e["seq"] for e in exps.values()]
        if seqs != list(range(1, len(seqs) + 1)):
            out.append(f"experiment numbering has gaps or repeats: {seqs}")
        measured = [e["digest"] for e in exps.values() if e["state"] != "invalid"]
        dup = [d for d, c in Counter(measured).items() if c > 1]
        if dup:
            out.append(f"the same candidate was measured twice: {dup}")
        blocks = {r["id"]: dict(r) for r in con.execute("SELECT * FROM blocks")}
        runs = Counter(r["block_id"] for r in con.execute("SELECT block_id FROM runs"))
        for bid, b in blocks.items():
            if b["experiment_id"] != "cal" and b["experiment_id"] not in exps:
                out.append(f"block {bid} has no experiment")
            n = runs.get(bid, 0)
            if b["state"] != "done" and n:
                out.append(f"block {bid} is {b['state']} but holds {n} runs")
            if b["state"] == "done" and not b["error_kind"] and n != len(b["run_order"]):
                out.append(f"block {bid} holds {n} runs for order {b['run_order']}")
        for bid in runs:
            if bid not in blocks:
                out.append(f"runs of unknown block {bid}")
        finished = ("kept", "discarded", "invalid", "crashed")
        for e in exps.values():
            if e["state"] == "kept" and not e["commit_sha"]:
                out.append(f"{e['id']} kept without a commit")
        meta = {r["key"]: r["value"] for r in con.execute("SELECT * FROM meta")}
        if final:
            if len(exps) != BUDGET:
                out.append(f"{len(exps)} experiments for a budget of {BUDGET}")
            left = [e["id"] for e in exps.values() if e["state"] not in finished]
            if left:
                out.append(f"unfinished experiments at the end: {left}")
            busy = [bid for bid, b in blocks.items() if b["state"] in ("queued", "running")]
            if busy:
                out.append(f"blocks left queued/running at the end: {busy}")
            hooks = {r["key"]: r["status"] for r in con.execute("SELECT key, status FROM hooks")}
            logged = set((repo.root.parent / "hooks.log").read_text().split()) \
                if (repo.root.parent / "hooks.log").exists() else set()
            for e in exps.values():
                key = f"on_experiment:{e['id']}"
                if key not in logged or hooks.get(key) != "ok":
                    out.append(f"hook {key} did not run (journal: {hooks.get(key)})")
            keeps = repo.root.parent / "keeps.log"
            for line in (keeps.read_text().splitlines() if keeps.exists() else []):
                key, _, sha = line.partition(" ")
                exp = exps.get(key.split(":", 1)[1])
                if exp is None or exp["commit_sha"] != sha:
                    out.append(f"on_keep hook saw {line!r}, journal says "
                               f"{exp and exp['commit_sha']}")
            for e in exps.values():
                if e["state"] == "kept" and f"on_keep:{e['id']}" not in hooks:
                    out.append(f"on_keep for {e['id']} never fired")
    finally:
        con.close()
    out += check_branch(repo, exps, meta, final)
    return out


def check_branch(repo: Repo, exps: dict[str, dict[str, Any]], meta: dict[str, str],
                 final: bool) -> list[str]:
    import json

    out: list[str] = []
    name = json.loads(meta.get("run_name", '"main"'))
    tip = git(repo.root, "rev-parse", "--verify", "-q", f"refs/heads/assay/{name}").strip() \
        if "run_name" in meta else ""
    if not tip:
        return out
    chain = git(repo.root, "rev-list", "--first-parent", "--format=%H %s",
                f"{repo.base}..{tip}").splitlines()
    commits = [ln.split(" ", 2) for ln in chain if not ln.startswith("commit ")]
    seen: set[str] = set()
    for i, (sha, tag, *_rest) in enumerate(commits):
        if tag != "assay" or not _rest:
            out.append(f"branch commit {sha[:10]} is not an assay commit")
            continue
        eid = _rest[0].split(":", 1)[0]
        if eid in seen:
            out.append(f"{eid} appears twice on the branch")
        seen.add(eid)
        e = exps.get(eid)
        if e is not None and e["state"] == "kept" and e["commit_sha"] == sha:
            continue
        window = (not final and i == 0 and e is not None and e["state"] not in
                  ("kept", "discarded", "invalid", "crashed"))
        if not window:
            out.append(f"branch commit {sha[:10]} for {eid} is not that kept experiment "
                       f"({e and e['state']}, {e and e['commit_sha']})")
    for e in exps.values():
        if e["state"] == "kept" and e["id"] not in seen:
            out.append(f"kept {e['id']} is not on the branch")
    inc = json.loads(meta.get("incumbent", "null")) or {}
    parents = [c[0] for c in commits[:2]] + [repo.base]
    if inc.get("commit") and inc["commit"] not in (parents if not final else [tip]):
        out.append(f"the incumbent {inc['commit'][:10]} is not the branch tip {tip[:10]}")
    return out


@pytest.mark.timeout(1800)
def test_kill9_at_random_points_keeps_every_invariant(tmp_path: Path) -> None:
    seed = int(os.environ.get("ASSAY_FAULT_SEED", "20261130"))
    rng = random.Random(seed)
    rounds: list[Repo] = []

    def new_round() -> Repo:
        base = tmp_path / f"round{len(rounds)}"
        base.mkdir()
        r = make_repo(base, extra=hooks_config(base), counted=True)
        rounds.append(r)
        return r

    repo = new_round()
    kills: Counter[str] = Counter()
    violations: list[str] = []
    cycles = 0
    start = time.monotonic()
    errlog = tmp_path / "child-error.txt"
    while sum(kills.values()) < KILLS_WANTED and cycles < MAX_CYCLES:
        point = POINTS[cycles % len(POINTS)]
        nth = rng.randint(1, {"tx": 30, "run": 8, "commit": 1}.get(point, 3))
        before = repo.bench_pids()
        status = _spawn(repo, point, nth, rng.randrange(1 << 30), errlog, rng)
        cycles += 1
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            kills[point] += 1
            violations += [f"[{point}:{nth}] {v}" for v in check(repo)]
        elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            violations += [f"[round end] {v}" for v in check(repo, final=True)]
            repo = new_round()
        else:
            detail = errlog.read_text() if errlog.exists() else ""
            violations.append(f"[{point}:{nth}] the orchestrator failed: {status} {detail}")
            break
        # Every benchmark is dead: the current cycle's by PR_SET_PDEATHSIG at the kill,
        # earlier ones (had any survived) by the reaping of the restarted run.
        live = wait_dead(repo.bench_pids() if repo.pids.exists() else before)
        if live:
            violations.append(f"[{point}:{nth}] orphan benchmark processes alive: {live}")

    for r in rounds:  # finish every round cleanly and check it strictly
        api.run(r.root, budget=BUDGET, proposer_obj=ListProposer(ITEMS))
        violations += [f"[final {r.root.parent.name}] {v}" for v in check(r, final=True)]
        live = [p for p in r.bench_pids() if alive(p)]
        if wait_dead(live):
            violations.append(f"[final] orphan benchmark processes alive: {live}")

    total = sum(kills.values())
    print(f"\nfault injection (seed {seed}): {total} kills over {cycles} cycles in "
          f"{len(rounds)} round(s), {time.monotonic() - start:.0f}s; by point: "
          f"{dict(sorted(kills.items()))}; invariant violations: {len(violations)}")
    assert not violations, "\n".join(violations[:40])
    assert total >= KILLS_WANTED, f"only {total} kills happened in {cycles} cycles"
    assert len(kills) == len(POINTS), f"some fault points were never reached: {kills}"
