"""`assay init`: look at a repository, propose an ``assay.toml``, write it.

Detection reads files and runs nothing, except CMake to list a project's own targets
(:mod:`assay.init.cmaketargets`) when the commands name programs under ``build/``. It
recognises, in this order of precedence for the metric and the benchmark:

- a **pi-autoresearch** project: ``autoresearch.sh`` is the benchmark,
  ``autoresearch.checks.sh`` the checks, and the metric names are found by searching the
  scripts for ``METRIC name=`` (the first one found is the primary metric, the others are
  offered as commented-out guards);
- a **karpathy autoresearch** layout: ``train.py`` printing ``key: value`` lines after a
  ``---`` line, ``prepare.py`` (protected) and ``program.md`` (the brief); the metric is
  ``val_bpb`` (minimize) read with the ``summary_block`` reader, ``train.py`` is editable.

and, adding to whatever else was found:

- **pytest** (``tests/``, ``conftest.py``, ``pytest.ini`` or a pytest section in
  ``pyproject.toml``/``setup.cfg``/``tox.ini``): checks = ``python -m pytest -q``;
- **CMake** (``CMakeLists.txt``): a Release build, and ``ctest`` as checks when the project
  enables testing;
- **pyproject.toml**: the package sources (``src/**/*.py`` for a src layout) are editable.

A direction guessed from a metric's name (``*_ms``, ``latency``, ``loss``, ``bpb`` ...:
minimize; otherwise maximize) is listed in the plan's notes, and in the rendered file, as
a guess to check. When nothing gives a metric and a benchmark, the plan says so
(:attr:`InitPlan.missing`) and :func:`ask_plan` asks for them through a prompt function.

The parts live beside this module: :mod:`.init_plan` (the plan), :mod:`.init_bench` (the
benchmark and the metric), :mod:`.init_build` (the build system), :mod:`.init_detect` (the
detection in order), :mod:`.init_ask` (the questions), :mod:`.init_render` (the file's
text); this module completes a plan from flags and writes the file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..config.spec import CONFIG_NAME, parse
from ..errors import ConfigError
from .ask import ask_plan
from .bench import guess_direction
from .build import scope_cmake
from .detect import detect
from .files import referenced_files, unmatched_globs
from .plan import InitPlan
from .render import QUEUE_FOLDER, render

__all__ = [
    "FLAGS",
    "InitPlan",
    "apply_answers",
    "ask_plan",
    "detect",
    "guess_direction",
    "missing_message",
    "render",
    "write_config",
]

FLAGS = {"metric": "--metric", "bench": "--bench", "editable": "--editable",
         "direction": "--direction", "checks": "--checks", "build": "--build"}


def apply_answers(plan: InitPlan, answers: Mapping[str, str]) -> InitPlan:
    """The plan with answers given on the command line (``--metric``, ``--bench`` ...)."""
    given = {k: v for k, v in answers.items() if v}
    if not given:
        return plan
    changes: dict[str, Any] = {}
    if "metric" in given:
        changes["metric"] = given["metric"]
        if "direction" not in given:
            changes["direction"] = guess_direction(given["metric"])[0]
    if "direction" in given:
        if given["direction"] not in ("maximize", "minimize"):
            raise ConfigError(f"--direction {given['direction']!r} is not maximize or minimize",
                              file=CONFIG_NAME, valid="maximize, minimize")
        changes["direction"] = given["direction"]
    for key in ("bench", "checks", "build"):
        if key in given:
            changes[key] = given[key]
    if "editable" in given:
        changes["editable"] = tuple(g for g in re.split(r"[,\s]+", given["editable"]) if g)
    helpers = referenced_files(plan.root, f"{given.get('bench', '')} {given.get('checks', '')}")
    changes["protected"] = tuple(dict.fromkeys((*plan.protected, *helpers)))
    notes = [n for n in plan.notes if not any(n.startswith(k) for k in given)]
    found = [f for f in plan.found if not ("checks" in given and "checks run" in f)]
    out = replace(plan, **changes, found=tuple(found),
                  notes=(*notes, "given on the command line: " + ", ".join(sorted(given))))
    if (plan.root / "CMakeLists.txt").is_file():
        out = scope_cmake(out, keep_editable="editable" in given)
    return out


def missing_message(plan: InitPlan) -> str:
    """What an unattended ``assay init`` could not find, with the flag that gives each."""
    parts = [f"{m} ({FLAGS[m]} ...)" for m in plan.missing]
    return ("cannot write assay.toml without a terminal: missing " + ", ".join(parts)
            + "; pass them as flags, or run `assay init` in a terminal to answer questions")


def write_config(root: Path, plan: InitPlan, force: bool = False) -> Path:
    """Render ``plan``, check it parses, and write ``root/assay.toml``; return its path.

    An existing file is kept unless ``force``; raises :class:`ConfigError` then.
    """
    path = Path(root) / CONFIG_NAME
    if path.exists() and not force:
        raise ConfigError("already exists; pass --force to overwrite it", file=str(path),
                          valid="a repository without assay.toml, or --force")
    text = render(plan)
    parse(text, Path(root), str(path))  # never write a file assay itself would reject
    empty = unmatched_globs(Path(root), plan.editable or ("src/**",))
    if empty:
        raise ConfigError(f"editable {', '.join(map(repr, empty))} matches no file in {root}",
                          file=str(path), key="scope.editable",
                          valid="globs that match the files to optimise (--editable ...)")
    path.write_text(text, encoding="utf-8")
    if plan.proposer == "queue":
        (Path(root) / QUEUE_FOLDER).mkdir(exist_ok=True)
    return path
