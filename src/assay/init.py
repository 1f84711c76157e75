"""`assay init`: look at a repository, propose an ``assay.toml``, write it.

Detection reads files and runs nothing, except CMake to list a project's own targets
(:mod:`assay.cmaketargets`) when the commands name programs under ``build/``. It
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
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .cmaketargets import cmake_targets
from .config import CONFIG_NAME, READERS, glob_match, parse
from .errors import ConfigError

__all__ = [
    "InitPlan",
    "ask_plan",
    "detect",
    "guess_direction",
    "render",
    "write_config",
]

Prompt = Callable[[str, str], str]
QUEUE_FOLDER = "patches"  # where init points the queue proposer (created when missing)

_METRIC_IN_SCRIPT = re.compile(r"METRIC\s+([A-Za-z_][\w.\-/]*)\s*=")
_SUMMARY_PRINT = re.compile(r"""print\(\s*f?["']\s*([A-Za-z_]\w*)\s*:""")
_CODE_EXTS = (".py", ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".rs",
              ".go", ".js", ".ts", ".java", ".zig", ".jl")
_SKIP_DIRS = {"node_modules", "__pycache__", "build", "dist", "venv", "target", "tests",
              "test", "third_party", "vendor", "external"}
_MINIMIZE_WORDS = {
    "ms", "us", "ns", "s", "sec", "secs", "seconds", "second", "time", "times", "latency",
    "duration", "elapsed", "wall", "loss", "bpb", "bpc", "perplexity", "ppl", "error",
    "err", "errors", "mem", "memory", "bytes", "kb", "kib", "mb", "mib", "gb", "gib",
    "rss", "peak", "size", "cost", "cycles", "instructions", "misses", "p50", "p90",
    "p95", "p99", "mae", "mse", "rmse", "wer", "cer", "regret",
}


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


# --------------------------------------------------------------------------- detection


def guess_direction(name: str) -> tuple[str, str]:
    """A direction for a metric name, and the reason in words."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    if "per" in words:  # a rate: judge the numerator (tokens_per_s, ms_per_token)
        words = words[: words.index("per")]
    for word in reversed(words):
        if word in _MINIMIZE_WORDS:
            return "minimize", f"'{word}' in the name reads as a cost"
    return "maximize", "nothing in the name reads as a cost (time, memory, loss, error)"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _referenced_files(root: Path, script: str) -> list[str]:
    """Files next to ``root`` that a shell script mentions by name (bench helpers)."""
    out: list[str] = []
    for token in re.findall(r"[\w./\-]+", script):
        token = token.removeprefix("./")
        if not token or token.startswith(("/", "-")) or ".." in token.split("/"):
            continue
        if "." not in token.rsplit("/", 1)[-1]:
            continue
        path = root / token
        if path.is_file() and token not in out:
            out.append(token)
    return out


def _metric_names(texts: Iterable[str]) -> list[str]:
    names: list[str] = []
    for text in texts:
        for name in _METRIC_IN_SCRIPT.findall(text):
            if name not in names:
                names.append(name)
    return names


def _has_pytest(root: Path) -> str:
    """Why this looks like a pytest project, or '' when it does not."""
    for name in ("pytest.ini", "conftest.py"):
        if (root / name).is_file():
            return f"{name} exists"
    for name, marker in (("pyproject.toml", "[tool.pytest"), ("setup.cfg", "[tool:pytest]"),
                         ("tox.ini", "[pytest]")):
        if marker in _read(root / name):
            return f"{name} configures pytest"
    tests = root / "tests"
    if tests.is_dir() and (any(tests.rglob("test_*.py")) or any(tests.rglob("*_test.py"))):
        return "tests/ holds test_*.py files"
    return ""


def _walk_code(root: Path, max_depth: int = 4) -> list[str]:
    """Code files under ``root`` (relative POSIX paths), skipping tests, builds, venvs."""
    found: list[str] = []
    root_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        depth = len(here.parts) - root_depth
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")
                             and d not in _SKIP_DIRS and not d.endswith(".egg-info")
                             ) if depth < max_depth else []
        for fname in sorted(filenames):
            if Path(fname).suffix in _CODE_EXTS and not fname.startswith("test_"):
                found.append((here / fname).relative_to(root).as_posix())
    return found


def _code_globs(root: Path, exclude: Sequence[str] = ()) -> list[str]:
    """Globs covering the code present, leaving out the files in ``exclude``."""
    files = [f for f in _walk_code(root) if f not in exclude]
    in_src = [f for f in files if f.startswith("src/")]
    if in_src:
        files = in_src
    globs: list[str] = []
    for f in files:
        parts = f.split("/")
        glob = f"{parts[0]}/**/*{Path(f).suffix}" if len(parts) > 1 else f
        if glob not in globs:
            globs.append(glob)
    return globs


def _pyproject_globs(root: Path) -> list[str]:
    if (root / "src").is_dir() and any((root / "src").rglob("*.py")):
        return ["src/**/*.py"]
    text = _read(root / "pyproject.toml")
    m = re.search(r'^\s*name\s*=\s*["\']([^"\']+)["\']', text, re.MULTILINE)
    if m:
        pkg = m.group(1).replace("-", "_")
        if (root / pkg).is_dir():
            return [f"{pkg}/**/*.py"]
    return []


def detect(root: Path) -> InitPlan:
    """Read ``root`` and propose a plan. Runs nothing."""
    root = Path(root)
    plan = InitPlan(root=root)
    jobs = cpu_share(plan.slots)
    found: list[str] = []
    notes: list[str] = []
    protected: list[str] = []

    pi = _pi_files(root)
    train = root / "train.py"
    if pi is not None:
        measure, checks_name, prompt_name = pi
        bench_sh = root / measure
        script = _read(bench_sh)
        helpers = [h for h in _referenced_files(root, script) if h != measure]
        checks_sh = root / checks_name
        scripts = [script] + [_read(root / h) for h in helpers]
        checks = ""
        protected.append(".auto/**" if measure.startswith(".auto/") else measure)
        if checks_sh.is_file():
            checks = f"bash {checks_name}"
            if not measure.startswith(".auto/"):
                protected.append(checks_name)
            found.append(f"{checks_name}: the correctness checks")
        protected += [h for h in helpers if h not in protected]
        names = _metric_names(scripts)
        layout_name = "current .auto/ layout" if measure.startswith(".auto/") else \
            "legacy flat layout"
        found.insert(0, f"{measure}: a pi-autoresearch benchmark ({layout_name})"
                     + (f" (also reads {', '.join(helpers)})" if helpers else ""))
        if (root / ".auto" / "log.jsonl").is_file():
            found.append(".auto/log.jsonl: pi-autoresearch's own log (left as it is; "
                         "`assay export jsonl` writes the same format)")
        metric, direction = "", "maximize"
        others: list[tuple[str, str]] = []
        if names:
            metric = names[0]
            direction, why = guess_direction(metric)
            found.append(f"METRIC lines in the scripts: {', '.join(names)}")
            notes.append(f"primary metric {metric!r} is the first METRIC name found; "
                         f"direction {direction} guessed ({why})")
            others = [(n, guess_direction(n)[0]) for n in names[1:]]
        else:
            notes.append("no 'METRIC name=' found in autoresearch.sh or the files it "
                         "names; give the metric name")
        brief = prompt_name if (root / prompt_name).is_file() else ""
        if brief and brief not in protected and not brief.startswith(".auto/"):
            protected.append(brief)
        plan = replace(plan, layout="pi-autoresearch", metric=metric, direction=direction,
                       reader="metric_lines", bench=f"bash {measure}", checks=checks,
                       brief=brief, other_metrics=tuple(others), proposer="queue")
        notes.append("proposer queue: put patch files in patches/ (or set proposer = "
                     "\"agent\" with a [proposer.agent] command)")
    elif train.is_file() and ("---" in _read(train) or (root / "prepare.py").is_file()):
        text = _read(train)
        tail = text[text.find("---"):] if "---" in text else ""
        keys = list(dict.fromkeys(_SUMMARY_PRINT.findall(tail)))
        found.append("train.py: a karpathy autoresearch training script ('---' summary)")
        if "val_bpb" in text or not keys:
            metric = "val_bpb"
        else:
            metric = keys[0]
            notes.append(f"val_bpb is not printed by train.py; using {metric!r}, the "
                         "first key of its summary")
        direction, why = guess_direction(metric)
        if metric != "val_bpb":
            notes.append(f"direction {direction} guessed ({why})")
        others = [(k, guess_direction(k)[0]) for k in keys
                  if k != metric and k in ("peak_vram_mb", "training_seconds",
                                           "total_seconds")]
        protected_here = []
        for name in ("prepare.py", "program.md"):
            if (root / name).is_file():
                protected_here.append(name)
                found.append(f"{name}: " + ("data preparation and evaluation (protected)"
                                            if name == "prepare.py" else "the brief"))
        protected += protected_here
        uv = (root / "uv.lock").is_file()
        knobs = _knobs(text)
        guards = (("peak_vram_mb", "minimize"),) if "peak_vram_mb" in text else ()
        if knobs:
            found.append("train.py hyperparameters to sweep: "
                         + ", ".join(k.name for k in knobs))
        notes.append("proposer sweep over train.py's hyperparameters (no model is configured; "
                     "set proposer = \"llm\" with a [proposer.llm] table to use one)")
        plan = replace(plan, layout="autoresearch", metric=metric, direction=direction,
                       reader="summary_block", bench="uv run train.py" if uv
                       else "python train.py", bench_timeout=600.0,
                       editable=("train.py",),
                       brief="program.md" if (root / "program.md").is_file() else "",
                       other_metrics=tuple(o for o in others if o not in guards),
                       guards=guards, params=knobs, proposer="sweep" if knobs else "queue",
                       rule="expensive", budget=12, delta=0.003)

    cmake = root / "CMakeLists.txt"
    if cmake.is_file():
        text = _read(cmake)
        found.append("CMakeLists.txt: a CMake project (Release build)")
        launcher = ""
        if shutil.which("ccache"):
            launcher = (" -DCMAKE_C_COMPILER_LAUNCHER=ccache"
                        " -DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
            found.append("ccache is installed: builds use it (each tree has its own cache, "
                         "so a rebuild there stays incremental)")
        else:
            notes.append("install ccache: each tree's rebuilds then reuse its own earlier "
                         "compilations (assay gives each tree its own CCACHE_DIR)")
        build = (f"cmake -S . -B build -DCMAKE_BUILD_TYPE=Release{launcher} && "
                 f"cmake --build build -j {jobs}")
        checks = plan.checks
        if not checks and re.search(r"enable_testing|add_test|CTest", text):
            checks = "ctest --test-dir build --output-on-failure"
            found.append("CMake enables testing: checks run ctest")
        plan = replace(plan, build=plan.build or build, checks=checks,
                       layout=plan.layout if plan.detected else "cmake")
        protected.append("CMakeLists.txt")
        protected += [f"{d}/**" for d in ("test", "tests") if (root / d).is_dir()]
    elif (root / "Makefile").is_file() and not plan.build and _builds_nothing(root):
        found.append(f"Makefile: {_builds_nothing(root)}: no build command")
    elif (root / "Makefile").is_file() and not plan.build:
        found.append("Makefile: a make build")
        cc = ' CC="ccache cc" CXX="ccache c++"' if shutil.which("ccache") else ""
        if not cc:
            notes.append("install ccache and build with CC=\"ccache cc\": slots then share "
                         "compilations")
        plan = replace(plan, build=f"make -j {jobs}{cc}",
                       layout=plan.layout if plan.detected else "make")

    why_pytest = _has_pytest(root)
    if why_pytest:
        found.append(f"pytest: {why_pytest}")
        if not plan.checks:
            plan = replace(plan, checks="python -m pytest -q")
        if (root / "tests").is_dir():
            protected.append("tests/**")
        plan = replace(plan, layout=plan.layout if plan.detected else "pytest")

    if (root / "pyproject.toml").is_file():
        globs = _pyproject_globs(root)
        found.append("pyproject.toml: a Python project"
                     + (f" (sources: {', '.join(globs)})" if globs else ""))
        if not plan.editable and globs:
            plan = replace(plan, editable=tuple(globs))
        plan = replace(plan, layout=plan.layout if plan.detected else "pyproject")

    if plan.detected and not plan.editable:
        globs = _code_globs(root, exclude=protected)
        if globs:
            plan = replace(plan, editable=tuple(globs))
            notes.append(f"editable files guessed from the code present: {', '.join(globs)}")

    if not plan.detected:
        found.append("no benchmark layout recognised (.auto/measure.sh, autoresearch.sh, "
                     "train.py, CMakeLists.txt, Makefile, pytest, pyproject.toml)")
    plan = replace(plan, found=tuple(found), notes=tuple(notes),
                   protected=tuple(dict.fromkeys(protected)))
    return scope_cmake(plan) if cmake.is_file() else plan


_GOAL = re.compile(r"^([A-Za-z0-9_.\-/]+)[ \t]*::?(?!=)", re.MULTILINE)
_NOT_BUILDS = {"help", "test", "tests", "check", "lint", "clean", "docs", "doc", "install",
               "format", "fmt", "coverage", "bench", "benchmark", "run", "serve", "dev",
               "release", "dist", "publish", "upload", "venv", "setup", "usage"}
_COMPILED = {".c", ".cc", ".cpp", ".cxx", ".cu", ".rs", ".go", ".zig", ".java"}


def _builds_nothing(root: Path) -> str:
    """Why ``make`` here builds nothing a benchmark runs ('' when it may): a default target
    such as ``help``, or no compiled source at all (a Python project needs no build)."""
    text = _read(root / "Makefile")
    m = re.search(r"^\.DEFAULT_GOAL\s*:?=\s*(\S+)", text, re.MULTILINE)
    goals = [g for g in _GOAL.findall(text) if not g.startswith(".")]
    goal = m.group(1) if m else (goals[0] if goals else "")
    rule = re.search(rf"^{re.escape(goal)}[ \t]*::?[ \t]*([^=\n]*)$", text, re.MULTILINE)
    needs = rule.group(1).split() if goal and rule else []
    if needs and all(n in _NOT_BUILDS for n in needs):  # `default: help`
        goal = needs[0]
    if goal in _NOT_BUILDS:
        return f"its default target is {goal!r}, which builds nothing the bench runs"
    if not any(Path(f).suffix in _COMPILED for f in _walk_code(root)):
        return "no compiled source (a Python project needs no build)"
    return ""


def cpu_share(slots: int) -> int:
    """Build jobs for one slot: this machine's CPUs divided among the slots."""
    return max(1, (os.cpu_count() or 1) // max(1, slots))


def _pi_files(root: Path) -> tuple[str, str, str] | None:
    """(measure, checks, prompt) of a pi-autoresearch project, current layout first."""
    auto = root / ".auto"
    if (auto / "measure.sh").is_file():
        return ".auto/measure.sh", ".auto/checks.sh", ".auto/prompt.md"
    if (root / "autoresearch.sh").is_file():
        return "autoresearch.sh", "autoresearch.checks.sh", "autoresearch.md"
    return None


_KNOB = re.compile(r"^([A-Z][A-Z0-9_]*)[ \t]*=[ \t]*([0-9.eE+\-*/ ]+?)[ \t]*(?:#.*)?$",
                   re.MULTILINE)
_KNOB_WORDS = ("LR", "BATCH", "DEPTH", "WARMUP", "WARMDOWN", "DECAY", "RATIO", "FRAC",
               "ASPECT", "HEAD_DIM", "DIM", "MULT", "BETA", "MOMENTUM")


def _knobs(text: str, limit: int = 6) -> tuple[Knob, ...]:
    """Top-level numeric hyperparameters of a training script, with a small grid each."""
    from .workspace import literal_value

    out: list[Knob] = []
    found = [m for m in _KNOB.finditer(text) if any(w in m.group(1) for w in _KNOB_WORDS)]
    # learning rates and schedules first: they are what such a script's notes tune
    found.sort(key=lambda m: next(i for i, w in enumerate(_KNOB_WORDS) if w in m.group(1)))
    for m in found:
        name, expr = m.group(1), m.group(2)
        if any(k.name == name for k in out):
            continue
        try:
            value = literal_value(expr)
        except (ValueError, ArithmeticError, TypeError):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            continue
        if isinstance(value, int):
            choices: tuple[int | float, ...] = tuple(sorted({max(1, value // 2), value,
                                                             value * 2}))
            out.append(Knob(name, "int", value, choices))
        else:
            high = min(1.0, value * 1.5) if ("FRAC" in name or "RATIO" in name) and \
                value <= 1 else value * 2
            grid = sorted({float(f"{value * 0.5:.4g}"), value, float(f"{high:.4g}")})
            out.append(Knob(name, "float", value, tuple(grid)))
        if len(out) >= limit:
            break
    return tuple(out)


_EXE = re.compile(r"(?:^|[\s;&|(])\.?/?build/(?:bin/)?([A-Za-z0-9_.\-]+)")
_CM_CALL = re.compile(r"\b(add_executable|add_library|target_link_libraries)\s*\(([^)]*)\)",
                      re.IGNORECASE)


def _cmake_graph(root: Path) -> tuple[dict[str, tuple[str, list[str]]], dict[str, list[str]]]:
    """{target: (folder, sources)} and {target: linked targets} from the CMakeLists.txt files."""
    sources: dict[str, tuple[str, list[str]]] = {}
    links: dict[str, list[str]] = {}
    for path in sorted(root.rglob("CMakeLists.txt")):
        rel = path.parent.relative_to(root).as_posix()
        if len(path.relative_to(root).parts) > 6 or (rel != "." and rel.startswith(("build", "."))):
            continue
        for kind, body in _CM_CALL.findall(_read(path)):
            words = [w for w in re.split(r"\s+", body.strip()) if w]
            if not words:
                continue
            name, rest = words[0], words[1:]
            if kind.lower() == "target_link_libraries":
                links.setdefault(name, []).extend(w for w in rest if w not in (
                    "PUBLIC", "PRIVATE", "INTERFACE"))
            else:
                files = [w for w in rest if Path(w).suffix in _CODE_EXTS]
                sources[name] = ("" if rel == "." else rel, files)
    return sources, links


def scope_cmake(plan: InitPlan, keep_editable: bool = False) -> InitPlan:
    """Build only the bench's and checks' targets, and scope editable to their sources."""
    named = list(dict.fromkeys(_EXE.findall(f"{plan.bench} ; {plan.checks}")))
    if not named or not plan.build.startswith("cmake"):
        return plan
    graph, links = _cmake_graph(plan.root)
    known, why = cmake_targets(plan.root)
    found = list(plan.found)
    if known is None:  # the CMakeLists.txt files as read, when cmake cannot list them
        known = set(graph)
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
    oracle = [Path(graph[t][0], f).as_posix() for t in targets if t in checked
              for f in graph.get(t, ("", []))[1]]
    dirs: list[str] = []
    seen: set[str] = set()
    todo = list(targets)
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        folder, files = graph.get(t, ("", []))
        for f in files:
            d = str(Path(folder, f).parent.as_posix()) if "/" in f or folder else "."
            if d not in dirs and not d.startswith("$"):
                dirs.append(d)
        todo.extend(x for x in links.get(t, []) if x in graph)
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
    helpers = _referenced_files(plan.root, f"{given.get('bench', '')} {given.get('checks', '')}")
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


# --------------------------------------------------------------------------- asking


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


_SKIP_LISTING = {".git", ".assay", ".venv", "venv", "node_modules", "__pycache__"}


def repository_files(root: Path, limit: int = 50_000) -> list[str]:
    """The files under ``root`` (relative POSIX paths), leaving out git's and assay's own
    folders, virtual environments and caches; at most ``limit``."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_LISTING)
        here = Path(dirpath).relative_to(root)
        out += [(here / f).as_posix() for f in sorted(filenames)]
        if len(out) >= limit:
            break
    return out


def unmatched_globs(root: Path, globs: Sequence[str]) -> list[str]:
    """The globs that match no file under ``root``."""
    files = repository_files(root)
    return [g for g in globs if not any(glob_match(f, g) for f in files)]


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


_PROPOSER_WORDS = {"queue": "queue (patch files you put in patches/)",
                   "sweep": "sweep (searches the [[params]] found)"}


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
    helpers = [h for h in _referenced_files(Path(root), f"{bench} {checks}")
               if not any(glob_match(h, g) for g in editable)]
    return replace(base, metric=metric, direction=direction, reader=reader,
                   json_path=json_path, bench=bench, editable=editable, checks=checks,
                   proposer=proposer, protected=tuple(dict.fromkeys((*base.protected,
                                                                     *helpers))),
                   other_metrics=tuple(m for m in base.other_metrics if m[0] != metric),
                   notes=(*notes, "confirmed by hand"))


# --------------------------------------------------------------------------- rendering


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

    out += ["", "[target]"]
    out.append("# The brief proposers read: what to optimise and what to leave alone "
               "('' for none).")
    out.append(f"brief = {_q(plan.brief)}")

    metric = plan.metric or "score"
    out += ["", "[metric]",
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

    if plan.other_metrics:
        out += ["", "# Other metrics the benchmark prints. Uncomment a block to make it a "
                "guard:", "# a candidate that worsens a guard by more than its tolerance "
                "is not kept."]
        for name, direction in plan.other_metrics:
            out += ["# [[guards]]", f"# name = {_q(name)}",
                    f"# direction = {_q(direction)}",
                    f"# reader = {_q(plan.reader)}",
                    "# tolerance = 0.02  # the relative regression allowed (2%)", "#"]
        out.pop()

    for name, direction in plan.guards:
        out += ["", "# A guard: a candidate worsening it by more than its tolerance is not kept.",
                "[[guards]]", f"name = {_q(name)}", f"direction = {_q(direction)}",
                f"reader = {_q(plan.reader)}"]
        if name.endswith("_mb"):
            out.append('unit = "MB"  # exports convert it (memory_gb in results.tsv)')
        out.append("tolerance = 0.05  # the relative regression allowed (5%)")

    out += ["", "[commands]",
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

    out += ["", "[scope]", "# Files a candidate may change (globs relative to the "
            "repository; ** spans folders)."]
    editable = plan.editable or ("src/**",)
    out.append(f"editable = {_qlist(editable)}" + ("  # TODO: the files to optimise"
                                                   if not plan.editable else ""))
    out.append("# Files no candidate may touch: the benchmark, the checks, the evaluation "
               "data.")
    out.append("# (assay.toml itself is always protected.)")
    out.append(f"protected = {_qlist(plan.protected)}")

    for k in plan.params:
        out += ["", f"# {k.name} in {k.file}: the sweep tries these values (the file keeps its "
                "own spelling", "# of a value it already holds).", "[[params]]",
                f"name = {_q(k.name)}", f"type = {_q(k.type)}",
                "choices = [" + ", ".join(repr(c) for c in k.choices) + "]",
                f"default = {k.default!r}", 'apply = "assign"', f"file = {_q(k.file)}"]

    out += ["", "[run]", "# Benchmarks run in parallel, one per slot (use 1 for a single "
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

    out += ["", "[decision]", '# "sequential" (stop as soon as the evidence is clear), '
            '"fixed" (a set number of', '# pairs) or "expensive" (few, long runs).']
    out.append(f"rule = {_q(plan.rule)}")
    out.append("# The smallest improvement worth keeping, as a fraction (0.01 = 1%).")
    out.append(f"delta = {plan.delta:g}")
    out.append("")
    return "\n".join(out)


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
