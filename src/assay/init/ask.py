"""The questions ``assay init`` asks in a terminal, each with its guess as the default."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from ..config.spec import CONFIG_NAME, READERS, glob_match
from ..errors import ConfigError
from .bench import guess_direction
from .detect import detect
from .files import referenced_files, unmatched_globs
from .plan import InitPlan

__all__ = ["Prompt", "ask_plan"]

Prompt = Callable[[str, str], str]

_PROPOSER_WORDS = {"queue": "queue (patch files you put in patches/)",
                   "sweep": "sweep (searches the [[params]] found)"}


def _ask_choice(prompt: Prompt, question: str, default: str, choices: Sequence[str],
                aliases: dict[str, str] | None = None, tries: int = 3) -> str:
    aliases = aliases or {}
    for _ in range(tries):
        answer = prompt(question, default).strip().lower()
        answer = aliases.get(answer, answer)
        if answer in choices:
            return answer
    raise ConfigError(f"no valid answer to {question!r} after {tries} tries",
                      file=CONFIG_NAME, valid=", ".join(choices))


def _ask_text(prompt: Prompt, question: str, default: str, tries: int = 3) -> str:
    for _ in range(tries):
        answer = prompt(question, default).strip()
        if answer:
            return answer
    raise ConfigError(f"{question!r} needs an answer", file=CONFIG_NAME)


def _split_globs(text: str) -> tuple[str, ...]:
    return tuple(g for g in (p.strip() for p in re.split(r"[,\s]+", text)) if g)


def _ask_globs(prompt: Prompt, root: Path, default: str, tries: int = 3) -> tuple[str, ...]:
    """Editable globs, asked again while one of them matches no file."""
    question = "Editable files (globs, comma-separated)"
    for _ in range(tries):
        globs = _split_globs(prompt(question, default))
        empty = unmatched_globs(root, globs) if globs else ["(none given)"]
        if not empty:
            return globs
        question = (f"{', '.join(empty)} matches no file here; editable files (globs, "
                    "comma-separated)")
    raise ConfigError(f"no editable glob matching a file after {tries} tries",
                      file=CONFIG_NAME, key="scope.editable",
                      valid="globs that match the files to optimise (add them first)")


def ask_plan(root: Path, prompt: Prompt, plan: InitPlan | None = None,
             given: Sequence[str] = ()) -> InitPlan:
    """Confirm or complete a plan by asking: metric, direction, reader, bench, editable,
    checks and proposer, each with its guess as the default answer.

    ``prompt(question, default) -> answer`` is called once per question (``typer.prompt``
    fits); what ``given`` names (answered by flags) is not asked again.
    """
    base = plan if plan is not None else detect(Path(root))
    metric = base.metric if "metric" in given else _ask_text(
        prompt, "Metric name (as the benchmark prints it)", base.metric or "score")
    guessed, _ = guess_direction(metric)
    default_dir = base.direction if metric == base.metric else guessed
    direction = default_dir if "direction" in given else _ask_choice(
        prompt, "Direction: maximize or minimize", default_dir, ("maximize", "minimize"),
        {"max": "maximize", "min": "minimize", "+": "maximize", "-": "minimize",
         "higher": "maximize", "lower": "minimize"})
    reader = _ask_choice(
        prompt, "Output format: metric_lines (METRIC name=value), summary_block ('---' "
        "then name: value) or json", base.reader, READERS,
        {"lines": "metric_lines", "metric": "metric_lines", "summary": "summary_block",
         "block": "summary_block"})
    json_path = base.json_path
    if reader == "json":
        json_path = _ask_text(prompt, "JSON path to the metric (e.g. results.0.tokens_per_s)",
                              json_path or metric)
    bench = base.bench if "bench" in given else _ask_text(
        prompt, "Benchmark command (prints the metric)", base.bench or "python bench.py")
    editable = base.editable if "editable" in given else _ask_globs(
        prompt, Path(root), ", ".join(base.editable) or "src/**/*.py")
    checks = base.checks if "checks" in given else prompt(
        "Correctness check command (empty for none)", base.checks).strip()
    choices = ("queue", "sweep") if base.params else ("queue",)
    proposer = _ask_choice(
        prompt, "Who proposes candidates: " + " or ".join(_PROPOSER_WORDS[c] for c in choices)
        + "; a model (llm, agent) needs its own table, added later",
        base.proposer if base.proposer in choices else "queue", choices)
    notes = tuple(n for n in base.notes if "guess" not in n or metric != base.metric)
    helpers = [h for h in referenced_files(Path(root), f"{bench} {checks}")
               if not any(glob_match(h, g) for g in editable)]
    return replace(base, metric=metric, direction=direction, reader=reader,
                   json_path=json_path, bench=bench, editable=editable, checks=checks,
                   proposer=proposer, protected=tuple(dict.fromkeys((*base.protected,
                                                                     *helpers))),
                   other_metrics=tuple(m for m in base.other_metrics if m[0] != metric),
                   notes=(*notes, "confirmed by hand"))
