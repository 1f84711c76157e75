"""The package's structure, checked: layers, circles, imports, sizes and names.

Every import of an assay module is counted wherever it stands (module level, inside a
function, under ``TYPE_CHECKING``). :data:`LAYERS` lists every module, bottom first; a module
may import modules of its own layer or of a layer below, never above, and the imports form
no circle. ``docs/architecture.md`` prints the same table: the test checks that they agree.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "assay"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"

# bottom first: (layer, modules), names relative to the package
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", (
        "__init__", "errors", "extras", "hardware", "keys", "model", "records", "refname",
        "registry", "retry", "sandbox", "strictjson", "tomlpos", "usage",
    )),
    ("config", (
        "config", "config.fidelity", "config.prices", "config.section", "config.spec",
        "config.watch",
    )),
    ("stores", (
        "journal", "journal.blocks", "journal.connection", "journal.events", "journal.experiments",
        "journal.lock", "journal.meta", "journal.model_calls", "journal.rows", "journal.schema",
        "journal.seal", "journal.store", "journal.views", "repo", "repo.applied", "repo.carry",
        "repo.git", "repo.holdout", "repo.merge", "repo.paramdiff", "repo.plumbing",
        "repo.repository", "repo.tidy", "repo.treestate", "repo.workspace",
    )),
    ("mechanics", (
        "bench", "bench.checks", "bench.contain", "bench.fingerprint", "bench.meter",
        "bench.metrics", "bench.outputs", "bench.process", "bench.readers", "bench.steps",
        "bench.worker",
    )),
    ("decision", (
        "decision", "decision.agreement", "decision.combine", "decision.next_step",
        "decision.rule", "decision.stats",
        "decision.stats.bounds", "decision.stats.calibrate", "decision.stats.expensive",
        "decision.stats.heterogeneity", "decision.stats.noise", "decision.stats.regime",
        "decision.stats.robust", "decision.stats.screen", "decision.stats.sequential",
        "decision.stats.unbiased",
    )),
    ("backends", (
        "executors", "executors.base", "executors.bundle", "executors.function", "executors.local",
        "executors.platforms", "executors.ray", "executors.skypilot", "executors.slots",
        "proposers", "proposers.agent", "proposers.base", "proposers.chat", "proposers.cli_usage",
        "proposers.context", "proposers.edits", "proposers.llm", "proposers.queue",
        "proposers.sandbox", "proposers.sweep",
    )),
    ("loop", (
        "loop", "loop.calibration", "loop.dispatch", "loop.drive", "loop.driver", "loop.fanout",
        "loop.history", "loop.hooks", "loop.intake", "loop.levels", "loop.outcomes",
        "loop.progress", "loop.sessions", "loop.stopping", "loop.stops",
    )),
    ("assemble", (
        "assemble",
    )),
    ("measure", (
        "measure", "measure.chain", "measure.compare", "measure.spend", "measure.verify",
    )),
    ("subsystems", (
        "export", "finalize", "finalize.grouping", "finalize.pr", "finalize.review",
        "finalize.run", "init", "init.ask", "init.bench", "init.build", "init.cmaketargets",
        "init.detect", "init.files", "init.plan", "init.render", "init.write", "planning",
        "planning.fidelity", "planning.plan", "planning.simulate", "research", "research.brief",
        "research.config",
        "research.diffs", "research.focus", "research.gaps", "research.index", "research.measure",
        "research.peaks", "research.profile", "research.remote", "research.rerank",
        "research.research_journal", "research.result", "research.roofline", "research.run",
        "research.sources", "research.store", "research.waves", "state", "testing",
        "testing.executors", "testing.proposers", "testing.repository", "testing.rules",
    )),
    ("api", (
        "api",
    )),
    ("faces", (
        "faces", "faces.data", "faces.mcp", "faces.page", "faces.relay", "faces.report",
        "faces.serve", "faces.terminal",
    )),
    ("cli", (
        "__main__", "cli", "cli.app", "cli.exit", "cli.faces", "cli.finalize", "cli.plan",
        "cli.research",
    )),
)

MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 700
# the one place a dynamic import of assay's own modules is allowed: the registry resolves
# "module:attr" names on use; the CLI registers its command groups lazily
LAZY_ALLOWED = ("registry", "cli.")
# one idea, one name: each of these is defined once in the package
DEFINED_ONCE = ("Calibration", "build_executor", "local_slots", "parse_nvidia_smi",
                "cpu_flags", "cpu_share", "git", "compare", "holding_branch")
# names that meant the same thing twice: only the first of each pair may exist
NOT_BOTH = (("holding_branch", "branch_of"),)


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    name: str
    in_function: bool


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(p for p in parts if p != "__init__") or "__init__"
        found[name] = path
    return found


def _resolve(mods: dict[str, Path], source: str, node: ast.ImportFrom) -> str:
    if source == "__init__":
        package = ""
    elif mods[source].name == "__init__.py":
        package = source
    else:
        package = source.rpartition(".")[0]
    if not node.level:
        return (node.module or "").removeprefix("assay").removeprefix(".")
    parts = package.split(".") if package else []
    base = parts[: len(parts) - node.level + 1] if node.level > 1 else parts
    return ".".join([*base, *([node.module] if node.module else [])])


def imports() -> Iterator[Import]:
    mods = modules()
    for source, path in mods.items():
        tree = ast.parse(path.read_text())
        in_function: set[int] = set()
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                in_function.update(id(n) for n in ast.walk(fn))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("assay."):
                        target = alias.name.removeprefix("assay.")
                        if target in mods:
                            yield Import(source, target, node.lineno, target,
                                         id(node) in in_function)
            elif isinstance(node, ast.ImportFrom):
                if not node.level and not (node.module or "").startswith("assay"):
                    continue
                base = _resolve(mods, source, node)
                for alias in node.names:
                    sub = f"{base}.{alias.name}" if base else alias.name
                    target = sub if sub in mods else base
                    if target in mods and target != source:
                        yield Import(source, target, node.lineno, alias.name,
                                     id(node) in in_function)


def layer_of() -> dict[str, int]:
    return {m: i for i, (_, mods) in enumerate(LAYERS) for m in mods}


def test_the_layer_table_lists_every_module_once() -> None:
    listed = [m for _, mods in LAYERS for m in mods]
    assert len(listed) == len(set(listed)), "a module is listed twice"
    assert sorted(set(modules()) - set(listed)) == [], "modules missing from LAYERS"
    assert sorted(set(listed) - set(modules())) == [], "LAYERS names modules that do not exist"


def test_no_module_imports_a_layer_above_its_own() -> None:
    layer = layer_of()
    names = [name for name, _ in LAYERS]
    upward = sorted(
        f"{i.source}:{i.line} ({names[layer[i.source]]}) imports {i.target} "
        f"({names[layer[i.target]]})"
        for i in imports()
        if i.source in layer and i.target in layer and layer[i.target] > layer[i.source])
    assert upward == []


def test_the_imports_form_no_circle() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for i in imports():
        graph[i.source].add(i.target)
    circles = _circles(graph)
    assert circles == []


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_assay_module_is_imported_inside_a_function() -> None:
    lazy = sorted(f"{i.source}:{i.line} {i.target}" for i in imports()
                  if i.in_function and not i.source.startswith(LAZY_ALLOWED))
    assert lazy == []


def test_no_private_name_is_imported_across_modules() -> None:
    private = sorted(f"{i.source}:{i.line} {i.target}.{i.name}" for i in imports()
                     if i.name.startswith("_") and not i.name.startswith("__"))
    assert private == []


def test_no_function_is_longer_than_the_limit() -> None:
    long = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_no_module_is_longer_than_the_limit() -> None:
    big = sorted(f"{name} ({n} lines)" for name, path in modules().items()
                 if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES)
    assert big == []


def _top_level_names() -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for name, path in modules().items():
        for node in ast.parse(path.read_text()).body:
            defines = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            if defines and name not in where[node.name]:
                where[node.name].append(name)
    return where


def test_one_idea_has_one_name() -> None:
    where = _top_level_names()
    twice = {n: where[n] for n in DEFINED_ONCE if len(where.get(n, [])) > 1}
    assert twice == {}
    both = [pair for pair in NOT_BOTH if all(where.get(n) for n in pair)]
    assert both == []


def _imports_typer(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name == "typer" for a in node.names)
    return isinstance(node, ast.ImportFrom) and node.module == "typer"


def test_only_the_cli_imports_typer() -> None:
    users = {name for name, path in modules().items()
             for node in ast.walk(ast.parse(path.read_text())) if _imports_typer(node)}
    assert sorted(u for u in users if not (u == "cli" or u.startswith("cli."))) == []


ROW = re.compile(r"^\|\s*(?P<layer>[^|]+?)\s*\|\s*(?P<mods>[^|]*?)\s*\|")


def docs_table() -> list[tuple[str, tuple[str, ...]]]:
    text = DOCS.read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        m = ROW.match(line)
        if not m or m["layer"] in ("layer", "---") or set(m["layer"]) <= {"-"}:
            continue
        rows.append((m["layer"], tuple(re.findall(r"`([\w.]+)`", m["mods"]))))
    return rows


def test_the_docs_print_the_same_table_top_first() -> None:
    assert docs_table() == [(name, mods) for name, mods in reversed(LAYERS)]
