"""Declared dependencies match imports: every third-party module src/ imports is declared."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "assay"

# Declared, but not imported by src/ -- each with the reason.
NOT_IMPORTED = {
    "py-spy": "a profiler program run as a subprocess by research/profile.py",
    "torch": "the gp extra: Optuna's GPSampler imports it; the gpt extra: examples/gpt",
    "tokenizers": "examples/gpt",
    "pyarrow": "examples/gpt",
    "pytest": "dev tool", "pytest-timeout": "dev tool", "hypothesis": "dev tool",
    "ruff": "dev tool", "mypy": "dev tool", "pandas": "dev tool (export tests)",
    "playwright": "dev tool (browser tests)",
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> dict[str, str]:
    """Every declared distribution -> where (``dependencies`` or ``extra <name>``)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = {_norm(re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0]): "dependencies"
           for d in project["dependencies"]}
    for extra, deps in project["optional-dependencies"].items():
        for d in deps:
            out.setdefault(_norm(re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0]), f"extra {extra}")
    return out


def _sdk_names(node: ast.Assign) -> list[str]:
    """The module named by ``sdk = "m"`` (or ``sdk, sdk_client = "m", "C"``) in a class."""
    pairs: list[tuple[ast.expr, ast.expr]] = []
    for target in node.targets:
        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
            pairs += zip(target.elts, node.value.elts, strict=False)
        else:
            pairs.append((target, node.value))
    return [v.value for t, v in pairs if isinstance(t, ast.Name) and t.id == "sdk"
            and isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value]


def imported() -> dict[str, str]:
    """Top-level third-party modules imported by src/ -> the first file importing it."""
    out: dict[str, str] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call) and node.args \
                    and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str) \
                    and (getattr(node.func, "id", "") in ("require", "need")
                         or getattr(node.func, "attr", "") == "import_module"):
                names = [node.args[0].value]  # require("module", ...), import_module("...")
            elif isinstance(node, ast.Assign):  # a chat client's `sdk = "openai"`, which
                names = _sdk_names(node)        # it imports with require(self.sdk, ...)
            for name in names:
                top = name.split(".")[0]
                if top != "assay" and top not in sys.stdlib_module_names:
                    out.setdefault(top, str(path.relative_to(ROOT)))
    return out


def test_every_imported_package_is_declared() -> None:
    dists = md.packages_distributions()
    have = declared()
    missing = []
    for module, where in imported().items():
        names = {_norm(d) for d in dists.get(module, [module])}
        if not names & set(have):
            missing.append(f"{module} (imported in {where}; distribution {sorted(names)})")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)


def test_every_declared_package_is_imported() -> None:
    dists = md.packages_distributions()
    used = {_norm(d) for module in imported() for d in dists.get(module, [module])}
    unused = [f"{name} ({where})" for name, where in declared().items()
              if name not in used and name not in NOT_IMPORTED]
    assert not unused, "declared but never imported by src/: " + "; ".join(unused)


def test_building_the_package_prints_no_deprecation_banner(tmp_path: Path) -> None:
    """`make demo` installs the package: setuptools must have nothing to warn about (a
    ``license = {text = ...}`` table or a license classifier prints a banner, twice)."""
    import shutil
    import subprocess

    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copy(ROOT / "README.md", tmp_path)
    pkg = tmp_path / "src" / "assay"
    pkg.mkdir(parents=True)
    shutil.copy(SRC / "__init__.py", pkg)
    out = tmp_path / "meta"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-W", "always", "-c",
         "import sys, setuptools.build_meta as b\n"
         "b.prepare_metadata_for_build_editable(sys.argv[1])",
         str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert "Deprecat" not in text and "License classifiers" not in text, text
    meta = next(out.glob("*.dist-info")) / "METADATA"
    assert "License-Expression: MIT" in meta.read_text()
