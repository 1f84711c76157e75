"""git: slot worktrees, patch validation and application, and the run branch.

The user's branch, index and working tree are never touched. assay works in persistent
worktrees under ``.assay/worktrees/`` (``<slot>-a`` holds the incumbent, ``<slot>-b`` the
candidate), resets them with ``git checkout --force`` + ``git clean -fd`` (ignored build
outputs survive, so builds stay warm), and records kept candidates as commits on
``assay/<run-name>`` built in a private index (``git commit-tree``), never by checking out.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import math
import operator
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..config.spec import ParamSpec, Target, glob_match
from ..errors import PatchError, WorkspaceError
from ..model import ParamValue
from . import applied, carry
from .git import git
from .holdout import holdout_files

# Header lines (never hunk lines, which begin with " ", "+", "-" or "\\") that make or change
# a symbolic link: a new link, a mode change to or from a link, an edit of a link's target.
_SYMLINK = re.compile(r"^(?:new file mode|new mode|old mode) 120000\s*$"
                      r"|^index [0-9a-f]+\.\.[0-9a-f]+ 120000\s*$", re.MULTILINE)
# Folders that hold build outputs: `git clean` leaves them in a slot's tree (warm builds)
# even where the project does not ignore them.
BUILD_DIRS = ("build/", "_build/", "cmake-build-*/", "builddir/", "target/")


@dataclass(frozen=True)
class PatchInfo:
    paths: tuple[str, ...]  # every path the patch creates, changes, renames or deletes


def _numstat(patch: str, *flags: str) -> tuple[list[str], str]:
    """The paths ``git apply --numstat -z`` reads from ``patch`` (and git's complaint, if any).

    git parses the patch itself: hunk lines are never taken for headers, quoted names are
    unquoted, and ``-z`` prints every name verbatim (UTF-8 included). It names one path per
    file: the new one, or the old one for a deletion; ``-R`` (the patch reversed) gives the
    old name of a rename or copy.
    """
    with tempfile.TemporaryDirectory(prefix="assay-patch-") as empty:  # outside any repo
        proc = git(["apply", "--numstat", "-z", *flags, "-"], empty, binary=True, check=False,
                   input=patch.encode("utf-8", errors="surrogateescape"),
                   env={"GIT_DIR": os.devnull})
    if proc.returncode != 0:
        return [], proc.stderr.decode(errors="replace").strip()
    names: list[str] = []
    for record in proc.stdout.split(b"\0"):
        if record:
            name = record.split(b"\t", 2)[-1]  # "added<TAB>deleted<TAB>path"
            names.append(name.decode("utf-8", errors="surrogateescape"))
    return names, ""


def patch_paths(patch: str) -> PatchInfo:
    """The repository paths a unified/git diff touches, as git reads them.

    Raises PatchError when git cannot read the patch, or on an unsafe path (absolute, with
    ``..``, inside ``.git`` or ``.assay``) or a symbolic link.
    """
    text = patch if patch.endswith("\n") else patch + "\n"
    new, problem = _numstat(text)
    if problem:
        raise PatchError(f"git cannot read the patch: {problem}; send a unified diff as "
                         "`git diff` prints it (---/+++ headers and @@ hunks)")
    old, _ = _numstat(text, "-R")
    raw, _ = _numstat(text, "-p0")  # names as written, before git strips a/ and b/
    for name in raw:
        if name.startswith("/"):
            raise PatchError(f"patch names the absolute path {name!r}; patches must use "
                             "paths relative to the repository root")
    paths: list[str] = []
    for name in (*new, *old):
        _check_path(name)
        if name not in paths:
            paths.append(name)
    m = _SYMLINK.search(text)
    if m:
        line = text.count("\n", 0, m.start()) + 1
        raise PatchError(f"patch line {line}: creates or changes a symbolic link; "
                         "symlinks are not allowed in candidate patches")
    return PatchInfo(tuple(paths))


def _check_path(name: str) -> None:
    if name.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", name):
        raise PatchError(f"patch names the absolute path {name!r}; patches must use "
                         "paths relative to the repository root")
    parts = PurePosixPath(name).parts
    if ".." in parts:
        raise PatchError(f"patch path {name!r} escapes the repository with '..'")
    if parts and parts[0] == ".git":
        raise PatchError(f"patch path {name!r} is inside .git")
    if parts and parts[0] == ".assay":
        raise PatchError(f"patch path {name!r} is inside assay's state folder")


def check_scope(patch: str, target: Target) -> tuple[str, ...]:
    """Raise PatchError when the patch touches a protected path or leaves the editable scope."""
    info = patch_paths(patch)
    for p in info.paths:  # a protected path is named first, wherever it is in the patch
        if target.is_protected(p):
            raise PatchError(f"patch touches protected path {p!r}; the evaluator, checks, data "
                             "and config may not change")
    for p in info.paths:
        if not target.is_editable(p):
            raise PatchError(f"patch touches {p!r}, outside the editable scope "
                             f"{list(target.editable)}")
    return info.paths


def _assignment(name: str) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(name)}[ \t]*(?::[^=\n]+)?=[ \t]*(.*?)[ \t]*(#.*)?$",
                      re.MULTILINE)


def assigned_value(text: str, spec: ParamSpec) -> ParamValue | None:
    """The value the file gives ``spec``'s parameter on its one line ``NAME = ...``, as the
    parameter's type, or None when there is no such single line or its right side is not a
    constant expression (``2**19`` counts) of that type."""
    hits = list(_assignment(spec.name).finditer(text))
    if len(hits) != 1:
        return None
    try:
        value = literal_value(hits[0].group(1))
    except (ValueError, ArithmeticError, TypeError):
        return None
    if spec.type == "bool":
        return value if isinstance(value, bool) else None
    if isinstance(value, bool):
        return value if spec.type == "categorical" and value in spec.choices else None
    if spec.type == "int":
        return value if isinstance(value, int) else None
    if spec.type == "float":
        return float(value) if isinstance(value, (int, float)) else None
    return value if value in spec.choices else None


def held_params(specs: Sequence[ParamSpec], params: Mapping[str, ParamValue],
                read: Callable[[str], str | None]) -> dict[str, ParamValue]:
    """The values a commit holds for the declared parameters: ``params`` (the values assay
    applies to it) where they name one, else, for an assigned parameter, what its file's
    own line says (``read(path)`` gives the file's text, None when there is none)."""
    out: dict[str, ParamValue] = {}
    texts: dict[str, str | None] = {}
    for spec in specs:
        if spec.name in params:
            out[spec.name] = params[spec.name]
            continue
        if spec.apply != "assign":
            continue
        if spec.file not in texts:
            texts[spec.file] = read(spec.file)
        text = texts[spec.file]
        value = assigned_value(text, spec) if text is not None else None
        if value is not None:
            out[spec.name] = value
    return out


def rewrite_assignment(text: str, name: str, value: ParamValue, file: str) -> str:
    """Replace the one top-level line ``NAME = ...`` with ``NAME = value``."""
    hits = list(_assignment(name).finditer(text))
    if len(hits) != 1:
        raise PatchError(f"parameter {name}: expected exactly one line `{name} = ...` at the "
                         f"start of a line in {file}, found {len(hits)}")
    m = hits[0]
    if same_value(m.group(1), value):
        return text  # the file's own spelling (`2**19`) stays, and its mtime with it
    comment = f"  {m.group(2)}" if m.group(2) else ""
    return text[: m.start()] + f"{name} = {python_literal(value)}{comment}" + text[m.end():]


_OPS: dict[type, Any] = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
                         ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv,
                         ast.Pow: operator.pow, ast.Mod: operator.mod,
                         ast.USub: operator.neg, ast.UAdd: operator.pos}


def literal_value(source: str) -> Any:
    """The value of a constant expression (``524288``, ``2**19``, ``3e-4``, ``'x'``).

    Only literals and arithmetic on them; anything else raises ValueError.
    """
    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and right > 64:
                raise ValueError("exponent too large")
            return _OPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError(f"not a constant expression: {ast.dump(node)[:60]}")

    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(str(exc)) from None
    return ev(tree.body)


def same_value(source: str, value: ParamValue) -> bool:
    """Whether the expression ``source`` already evaluates to ``value``."""
    try:
        current = literal_value(source)
    except (ValueError, ArithmeticError, TypeError):
        return False
    if isinstance(value, bool) or isinstance(current, bool):
        return type(current) is type(value) and current == value
    if isinstance(value, str) or isinstance(current, str):
        return isinstance(current, str) and isinstance(value, str) and current == value
    if isinstance(value, int) and isinstance(current, int):
        return current == value
    return math.isclose(float(current), float(value), rel_tol=1e-12, abs_tol=0.0)


def python_literal(value: ParamValue) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def split_params(params: Mapping[str, ParamValue], specs: Sequence[ParamSpec]
                 ) -> tuple[dict[str, str], dict[str, ParamValue]]:
    """(environment variables, assignments) for a set of parameter values."""
    by_name = {s.name: s for s in specs}
    env: dict[str, str] = {}
    assign: dict[str, ParamValue] = {}
    for name, value in params.items():
        spec = by_name.get(name)
        if spec is None:
            raise PatchError(f"parameter {name!r} is not declared in [[params]]")
        if spec.apply == "env":
            env[name] = python_literal(value) if not isinstance(value, str) else value
        else:
            assign[name] = value
    return env, assign


def hash_paths(root: Path, globs: Sequence[str], extra: Sequence[str] = ()) -> dict[str, str]:
    """SHA-256 of every file under ``root`` matching a protected glob (tracked or not)."""
    out: dict[str, str] = {}
    if not globs and not extra:
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if d not in (".git", ".assay")]
        for fn in filenames:
            rel = fn if rel_dir == "." else f"{rel_dir}/{fn}".replace(os.sep, "/")
            if any(glob_match(rel, g) for g in globs) or rel in extra:
                full = Path(dirpath) / fn
                if full.is_symlink():
                    out[rel] = "symlink:" + os.readlink(full)
                    continue
                h = hashlib.sha256()
                with open(full, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
                out[rel] = h.hexdigest()
    return out


def diff_hashes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    keys = sorted(set(before) | set(after))
    return [k for k in keys if before.get(k) != after.get(k)]


class Workspace:
    """The target repository as assay sees it: worktrees, patches, the run branch."""

    def __init__(self, target: Target, run_name: str = "") -> None:
        self.target = target
        self.root = target.root
        self.run_name = run_name or target.run.name or "main"
        self.state = target.state_dir
        self.trees = self.state / "worktrees"
        if not (self.root / ".git").exists():
            raise WorkspaceError(f"{self.root} is not a git repository; assay measures commits "
                                 "(run `git init` and commit your code first)")
        self._exclude_state_dir()

    @property
    def branch(self) -> str:
        return f"assay/{self.run_name}"

    @functools.cached_property
    def _common(self) -> Path:
        """The repository's git directory (shared by its worktrees), resolved."""
        common = Path(git(["rev-parse", "--git-common-dir"], self.root).stdout.strip())
        return (common if common.is_absolute() else self.root / common).resolve()

    def _exclude_state_dir(self) -> None:
        exclude = self._common / "info" / "exclude"
        exclude.parent.mkdir(parents=True, exist_ok=True)
        text = exclude.read_text() if exclude.exists() else ""
        if "/.assay/" not in text.splitlines():
            with open(exclude, "a") as fh:
                fh.write(("\n" if text and not text.endswith("\n") else "") + "/.assay/\n")

    def head(self) -> str:
        return git(["rev-parse", "HEAD"], self.root).stdout.strip()

    def resolve(self, rev: str) -> str:
        return git(["rev-parse", "--verify", f"{rev}^{{commit}}"], self.root).stdout.strip()

    def dirty(self) -> bool:
        return bool(git(["status", "--porcelain", "--untracked-files=no"],
                        self.root).stdout.strip())

    def ensure_branch(self, base: str) -> str:
        """Create ``assay/<run-name>`` at ``base`` unless it exists; return its tip."""
        ref = f"refs/heads/{self.branch}"
        existing = git(["rev-parse", "--verify", "-q", ref], self.root, check=False).stdout.strip()
        if existing:
            return existing
        git(["update-ref", ref, base, ""], self.root)
        self.save_commits()
        return base

    @property
    def bundle(self) -> Path:
        """``.assay/commits.bundle``: the run branches, for another clone to fetch."""
        return self.state / carry.BUNDLE_NAME

    def save_commits(self, named: Sequence[str] = ()) -> None:
        """Write the run branches (and the ``named`` commits) into :attr:`bundle`, so that
        a copy of ``.assay`` carries them to a fresh clone (:mod:`assay.repo.carry`)."""
        carry.write_bundle(self.root, self.bundle, named)

    def adopt_trees(self) -> list[str]:
        """Make the slot trees under ``.assay/worktrees`` worktrees of this clone again.

        A copy of ``.assay`` from another clone (another machine) holds trees whose ``.git``
        file points at that clone: each is registered here afresh, its untracked files
        (warm build outputs) kept. Call only while holding the run lock. Returns the names
        of the trees adopted."""
        if not self.trees.is_dir():
            return []
        adopted: list[str] = []
        for tree in sorted(self.trees.iterdir()):
            if tree.is_dir() and (tree / ".git").is_file() and self._foreign(tree):
                self._readopt(tree)
                adopted.append(tree.name)
        return adopted

    def _foreign(self, tree: Path) -> bool:
        """Whether ``tree``'s ``.git`` file names no worktree of this clone."""
        line = (tree / ".git").read_text(errors="replace").strip()
        gitdir = Path(line.split(":", 1)[1].strip()) if line.startswith("gitdir:") else None
        return gitdir is None or not gitdir.is_absolute() or not gitdir.is_dir() or \
            gitdir.resolve().parent != self._common / "worktrees"

    def _readopt(self, tree: Path) -> None:
        aside = tree.with_name(f".{tree.name}.adopting")
        shutil.rmtree(aside, ignore_errors=True)
        tree.rename(aside)
        (aside / ".git").unlink()
        git(["worktree", "prune"], self.root)
        git(["worktree", "add", "--detach", "-f", "--no-checkout", str(tree), "HEAD"],
            self.root)
        for item in aside.iterdir():
            item.rename(tree / item.name)
        aside.rmdir()

    def clear_stale_locks(self) -> list[str]:
        """Remove git lock files a killed run left in assay's own worktrees and run branch.

        Call only while holding the run lock: nothing else writes these. Returns what was
        removed (a leftover ``index.lock`` would otherwise fail every block on its slot).
        """
        removed: list[str] = []
        common = Path(git(["rev-parse", "--git-common-dir"], self.root).stdout.strip())
        if not common.is_absolute():
            common = self.root / common
        candidates = [common / "refs" / "heads" / f"{self.branch}.lock"]
        if self.trees.is_dir():
            for tree in self.trees.iterdir():
                dotgit = tree / ".git"
                if dotgit.is_file():
                    line = dotgit.read_text(errors="replace").strip()
                    if line.startswith("gitdir:"):
                        gitdir = Path(line.split(":", 1)[1].strip())
                        candidates.append((tree / gitdir) / "index.lock")
        for lock in candidates:
            if lock.is_file():
                lock.unlink(missing_ok=True)
                removed.append(str(lock))
        return removed

    # -- worktrees -----------------------------------------------------------------
    def tree(self, name: str) -> Path:
        """A persistent worktree ``.assay/worktrees/<name>`` (created on first use)."""
        path = self.trees / name
        if (path / ".git").is_file() and self._foreign(path):
            self._readopt(path)  # a tree copied from another clone
        if not (path / ".git").exists():
            self.trees.mkdir(parents=True, exist_ok=True)
            git(["worktree", "prune"], self.root)
            git(["worktree", "add", "--detach", "-f", str(path), "HEAD"], self.root)
        return path

    def reset(self, path: Path, commit: str) -> None:
        """Check out ``commit``, dropping changes; build folders stay (warm builds)."""
        git(["checkout", "-q", "--force", "--detach", commit], path)
        keep = [arg for d in BUILD_DIRS for arg in ("-e", d)]
        git(["clean", "-fdq", *keep], path)

    def checked_out(self, path: Path) -> str:
        """The commit ``path`` has checked out."""
        return git(["rev-parse", "HEAD"], path).stdout.strip()

    def fingerprint(self, path: Path) -> str:
        """What ``path`` holds: its HEAD plus its tracked and staged changes (a digest).

        Build outputs and untracked files are left out, so a build does not change it.
        """
        head = git(["rev-parse", "HEAD"], path, check=False).stdout.strip()
        diff = git(["diff", "HEAD", "--binary"], path, check=False).stdout
        return hashlib.sha256(f"{head}\n{diff}".encode()).hexdigest()[:24]

    def bytecode_dir(self, tree: Path) -> Path:
        """Where the commands run in ``tree`` keep Python bytecode (``PYTHONPYCACHEPREFIX``):
        a folder per tree, for the tree's own files and the installed packages (which mirror
        their absolute paths in it). Only that tree's commands write and read it, so
        nothing one side of a slot compiles is ever loaded by the other side or another
        slot; it persists across the tree's runs, so the packages compile once per tree."""
        return self.target.state_dir / "pycache" / tree.name

    def bytecode_env(self, tree: Path) -> dict[str, str]:
        return {"PYTHONPYCACHEPREFIX": str(self.bytecode_dir(tree))}

    def bytecode_of(self, path: Path) -> Path:
        """The folder of :meth:`bytecode_dir` that holds the bytecode of ``path``'s files."""
        full = path.resolve()
        return self.bytecode_dir(path) / full.relative_to(full.anchor)

    def forget_bytecode(self, path: Path) -> None:
        """Drop the bytecode of ``path``'s own files. A .pyc is trusted when its source has
        the same size and modification second, which a rewritten parameter (``K = 12``
        then ``K = 13``) can match; a tree's files compile afresh after every change."""
        shutil.rmtree(self.bytecode_of(path), ignore_errors=True)
        self.drop_foreign_bytecode(path)

    def drop_foreign_bytecode(self, tree: Path) -> None:
        """Drop from ``tree``'s bytecode folder what mirrors the state folder's files other
        than the tree's own (another tree's ``work.py``): the tree's commands cannot see
        them, so no such file is anything they compiled, only what a run planted, which
        no interpreter loads and none is left to look as if one might."""
        own = self.bytecode_of(tree)
        state = self.target.state_dir.resolve()
        top = self.bytecode_dir(tree) / state.relative_to(state.anchor)
        for dirpath, dirnames, filenames in os.walk(top):
            folder = Path(dirpath)
            if folder == own:
                dirnames[:] = []
                continue
            for name in filenames:
                (folder / name).unlink(missing_ok=True)
            for name in list(dirnames):
                sub = folder / name
                if sub != own and sub not in own.parents:
                    shutil.rmtree(sub, ignore_errors=True)
                    dirnames.remove(name)

    def materialize(self, path: Path, commit: str, patch: str,
                    params: Mapping[str, ParamValue]) -> dict[str, str]:
        """Reset ``path`` to ``commit``, apply the patch (its links, submodules and modes
        checked in git's index: :mod:`assay.repo.applied`) and parameter assignments, and drop
        the tree's bytecode (:meth:`forget_bytecode`).

        Returns the environment variables the parameters set.
        """
        self.forget_bytecode(path)
        self.reset(path, commit)
        if patch.strip():
            check_scope(patch, self.target)
            self.apply(path, patch)
            applied.check(path, commit, self.target.is_editable)
        env, assign = split_params(params, self.target.params)
        by_name = {s.name: s for s in self.target.params}
        for name, value in assign.items():
            spec = by_name[name]
            f = path / spec.file
            if not f.exists():
                raise PatchError(f"parameter {name}: file {spec.file} does not exist")
            text = f.read_text()
            new = rewrite_assignment(text, name, value, spec.file)
            if new != text:
                f.write_text(new)
        return env

    def apply(self, path: Path, patch: str) -> None:
        text = patch if patch.endswith("\n") else patch + "\n"
        proc = git(["apply", "--index", "--whitespace=nowarn", "-"], path, input=text,
                   check=False)
        if proc.returncode != 0:
            raise PatchError(f"patch does not apply: {proc.stderr.strip()}")

    # -- kept candidates -----------------------------------------------------------
    def commit_candidate(self, base: str, patch: str, params: Mapping[str, ParamValue],
                         message: str) -> str:
        """Commit base + patch + assignments on the run branch, in a private index."""
        _, assign = split_params(params, self.target.params)
        by_name = {s.name: s for s in self.target.params}
        self.state.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.state) as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            git(["read-tree", base], self.root, env=env)
            if patch.strip():
                text = patch if patch.endswith("\n") else patch + "\n"
                proc = git(["apply", "--cached", "--whitespace=nowarn", "-"], self.root,
                           input=text, env=env, check=False)
                if proc.returncode != 0:
                    raise PatchError(f"patch does not apply to {base[:12]}: "
                                     f"{proc.stderr.strip()}")
            for name, value in assign.items():
                spec = by_name[name]
                old = git(["cat-file", "-p", f":{spec.file}"], self.root, env=env).stdout
                new = rewrite_assignment(old, name, value, spec.file)
                blob = git(["hash-object", "-w", "--stdin"], self.root, input=new).stdout.strip()
                mode = git(["ls-files", "-s", "--", spec.file], self.root,
                           env=env).stdout.split()[0]
                git(["update-index", "--cacheinfo", f"{mode},{blob},{spec.file}"], self.root,
                    env=env)
            tree = git(["write-tree"], self.root, env=env).stdout.strip()
        ident = {"GIT_AUTHOR_NAME": "assay", "GIT_AUTHOR_EMAIL": "assay@localhost",
                 "GIT_COMMITTER_NAME": "assay", "GIT_COMMITTER_EMAIL": "assay@localhost"}
        sha = git(["commit-tree", tree, "-p", base, "-m", message], self.root,
                  env=ident).stdout.strip()
        ref = f"refs/heads/{self.branch}"
        old_tip = git(["rev-parse", "--verify", "-q", ref], self.root, check=False).stdout.strip()
        git(["update-ref", ref, sha, old_tip or ""], self.root)
        self.save_commits()
        return sha

    def file_at(self, commit: str, path: str) -> str:
        return git(["show", f"{commit}:{path}"], self.root).stdout

    def editable_files(self, commit: str, limit_bytes: int = 200_000) -> dict[str, str]:
        """The editable text files at ``commit``, up to ``limit_bytes`` in total.

        One ``git ls-tree`` and one ``git cat-file --batch``, whatever the number of files.
        """
        # -z: names verbatim (git quotes non-ASCII names otherwise, and no glob matches those)
        listing = [r for r in git(["ls-tree", "-r", "-l", "-z", commit],
                                  self.root).stdout.split("\0")
                   if r]
        held = holdout_files(self.target, [r.partition("\t")[2] for r in listing])
        wanted: list[tuple[str, str]] = []
        total = 0
        for line in listing:
            meta, _, name = line.partition("\t")
            parts = meta.split()
            if len(parts) < 4 or parts[1] != "blob" or not parts[3].isdigit():
                continue
            if not self.target.is_editable(name) or self.target.is_protected(name) \
                    or name in held:  # a file the holdout command names never reaches one
                continue
            size = int(parts[3])
            if total + size > limit_bytes:
                continue
            wanted.append((name, parts[2]))
            total += size
        if not wanted:
            return {}
        proc = git(["cat-file", "--batch"], self.root, binary=True,
                   input="".join(f"{sha}\n" for _, sha in wanted).encode())
        out: dict[str, str] = {}
        data, pos = proc.stdout, 0
        for name, _sha in wanted:
            end = data.index(b"\n", pos)
            size = int(data[pos:end].split()[2])
            body = data[end + 1:end + 1 + size]
            pos = end + 1 + size + 1
            if b"\0" in body:
                continue
            out[name] = body.decode("utf-8", errors="replace")
        return out

    def checkout(self, name: str, commit: str) -> Path:
        """A clean worktree at ``commit`` for a proposer to read or edit."""
        path = self.tree(f"propose-{name}")
        self.reset(path, commit)
        return path
