"""The build system ``assay init`` recognises: CMake (a Release build, ``ctest`` as checks,
and only the targets the commands run) or make, with ccache when it is installed."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

from .cmaketargets import cmake_targets
from .files import CODE_EXTS, code_files, read_text
from .plan import Findings, InitPlan

__all__ = ["build_jobs", "detect_build", "scope_cmake"]

_GOAL = re.compile(r"^([A-Za-z0-9_.\-/]+)[ \t]*::?(?!=)", re.MULTILINE)
_NOT_BUILDS = {"help", "test", "tests", "check", "lint", "clean", "docs", "doc", "install",
               "format", "fmt", "coverage", "bench", "benchmark", "run", "serve", "dev",
               "release", "dist", "publish", "upload", "venv", "setup", "usage"}
_COMPILED = {".c", ".cc", ".cpp", ".cxx", ".cu", ".rs", ".go", ".zig", ".java"}
_EXE = re.compile(r"(?:^|[\s;&|(])\.?/?build/(?:bin/)?([A-Za-z0-9_.\-]+)")
_CM_CALL = re.compile(r"\b(add_executable|add_library|target_link_libraries)\s*\(([^)]*)\)",
                      re.IGNORECASE)

CmakeGraph = tuple[dict[str, tuple[str, list[str]]], dict[str, list[str]]]


def build_jobs(slots: int) -> int:
    """Build jobs for one slot: this machine's CPUs divided among the slots."""
    return max(1, (os.cpu_count() or 1) // max(1, slots))


def detect_build(root: Path, plan: InitPlan, jobs: int, seen: Findings) -> InitPlan:
    """The plan with the build of a CMake project, or of a Makefile that builds something
    the bench runs (``jobs`` parallel jobs)."""
    if (root / "CMakeLists.txt").is_file():
        return _cmake(root, plan, jobs, seen)
    if (root / "Makefile").is_file() and not plan.build:
        return _make(root, plan, jobs, seen)
    return plan


def _cmake(root: Path, plan: InitPlan, jobs: int, seen: Findings) -> InitPlan:
    text = read_text(root / "CMakeLists.txt")
    seen.found.append("CMakeLists.txt: a CMake project (Release build)")
    launcher = ""
    if shutil.which("ccache"):
        launcher = (" -DCMAKE_C_COMPILER_LAUNCHER=ccache"
                    " -DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        seen.found.append("ccache is installed: builds use it (each tree has its own cache, "
                          "so a rebuild there stays incremental)")
    else:
        seen.notes.append("install ccache: each tree's rebuilds then reuse its own earlier "
                          "compilations (assay gives each tree its own CCACHE_DIR)")
    build = (f"cmake -S . -B build -DCMAKE_BUILD_TYPE=Release{launcher} && "
             f"cmake --build build -j {jobs}")
    checks = plan.checks
    if not checks and re.search(r"enable_testing|add_test|CTest", text):
        checks = "ctest --test-dir build --output-on-failure"
        seen.found.append("CMake enables testing: checks run ctest")
    seen.protected.append("CMakeLists.txt")
    seen.protected.extend(f"{d}/**" for d in ("test", "tests") if (root / d).is_dir())
    return replace(plan, build=plan.build or build, checks=checks,
                   layout=plan.layout if plan.detected else "cmake")


def _make(root: Path, plan: InitPlan, jobs: int, seen: Findings) -> InitPlan:
    nothing = _builds_nothing(root)
    if nothing:
        seen.found.append(f"Makefile: {nothing}: no build command")
        return plan
    seen.found.append("Makefile: a make build")
    cc = ' CC="ccache cc" CXX="ccache c++"' if shutil.which("ccache") else ""
    if not cc:
        seen.notes.append("install ccache and build with CC=\"ccache cc\": slots then share "
                          "compilations")
    return replace(plan, build=f"make -j {jobs}{cc}",
                   layout=plan.layout if plan.detected else "make")


def _builds_nothing(root: Path) -> str:
    """Why ``make`` here builds nothing a benchmark runs ('' when it may): a default target
    such as ``help``, or no compiled source at all (a Python project needs no build)."""
    text = read_text(root / "Makefile")
    m = re.search(r"^\.DEFAULT_GOAL\s*:?=\s*(\S+)", text, re.MULTILINE)
    goals = [g for g in _GOAL.findall(text) if not g.startswith(".")]
    goal = m.group(1) if m else (goals[0] if goals else "")
    rule = re.search(rf"^{re.escape(goal)}[ \t]*::?[ \t]*([^=\n]*)$", text, re.MULTILINE)
    needs = rule.group(1).split() if goal and rule else []
    if needs and all(n in _NOT_BUILDS for n in needs):  # `default: help`
        goal = needs[0]
    if goal in _NOT_BUILDS:
        return f"its default target is {goal!r}, which builds nothing the bench runs"
    if not any(Path(f).suffix in _COMPILED for f in code_files(root)):
        return "no compiled source (a Python project needs no build)"
    return ""


def _cmake_graph(root: Path) -> CmakeGraph:
    """{target: (folder, sources)} and {target: linked targets} from the CMakeLists.txt files."""
    sources: dict[str, tuple[str, list[str]]] = {}
    links: dict[str, list[str]] = {}
    for path in sorted(root.rglob("CMakeLists.txt")):
        rel = path.parent.relative_to(root).as_posix()
        if len(path.relative_to(root).parts) > 6 or (rel != "." and rel.startswith(("build", "."))):
            continue
        for kind, body in _CM_CALL.findall(read_text(path)):
            words = [w for w in re.split(r"\s+", body.strip()) if w]
            if not words:
                continue
            name, rest = words[0], words[1:]
            if kind.lower() == "target_link_libraries":
                links.setdefault(name, []).extend(w for w in rest if w not in (
                    "PUBLIC", "PRIVATE", "INTERFACE"))
            else:
                files = [w for w in rest if Path(w).suffix in CODE_EXTS]
                sources[name] = ("" if rel == "." else rel, files)
    return sources, links


def _source_dirs(graph: CmakeGraph, targets: list[str]) -> list[str]:
    """The folders of the sources of ``targets`` and of the libraries they link."""
    sources, links = graph
    dirs: list[str] = []
    seen: set[str] = set()
    todo = list(targets)
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        folder, files = sources.get(t, ("", []))
        for f in files:
            d = str(Path(folder, f).parent.as_posix()) if "/" in f or folder else "."
            if d not in dirs and not d.startswith("$"):
                dirs.append(d)
        todo.extend(x for x in links.get(t, []) if x in sources)
    return dirs


def scope_cmake(plan: InitPlan, keep_editable: bool = False) -> InitPlan:
    """Build only the bench's and checks' targets, and scope editable to their sources."""
    named = list(dict.fromkeys(_EXE.findall(f"{plan.bench} ; {plan.checks}")))
    if not named or not plan.build.startswith("cmake"):
        return plan
    graph = _cmake_graph(plan.root)
    sources = graph[0]
    known, why = cmake_targets(plan.root)
    found = list(plan.found)
    if known is None:  # the CMakeLists.txt files as read, when cmake cannot list them
        known = set(sources)
        found.append(f"targets read from the CMakeLists.txt files ({why})")
    targets = [t for t in named if t in known]
    others = [t for t in named if t not in known]
    if others:
        found.append(f"{', '.join(others)}: run by the commands but no CMake target of this "
                     "project: not named in the build")
    if not targets:
        return replace(plan, found=tuple(found))
    build = plan.build
    if " --target " not in build:
        build = f"{build} --target {' '.join(targets)}"
    checked = set(_EXE.findall(plan.checks)) - set(_EXE.findall(plan.bench))
    oracle = [Path(sources[t][0], f).as_posix() for t in targets if t in checked
              for f in sources.get(t, ("", []))[1]]
    dirs = _source_dirs(graph, targets)
    oracle_dirs = {str(Path(f).parent.as_posix()) for f in oracle}
    test_like = [d for d in dirs if re.search(r"(^|/)(tests?|tools|bench\w*)(/|$)", d)
                 or d in oracle_dirs]
    editable = tuple(f"{d}/*" if d != "." else "*.c*" for d in dirs if d not in test_like)
    notes = list(plan.notes)
    found.append(f"build only the targets the bench and checks run: {', '.join(targets)}")
    protected = tuple(dict.fromkeys((*plan.protected, *oracle)))
    if oracle:
        found.append(f"the checks' own sources are protected: {', '.join(oracle)}")
    if editable and not keep_editable:
        notes.append("editable scoped to the sources of those targets and the libraries they "
                     "link: " + ", ".join(editable))
        return replace(plan, build=build, editable=editable, found=tuple(found),
                       notes=tuple(notes), protected=protected, cmake_scoped=True)
    return replace(plan, build=build, found=tuple(found), protected=protected,
                   cmake_scoped=True)
