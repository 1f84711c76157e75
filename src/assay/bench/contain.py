"""What a target's runs may touch: the sandbox spec of one run, and the gate before a run.

:func:`spec_for` gives the :class:`assay.sandbox.Spec` of a command run in a tree (a slot's,
the chain's, finalize's, the agent's private checkout): the tree writable, the compiler
caches and the bytecode folder its environment names writable (each the tree's own:
:func:`assay.bench.worker.tree_cache`, :meth:`assay.repo.workspace.Workspace.bytecode_dir`),
and hidden: the target's state folder (journal, logs, process records, the other slots'
trees), the user's checkout, the repository's git folder, and the holdout files (except for
the holdout command itself). ``None`` when the machine has no sandbox
(:func:`assay.sandbox.probe`): the run then goes unconfined, which :func:`gate` has allowed,
refused or announced before the run started.

:func:`gate` is that decision: with a sandbox, nothing to say; without one, candidates from
the ``llm`` and ``agent`` proposers (code an adversary may have written) are refused unless
the user passed ``--unconfined``, and ``queue`` and ``sweep`` runs get one warning.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import sandbox
from ..config.spec import Target
from ..errors import ConfigError, ExecutorError
from ..repo.git import git
from ..repo.holdout import holdout_files

# environment variables that name a cache folder a run writes (compilers, bytecode)
CACHE_VARS = ("PYTHONPYCACHEPREFIX", "CCACHE_DIR", "SCCACHE_DIR")
# proposers whose candidates are code nobody reviewed before it runs
UNTRUSTED = ("llm", "agent")
# the key of a candidate's meta (and the journal's) marking a run without a sandbox
UNCONFINED = "unconfined"


@functools.cache
def git_folder(root: Path) -> Path | None:
    """The repository's (common) git folder, resolved (asked once per root)."""
    try:
        r = git(["rev-parse", "--git-common-dir"], root, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = r.stdout.strip()
    return (root / out).resolve() if r.returncode == 0 and out else None


def _tree_holdout(target: Target, tree: Path) -> list[Path]:
    """The holdout files present in ``tree`` (tracked or not)."""
    if target.holdout is None and not target.holdout_files:
        return []
    names: list[str] = []
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".assay")]
        rel = os.path.relpath(dirpath, tree)
        names += [fn if rel == "." else f"{rel}/{fn}".replace(os.sep, "/") for fn in filenames]
    return [tree / n for n in sorted(holdout_files(target, names))]


def spec_for(target: Target, tree: Path, env: Mapping[str, str], *, holdout: bool = False,
             network: bool | None = None, readable: Sequence[Path] = ()
             ) -> sandbox.Spec | None:
    """The sandbox of a command run in ``tree`` with ``env``; None without a sandbox.

    ``holdout``: the command is the holdout command (it sees the holdout files).
    ``network``: overrides ``[limits] network`` (the agent reaches its API).
    ``readable``: files of the hidden folders the command reads (a reviewer's request).
    """
    if not sandbox.probe().ok:
        return None
    tree = tree.resolve()
    root = target.root.resolve()
    hidden = [root, target.state_dir.resolve()]
    common = git_folder(root)
    if common is not None:
        hidden.append(common)
    if not holdout:
        hidden += _tree_holdout(target, tree)
    writable = [Path(env[v]) for v in (*CACHE_VARS, *target.run.compile_cache)
                if env.get(v) and Path(env[v]).is_absolute()]
    for folder in writable:
        folder.mkdir(parents=True, exist_ok=True)
    dotgit = tree / ".git"
    protected = [dotgit] if dotgit.is_file() else [dotgit / "config", dotgit / "hooks"]
    allowed = target.limits.network is True if network is None else network
    return sandbox.Spec(tree=tree, writable=sandbox.paths_exist(writable),
                        hidden=tuple(p for p in sandbox.paths_exist(hidden) if p != tree),
                        readable=(*sandbox.interpreter_paths(env), *readable),
                        protected=tuple(protected),
                        home=env.get("HOME", ""), network=allowed)


@dataclass(frozen=True)
class Gate:
    """How a run's processes are confined: ``sandbox`` (the tool) or unconfined, and the
    one warning to print ('' for none; the face that prints it adds ``warning:``)."""

    sandbox: str
    warning: str = ""

    @property
    def unconfined(self) -> bool:
        return not self.sandbox


def gate(proposer: str, unconfined: bool) -> Gate:
    """Whether a run with ``proposer`` may start here; raises ConfigError (exit 2) when the
    machine cannot sandbox and the proposer's candidates are untrusted."""
    found = sandbox.probe()
    if found.ok:
        return Gate(found.tool)
    if proposer in UNTRUSTED and not unconfined:
        raise ConfigError(
            f"the {proposer} proposer's candidates are code nobody has reviewed, and this "
            f"machine cannot run them in a sandbox: {found.why}. Enable the sandbox, or "
            "pass --unconfined to run them with your full rights (every experiment is then "
            "marked unconfined)", key="run")
    return Gate("", f"commands from the trees run unconfined (no sandbox: "
                    f"{found.why}); they can write anywhere you can"
                    + (" (--unconfined)" if unconfined else ""))


def node_gate(confined: bool) -> None:
    """Before a node runs a block of a run whose own machine sandboxes (``confined``):
    raise ExecutorError when this node cannot, so the block fails with the reason instead of
    running unconfined without a word (a Ray or cloud node without bubblewrap)."""
    if not confined:
        return
    found = sandbox.probe()
    if not found.ok:
        raise ExecutorError(
            f"node {socket.gethostname()} cannot run the block's commands in a sandbox, as the "
            f"machine running `assay run` does: {found.why}. Install bubblewrap on every "
            "node (or run assay with ASSAY_SANDBOX=off to run every block unconfined, which "
            "the run then says)")


def seed_cache(incumbent: Path, candidate: Path) -> list[str]:
    """Give the candidate tree's compile caches a copy of the incumbent tree's, each cache
    folder (ccache's, sccache's) the candidate's tree does not hold yet; the names copied.

    The candidate's first build then compiles only what differs from the incumbent (the
    caches are keyed by the preprocessed source and the flags, each path relative to its
    own tree) instead of everything. Only this way round: nothing a candidate compiled
    reaches the incumbent's tree."""
    copied: list[str] = []
    if not incumbent.is_dir():
        return copied
    for src in sorted(incumbent.iterdir()):
        dst = candidate / src.name
        if not src.is_dir() or (dst.is_dir() and any(dst.iterdir())):
            continue
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, symlinks=True)
        copied.append(src.name)
    return copied
