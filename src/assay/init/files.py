"""The repository's files as ``assay init`` reads them: text, code files, the files a
command names, and which globs match nothing."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from ..config.spec import glob_match

__all__ = ["CODE_EXTS", "code_files", "code_globs", "read_text", "referenced_files",
           "repository_files", "unmatched_globs"]

CODE_EXTS = (".py", ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".rs",
             ".go", ".js", ".ts", ".java", ".zig", ".jl")
_SKIP_DIRS = {"node_modules", "__pycache__", "build", "dist", "venv", "target", "tests",
              "test", "third_party", "vendor", "external"}
_SKIP_LISTING = {".git", ".assay", ".venv", "venv", "node_modules", "__pycache__"}


def read_text(path: Path) -> str:
    """The file's text ('' when it cannot be read)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def referenced_files(root: Path, script: str) -> list[str]:
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


def code_files(root: Path, max_depth: int = 4) -> list[str]:
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
            if Path(fname).suffix in CODE_EXTS and not fname.startswith("test_"):
                found.append((here / fname).relative_to(root).as_posix())
    return found


def code_globs(root: Path, exclude: Sequence[str] = ()) -> list[str]:
    """Globs covering the code present, leaving out the files in ``exclude``."""
    files = [f for f in code_files(root) if f not in exclude]
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
