"""What a candidate's tree may hold once its patch is applied, read from git's index.

The patch's text says what it means to do; ``git ls-files -s`` says what was done. git
reads a patch's modes as octal numbers, so ``new file mode 0120000`` makes a symbolic link
as surely as ``120000`` does, and a header that no pattern foresaw still ends up as a mode in
the index. :func:`check` compares the index of the applied tree with the base commit's
tree: a path that is a symbolic link (mode ``120000``) or a submodule (``160000``) that the base
did not hold as it is, or whose mode changed on a path outside the editable scope, is refused with
the path and the word ``symlink``, ``submodule`` or ``mode``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import PatchError
from .git import git

LINK = "120000"
SUBMODULE = "160000"


def _modes(tree: Path, args: list[str], sha_at: int) -> dict[str, tuple[str, str]]:
    """path -> (mode, object), from ``git <args> -z`` records ``<fields>\\t<path>``."""
    proc = git([*args, "-z"], tree, binary=True, error=PatchError)
    out: dict[str, tuple[str, str]] = {}
    for record in proc.stdout.split(b"\0"):
        if record:
            meta, _, name = record.partition(b"\t")
            fields = meta.decode().split()
            out[name.decode("utf-8", "surrogateescape")] = (fields[0], fields[sha_at])
    return out


def check(tree: Path, base: str, editable: Callable[[str], bool]) -> None:
    """Raise PatchError when the applied tree at ``tree`` holds a new or changed symlink or
    submodule, or a mode change outside the editable scope (against ``base``)."""
    now = _modes(tree, ["ls-files", "-s"], 1)
    before = _modes(tree, ["ls-tree", "-r", base], 2)
    for path, entry in sorted(now.items()):
        mode = entry[0]
        old = before[path][0] if path in before else None
        if entry == before.get(path) or (mode == old and mode not in (LINK, SUBMODULE)):
            continue
        if mode == LINK:
            raise PatchError(f"{path}: the applied patch makes it a symlink (mode {LINK} in "
                             "git's index); symlinks are not allowed in candidates, send the "
                             "file's content instead")
        if mode == SUBMODULE:
            raise PatchError(f"{path}: the applied patch makes it a submodule (mode "
                             f"{SUBMODULE} in git's index); submodules are not allowed in "
                             "candidates")
        if old is not None and not editable(path):
            raise PatchError(f"{path}: the applied patch changes its mode from {old} to {mode} "
                             "outside the editable scope; mode changes are allowed only on "
                             "editable files")
