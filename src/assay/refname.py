"""Whether a run name can be a git branch (``assay/<name>``), by git's own rules.

``git check-ref-format`` refuses a name with a space, a control character, one of
``~ ^ : ? * [ \\``, a ``..`` or ``@{``, a component that starts with ``.`` or ends with
``.lock``, an empty component (``a//b``, a leading or trailing ``/``), a trailing ``.``, or
the name ``@``. Checking here lets a bad name be refused before anything is written.
"""

from __future__ import annotations

__all__ = ["branch_problem"]

_FORBIDDEN = set(" ~^:?*[\\\x7f")


def branch_problem(name: str) -> str:
    """Why ``assay/<name>`` is not a valid git branch, in words; '' when it is."""
    if not name:
        return "is empty"
    if name == "@":
        return "is '@', which git reserves"
    bad = sorted({ch for ch in name if ch in _FORBIDDEN or ord(ch) < 0x20})
    if bad:
        shown = ", ".join("a space" if ch == " " else repr(ch) for ch in bad)
        return f"holds {shown}, which git refuses in a branch name"
    if ".." in name:
        return "holds '..', which git refuses in a branch name"
    if "@{" in name:
        return "holds '@{', which git refuses in a branch name"
    if name.endswith("."):
        return "ends with '.', which git refuses in a branch name"
    for part in name.split("/"):
        if not part:
            return "has an empty path component (a leading, trailing or doubled '/')"
        if part.startswith("."):
            return f"has a component starting with '.' ({part!r})"
        if part.endswith(".lock"):
            return f"has a component ending with '.lock' ({part!r})"
    return ""
