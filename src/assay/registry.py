"""The names a config may use, each written once: proposers, executors, samplers, readers.

Each :class:`Registry` is one table of ``name → (help, factory)``. Config validation takes
its ``names``, ``--help`` texts take :meth:`Registry.help`, and construction calls
:meth:`Registry.get`. Factories import their backend lazily, so reading a config never
imports Optuna, Ray or an LLM client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .errors import ConfigError

if TYPE_CHECKING:
    from .config import MetricSpec, Target
    from .executors.base import Executor
    from .finalize.review import Reviewer
    from .journal import Journal
    from .proposers.base import Proposer
    from .section import Section
    from .workspace import Workspace

F = TypeVar("F")


@dataclass(frozen=True)
class Entry(Generic[F]):
    name: str
    help: str
    make: F


class Registry(Generic[F]):
    """One table of named backends of one kind (``what``: 'proposer', 'executor' ...)."""

    def __init__(self, what: str, *entries: Entry[F]) -> None:
        self.what = what
        self._entries = {e.name: e for e in entries}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[F]]:
        return iter(self._entries.values())

    def get(self, name: str) -> F:
        """The factory for ``name``; ``KeyError`` naming the valid ones when unknown."""
        try:
            return self._entries[name].make
        except KeyError:
            raise KeyError(f"unknown {self.what} {name!r}; valid: {', '.join(self.names)}") \
                from None

    def for_config(self, name: str, file: str, key: str) -> F:
        """The factory for ``name`` read from ``key`` of a config; a ConfigError if unknown."""
        try:
            return self.get(name)
        except KeyError:
            raise ConfigError(f"unknown {self.what} {name!r}", file=file, key=key,
                              valid=", ".join(self.names)) from None

    def help(self) -> str:
        """One line for ``--help``: every name with what it does."""
        return "; ".join(f"{e.name}: {e.help}" for e in self) + "."


# -- proposers ---------------------------------------------------------------------------
ProposerFactory = Callable[["Target", "Journal"], "Proposer"]


def _sweep(target: Target, journal: Journal) -> Proposer:
    from .proposers.sweep import SweepProposer

    sweep = SweepProposer.from_target(target)
    sweep.replay(journal.experiments(patches=False))
    return sweep


def _queue(target: Target, journal: Journal) -> Proposer:
    from .proposers.queue import QueueProposer

    queue = QueueProposer.from_target(target)
    queue.skip_tried({str(e.candidate.meta.get("file")) for e in journal.experiments(patches=False)
                      if e.candidate.proposer == "queue"})
    return queue


def _llm(target: Target, journal: Journal) -> Proposer:
    from .proposers.llm import LLMProposer

    return LLMProposer.from_target(target)


def _agent(target: Target, journal: Journal) -> Proposer:
    from .proposers.agent import AgentProposer

    return AgentProposer.from_target(target)


PROPOSERS: Registry[ProposerFactory] = Registry(
    "proposer",
    Entry("sweep", "Optuna over the [[params]]", _sweep),
    Entry("queue", "patches from a folder, in order", _queue),
    Entry("llm", "a chat model writes patches", _llm),
    Entry("agent", "a coding agent edits a checkout", _agent),
)

# -- executors ---------------------------------------------------------------------------
ExecutorFactory = Callable[["Target", "Workspace"], "Executor"]


def _local(target: Target, ws: Workspace) -> Executor:
    from .executors.local import LocalExecutor

    return LocalExecutor(target, ws)


def _ray(target: Target, ws: Workspace) -> Executor:
    from .executors.ray import RayExecutor

    exe: Executor = RayExecutor.from_target(target, ws)
    return exe


def _skypilot(target: Target, ws: Workspace) -> Executor:
    from .executors.skypilot import SkyPilotExecutor

    exe: Executor = SkyPilotExecutor.from_target(target, ws)
    return exe


EXECUTORS: Registry[ExecutorFactory] = Registry(
    "executor",
    Entry("local", "slots on this machine", _local),
    Entry("ray", "slots on a Ray cluster", _ray),
    Entry("skypilot", "a pool of cloud machines", _skypilot),
)

# -- sweep samplers ----------------------------------------------------------------------
SamplerFactory = Callable[[int, int], Any]  # (seed, n_startup) -> an Optuna sampler


def _tpe(seed: int, n_startup: int) -> Any:
    import optuna

    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup)


def _random(seed: int, n_startup: int) -> Any:
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


def _gp(seed: int, n_startup: int) -> Any:
    import optuna

    return optuna.samplers.GPSampler(seed=seed)


SAMPLERS: Registry[SamplerFactory] = Registry(
    "sampler",
    Entry("tpe", "tree-structured Parzen estimator", _tpe),
    Entry("random", "uniform random draws", _random),
    # The grid is walked by the proposer in a seeded order; the sampler only fills trials.
    Entry("grid", "every point of the grid once, in a seeded order", _random),
    Entry("gp", "Gaussian-process Bayesian optimisation", _gp),
)

# -- metric readers ----------------------------------------------------------------------
ReaderFactory = Callable[["MetricSpec", str, str, str], float]  # (spec, text, where, suffix)


def _metric_lines(spec: MetricSpec, text: str, where: str, suffix: str) -> float:
    from .metrics import from_readings, parse_metric_lines

    return from_readings(spec, parse_metric_lines(text), where, text, suffix)


def _summary_block(spec: MetricSpec, text: str, where: str, suffix: str) -> float:
    from .metrics import from_readings, parse_summary_block

    return from_readings(spec, parse_summary_block(text), where, text, suffix)


def _json(spec: MetricSpec, text: str, where: str, suffix: str) -> float:
    from .metrics import from_json

    return from_json(spec, text, where, suffix)


READERS: Registry[ReaderFactory] = Registry(
    "reader",
    Entry("metric_lines", "lines 'METRIC name=value'", _metric_lines),
    Entry("summary_block", "'name: value' lines after the last '---'", _summary_block),
    Entry("json", "a number at json_path in a JSON document", _json),
)

# -- finalize reviewers ------------------------------------------------------------------
ReviewerFactory = Callable[["Target", "Section"], "Reviewer | None"]  # [finalize.review]


def _no_review(target: Target, sec: Section) -> Reviewer | None:
    sec.reject_unknown(("reviewer",))
    return None


def _command_review(target: Target, sec: Section) -> Reviewer | None:
    from .finalize.review import command_reviewer

    return command_reviewer(target, sec)


def _llm_review(target: Target, sec: Section) -> Reviewer | None:
    from .finalize.review import llm_reviewer

    return llm_reviewer(target, sec)


def _agent_review(target: Target, sec: Section) -> Reviewer | None:
    from .finalize.review import agent_reviewer

    return agent_reviewer(target, sec)


REVIEWERS: Registry[ReviewerFactory] = Registry(
    "reviewer",
    Entry("none", "no review", _no_review),
    Entry("command", "a command (linter, sanitizer build) run on merge-base + group",
          _command_review),
    Entry("llm", "the chat model of [proposer.llm] reads the change", _llm_review),
    Entry("agent", "a coding-agent CLI reviews a checkout", _agent_review),
)
