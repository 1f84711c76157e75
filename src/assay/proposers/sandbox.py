"""Where a proposer that runs programs (the agent) works: a private copy, the rest hidden.

:func:`private_checkout` writes the incumbent's files into a fresh repository in the
system's temporary folder, outside the target and its ``.assay`` (journal, logs, slot
worktrees): a plain ``git init`` with one commit, no link back to the target's repository.
The holdout files (:func:`assay.repo.holdout.holdout_files`: the ``[scope] holdout`` globs
and the files ``[commands] holdout`` names) are left out.

:func:`hidden_paths` lists what the agent's process must not see at all; where the machine
allows a mount namespace (:func:`assay.bench.process.mount_isolation_available`) each is covered
for the agent's processes (the state folder with the journal and logs, the repository's git
folder, the holdout files), and ``/proc`` shows only the agent's own processes.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..config.spec import Target, glob_match
from ..errors import ProposerError
from ..repo.git import git
from ..repo.holdout import holdout_files

_IDENT = {"GIT_AUTHOR_NAME": "assay", "GIT_AUTHOR_EMAIL": "assay@localhost",
          "GIT_COMMITTER_NAME": "assay", "GIT_COMMITTER_EMAIL": "assay@localhost",
          "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}


def private_checkout(target: Target, commit: str, dest: Path) -> str:
    """Write ``commit``'s files (less the holdout) into a new repository at ``dest``.

    Returns the commit of that repository holding them: diff the agent's work against it.
    """
    listing = git(["ls-tree", "-r", "-z", "--full-tree", commit], target.root, plain=True,
                  binary=True, error=ProposerError).stdout
    entries: list[tuple[str, str, str]] = []  # (mode, sha, path)
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, _, raw = record.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        if kind == "blob":
            entries.append((mode, sha, raw.decode("utf-8", errors="surrogateescape")))
    hidden = holdout_files(target, [p for _, _, p in entries])
    wanted = [e for e in entries if e[2] not in hidden]
    dest.mkdir(parents=True)
    if wanted:
        batch = git(["cat-file", "--batch"], target.root,
                    input="".join(f"{sha}\n" for _, sha, _ in wanted).encode(), plain=True,
                    binary=True, error=ProposerError).stdout
        pos = 0
        for mode, _sha, path in wanted:
            end = batch.index(b"\n", pos)
            size = int(batch[pos:end].split()[2])
            body = batch[end + 1:end + 1 + size]
            pos = end + 1 + size + 1
            out = dest / path
            out.parent.mkdir(parents=True, exist_ok=True)
            if mode == "120000":
                os.symlink(body.decode("utf-8", errors="surrogateescape"), out)
                continue
            out.write_bytes(body)
            if mode == "100755":
                out.chmod(0o755)
    git(["init", "-q"], dest, plain=True, binary=True, error=ProposerError)
    # tracked files matching .gitignore too
    git(["add", "-A", "-f", "--", "."], dest, plain=True, binary=True, error=ProposerError)
    env = {**_IDENT, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    proc = git(["commit", "-q", "--allow-empty", "--no-verify", "-m", "incumbent"], dest, env=env,
               check=False)
    if proc.returncode != 0:
        raise ProposerError(f"cannot prepare the agent's checkout in {dest}: {proc.stderr}")
    return git(["rev-parse", "HEAD"], dest, plain=True, binary=True,
               error=ProposerError).stdout.decode().strip()


def hidden_paths(target: Target, tree: Path) -> list[Path]:
    """What the agent's processes must not see, in the target's folder.

    The state folder (journal, logs, slot worktrees), the repository's git folder (its
    objects hold every commit, holdout files included) and the holdout files themselves.
    The rest of the target's folder stays visible (a tool installed there keeps working).
    """
    tree = tree.resolve()
    root = target.root.resolve()
    out: list[Path] = [target.state_dir.resolve()]
    dotgit = root / ".git"
    common = git(["rev-parse", "--git-common-dir"], root, check=False, plain=True, binary=True,
                 error=ProposerError).stdout.decode().strip()
    if common:
        out.append((root / common).resolve())
    out.append(dotgit)
    names = git(["ls-files", "-z"], root, check=False, plain=True, binary=True,
                error=ProposerError).stdout.decode("utf-8", errors="surrogateescape").split("\0")
    held = holdout_files(target, [n for n in names if n])
    if target.holdout_files:  # untracked files matching [scope] holdout, too
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in (".git", ".assay")]
            rel = os.path.relpath(dirpath, root)
            for fn in filenames:
                name = fn if rel == "." else f"{rel}/{fn}".replace(os.sep, "/")
                if any(glob_match(name, g) for g in target.holdout_files):
                    held.add(name)
    out += [root / n for n in sorted(held)]
    seen: list[Path] = []
    for p in out:
        if (p.exists() or p.is_symlink()) and p not in seen and p != tree \
                and p not in tree.parents and not any(q in p.parents for q in seen):
            seen.append(p)
    return seen
