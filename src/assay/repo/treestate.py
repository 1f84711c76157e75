"""The file state of a slot's trees, checked around every step of a block.

A block runs code from two trees of one slot: the incumbent's (``<slot>-a``) and the
candidate's (``<slot>-b``). Each may change its own tree (build outputs, bytecode, a file
its benchmark writes), but nothing may change the other side's tree, and the incumbent's
sources stay as they were materialized. A sandbox keeps the candidate's processes away from
the other tree in the first place; these checks are the second line, for runs without one
and for whatever a sandbox misses.

A tree's print (:func:`take`) is the ``lstat`` (mode, size, modification and change times,
inode) of every file git lists in it (tracked, untracked and ignored ones: ``git ls-files
--cached --others [--ignored] --exclude-standard``), of every folder holding one (a file
created or removed there moves the folder's times), and of the tree's own bytecode folder,
its subfolders and files. A write cannot set a file's change time back, so an edit shows even when
the size and modification time are forged. Taking a print costs two ``git ls-files``;
checking one again (:func:`again`) only the ``lstat`` calls, and a print is taken afresh
only when checking it again found a change.

:class:`Guard` holds a block's prints. After each step it checks what ran: a tree that ran
nothing must be unchanged, and the incumbent's tree may only have changed outside its
sources (a build's outputs, its bytecode); anything else is blamed on the candidate, whose
code is the only code in the block that is not already trusted. The user's checkout is
watched on the files a change to which would act later: its protected files,
``assay.toml``, and the repository's hooks and config.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .git import git
from .workspace import BUILD_DIRS

Stat = tuple[int, int, int, int, int]  # mode, size, mtime_ns, ctime_ns, inode
BYTECODE = "<bytecode>/"  # the prefix of the tree's own bytecode files in a print


def _stat(path: Path) -> Stat | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


@dataclass(frozen=True)
class TreePrint:
    """The file state of one tree: relative path -> its ``lstat`` (None: absent).

    Folders end with ``/`` (the tree itself is ``./``); the tree's bytecode files start
    with :data:`BYTECODE`."""

    root: Path
    bytecode: Path | None
    entries: Mapping[str, Stat | None]
    tracked: frozenset[str] = frozenset()  # the entries git tracks

    def path(self, rel: str) -> Path:
        if rel.startswith(BYTECODE) and self.bytecode is not None:
            return self.bytecode / rel[len(BYTECODE):].rstrip("/")
        return self.root / rel


def _ls(root: Path, *args: str) -> list[str]:
    proc = git(["ls-files", "-z", *args], root, check=False, binary=True)
    return [n.decode("utf-8", "surrogateescape") for n in proc.stdout.split(b"\0") if n]


def take(root: Path, bytecode: Path | None = None) -> TreePrint:
    """The print of ``root`` now: two ``git ls-files``, then an ``lstat`` per entry."""
    listed = _ls(root, "-t", "--cached", "--others", "--exclude-standard")
    # "H name" (tracked) or "? name" (untracked); then the ignored files (build outputs):
    # the tree's own steps may change those, the other side's may not
    names = [n[2:] for n in listed] + _ls(root, "--others", "--ignored", "--exclude-standard")
    entries: dict[str, Stat | None] = {"./": _stat(root), ".git": _stat(root / ".git")}
    for name in names:
        entries[name] = _stat(root / name)
        parent = os.path.dirname(name)
        while parent and f"{parent}/" not in entries:
            entries[f"{parent}/"] = _stat(root / parent)
            parent = os.path.dirname(parent)
    if bytecode is not None:
        entries[BYTECODE] = _stat(bytecode)  # None until the tree's first import
        for dirpath, _dirs, files in os.walk(bytecode):
            folder = Path(dirpath)
            if folder != bytecode:
                entries[f"{BYTECODE}{folder.relative_to(bytecode)}/"] = _stat(folder)
            for fn in files:
                entries[BYTECODE + str((folder / fn).relative_to(bytecode))] = \
                    _stat(folder / fn)
    tracked = frozenset(n[2:] for n in listed if not n.startswith("? "))
    return TreePrint(root, bytecode, entries, tracked)


def again(p: TreePrint) -> TreePrint:
    """The same entries, stat'ed again (no git): a changed, added or removed file of the
    print shows, and so does a file added to one of its folders (the folder's times)."""
    return TreePrint(p.root, p.bytecode, {rel: _stat(p.path(rel)) for rel in p.entries},
                     p.tracked)


def changed(before: TreePrint, after: TreePrint) -> list[str]:
    """The entries whose state differs, sorted (files before the folders that hold them)."""
    keys = set(before.entries) | set(after.entries)
    out = [k for k in keys if before.entries.get(k) != after.entries.get(k)]
    return sorted(out, key=lambda k: (k.endswith("/"), k))


def is_source(p: TreePrint, rel: str) -> bool:
    """Whether a print entry is one of the tree's sources: a file git tracks (or the tree's
    link to its git folder), not inside a build folder. A benchmark may write files of its
    own (a log, a results file) into its tree; it may not change what it was given."""
    if rel != ".git" and rel not in p.tracked:
        return False
    first = rel.split("/", 1)[0] + "/"
    return not any(fnmatch.fnmatch(first, pattern) for pattern in BUILD_DIRS)


# the hooks git runs (githooks(5)): one planted in the user's repository runs at their next
# commit, checkout or push
HOOKS = ("applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit",
         "pre-merge-commit", "prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase",
         "post-checkout", "post-merge", "pre-push", "pre-receive", "update", "proc-receive",
         "post-receive", "post-update", "reference-transaction", "push-to-checkout",
         "pre-auto-gc", "post-rewrite", "sendemail-validate", "fsmonitor-watchman",
         "post-index-change")


def watched_files(root: Path, protected: Callable[[str], bool]) -> list[Path]:
    """The files of the user's checkout whose change would act later: the protected ones,
    ``assay.toml``, the repository's config and hooks."""
    names = git(["ls-files", "-z", "--cached", "--others", "--exclude-standard"], root,
                check=False).stdout.split("\0")
    out = [root / n for n in names if n and (n == "assay.toml" or protected(n))]
    common_dir = git(["rev-parse", "--git-common-dir"], root, check=False).stdout.strip()
    if not common_dir:
        return out
    common = Path(common_dir)
    common = common if common.is_absolute() else root / common
    hooks = common / "hooks"
    out += [common / "config", hooks]
    out += [hooks / name for name in sorted(set(HOOKS) | (
        {p.name for p in hooks.iterdir()} if hooks.is_dir() else set()))]
    return out


def _files_state(files: Sequence[Path]) -> dict[Path, Stat | None]:
    return {f: _stat(f) for f in files}


class Guard:
    """A block's trees, checked after every step (see the module's docstring).

    ``prints`` holds the print of each tree as the block last left it (the slot keeps it
    between blocks); ``user`` the watched files of the user's checkout.
    """

    def __init__(self, incumbent: Path, candidate: Path | None, user: Sequence[Path],
                 bytecode: Callable[[Path], Path], show: Callable[[Path], str]) -> None:
        self.incumbent = incumbent
        self.candidate = candidate
        self.bytecode = bytecode
        self.show = show  # how a path is named in a reason
        self.prints: dict[Path, TreePrint] = {}
        self.user_files = list(user)
        self.user = _files_state(self.user_files)

    @property
    def trees(self) -> list[Path]:
        return [self.incumbent] + ([self.candidate] if self.candidate is not None else [])

    def settle(self, *trees: Path) -> None:
        """Take the print of ``trees`` (every tree when none is named) as it is now."""
        for tree in trees or tuple(self.trees):
            self.prints[tree] = take(tree, self.bytecode(tree))

    def check(self, step: str, ran: Sequence[Path] = ()) -> str:
        """After ``step``, which ran code in the trees ``ran``: '' when every change is the
        step's own, else the reason the candidate is blamed. The prints are taken again."""
        found: list[str] = []
        for tree in self.trees:
            known = self.prints.get(tree)
            if known is None:
                self.settle(tree)
                continue
            if tree not in ran:
                now = again(known)
                diff = changed(known, now)
                if diff:  # name the new files, not only the folders that hold them
                    now = take(tree, self.bytecode(tree))
                    diff = changed(known, now) or diff
                found += [self.show(known.path(rel)) for rel in diff]
                self.prints[tree] = now
                continue
            now = again(known)
            if not changed(known, now):
                continue  # nothing moved: no listing needed
            now = take(tree, self.bytecode(tree))
            if tree == self.incumbent and self.candidate is not None:
                found += [self.show(known.path(rel)) for rel in changed(known, now)
                          if is_source(known, rel)]
            self.prints[tree] = now
        now_user = _files_state(self.user_files)
        for f, st in now_user.items():
            if self.user.get(f) == st:
                continue
            if self.user.get(f) is None and f.parent.name == "hooks" and f.is_file():
                f.unlink()  # a hook planted during the block: git must never run it
                found.append(f"{self.show(f)} (a new hook, removed)")
            else:
                found.append(self.show(f))
        self.user = _files_state(self.user_files)
        if not found or self.candidate is None:
            return ""
        names = ", ".join(found[:6]) + (f" and {len(found) - 6} more" if len(found) > 6 else "")
        return (f"{names} changed during {step}, outside the candidate's own tree; the "
                "candidate is not measured further and the incumbent's tree is restored")


def unchanged(known: TreePrint | None) -> bool:
    """Whether a tree still holds what its print says (True when there is no print)."""
    return known is None or not changed(known, again(known))


def scrub(tree: Path) -> None:
    """Remove every untracked file of ``tree``, build outputs and ignored ones included:
    a tree changed from outside has nothing left worth keeping warm."""
    git(["clean", "-ffdxq"], tree)
