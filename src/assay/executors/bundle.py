"""git bundles: ship the commits a block needs to a machine with no shared filesystem.

The driver packs a commit (and everything it needs) into a bundle, a single file of bytes;
a node fetches it into a node-local clone. Bundles are built from a throwaway bare
repository that borrows the target's objects (``objects/info/alternates``), so the user's
refs are never touched.

A *thin* bundle holds only the commits between a base the node already has and the tip;
:func:`ensure_commit` applies a chain ``[full(base), thin(base..tip)]`` skipping every
bundle whose tip the node already holds.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ..errors import WorkspaceError
from ..repo.git import git

BUNDLE_REF = "refs/assay/bundle"


def _objects_dir(root: Path) -> Path:
    common = Path(git(["rev-parse", "--git-common-dir"], root).stdout.strip())
    if not common.is_absolute():
        common = root / common
    return (common / "objects").resolve()


def make_bundle(root: Path, commit: str, exclude: Sequence[str] = ()) -> bytes:
    """A bundle of ``commit`` with its history, minus what ``exclude`` commits reach."""
    commit = git(["rev-parse", "--verify", f"{commit}^{{commit}}"], root).stdout.strip()
    excl = [git(["rev-parse", "--verify", f"{e}^{{commit}}"], root).stdout.strip() for e in exclude]
    excl = [e for e in excl if e != commit]
    with tempfile.TemporaryDirectory(prefix="assay-bundle-") as tmp:
        bare = Path(tmp) / "repo.git"
        git(["init", "-q", "--bare", str(bare)], Path(tmp))
        (bare / "objects" / "info" / "alternates").write_text(f"{_objects_dir(root)}\n")
        git(["update-ref", BUNDLE_REF, commit], bare)
        out = Path(tmp) / "b.bundle"
        git(["bundle", "create", "-q", str(out), BUNDLE_REF, *[f"^{e}" for e in excl]], bare)
        return out.read_bytes()


def has_commit(repo: Path, commit: str) -> bool:
    return git(["cat-file", "-t", commit], repo, check=False).stdout.strip() == "commit"


def fetch_bundle(repo: Path, data: bytes) -> str:
    """Fetch a bundle's objects into ``repo``; returns the commit it carries."""
    fd, name = tempfile.mkstemp(prefix="assay-", suffix=".bundle", dir=repo / ".git")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        git(["fetch", "-q", "--no-tags", name, f"+{BUNDLE_REF}:{BUNDLE_REF}"], repo)
        return git(["rev-parse", BUNDLE_REF], repo).stdout.strip()
    finally:
        os.unlink(name)


@contextlib.contextmanager
def repo_lock(repo: Path) -> Iterator[None]:
    """An exclusive lock for operations that change the clone's refs or worktree list."""
    repo.mkdir(parents=True, exist_ok=True)
    with open(repo.parent / (repo.name + ".lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def node_clone(cache_dir: Path, key: str) -> Path:
    """The node-local clone for repository ``key`` under ``cache_dir`` (created if new)."""
    repo = cache_dir / key / "repo"
    with repo_lock(repo):
        if not (repo / ".git").exists():
            git(["init", "-q", str(repo)], cache_dir)
            git(["config", "gc.auto", "0"], repo)
    return repo


def ensure_commit(repo: Path, commit: str,
                  bundles: Sequence[tuple[str, Callable[[], bytes]]]) -> None:
    """Make ``commit`` available in ``repo`` by fetching the bundles it still lacks.

    ``bundles`` is a chain of (tip commit, loader) pairs, base first; a loader is only
    called when its tip is missing (so a warm node transfers nothing).
    """
    with repo_lock(repo):
        if has_commit(repo, commit):
            _set_head(repo, commit)
            return
        for tip, load in bundles:
            if not has_commit(repo, tip):
                got = fetch_bundle(repo, load())
                if got != tip:
                    raise WorkspaceError(f"bundle carries {got[:12]}, expected {tip[:12]}")
        if not has_commit(repo, commit):
            raise WorkspaceError(f"commit {commit[:12]} is missing after fetching its bundles")
        _set_head(repo, commit)


def _set_head(repo: Path, commit: str) -> None:
    # `git worktree add ... HEAD` needs a born HEAD; the clone's own tree is never used.
    current = git(["rev-parse", "--verify", "-q", "HEAD"], repo, check=False).stdout.strip()
    if not current:
        git(["update-ref", "HEAD", commit], repo)


def repo_key(root: Path) -> str:
    """A stable name for the driver's repository, for node-local caches."""
    ident = f"{socket.gethostname()}:{root.resolve()}"
    return f"{root.resolve().name}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"
