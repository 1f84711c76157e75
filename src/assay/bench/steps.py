"""The commands around a block's timed runs: a build, the checks and the compare command.

A step runs in one tree and says why it failed ('' when it succeeded). The checks run once
per tree content (:class:`~assay.bench.checks.CheckMemo`): a failure is run again on the
candidate, then on the incumbent, to tell a flaky test from a real failure; the compare
command's output on the candidate must agree with the incumbent's. A step cut by the
block's cancel (a stop, Ctrl-C) is no outcome, and nothing of it is remembered.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..config.spec import Command, Target
from . import contain, process
from .checks import CheckMemo, failing_tests, tail
from .outputs import compare_outputs


@dataclass(frozen=True)
class Step:
    """One build, checks or compare command: '' when it succeeded, else why not."""

    why: str
    seconds: float
    output: str
    cancelled: bool = False  # cut by the block's cancel: no outcome


def run_step(cmd: Command | None, cwd: Path, env: Mapping[str, str], logs: Path, name: str,
             target: Target, cancel: process.CancelToken | None) -> Step:
    """Run a build, checks or compare command in ``cwd``."""
    if cmd is None:
        return Step("", 0.0, "")
    t0 = time.monotonic()
    r = process.run(cmd.cmd, cwd=cwd, env=env, timeout_s=cmd.timeout_s,
                    stdout_path=logs / f"{name}.out", stderr_path=logs / f"{name}.err",
                    limits=target.limits, cancel=cancel,
                    sandbox=contain.spec_for(target, cwd, env))
    took = time.monotonic() - t0
    out = (r.stdout or "") + ("\n" + r.stderr if r.stderr else "")
    if r.timed_out:
        return Step(f"{name} timed out after {cmd.timeout_s:g}s (logs: {logs / name}.err)",
                    took, out)
    if r.cancelled:
        return Step(f"{name} cancelled", took, out, cancelled=True)
    if r.exit_code != 0:
        lines = (r.stderr or r.stdout).strip().splitlines()[-3:]
        return Step(f"{name} exited {r.exit_code}: {' | '.join(lines)} (logs: {logs / name}.out)",
                    took, out)
    return Step("", took, r.stdout or "")


@dataclass(frozen=True)
class ChecksOutcome:
    outcome: str  # passed, reused, flaky, failed
    runs: int  # checks runs on the candidate in this block
    detail: str = ""


def run_checks(target: Target, memo: CheckMemo, key: str, cand_tree: Path, inc_tree: Path,
               env_b: Mapping[str, str], env_a: Mapping[str, str], logs: Path,
               cancel: process.CancelToken | None) -> ChecksOutcome:
    """The candidate's checks, once per content; a failure is re-run to tell flaky from real."""
    if target.checks is None:
        return ChecksOutcome("", 0)
    known = memo.get(key)
    if known is not None:
        return ChecksOutcome("reused", 0, known.detail)
    first = run_step(target.checks, cand_tree, env_b, logs, "checks", target, cancel)
    if not first.why:
        memo.put(key, "passed")
        return ChecksOutcome("passed", 1)
    if _stopped(first, cancel):  # a cancelled run is no outcome, and none is remembered
        return ChecksOutcome("cancelled", 1, first.why)
    names = failing_tests(first.output)
    again = run_step(target.checks, cand_tree, env_b, logs, "checks-again", target, cancel)
    if _stopped(again, cancel):
        return ChecksOutcome("cancelled", 2, again.why)
    named = f" ({', '.join(names)})" if names else ""
    if not again.why:
        detail = f"failed once{named}, then passed on the candidate"
        memo.put(key, "flaky", detail)
        return ChecksOutcome("flaky", 2, detail)
    names = names or failing_tests(again.output)
    named = f" ({', '.join(names)})" if names else ""
    inc = run_step(target.checks, inc_tree, env_a, logs, "checks-incumbent", target, cancel)
    if _stopped(inc, cancel):
        return ChecksOutcome("cancelled", 2, inc.why)
    if inc.why:
        detail = (f"failed twice on the candidate{named} and also on the incumbent: the "
                  "failure does not come from the candidate")
        memo.put(key, "flaky", detail)
        return ChecksOutcome("flaky", 2, detail)
    what = ", ".join(names) if names else again.why
    return ChecksOutcome("failed", 2, f"{what}; failed twice on the candidate and passed on "
                                      f"the incumbent\n{tail(again.output)}")


def _stopped(step: Step, cancel: process.CancelToken | None) -> bool:
    """Whether ``step`` was cut by the block's cancel (a stop, Ctrl-C): its exit says
    nothing about the tree."""
    return step.cancelled or (cancel is not None and cancel.cancelled)


# what run_compare returns when the block was cancelled during it: no verdict
CANCELLED = "cancelled"


def run_compare(target: Target, memo: CheckMemo, a_key: str, b_key: str, a_tree: Path,
                b_tree: Path, env_a: Mapping[str, str], env_b: Mapping[str, str], logs: Path,
                cancel: process.CancelToken | None) -> str:
    """'' when the candidate's compare output agrees with the incumbent's, :data:`CANCELLED`
    when the block was cancelled meanwhile, else why not."""
    if target.compare is None or memo.get(f"compare-{b_key}") is not None:
        return ""
    store = target.state_dir / "compare"
    a_out = store / f"{a_key}.out"
    if not a_out.is_file():
        a = run_step(target.compare, a_tree, env_a, logs, "compare-a", target, cancel)
        if _stopped(a, cancel):
            return CANCELLED
        if a.why:
            return f"the incumbent's compare command failed: {a.why}"
        store.mkdir(parents=True, exist_ok=True)
        a_out.write_text(a.output)
    b = run_step(target.compare, b_tree, env_b, logs, "compare-b", target, cancel)
    if _stopped(b, cancel):
        return CANCELLED
    if b.why:
        return b.why
    diffs = compare_outputs(a_out.read_text(), b.output, target.compare_rtol,
                            target.compare_atol)
    if diffs:
        return ("the candidate's output differs from the incumbent's:\n"
                + "\n".join(d.describe() for d in diffs))
    memo.put(f"compare-{b_key}", "passed")
    return ""
