"""`assay init`'s detection: read a repository and propose a plan. Runs nothing, except
CMake to list a project's own targets (:mod:`assay.init.cmaketargets`)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from .bench import detect_bench
from .build import build_jobs, detect_build, scope_cmake
from .files import code_globs, read_text
from .plan import Findings, InitPlan

__all__ = ["detect"]


def detect(root: Path) -> InitPlan:
    """Read ``root`` and propose a plan. Runs nothing."""
    root = Path(root)
    plan = InitPlan(root=root)
    jobs = build_jobs(plan.slots)
    seen = Findings()
    plan = detect_bench(root, plan, seen)
    plan = detect_build(root, plan, jobs, seen)
    plan = _pytest(root, plan, seen)
    plan = _pyproject(root, plan, seen)
    if plan.detected and not plan.editable:
        globs = code_globs(root, exclude=seen.protected)
        if globs:
            plan = replace(plan, editable=tuple(globs))
            seen.notes.append("editable files guessed from the code present: "
                              f"{', '.join(globs)}")
    if not plan.detected:
        seen.found.append("no benchmark layout recognised (.auto/measure.sh, autoresearch.sh, "
                          "train.py, CMakeLists.txt, Makefile, pytest, pyproject.toml)")
    plan = replace(plan, found=tuple(seen.found), notes=tuple(seen.notes),
                   protected=tuple(dict.fromkeys(seen.protected)))
    return scope_cmake(plan) if (root / "CMakeLists.txt").is_file() else plan


def _has_pytest(root: Path) -> str:
    """Why this looks like a pytest project, or '' when it does not."""
    for name in ("pytest.ini", "conftest.py"):
        if (root / name).is_file():
            return f"{name} exists"
    for name, marker in (("pyproject.toml", "[tool.pytest"), ("setup.cfg", "[tool:pytest]"),
                         ("tox.ini", "[pytest]")):
        if marker in read_text(root / name):
            return f"{name} configures pytest"
    tests = root / "tests"
    if tests.is_dir() and (any(tests.rglob("test_*.py")) or any(tests.rglob("*_test.py"))):
        return "tests/ holds test_*.py files"
    return ""


def _pytest(root: Path, plan: InitPlan, seen: Findings) -> InitPlan:
    """The plan with pytest as its checks (unless it has some), when this is a pytest
    project."""
    why = _has_pytest(root)
    if not why:
        return plan
    seen.found.append(f"pytest: {why}")
    if not plan.checks:
        plan = replace(plan, checks="python -m pytest -q")
    if (root / "tests").is_dir():
        seen.protected.append("tests/**")
    return replace(plan, layout=plan.layout if plan.detected else "pytest")


def _pyproject_globs(root: Path) -> list[str]:
    if (root / "src").is_dir() and any((root / "src").rglob("*.py")):
        return ["src/**/*.py"]
    text = read_text(root / "pyproject.toml")
    m = re.search(r'^\s*name\s*=\s*["\']([^"\']+)["\']', text, re.MULTILINE)
    if m:
        pkg = m.group(1).replace("-", "_")
        if (root / pkg).is_dir():
            return [f"{pkg}/**/*.py"]
    return []


def _pyproject(root: Path, plan: InitPlan, seen: Findings) -> InitPlan:
    """The plan with a Python project's package sources as editable (unless it has some)."""
    if not (root / "pyproject.toml").is_file():
        return plan
    globs = _pyproject_globs(root)
    seen.found.append("pyproject.toml: a Python project"
                      + (f" (sources: {', '.join(globs)})" if globs else ""))
    if not plan.editable and globs:
        plan = replace(plan, editable=tuple(globs))
    return replace(plan, layout=plan.layout if plan.detected else "pyproject")
