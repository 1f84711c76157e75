"""A `command` reviewer for Python targets: a removed write whose value is still read.

The hazard it looks for: a fusion or rewrite that stops storing an intermediate
(``SCRATCH[i] = ...``, ``self.cache = ...``, ``buf = ...``) while other code still reads
it. The optimized function passes its own tests, and the reader elsewhere silently gets
stale data. The check counts uses, the way a graph compiler asks whether a fused node has
other consumers before fusing it.

Use it in assay.toml::

    [finalize.review]
    reviewer = "command"
    command = "python /path/to/assay/examples/review/consumers.py"

It reads the group's diff from ``ASSAY_DIFF_FILE`` and the code from the current folder
(merge-base + the group), and prints one ``path:line: blocking: ...`` line per read of a
name whose store the diff removed and did not put back. Exit status 0 either way: the
findings carry the verdict.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

STORE = re.compile(r"^\s*(?:self\.)?([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*(?:[-+*/|&]?=)(?!=)")


def removed_stores(diff: str) -> dict[str, tuple[str, int]]:
    """Names stored on a removed line and on no added line: name -> (file, old line)."""
    removed: dict[str, tuple[str, int]] = {}
    added: set[str] = set()
    file, old_no = "", 0
    for line in diff.splitlines():
        if line.startswith("--- "):
            continue
        if line.startswith("+++ "):
            file = line[6:] if line.startswith("+++ b/") else line[4:]
            continue
        m = re.match(r"^@@ -(\d+)", line)
        if m:
            old_no = int(m.group(1))
            continue
        if line.startswith("-"):
            s = STORE.match(line[1:])
            if s:
                removed.setdefault(s.group(1), (file, old_no))
            old_no += 1
        elif line.startswith("+"):
            s = STORE.match(line[1:])
            if s:
                added.add(s.group(1))
        else:
            old_no += 1
    return {k: v for k, v in removed.items() if k not in added}


def _modules(tree: Path) -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted(tree.rglob("*.py")):
        rel = path.relative_to(tree).as_posix()
        if rel.startswith((".assay/", ".git/")):
            continue
        try:
            out.append((rel, ast.parse(path.read_text(encoding="utf-8"))))
        except (SyntaxError, UnicodeDecodeError):
            continue
    return out


def _target_name(node: ast.expr) -> str:
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.attr if node.value.id == "self" else ""
    return ""


def still_written(mods: list[tuple[str, ast.Module]], names: set[str]) -> set[str]:
    """Names some function still stores to (a subscript, an attribute, a global)."""
    out: set[str] = set()
    for _rel, mod in mods:
        for func in ast.walk(mod):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets = list(node.targets)
                elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                    targets = [node.target]
                for t in targets:
                    name = _target_name(t)
                    if name in names and not isinstance(t, ast.Name):
                        out.add(name)
    return out


def reads(mods: list[tuple[str, ast.Module]], names: set[str]
          ) -> list[tuple[str, int, str, str]]:
    """(file, line, name, enclosing function) of every load of one of ``names``."""
    out: list[tuple[str, int, str, str]] = []
    for rel, mod in mods:
        for func in ast.walk(mod):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            stored = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)
                      and isinstance(n.ctx, ast.Store)}
            for node in ast.walk(func):
                name = ""
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    name = node.id
                elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
                      and isinstance(node.value, ast.Name) and node.value.id == "self"):
                    name = node.attr
                if name in names and name not in stored:
                    out.append((rel, node.lineno, name, func.name))
    return out


def main() -> int:
    diff = Path(os.environ["ASSAY_DIFF_FILE"]).read_text(encoding="utf-8")
    gone = removed_stores(diff)
    mods = _modules(Path.cwd())
    names = set(gone) - still_written(mods, set(gone))
    seen: set[tuple[str, int]] = set()
    for file, line, name, func in reads(mods, names):
        if (file, line) in seen:
            continue
        seen.add((file, line))
        where, old = gone[name]
        print(f"{file}:{line}: blocking: {func}() reads {name}, but the change removed the "
              f"store to it ({where}, old line {old}) and nothing writes it any more: an "
              "intermediate with another consumer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
