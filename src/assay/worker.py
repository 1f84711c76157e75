"""Run one block on one slot: the unit every executor ships (local thread, Ray task).

A block alternates the incumbent (worktree ``<slot>-a``) and the candidate (``<slot>-b``) in
its ``order`` (e.g. ``ABBA``). Before measuring, the candidate is built and checked; a
candidate that fails to apply, build or pass its checks is judged without a single timed
run. Protected paths are hashed before and after every run: any change rejects the
candidate as ``harness_changed``.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import process
from .config import Command, MetricSpec, Target
from .errors import AssayError, MetricError, PatchError
from .metrics import check_bounds, read_metric
from .model import Block, BlockResult, Role, RunResult, RunStatus, Slot
from .watch import Watcher
from .workspace import Workspace, diff_hashes, hash_paths, split_params


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class SlotTrees:
    a: Path
    b: Path
    a_state: str = ""  # what A holds now (commit + params), to skip needless rebuilds
    # the latest OK incumbent run on this slot: its key, progress-line medians and wall time
    # (the reference of `incumbent` in watch conditions and of the time an early stop saves)
    watch_key: str = ""
    watch_ref: dict[str, float] = field(default_factory=dict)
    wall_ref: float | None = None


def slot_env(target: Target, slot: Slot, extra: Mapping[str, str]) -> dict[str, str]:
    env = process.scrubbed_env(target.env, {**dict(slot.env), **extra})
    if slot.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in slot.gpus)
    env["ASSAY_SLOT"] = slot.name
    for var in target.run.compile_cache:
        folder = cache_dir(target, slot.name) / var.lower()
        folder.mkdir(parents=True, exist_ok=True)
        env[var] = str(folder)
    return env


def cache_dir(target: Target, slot: str) -> Path:
    """The slot's compile caches and the markers of the trees already warmed."""
    return target.state_dir / "cache" / slot


def _warm(target: Target, slot: Slot, cwd: Path, key: str, env: Mapping[str, str],
          logs: Path, role: str, cancel: process.CancelToken | None) -> float | None:
    """One unmeasured bench run in ``cwd`` when this slot has not run ``key`` there yet
    (its compile cache is cold for it); returns its wall time, or None when none was due."""
    marker = cache_dir(target, slot.name) / f"warm-{_digest(f'{cwd}:{key}')}"
    if marker.exists():
        return None
    r = process.run(target.bench.cmd, cwd=cwd, env=env, timeout_s=target.bench.timeout_s,
                    stdout_path=logs / f"warmup-{role}.out",
                    stderr_path=logs / f"warmup-{role}.err",
                    limits=target.limits, cancel=cancel)
    if r.exit_code == 0:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{cwd}\n{key}\n")
    return r.wall_s


def _read_all(specs: tuple[MetricSpec, ...], stdout: str, cwd: Path
              ) -> tuple[dict[str, float], RunStatus, str]:
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


def _prep(cmd: Command | None, cwd: Path, env: Mapping[str, str], logs: Path, name: str,
          target: Target, cancel: process.CancelToken | None) -> str:
    """Run a build or checks command; return '' on success or the reason it failed."""
    if cmd is None:
        return ""
    r = process.run(cmd.cmd, cwd=cwd, env=env, timeout_s=cmd.timeout_s,
                    stdout_path=logs / f"{name}.out", stderr_path=logs / f"{name}.err",
                    limits=target.limits, cancel=cancel)
    if r.timed_out:
        return f"{name} timed out after {cmd.timeout_s:g}s (logs: {logs / name}.err)"
    if r.cancelled:
        return f"{name} cancelled"
    if r.exit_code != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        return f"{name} exited {r.exit_code}: {' | '.join(tail)}"
    return ""


def early_stop_reason(why: str, wall_s: float, full_s: float | None, timeout_s: float) -> str:
    """The crash reason of a run a watch condition stopped, with the time it saved: the
    incumbent's latest full run on the slot, or the bench timeout when there is none yet."""
    full, ref = (full_s, "the incumbent's run") if full_s else (timeout_s, "the bench timeout")
    saved = max(0.0, full - wall_s)
    return (f"stopped early: {why}; after {wall_s:.1f} s, saving about {saved:.0f} s against "
            f"{ref} ({full:.0f} s)")


def run_block(block: Block, target: Target, ws: Workspace, slot: Slot, trees: SlotTrees,
              cancel: process.CancelToken | None = None) -> BlockResult:
    start = time.monotonic()
    logs = target.state_dir / "logs" / block.experiment_id / block.block_id
    logs.mkdir(parents=True, exist_ok=True)
    inc = block.incumbent
    cand = block.candidate
    b_params = {**inc.params, **(cand.params if cand else {})}

    def fail(kind: str, msg: str, checks: bool | None = None) -> BlockResult:
        return BlockResult(block.block_id, block.experiment_id, slot.name, (), checks, msg, kind,
                           time.monotonic() - start)

    a_key = f"{inc.commit}:{sorted(inc.params.items())}"
    try:
        if trees.a_state == a_key and ws.is_clean(trees.a, inc.commit):
            a_env = split_params(inc.params, target.params)[0]  # warm: nothing to reset
        else:
            trees.a_state = ""
            a_env = ws.materialize(trees.a, inc.commit, "", inc.params)
        if cand is not None:
            b_env = ws.materialize(trees.b, cand.base_commit, cand.patch, b_params)
        else:
            b_env = a_env
    except PatchError as exc:
        return fail("patch", str(exc))
    except AssayError as exc:
        return fail("executor", str(exc))

    # One bytecode cache per distinct content: a stale .pyc (same size, same second) can
    # never stand in for a changed source file, and the incumbent's cache stays warm.
    cache_root = target.state_dir / "pycache"
    a_env = {"PYTHONPYCACHEPREFIX": str(cache_root / _digest(a_key)), **a_env}
    b_key = a_key
    if cand is not None:
        b_key = f"{cand.base_commit}:{cand.digest}:{sorted(b_params.items())}"
    b_env = {"PYTHONPYCACHEPREFIX": str(cache_root / _digest(b_key)), **b_env}
    env_a = slot_env(target, slot, a_env)
    env_b = slot_env(target, slot, b_env)
    b_tree = trees.b if cand is not None else trees.a
    protected = [*list(target.protected), "assay.toml"]
    base_hash = hash_paths(trees.a, protected)
    last_hash: dict[Path, dict[str, str]] = {trees.a: base_hash}
    if cand is not None:
        last_hash[trees.b] = hash_paths(trees.b, protected)
        changed = diff_hashes(base_hash, last_hash[trees.b])
        if changed:
            return fail("harness_changed", f"the candidate changes protected paths: {changed}")

    if trees.a_state != a_key:
        why = _prep(target.build, trees.a, env_a, logs, "build-a", target, cancel)
        if why:
            return fail("executor", f"the incumbent does not build: {why}")
        trees.a_state = a_key
    if cand is not None:
        why = _prep(target.build, trees.b, env_b, logs, "build-b", target, cancel)
        if why:
            return fail("build", why)
        why = _prep(target.checks, trees.b, env_b, logs, "checks", target, cancel)
        if why:
            return fail("checks", why, checks=False)
    checks_ok: bool | None = True if (cand is not None and target.checks) else None

    warmups: list[tuple[str, float]] = []
    if target.run.warm_up != "none":
        todo = [("A", trees.a, a_key, env_a)] if "A" in block.order else []
        if cand is not None and target.run.warm_up == "all" and "B" in block.order:
            todo.append(("B", b_tree, b_key, env_b))
        for role_ch, cwd, key, env in todo:
            wall = _warm(target, slot, cwd, key, env, logs, role_ch, cancel)
            if cancel is not None and cancel.cancelled:
                return fail("cancelled", "block cancelled")
            if wall is not None:
                warmups.append((role_ch, wall))

    metric_specs = (target.metric, *target.guards)
    runs: list[RunResult] = []
    for i, role_ch in enumerate(block.order):
        role = Role(role_ch)
        cwd = trees.a if role is Role.INCUMBENT else b_tree
        env = env_a if role is Role.INCUMBENT else env_b
        run_id = f"{block.block_id}-r{i + 1}"
        before = last_hash.get(cwd) or hash_paths(cwd, protected)
        watcher = None
        if target.metric.watch is not None:
            watcher = Watcher(target.metric.watch,
                              trees.watch_ref if trees.watch_key == a_key else None)
        r = process.run(target.bench.cmd, cwd=cwd, env=env, timeout_s=target.bench.timeout_s,
                        stdout_path=logs / f"r{i + 1}-{role_ch}.out",
                        stderr_path=logs / f"r{i + 1}-{role_ch}.err",
                        limits=target.limits, cancel=cancel, watch=watcher)
        if r.cancelled:
            return fail("cancelled", "block cancelled")
        after = hash_paths(cwd, protected)
        last_hash[cwd] = after
        after_changes = diff_hashes(before, after)
        metrics: dict[str, float] = {}
        holdout: dict[str, float] = {}
        if after_changes:
            status, reason = RunStatus.HARNESS_CHANGED, f"run changed protected paths: " \
                                                        f"{after_changes}"
        elif r.stopped:
            status, reason = RunStatus.CRASHED, early_stop_reason(
                r.stopped, r.wall_s, trees.wall_ref if trees.watch_key == a_key else None,
                target.bench.timeout_s)
        elif r.timed_out:
            status, reason = RunStatus.TIMEOUT, f"killed after {target.bench.timeout_s:g}s"
        elif r.exit_code != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-2:]
            status, reason = RunStatus.CRASHED, f"exit {r.exit_code}: {' | '.join(tail)}"
        else:
            metrics, status, reason = _read_all(metric_specs, r.stdout, cwd)
        if status is RunStatus.OK and target.holdout is not None and target.holdout_metric:
            h = process.run(target.holdout.cmd, cwd=cwd, env=env,
                            timeout_s=target.holdout.timeout_s,
                            stdout_path=logs / f"r{i + 1}-{role_ch}.holdout.out",
                            stderr_path=logs / f"r{i + 1}-{role_ch}.holdout.err",
                            limits=target.limits, cancel=cancel)
            if h.exit_code == 0:
                hv, hs, _hr = _read_all((target.holdout_metric,), h.stdout, cwd)
                if hs is RunStatus.OK:
                    holdout = hv
        if watcher is not None and role is Role.INCUMBENT and status is RunStatus.OK:
            trees.watch_key, trees.watch_ref, trees.wall_ref = a_key, watcher.medians(), r.wall_s
        runs.append(RunResult(run_id, block.block_id, block.experiment_id, role, i + 1, status,
                              metrics, reason, r.exit_code, r.wall_s,
                              str(logs / f"r{i + 1}-{role_ch}.out"),
                              str(logs / f"r{i + 1}-{role_ch}.err"), slot.name, holdout))
        if status is RunStatus.HARNESS_CHANGED and role is Role.CANDIDATE:
            return BlockResult(block.block_id, block.experiment_id, slot.name, tuple(runs),
                               checks_ok, reason, "harness_changed", time.monotonic() - start)
        if status is RunStatus.HARNESS_CHANGED:
            trees.a_state = ""
    return BlockResult(block.block_id, block.experiment_id, slot.name, tuple(runs), checks_ok,
                       "", "", time.monotonic() - start, tuple(warmups))
