"""`assay mcp`: an MCP server (stdio) so an agent can drive assay.

Tools:

- ``run_experiment``: a unified diff (and/or parameter values) plus a hypothesis is
  validated, measured against the incumbent on the target's slots and decided; the tool
  returns the decision (kept changes are committed on the run branch as usual).
- ``status``, ``log``, ``best``, ``show``: read the journal (read-only).
- ``add_hypothesis``: add a hypothesis to the journal for proposers to pick up.
- ``stop``: ask a running loop to stop gracefully (creates ``.assay/stop``).

``run_experiment`` takes the run lock for its duration, so it refuses while an
``assay run`` holds it (and vice versa). It queues the candidate with
:meth:`Loop.submit_candidate` and drives the loop with :meth:`Loop.run` (no proposer asked)
until the experiment is decided, so it gets what ``assay run`` gets: the lock check, the
stop file, hooks (``on_finish`` included) and re-queueing of blocks still running.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import __version__, api
from ..config.spec import Target
from ..errors import AssayError
from ..export import experiment_dict
from ..journal.store import Journal
from ..loop.driver import Loop
from ..model import Candidate, Experiment, ExperimentState, ParamValue, for_proposer
from ..proposers.base import ProposalContext, Proposer
from .data import lock_state, open_readonly, status_data
from .relay import answer_all

SERVER_NAME = "assay"
DEFAULT_TIMEOUT_S = 3600.0
SOURCE_KINDS = ("paper", "fork", "backend", "profile", "doc", "person", "proposer")
INSTRUCTIONS = """\
assay measures code changes against the current best version (the incumbent) of a
repository's benchmark, with paired statistics, and keeps only changes that measurably help.
Use `status` and `best` to see where the run stands, `log` for what was tried,
`run_experiment` to measure a unified diff against the incumbent (the diff must apply to the
incumbent commit and touch only editable files), `add_hypothesis` to record an idea, and
`stop` to ask a running `assay run` to stop."""


class OutsideProposer(Proposer):
    """Proposes nothing: candidates come from the MCP client."""

    name = "mcp"

    def propose(self, context: ProposalContext, n: int) -> list[Candidate]:
        return []


# -- the operations (plain functions, usable without MCP) -------------------------------
def _read(target: Target) -> Journal:
    journal = open_readonly(target)
    if journal is None:
        raise AssayError(f"{target.state_dir}: no journal yet; run `assay run` or the "
                         "run_experiment tool first")
    return journal


def _brief(journal: Journal, e: Experiment) -> dict[str, Any]:
    e = for_proposer(e)  # every tool here may be called by a proposer: held-out notes withheld
    d = e.decision
    return {"id": e.id, "state": e.state.value, "hypothesis": e.candidate.hypothesis,
            "proposer": e.candidate.proposer, "params": dict(e.candidate.params),
            "effect": d.effect if d else None, "interval": [d.lo, d.hi] if d else None,
            "runs": d.runs_used if d else 0, "reason": e.note or (d.reason if d else ""),
            "commit": e.commit}


def status(target: Target) -> dict[str, Any]:
    journal = open_readonly(target)
    try:
        data = status_data(target, journal)
    finally:
        if journal is not None:
            journal.close()
    return {k: data[k] for k in ("metric", "counts", "incumbent", "baseline", "best",
                                 "calibration", "cost", "branch", "lock")
            } | {"experiments": len(data["experiments"]),
                 "improvement": data.get("improvement"), "spend": data.get("spend"),
                 "win_rates": data["win_rates"], "fidelity": data.get("fidelity")}


def log(target: Target, last: int = 20, state: str | None = None) -> list[dict[str, Any]]:
    valid = [s.value for s in ExperimentState]
    if state and state not in valid:
        raise AssayError(f"log: unknown state {state!r}; valid: {', '.join(valid)}")
    journal = _read(target)
    try:
        exps = journal.experiments([ExperimentState(state)] if state else None,
                                   patches=False)
        return [_brief(journal, e) for e in exps[-last:] if last > 0]
    finally:
        journal.close()


def best(target: Target) -> dict[str, Any]:
    journal = _read(target)
    try:
        inc = journal.incumbent()
        kept = journal.experiments([ExperimentState.KEPT], patches=False)
        data = status_data(target, journal)
        return {"metric": data["metric"], "baseline": data["baseline"], "best": data["best"],
                "improvement": data.get("improvement"),
                "incumbent": None if inc is None else {
                    "commit": inc.commit, "params": dict(inc.params),
                    "experiment": inc.experiment_id},
                "kept": [_brief(journal, e) for e in kept], "branch": data["branch"]}
    finally:
        journal.close()


def show(target: Target, experiment_id: str) -> dict[str, Any]:
    journal = _read(target)
    try:
        exp = journal.experiment(experiment_id)
        if exp is None:
            raise AssayError(f"no experiment {experiment_id!r} in the journal")
        out = experiment_dict(journal, for_proposer(exp))
        out["runs"] = [{"run": r.run_id, "role": r.role.value, "status": r.status.value,
                        "metrics": dict(r.metrics), "slot": r.slot, "wall_s": r.wall_s,
                        "reason": r.reason} for r in journal.runs(experiment_id)]
        return out
    finally:
        journal.close()


def add_hypothesis(target: Target, text: str, sources: Sequence[str] = (),
                   source_kind: str = "person", score: float = 0.0) -> dict[str, Any]:
    if not text.strip():
        raise AssayError("the hypothesis text is empty")
    if source_kind not in SOURCE_KINDS:
        raise AssayError(f"add_hypothesis: unknown source_kind {source_kind!r}; valid: "
                         f"{', '.join(SOURCE_KINDS)}")
    if isinstance(score, bool) or not isinstance(score, (int, float)) \
            or not math.isfinite(score):
        raise AssayError(f"add_hypothesis: score must be a finite number, not {score!r}")
    journal = api.open_journal(target)
    try:
        hid = journal.add_hypothesis(text, list(sources), source_kind, score)
        h = next((h for h in journal.hypotheses() if h.id == hid), None)
        return {"id": hid, "text": text.strip(), "status": h.status if h else "open",
                "source_kind": h.source_kind if h else source_kind}
    finally:
        journal.close()


def stop(target: Target) -> dict[str, Any]:
    """Create the stop file; say whether a live run holds the lock to act on it."""
    target.state_dir.mkdir(parents=True, exist_ok=True)
    path = target.state_dir / "stop"
    path.write_text(f"stop requested at {time.time():.0f}\n")
    lock = lock_state(target)
    if lock["running"]:
        holder = lock["holder"] or {}
        msg = (f"stop requested: the run (pid {holder.get('pid')} on {holder.get('host')}) "
               "will stop after cancelling its running blocks")
    else:
        msg = ("stop file written, but no run holds the lock now; a run started later "
               "ignores it")
    return {"stop_file": str(path.relative_to(target.root)), "running": lock["running"],
            "message": msg}


def run_experiment(target: Target, patch: str = "", hypothesis: str = "",
                   params: Mapping[str, ParamValue] | None = None,
                   sources: Sequence[str] = (), hypothesis_id: int | None = None,
                   timeout_s: float = DEFAULT_TIMEOUT_S, proposer: str = "mcp",
                   meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Validate, measure and decide one candidate against the incumbent; its result."""
    if not patch.strip() and not params:
        raise AssayError("give a unified diff (patch) or parameter values to measure")
    with api.session(target, proposer=OutsideProposer()) as loop:
        loop.start()
        loop.calibrate()  # a new target measures its noise before the candidate
        inc = loop.incumbent
        cand = Candidate(base_commit=inc.commit, patch=patch, params=dict(params or {}),
                         hypothesis=hypothesis.strip() or "(no hypothesis given)",
                         proposer=proposer, sources=tuple(sources), hypothesis_id=hypothesis_id,
                         meta=dict(meta or {}))
        exp = loop.submit_candidate(cand)
        loop.run(max_hours=timeout_s / 3600, propose=False,
                 until=functools.partial(_decided, loop, exp.id))
        done = loop.journal.experiment(exp.id)
        assert done is not None
        out = experiment_dict(loop.journal, for_proposer(done))  # a proposer may call it
        new_inc = loop.journal.incumbent()
    out["kept"] = done.state is ExperimentState.KEPT
    out["finished"] = done.state.is_finished()
    out["stopped"] = "" if out["finished"] else (
        f"{loop.stop_reason}; the experiment is left queued")
    out["incumbent"] = None if new_inc is None else {
        "commit": new_inc.commit, "params": dict(new_inc.params),
        "experiment": new_inc.experiment_id}
    return out


def _decided(loop: Loop, exp_id: str) -> str:
    exp = loop.journal.experiment(exp_id)
    return f"{exp_id} is decided" if exp is None or exp.state.is_finished() else ""


# -- the MCP server ----------------------------------------------------------------------
def _server_class() -> Any:
    """MCPServer (mcp 2), or FastMCP (mcp 1)."""
    try:
        return importlib.import_module("mcp.server.mcpserver").MCPServer
    except ImportError:
        return importlib.import_module("mcp.server.fastmcp").FastMCP


def _tool_error_class() -> type[Exception]:
    for name in ("mcp.server.mcpserver.exceptions", "mcp.server.fastmcp.exceptions"):
        try:
            cls: type[Exception] = importlib.import_module(name).ToolError
            return cls
        except (ImportError, AttributeError):
            continue
    return RuntimeError


def _guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Expected failures (bad input, a held lock) reach the client as a tool error with
    their message, not as an internal error."""
    tool_error = _tool_error_class()

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (AssayError, ValueError) as exc:
            raise tool_error(str(exc)) from None

    return wrapper


def build_server(root: str | Path = ".", config: str | None = None) -> Any:
    """The MCP server for the repository at ``root`` (call ``.run()`` to serve stdio)."""
    target = api.load(root, config)
    cls = _server_class()
    try:
        server = cls(SERVER_NAME, instructions=INSTRUCTIONS, version=__version__)
    except TypeError:  # mcp 1's FastMCP takes no version
        server = cls(SERVER_NAME, instructions=INSTRUCTIONS)
        with contextlib.suppress(AttributeError):
            server._mcp_server.version = __version__

    def run_experiment_tool(patch: str = "", hypothesis: str = "",
                            params: dict[str, int | float | str | bool] | None = None,
                            sources: list[str] | None = None, hypothesis_id: int | None = None,
                            timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """Measure one change against the incumbent and decide it (keep or discard).

        patch: a unified diff (`git diff` output) against the incumbent commit, touching
        only editable files; params: parameter values declared in assay.toml (optional);
        hypothesis: why the change should help. Returns the experiment with its decision
        (verdict, effect and interval, runs), `kept`, and the incumbent after it.
        """
        return run_experiment(target, patch, hypothesis, params, sources or (), hypothesis_id,
                              timeout_s)

    def status_tool() -> dict[str, Any]:
        """Where the run stands: metric, baseline, best, counts by state, noise, cost, spend on
        model calls (dollars, tokens, per kept change, caps, a stop rule), lock."""
        return status(target)

    def log_tool(last: int = 20, state: str | None = None) -> list[dict[str, Any]]:
        """The last `last` experiments (optionally only one state: kept, discarded, invalid,
        crashed, conflict, queued, running), each with its hypothesis, effect, interval and
        reason."""
        return log(target, last, state)

    def best_tool() -> dict[str, Any]:
        """The incumbent (best version so far): its value, commit, and the kept changes."""
        return best(target)

    def show_tool(experiment_id: str) -> dict[str, Any]:
        """One experiment in full: its patch, decision and runs."""
        return show(target, experiment_id)

    def add_hypothesis_tool(text: str, sources: list[str] | None = None,
                            source_kind: str = "person", score: float = 0.0) -> dict[str, Any]:
        """Record a hypothesis for proposers to test. source_kind: paper, fork, backend,
        profile, doc or person; sources: URLs or references; score: priority (higher first)."""
        return add_hypothesis(target, text, sources or (), source_kind, score)

    def stop_tool() -> dict[str, Any]:
        """Ask the running loop to stop gracefully (it cancels running blocks and exits)."""
        return stop(target)

    for fn, name in ((run_experiment_tool, "run_experiment"), (status_tool, "status"),
                     (log_tool, "log"), (best_tool, "best"), (show_tool, "show"),
                     (add_hypothesis_tool, "add_hypothesis"), (stop_tool, "stop")):
        server.add_tool(_guarded(fn), name=name)
    return server


def serve_stdio(server: Any) -> None:
    """Run ``server`` on stdio; a request read before the client closed stdin is answered."""
    answer_all(lambda: server.run("stdio"))


def serve(root: str | Path = ".", config: str | None = None) -> None:
    serve_stdio(build_server(root, config))
