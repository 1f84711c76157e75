"""What ``assay init`` proposes to write (:class:`InitPlan`), and what detection saw on the
way (:class:`Findings`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Findings", "InitPlan", "Knob"]


@dataclass(frozen=True)
class Knob:
    """A hyperparameter found as ``NAME = number`` in a training script."""

    name: str
    type: str  # int or float
    default: int | float
    choices: tuple[int | float, ...]
    file: str = "train.py"


@dataclass(frozen=True)
class InitPlan:
    """What ``assay init`` proposes to write, and why."""

    root: Path
    layout: str = "none"  # pi-autoresearch, autoresearch, cmake, pytest, pyproject, none
    found: tuple[str, ...] = ()  # what detection saw, one sentence each
    notes: tuple[str, ...] = ()  # guesses the user should check
    metric: str = ""
    direction: str = "maximize"
    reader: str = "metric_lines"
    json_path: str = ""
    bench: str = ""
    bench_timeout: float | None = None
    build: str = ""
    checks: str = ""
    editable: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()
    brief: str = ""
    other_metrics: tuple[tuple[str, str], ...] = ()  # (name, direction): offered as guards
    slots: int = 1
    budget: int = 20
    proposer: str = "queue"  # one that runs without a model: queue (patches/) or sweep
    rule: str = "sequential"
    delta: float = 0.01
    guards: tuple[tuple[str, str], ...] = ()  # (name, direction): written as [[guards]]
    params: tuple[Knob, ...] = ()  # written as [[params]] (apply = "assign")
    cmake_scoped: bool = False  # the build and editable scope follow the bench's targets

    @property
    def missing(self) -> tuple[str, ...]:
        """What detection could not find and a person must give (empty: complete)."""
        out = []
        if not self.metric:
            out.append("metric")
        if not self.bench:
            out.append("bench")
        if not self.editable:
            out.append("editable")
        return tuple(out)

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def detected(self) -> bool:
        """Whether any known layout was recognised."""
        return self.layout != "none"

    def describe(self) -> str:
        """The plan in words, for the CLI to show before writing."""
        lines = [f"layout: {self.layout if self.detected else 'nothing recognised'}"]
        lines += [f"  found: {f}" for f in self.found]
        lines += [f"  guess: {n}" for n in self.notes]
        if self.missing:
            lines.append("  missing: " + ", ".join(self.missing)
                         + " (answer the questions, or edit assay.toml)")
        return "\n".join(lines)


@dataclass
class Findings:
    """What detection saw (``found``), guessed (``notes``) and would protect, gathered step
    by step before they go into the plan."""

    found: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    protected: list[str] = field(default_factory=list)
