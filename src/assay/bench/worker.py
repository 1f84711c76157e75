"""Run one block on one slot: the unit every executor ships (local thread, Ray task).

A block alternates the incumbent (worktree ``<slot>-a``) and the candidate (``<slot>-b``) in
its ``order`` (e.g. ``ABBA``). Build once, measure many: each tree stays at what it holds
across blocks (the candidate's tree at the candidate, the incumbent's at the incumbent), so
a candidate measured in five blocks is patched and built once; a tree is materialized and
built again only when what it should hold changes, or when its content no longer matches
(a run edited a tracked file). Build folders and compiler caches stay warm per tree
(each tree is its own ccache/sccache base and has its own cache folders, which only its
commands write and read: :func:`tree_cache`).

Before the candidate's first block its checks run once (see :mod:`assay.bench.steps`), then the
``compare`` command, whose output must agree with the incumbent's. A candidate that fails
to apply, build or pass its checks is judged without a single timed run. Protected paths
are hashed before and after every run: any change rejects the candidate as
``harness_changed``. Both trees are checked after every step (:mod:`assay.trees`): a
change outside the step's own tree, or to the incumbent's sources, ends the block as
``tampered``, blamed on the candidate, and the incumbent's tree is restored at once. An
incumbent run that crashes or times out ends the block at once.
"""

from __future__ import annotations

import hashlib
import math
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..config.spec import MetricSpec, Target
from ..config.watch import EARLY_STOP, Watcher
from ..errors import AssayError, MetricError, PatchError
from ..model import Block, BlockResult, Incumbent, ParamValue, Role, RunResult, RunStatus, Slot
from ..repo import treestate
from ..repo.workspace import Workspace, diff_hashes, hash_paths, split_params
from . import contain, process
from .checks import CheckMemo, failing_tests, tail
from .metrics import check_bounds, read_metric
from .steps import CANCELLED, ChecksOutcome, run_checks, run_compare, run_step


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class SlotTrees:
    a: Path
    b: Path
    a_state: str = ""  # the content key A holds and has built ('' : unknown, rebuild)
    a_print: str = ""  # A's fingerprint right after it was materialized
    b_state: str = ""
    b_print: str = ""
    # the latest OK incumbent run on this slot: its key, progress-line medians and wall time
    # (the reference of `incumbent` in watch conditions and of the time an early stop saves)
    watch_key: str = ""
    watch_ref: dict[str, float] = field(default_factory=dict)
    wall_ref: float | None = None
    # each tree's file state as the last block left it (assay.trees), and the user's
    # checkout files watched while a candidate runs
    prints: dict[Path, treestate.TreePrint] = field(default_factory=dict)
    user_files: list[Path] | None = None


def incumbent_key(inc: Incumbent) -> str:
    return f"{inc.commit}:{sorted(inc.params.items())}"


def cache_env(target: Target, slot: str, tree: Path) -> dict[str, str]:
    """Compiler-cache settings for a build in ``tree``: the tree is its own base, and each
    cache folder (ccache's, sccache's) is the tree's own (:func:`tree_cache`), named even
    when the user set one, so nothing the other side of the slot writes there is read."""
    env: dict[str, str] = {}
    if shutil.which("ccache"):
        env["CCACHE_BASEDIR"] = str(tree)
        env["CCACHE_NOHASHDIR"] = "true"
        env["CCACHE_DIR"] = str(tree_cache(target, slot, tree) / "ccache")
    if shutil.which("sccache"):
        env["SCCACHE_BASEDIRS"] = str(tree)
        env["SCCACHE_DIR"] = str(tree_cache(target, slot, tree) / "sccache")
    return env


def slot_env(target: Target, slot: Slot, tree: Path, extra: Mapping[str, str]
             ) -> dict[str, str]:
    """The environment of a command run in ``tree`` on ``slot``: the scrubbed one, the
    slot's, ``extra``, and each ``[run] compile_cache`` variable naming the tree's own
    folder (:func:`tree_cache`)."""
    env = process.scrubbed_env(target.env, {**dict(slot.env), **extra})
    if slot.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in slot.gpus)
    env["ASSAY_SLOT"] = slot.name
    for var in target.run.compile_cache:
        folder = tree_cache(target, slot.name, tree) / var.lower()
        folder.mkdir(parents=True, exist_ok=True)
        env[var] = str(folder)
    return env


def tree_env(target: Target, ws: Workspace, slot: Slot, tree: Path,
             params: Mapping[str, ParamValue]) -> dict[str, str]:
    """The environment of a command run in ``tree`` on ``slot`` (:func:`slot_env`): the
    tree's own bytecode folder and compile caches, and ``params`` set as variables."""
    return slot_env(target, slot, tree, {**ws.bytecode_env(tree),
                                         **cache_env(target, slot.name, tree),
                                         **split_params(params, target.params)[0]})


def cache_dir(target: Target, slot: str) -> Path:
    """The slot's compile caches (a folder per tree) and the markers of the trees warmed."""
    return target.state_dir / "cache" / slot


def tree_cache(target: Target, slot: str, tree: Path) -> Path:
    """The compile caches of one tree of ``slot``: written only by the commands run in that
    tree, kept across its runs (a rebuild there stays incremental); the candidate tree's
    start as a copy of the incumbent tree's (:func:`assay.bench.contain.seed_cache`)."""
    return cache_dir(target, slot) / tree.name


def run_bench(target: Target, cwd: Path, env: Mapping[str, str], logs: Path, name: str,
              cancel: process.CancelToken | None = None, watch: Watcher | None = None
              ) -> process.ProcResult:
    """One run of the benchmark command in ``cwd``, its output in ``logs/<name>.out`` and
    ``.err``."""
    return process.run(target.bench.cmd, cwd=cwd, env=env, timeout_s=target.bench.timeout_s,
                       stdout_path=logs / f"{name}.out", stderr_path=logs / f"{name}.err",
                       limits=target.limits, cancel=cancel, watch=watch,
                       sandbox=contain.spec_for(target, cwd, env))


def _warm(target: Target, slot: Slot, cwd: Path, key: str, env: Mapping[str, str],
          logs: Path, role: str, cancel: process.CancelToken | None) -> float | None:
    """One unmeasured bench run in ``cwd`` when this slot has not run ``key`` there yet
    (its compile cache is cold for it); returns its wall time, or None when none was due."""
    marker = cache_dir(target, slot.name) / f"warm-{_digest(f'{cwd}:{key}')}"
    if marker.exists():
        return None
    r = run_bench(target, cwd, env, logs, f"warmup-{role}", cancel)
    if r.exit_code == 0:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{cwd}\n{key}\n")
    return r.wall_s


def read_metrics(specs: tuple[MetricSpec, ...], stdout: str, cwd: Path
                 ) -> tuple[dict[str, float], RunStatus, str]:
    """Every metric of ``specs`` in a run's output, in order: the values read, and the run's
    status with why (the first unreadable, non-finite or out-of-bounds value ends it)."""
    values: dict[str, float] = {}
    for spec in specs:
        try:
            v = read_metric(spec, stdout, cwd)
        except MetricError as exc:
            return values, RunStatus.INVALID, str(exc)
        if not math.isfinite(v):
            return values, RunStatus.INVALID, f"metric {spec.name} is not finite ({v})"
        values[spec.name] = v
        why = check_bounds(spec, v)
        if why:
            return values, RunStatus.SUSPICIOUS, why
    return values, RunStatus.OK, ""


def _materialize(ws: Workspace, tree: Path, key: str, state: str, print_: str, commit: str,
                 patch: str, params: Mapping[str, ParamValue],
                 known: treestate.TreePrint | None = None) -> tuple[bool, str]:
    """Bring ``tree`` to ``key`` unless it holds it already; (warm, new fingerprint).

    A tree whose files changed since the last block left it (``known``) is scrubbed of
    every untracked file, build outputs included, before it is materialized again."""
    intact = treestate.unchanged(known)
    if state == key and print_ and intact and ws.fingerprint(tree) == print_:
        return True, print_
    if not intact:
        treestate.scrub(tree)
    ws.materialize(tree, commit, patch, params)
    return False, ws.fingerprint(tree)


def check_incumbent(target: Target, ws: Workspace, slot: Slot, trees: SlotTrees,
                    inc: Incumbent, cancel: process.CancelToken | None = None) -> str:
    """Build the incumbent and run its checks (a session's first step); '' or why not.

    The build is the slot's own warm one: the first block on this slot finds it done.
    """
    if target.checks is None and target.compare is None:
        return ""
    logs = target.state_dir / "logs" / "sessions" / time.strftime("%Y%m%d-%H%M%S")
    logs.mkdir(parents=True, exist_ok=True)
    key = incumbent_key(inc)
    try:
        warm, fp = _materialize(ws, trees.a, key, trees.a_state, trees.a_print, inc.commit, "",
                                inc.params)
    except AssayError as exc:
        return f"the incumbent {inc.commit[:12]} cannot be checked out: {exc}"
    if not warm:
        trees.a_state, trees.a_print = "", fp
    env = tree_env(target, ws, slot, trees.a, inc.params)
    if trees.a_state != key:
        step = run_step(target.build, trees.a, env, logs, "build", target, cancel)
        if step.why:
            return (f"the incumbent {inc.commit[:12]} does not build: {step.why}\n"
                    f"{tail(step.output)}")
        trees.a_state = key
    step = run_step(target.checks, trees.a, env, logs, "checks", target, cancel)
    if step.why:
        names = failing_tests(step.output)
        named = f" (failing: {', '.join(names)})" if names else ""
        return (f"the checks fail on the incumbent {inc.commit[:12]}, before any change"
                f"{named}: {step.why}\n{tail(step.output)}\nfix the checks or the code, "
                "commit, then run again")
    CheckMemo(target.state_dir / "checks").put(_digest(key), "passed")
    return ""


def early_stop_reason(why: str, wall_s: float, full_s: float | None, timeout_s: float) -> str:
    """The crash reason of a run a watch condition stopped, with the time it saved: the
    incumbent's latest full run on the slot, or the bench timeout when there is none yet."""
    full, ref = (full_s, "the incumbent's run") if full_s else (timeout_s, "the bench timeout")
    saved = max(0.0, full - wall_s)
    return (f"{EARLY_STOP}: {why}; after {wall_s:.1f} s, saving about {saved:.0f} s against "
            f"{ref} ({full:.0f} s)")


def _outcome(target: Target, r: process.ProcResult, changed: list[str],
             specs: tuple[MetricSpec, ...], cwd: Path, wall_ref: float | None
             ) -> tuple[dict[str, float], RunStatus, str]:
    """One benchmark run's metrics, status and reason: a harness it changed, an early stop,
    a timeout or a crash first, else what its output says."""
    if changed:
        return {}, RunStatus.HARNESS_CHANGED, f"run changed protected paths: {changed}"
    if r.stopped:
        return {}, RunStatus.CRASHED, early_stop_reason(r.stopped, r.wall_s, wall_ref,
                                                         target.bench.timeout_s)
    if r.timed_out:
        return {}, RunStatus.TIMEOUT, f"killed after {target.bench.timeout_s:g}s"
    if r.exit_code != 0:
        lines = (r.stderr or r.stdout).strip().splitlines()[-2:]
        return {}, RunStatus.CRASHED, f"exit {r.exit_code}: {' | '.join(lines)}"
    return read_metrics(specs, r.stdout, cwd)


def _holdout(target: Target, cwd: Path, env: dict[str, str], stem: Path,
             cancel: process.CancelToken | None) -> dict[str, float]:
    """The holdout command's metric after a good run ({} when none is configured or it
    failed); its values are stored withheld, never shown to a proposer."""
    if target.holdout is None or not target.holdout_metric:
        return {}
    h = process.run(target.holdout.cmd, cwd=cwd, env=env, timeout_s=target.holdout.timeout_s,
                    stdout_path=stem.with_name(stem.name + ".holdout.out"),
                    stderr_path=stem.with_name(stem.name + ".holdout.err"),
                    limits=target.limits, cancel=cancel,
                    sandbox=contain.spec_for(target, cwd, env, holdout=True))
    if h.exit_code != 0:
        return {}
    values, status, _reason = read_metrics((target.holdout_metric,), h.stdout, cwd)
    return values if status is RunStatus.OK else {}


def sweep(ws: Workspace, trees: SlotTrees) -> None:
    """Undo what changed in an idle slot's trees since its last block left them (a
    candidate of another slot that wrote there, caught and blamed by its own slot): each
    changed tree is scrubbed and checked out again, and built anew by its next block. What
    a run planted in a tree's bytecode folder for another tree is dropped from each."""
    for tree in (trees.a, trees.b):
        ws.drop_foreign_bytecode(tree)
        known = trees.prints.get(tree)
        if known is None:  # no block left a print: bytecode there was never checked
            ws.forget_bytecode(tree)
            for folder in tree.rglob("__pycache__"):
                shutil.rmtree(folder, ignore_errors=True)
            continue
        if treestate.unchanged(known):
            continue
        treestate.scrub(tree)
        ws.forget_bytecode(tree)
        ws.reset(tree, ws.checked_out(tree))
        trees.prints.pop(tree, None)
        if tree == trees.a:
            trees.a_state = trees.a_print = ""
        else:
            trees.b_state = trees.b_print = ""


def _shown(target: Target, path: Path) -> str:
    """A path as a reason names it: relative to the target's root when inside it."""
    try:
        return str(path.relative_to(target.root))
    except ValueError:
        return str(path)


@dataclass
class BlockRun:
    """One block in progress on its slot: what it was given, what its steps found, and the
    result it ends with."""

    block: Block
    target: Target
    ws: Workspace
    slot: Slot
    trees: SlotTrees
    cancel: process.CancelToken | None
    logs: Path
    start: float
    a_key: str
    b_key: str
    b_params: dict[str, ParamValue]
    b_tree: Path  # the candidate's tree, or the incumbent's in a block without a candidate
    guard: treestate.Guard
    protected: list[str]
    restored: list[str]  # notes on trees found changed since their last block
    env_a: dict[str, str] = field(default_factory=dict)
    env_b: dict[str, str] = field(default_factory=dict)
    last_hash: dict[Path, dict[str, str]] = field(default_factory=dict)
    build_s: float = 0.0
    checks: ChecksOutcome = field(default_factory=lambda: ChecksOutcome("", 0))
    warmups: list[tuple[str, float]] = field(default_factory=list)

    def fail(self, kind: str, msg: str, passed: bool | None = None) -> BlockResult:
        """End the block before its runs, or without them."""
        return BlockResult(self.block.block_id, self.block.experiment_id, self.slot.name, (),
                           passed, msg, kind, time.monotonic() - self.start,
                           build_s=self.build_s, checks_runs=self.checks.runs,
                           checks_outcome=self.checks.outcome,
                           checks_detail=self.checks.detail, restored=tuple(self.restored))

    def result(self, runs: list[RunResult], error: str = "", kind: str = "") -> BlockResult:
        """End the block with its runs."""
        checks_ok = True if (self.block.candidate is not None and self.target.checks) else None
        return BlockResult(self.block.block_id, self.block.experiment_id, self.slot.name,
                           tuple(runs), checks_ok, error, kind, time.monotonic() - self.start,
                           warmups=tuple(self.warmups), build_s=self.build_s,
                           checks_runs=self.checks.runs, checks_outcome=self.checks.outcome,
                           checks_detail=self.checks.detail, restored=tuple(self.restored))

    def tampered(self, why: str) -> BlockResult:
        """End the block on a change outside the step's own tree: the incumbent's tree is
        restored now, before anything else is measured on this slot; the candidate's tree
        is materialized again by its next block."""
        trees, inc = self.trees, self.block.incumbent
        trees.a_state = trees.b_state = ""
        trees.prints.pop(trees.b, None)
        try:
            treestate.scrub(trees.a)
            self.ws.materialize(trees.a, inc.commit, "", inc.params)
            trees.a_print = self.ws.fingerprint(trees.a)
            self.guard.settle(trees.a)
        except AssayError:
            trees.prints.pop(trees.a, None)  # the next block scrubs and materializes it
            trees.a_print = ""
        return self.fail("tampered", why)


def _drift_notes(target: Target, slot: Slot, trees: SlotTrees, with_candidate: bool
                 ) -> list[str]:
    """A note for each tree whose files changed since its last block left them, by nothing
    that ran there (:func:`_materialize` scrubs and restores it)."""
    notes: list[str] = []
    for tree in (trees.a, trees.b) if with_candidate else (trees.a,):
        known = trees.prints.get(tree)
        if known is None:
            continue
        drift = treestate.changed(known, treestate.again(known))
        if drift:
            names = ", ".join(_shown(target, known.path(rel)) for rel in drift[:6])
            notes.append(f"{names} changed on slot {slot.name} since its last block, by "
                         "nothing that ran there; the tree is scrubbed and restored")
    return notes


def _open_block(block: Block, target: Target, ws: Workspace, slot: Slot, trees: SlotTrees,
                cancel: process.CancelToken | None) -> BlockRun:
    """The block's logs folder, content keys and guard, and the trees found changed."""
    start = time.monotonic()
    logs = target.state_dir / "logs" / block.experiment_id / block.block_id
    logs.mkdir(parents=True, exist_ok=True)
    inc, cand = block.incumbent, block.candidate
    b_params = {**inc.params, **(cand.params if cand else {})}
    a_key = incumbent_key(inc)
    b_key = a_key
    if cand is not None:
        b_key = f"{cand.base_commit}:{cand.digest}:{sorted(b_params.items())}"
    if trees.user_files is None:
        trees.user_files = treestate.watched_files(target.root, target.is_protected)
    guard = treestate.Guard(trees.a, trees.b if cand is not None else None, trees.user_files,
                            ws.bytecode_of, lambda p: _shown(target, p))
    guard.prints = trees.prints
    return BlockRun(block, target, ws, slot, trees, cancel, logs, start, a_key, b_key, b_params,
                    b_tree=trees.b if cand is not None else trees.a, guard=guard,
                    protected=[*list(target.protected), "assay.toml"],
                    restored=_drift_notes(target, slot, trees, cand is not None))


def _materialize_trees(run: BlockRun) -> BlockResult | None:
    """Bring each tree to what it should hold, and set the environment of each side: a
    bytecode folder and compile caches per tree (a tree's own bytecode is dropped whenever
    it is materialized: Workspace.forget_bytecode)."""
    target, ws, trees = run.target, run.ws, run.trees
    inc, cand = run.block.incumbent, run.block.candidate
    try:
        warm_a, a_print = _materialize(ws, trees.a, run.a_key, trees.a_state, trees.a_print,
                                       inc.commit, "", inc.params, trees.prints.get(trees.a))
        if not warm_a:
            trees.a_state, trees.a_print = "", a_print
            run.guard.settle(trees.a)
        a_env = split_params(inc.params, target.params)[0]
        if cand is not None:
            warm_b, b_print = _materialize(ws, trees.b, run.b_key, trees.b_state, trees.b_print,
                                           cand.base_commit, cand.patch, run.b_params,
                                           trees.prints.get(trees.b))
            if not warm_b:
                trees.b_state, trees.b_print = "", b_print
            run.guard.settle(trees.b)
            b_env = split_params(run.b_params, target.params)[0]
        else:
            b_env = a_env
    except PatchError as exc:
        trees.b_state = ""
        trees.prints.pop(trees.b, None)
        return run.fail("patch", str(exc))
    except AssayError as exc:
        return run.fail("executor", str(exc))
    a_env = {**ws.bytecode_env(trees.a), **cache_env(target, run.slot.name, trees.a), **a_env}
    b_env = {**ws.bytecode_env(run.b_tree), **cache_env(target, run.slot.name, run.b_tree),
             **b_env}
    run.env_a = slot_env(target, run.slot, trees.a, a_env)
    run.env_b = slot_env(target, run.slot, run.b_tree, b_env)
    return None


def _hash_protected(run: BlockRun) -> BlockResult | None:
    """Hash the protected paths of each tree; a candidate that changes them ends here."""
    trees = run.trees
    base_hash = hash_paths(trees.a, run.protected)
    run.last_hash[trees.a] = base_hash
    if run.block.candidate is not None:
        run.last_hash[trees.b] = hash_paths(trees.b, run.protected)
        changed = diff_hashes(base_hash, run.last_hash[trees.b])
        if changed:
            return run.fail("harness_changed",
                            f"the candidate changes protected paths: {changed}")
    return None


def _build_trees(run: BlockRun) -> BlockResult | None:
    """Build each tree that does not hold its build yet."""
    target, trees, guard = run.target, run.trees, run.guard
    if trees.a_state != run.a_key:
        step = run_step(target.build, trees.a, run.env_a, run.logs, "build-a", target,
                        run.cancel)
        run.build_s += step.seconds
        if step.why:
            return run.fail("executor", f"the incumbent does not build: {step.why}")
        trees.a_state = run.a_key
        if why := guard.check("the incumbent's build", [trees.a]):
            return run.tampered(why)
    if run.block.candidate is not None and trees.b_state != run.b_key:
        cache = cache_dir(target, run.slot.name)  # the candidate's first build: seeded
        contain.seed_cache(cache / trees.a.name, cache / run.b_tree.name)
        step = run_step(target.build, trees.b, run.env_b, run.logs, "build-b", target,
                        run.cancel)
        run.build_s += step.seconds
        if why := guard.check("the candidate's build", [trees.b]):
            return run.tampered(why)
        if step.why:
            return run.fail("build", step.why)
        trees.b_state = run.b_key
    return None


def _vet_candidate(run: BlockRun) -> BlockResult | None:
    """The candidate's checks, then its compare command against the incumbent's output."""
    if run.block.candidate is None:
        return None
    target, trees, guard = run.target, run.trees, run.guard
    memo = CheckMemo(target.state_dir / "checks")
    run.checks = run_checks(target, memo, _digest(run.b_key), trees.b, trees.a, run.env_b,
                            run.env_a, run.logs, run.cancel)
    if why := guard.check("the checks", [trees.a, trees.b]):
        return run.tampered(why)
    if run.checks.outcome == "cancelled":
        return run.fail("cancelled", "block cancelled")
    if run.checks.outcome == "failed":
        return run.fail("checks_failed", run.checks.detail, passed=False)
    differs = run_compare(target, memo, _digest(run.a_key), _digest(run.b_key), trees.a,
                          trees.b, run.env_a, run.env_b, run.logs, run.cancel)
    if why := guard.check("the compare command", [trees.a, trees.b]):
        return run.tampered(why)
    if differs == CANCELLED:
        return run.fail("cancelled", "block cancelled")
    if differs:
        return run.fail("compare", differs, passed=False)
    return None


def _warm_up(run: BlockRun) -> BlockResult | None:
    """One unmeasured run on each side ``[run] warm_up`` names whose cache is cold for it."""
    target, order = run.target, run.block.order
    if target.run.warm_up == "none":
        return None
    todo = [("A", run.trees.a, run.a_key, run.env_a)] if "A" in order else []
    if run.block.candidate is not None and target.run.warm_up == "all" and "B" in order:
        todo.append(("B", run.b_tree, run.b_key, run.env_b))
    for role_ch, cwd, key, env in todo:
        wall = _warm(target, run.slot, cwd, key, env, run.logs, role_ch, run.cancel)
        if why := run.guard.check(f"warm-up run ({role_ch})", [cwd]):
            return run.tampered(why)
        if run.cancel is not None and run.cancel.cancelled:
            return run.fail("cancelled", "block cancelled")
        if wall is not None:
            run.warmups.append((role_ch, wall))
    return None


def _watcher(run: BlockRun, role: Role) -> Watcher | None:
    """The watch of a run's progress lines, when the metric has watch conditions."""
    if run.target.metric.watch is None:
        return None
    # an incumbent run is the reference, not judged against it: a busier machine must not
    # stop the very run that would show it
    trees = run.trees
    ref = trees.watch_ref if trees.watch_key == run.a_key and role is Role.CANDIDATE else None
    return Watcher(run.target.metric.watch, ref)


def _timed_run(run: BlockRun, i: int, role_ch: str) -> RunResult | BlockResult:
    """Run ``i`` of the block's order: the benchmark, its metrics and the holdout's; a
    BlockResult when the block ends on it (cancelled, or a change outside its tree)."""
    target, trees, guard, logs = run.target, run.trees, run.guard, run.logs
    role = Role(role_ch)
    cwd = trees.a if role is Role.INCUMBENT else run.b_tree
    env = run.env_a if role is Role.INCUMBENT else run.env_b
    run_id = f"{run.block.block_id}-r{i + 1}"
    if why := guard.check(f"the wait before run {i + 1} ({role_ch})"):
        return run.tampered(why)  # e.g. a process a candidate's run left behind
    before = run.last_hash.get(cwd) or hash_paths(cwd, run.protected)
    watcher = _watcher(run, role)
    r = run_bench(target, cwd, {**env, "ASSAY_RUN_ID": run_id}, logs, f"r{i + 1}-{role_ch}",
                  run.cancel, watcher)
    if r.cancelled:
        return run.fail("cancelled", "block cancelled")
    if why := guard.check(f"run {i + 1} ({role_ch})", [cwd]):
        return run.tampered(why)
    after = hash_paths(cwd, run.protected)
    run.last_hash[cwd] = after
    metrics, status, reason = _outcome(
        target, r, diff_hashes(before, after), (target.metric, *target.guards), cwd,
        trees.wall_ref if trees.watch_key == run.a_key else None)
    holdout: dict[str, float] = {}
    if status is RunStatus.OK:
        holdout = _holdout(target, cwd, env, logs / f"r{i + 1}-{role_ch}", run.cancel)
        if target.holdout is not None and (
                why := guard.check(f"holdout after run {i + 1} ({role_ch})", [cwd])):
            return run.tampered(why)
    if watcher is not None and role is Role.INCUMBENT and status is RunStatus.OK:
        trees.watch_key, trees.watch_ref, trees.wall_ref = run.a_key, watcher.medians(), r.wall_s
    return RunResult(run_id, run.block.block_id, run.block.experiment_id, role, i + 1, status,
                     metrics, reason, r.exit_code, r.wall_s,
                     str(logs / f"r{i + 1}-{role_ch}.out"),
                     str(logs / f"r{i + 1}-{role_ch}.err"), run.slot.name, holdout)


def _timed_runs(run: BlockRun) -> BlockResult:
    """The timed runs in the block's order. A candidate run that changes the harness ends
    the block; an incumbent run that crashes or times out ends it too (fail fast: the loop
    stops on a broken incumbent, the rest would wait too)."""
    runs: list[RunResult] = []
    for i, role_ch in enumerate(run.block.order):
        done = _timed_run(run, i, role_ch)
        if isinstance(done, BlockResult):
            return done
        runs.append(done)
        if done.status is RunStatus.HARNESS_CHANGED and done.role is Role.CANDIDATE:
            run.trees.b_state = ""
            return run.result(runs, done.reason, "harness_changed")
        if done.status is RunStatus.HARNESS_CHANGED:
            run.trees.a_state = ""
        if done.role is Role.INCUMBENT and done.status in (RunStatus.CRASHED,
                                                           RunStatus.TIMEOUT):
            break
    return run.result(runs)


def run_block(block: Block, target: Target, ws: Workspace, slot: Slot, trees: SlotTrees,
              cancel: process.CancelToken | None = None) -> BlockResult:
    """Run ``block`` on ``slot``: each tree brought to what it should hold and built, the
    candidate vetted, the warm-ups due, then the timed runs (see the module docstring)."""
    run = _open_block(block, target, ws, slot, trees, cancel)
    ended = (_materialize_trees(run) or _hash_protected(run) or _build_trees(run)
             or _vet_candidate(run) or _warm_up(run))
    return ended if ended is not None else _timed_runs(run)
