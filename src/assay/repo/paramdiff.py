"""A sweep candidate's parameter values as the diff of the files they rewrite.

A parameter with ``apply = "assign"`` changes one line ``NAME = value`` of its file; `assay
show` prints that change as a unified diff against the file at the commit the candidate
was measured from, the way a patch candidate's diff is printed. Parameters passed in the
environment (``apply = "env"``) rewrite no file and have no diff.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path

from ..config.spec import Target
from ..errors import PatchError, WorkspaceError
from ..model import ParamValue
from .git import git
from .workspace import rewrite_assignment

__all__ = ["params_diff"]


def params_diff(target: Target, base_commit: str, params: Mapping[str, ParamValue]) -> str:
    """The unified diff that ``params`` make to their files at ``base_commit`` ('' when they
    change no line). A file or line that cannot be read gives its reason as a comment."""
    by_file: dict[str, list[tuple[str, ParamValue]]] = {}
    for spec in target.params:
        if spec.apply == "assign" and spec.file and spec.name in params:
            by_file.setdefault(spec.file, []).append((spec.name, params[spec.name]))
    out: list[str] = []
    for file, values in by_file.items():
        try:
            before = git(["show", f"{base_commit}:{file}"], Path(target.root)).stdout
            after = before
            for name, value in values:
                after = rewrite_assignment(after, name, value, file)
        except (PatchError, WorkspaceError) as exc:
            out.append(f"# {file}: {exc}\n")
            continue
        out += difflib.unified_diff(before.splitlines(keepends=True),
                                    after.splitlines(keepends=True),
                                    fromfile=f"a/{file}", tofile=f"b/{file}")
    return "".join(out)
