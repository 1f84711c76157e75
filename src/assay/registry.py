"""The names a config may use, each written once: proposers, executors, samplers, readers.

Each :class:`Registry` is one table of ``name → (help, where)``, ``where`` naming its factory
as ``"module:attr"`` (as Datasette lists its built-in plugins). Config validation takes its
``names``, ``--help`` texts take :meth:`Registry.help`, and construction calls
:meth:`Registry.get`, which imports the factory's module then, and only then. So this table
imports no backend, reading a config never imports Optuna, Ray or an LLM client, and each
factory lives next to the class it builds.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from .errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Entry:
    name: str
    help: str
    where: str  # "package.module:attr[.attr]", the factory


def resolve(where: str) -> Any:
    """The object ``"module:attr[.attr]"`` names, importing its module."""
    module, _, path = where.partition(":")
    obj: Any = importlib.import_module(module)
    for attr in path.split("."):
        obj = getattr(obj, attr)
    return obj


class Registry(Generic[F]):
    """One table of named backends of one kind (``what``: 'proposer', 'executor' ...)."""

    def __init__(self, what: str, *entries: Entry) -> None:
        self.what = what
        self._entries = {e.name: e for e in entries}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries.values())

    def get(self, name: str) -> F:
        """The factory for ``name``; ``KeyError`` naming the valid ones when unknown."""
        try:
            entry = self._entries[name]
        except KeyError:
            raise KeyError(f"unknown {self.what} {name!r}; valid: {', '.join(self.names)}") \
                from None
        return cast(F, resolve(entry.where))

    def for_config(self, name: str, file: str, key: str) -> F:
        """The factory for ``name`` read from ``key`` of a config; a ConfigError if unknown."""
        if name not in self._entries:
            raise ConfigError(f"unknown {self.what} {name!r}", file=file, key=key,
                              valid=", ".join(self.names))
        return self.get(name)

    def help(self) -> str:
        """One line for ``--help``: every name with what it does."""
        return "; ".join(f"{e.name}: {e.help}" for e in self) + "."


# (target, journal) -> a Proposer
PROPOSERS: Registry[Callable[..., Any]] = Registry(
    "proposer",
    Entry("sweep", "Optuna over the [[params]]", "assay.proposers.sweep:make_proposer"),
    Entry("queue", "patches from a folder, in order", "assay.proposers.queue:make_proposer"),
    Entry("llm", "a chat model writes patches", "assay.proposers.llm:make_proposer"),
    Entry("agent", "a coding agent edits a checkout", "assay.proposers.agent:make_proposer"),
)

# (target, workspace) -> an Executor
EXECUTORS: Registry[Callable[..., Any]] = Registry(
    "executor",
    Entry("local", "slots on this machine", "assay.executors.local:LocalExecutor"),
    Entry("ray", "slots on a Ray cluster", "assay.executors.ray:RayExecutor.from_target"),
    Entry("skypilot", "a pool of cloud machines",
          "assay.executors.skypilot:SkyPilotExecutor.from_target"),
)

# (seed, n_startup) -> an Optuna sampler
SAMPLERS: Registry[Callable[[int, int], Any]] = Registry(
    "sampler",
    Entry("tpe", "tree-structured Parzen estimator", "assay.proposers.sweep:tpe_sampler"),
    Entry("random", "uniform random draws", "assay.proposers.sweep:random_sampler"),
    # The grid is walked by the proposer in a seeded order; the sampler only fills trials.
    Entry("grid", "every point of the grid once, in a seeded order",
          "assay.proposers.sweep:random_sampler"),
    Entry("gp", "Gaussian-process Bayesian optimisation", "assay.proposers.sweep:gp_sampler"),
)

# (spec, text, where, suffix) -> the metric's value
READERS: Registry[Callable[..., float]] = Registry(
    "reader",
    Entry("metric_lines", "lines 'METRIC name=value'", "assay.bench.readers:metric_lines"),
    Entry("summary_block", "'name: value' lines after the last '---'",
          "assay.bench.readers:summary_block"),
    Entry("json", "a number at json_path in a JSON document", "assay.bench.metrics:from_json"),
)

# (target, [finalize.review] section) -> a Reviewer or None
REVIEWERS: Registry[Callable[..., Any]] = Registry(
    "reviewer",
    Entry("none", "no review", "assay.finalize.review:no_reviewer"),
    Entry("command", "a command (linter, sanitizer build) run on merge-base + group",
          "assay.finalize.review:command_reviewer"),
    Entry("llm", "the chat model of [proposer.llm] reads the change",
          "assay.finalize.review:llm_reviewer"),
    Entry("agent", "a coding-agent CLI reviews a checkout",
          "assay.finalize.review:agent_reviewer"),
)


# the loop's hook before each proposal: research re-ranks its brief on what the last wave of
# experiments showed (named, so that a core verb starts without loading research)
RESEARCH_RERANK = "assay.research.rerank:after_wave"
