"""The text of the ``assay.toml`` that ``assay init`` writes, with a comment on every key."""

from __future__ import annotations

from collections.abc import Iterable

from .plan import InitPlan

__all__ = ["QUEUE_FOLDER", "render"]

QUEUE_FOLDER = "patches"  # where init points the queue proposer (created when missing)


def _q(text: str) -> str:
    """A TOML basic string."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _qlist(items: Iterable[str]) -> str:
    return "[" + ", ".join(_q(i) for i in items) + "]"


def _comment(text: str) -> str:
    return " ".join(text.split())


def render(plan: InitPlan) -> str:
    """The text of ``assay.toml`` for ``plan``, with a comment on every key.

    An incomplete plan still renders to a file that parses, with TODO placeholders.
    """
    out = [*_header(plan), *_target(plan), *_metric(plan), *_offered_guards(plan),
           *_guards(plan), *_commands(plan), *_scope(plan), *_params(plan), *_run(plan),
           *_decision(plan), ""]
    return "\n".join(out)


def _header(plan: InitPlan) -> list[str]:
    out: list[str] = [
        f"# assay.toml, written by `assay init` (layout: {plan.layout}).",
        "# assay measures each candidate change against the current best with paired runs",
        "# and keeps only changes that measurably help. Edit freely; every key is explained.",
    ]
    if plan.found:
        out.append("#")
        out.append("# What init saw:")
        out += [f"#   - {_comment(f)}" for f in plan.found]
    if plan.notes:
        out.append("# Guesses to check:")
        out += [f"#   - {_comment(n)}" for n in plan.notes]
    if plan.missing:
        out.append("# TODO: init could not find: " + ", ".join(plan.missing)
                   + ". Fill in the placeholders marked TODO below.")
    return out


def _target(plan: InitPlan) -> list[str]:
    return ["", "[target]",
            "# The brief proposers read: what to optimise and what to leave alone ('' for "
            "none).",
            f"brief = {_q(plan.brief)}"]


def _metric(plan: InitPlan) -> list[str]:
    metric = plan.metric or "score"
    out = ["", "[metric]",
           "# The number a candidate has to improve, spelled as the benchmark prints it."]
    out.append(f"name = {_q(metric)}" + ("  # TODO: the real metric name"
                                         if not plan.metric else ""))
    out.append('# "maximize" (bigger is better) or "minimize" (smaller is better).')
    out.append(f"direction = {_q(plan.direction)}")
    out.append('# How the value is read: "metric_lines" (lines METRIC name=value), '
               '"summary_block"')
    out.append("# (the last '---' line, then name: value lines) or \"json\" (with "
               "json_path).")
    out.append(f"reader = {_q(plan.reader)}")
    if plan.reader == "json":
        out.append("# Dotted path to the number inside the JSON output; list indices are "
                   "numbers.")
        out.append(f"json_path = {_q(plan.json_path or metric)}")
    out.append("# Optional: [low, high] outside which a value is implausible and never "
               "trusted.")
    out.append("# bounds = [0, 1e12]")
    return out


def _offered_guards(plan: InitPlan) -> list[str]:
    """The other metrics the benchmark prints, as commented-out guards."""
    if not plan.other_metrics:
        return []
    out = ["", "# Other metrics the benchmark prints. Uncomment a block to make it a "
           "guard:", "# a candidate that worsens a guard by more than its tolerance "
           "is not kept."]
    for name, direction in plan.other_metrics:
        out += ["# [[guards]]", f"# name = {_q(name)}",
                f"# direction = {_q(direction)}",
                f"# reader = {_q(plan.reader)}",
                "# tolerance = 0.02  # the relative regression allowed (2%)", "#"]
    out.pop()
    return out


def _guards(plan: InitPlan) -> list[str]:
    out: list[str] = []
    for name, direction in plan.guards:
        out += ["", "# A guard: a candidate worsening it by more than its tolerance is not kept.",
                "[[guards]]", f"name = {_q(name)}", f"direction = {_q(direction)}",
                f"reader = {_q(plan.reader)}"]
        if name.endswith("_mb"):
            out.append('unit = "MB"  # exports convert it (memory_gb in results.tsv)')
        out.append("tolerance = 0.05  # the relative regression allowed (5%)")
    return out


def _commands(plan: InitPlan) -> list[str]:
    out = ["", "[commands]",
           "# Runs the benchmark and prints the metric; one run per measurement, on an",
           "# isolated slot, so it should not depend on anything another run changes."]
    if plan.bench:
        out.append(f"bench = {_q(plan.bench)}")
    else:
        out.append("bench = \"echo 'TODO: set commands.bench in assay.toml' >&2; exit 2\""
                   "  # TODO")
    out.append("# Seconds before a benchmark run is killed (its whole process group).")
    out.append(f"bench_timeout = {plan.bench_timeout or 600.0:g}")
    if plan.build:
        out.append("# Runs once per candidate before its benchmark runs.")
        out.append(f"build = {_q(plan.build)}")
    else:
        out.append("# Optional: runs once per candidate before its benchmark runs.")
        out.append('# build = "make"')
    if plan.checks:
        out.append("# Must exit 0, or the candidate is invalid however fast it is.")
        out.append(f"checks = {_q(plan.checks)}")
    else:
        out.append("# Optional: a correctness check that must exit 0 for a candidate to "
                   "count.")
        out.append('# checks = "python -m pytest -q"')
    return out


def _scope(plan: InitPlan) -> list[str]:
    out = ["", "[scope]", "# Files a candidate may change (globs relative to the "
           "repository; ** spans folders)."]
    editable = plan.editable or ("src/**",)
    out.append(f"editable = {_qlist(editable)}" + ("  # TODO: the files to optimise"
                                                   if not plan.editable else ""))
    out.append("# Files no candidate may touch: the benchmark, the checks, the evaluation "
               "data.")
    out.append("# (assay.toml itself is always protected.)")
    out.append(f"protected = {_qlist(plan.protected)}")
    return out


def _params(plan: InitPlan) -> list[str]:
    out: list[str] = []
    for k in plan.params:
        out += ["", f"# {k.name} in {k.file}: the sweep tries these values (the file keeps its "
                "own spelling", "# of a value it already holds).", "[[params]]",
                f"name = {_q(k.name)}", f"type = {_q(k.type)}",
                "choices = [" + ", ".join(repr(c) for c in k.choices) + "]",
                f"default = {k.default!r}", 'apply = "assign"', f"file = {_q(k.file)}"]
    return out


def _run(plan: InitPlan) -> list[str]:
    out = ["", "[run]", "# Benchmarks run in parallel, one per slot (use 1 for a single "
           "GPU or a noisy machine)."]
    out.append(f"slots = {plan.slots}")
    out.append("# Experiments (candidates) before the run stops.")
    out.append(f"budget = {plan.budget}")
    out.append('# Who proposes candidates: "sweep" (searches [[params]]), "queue" (patch '
               'files),')
    out.append('# "llm" (a model writes patches) or "agent" (a coding agent edits a '
               'checkout).')
    out.append(f"proposer = {_q(plan.proposer)}")
    if plan.proposer == "queue":
        out += ["", "[proposer.queue]", "# The folder of patch files (*.patch, *.diff) measured "
                "in order; a line", "# `# hypothesis: ...` at the top of a file says what it "
                "tries."]
        out.append(f"path = {_q(QUEUE_FOLDER)}")
    return out


def _decision(plan: InitPlan) -> list[str]:
    return ["", "[decision]", '# "sequential" (stop as soon as the evidence is clear), '
            '"fixed" (a set number of', '# pairs) or "expensive" (few, long runs).',
            f"rule = {_q(plan.rule)}",
            "# The smallest improvement worth keeping, as a fraction (0.01 = 1%).",
            f"delta = {plan.delta:g}"]
