"""A run's state, carried to another machine: a session goes on where the last one stopped.

Everything a run needs to continue is in ``.assay``: the journal and its seal key, and
``commits.bundle``, a git bundle of the run branches (:mod:`assay.repo.carry`) that the
workspace rewrites after every keep. A copy of the folder into a fresh clone of the same
repository is enough: :func:`ensure_commits` fetches the run's commits from the bundle when
the clone lacks them, and the workspace adopts the copied slot trees
(:meth:`~assay.repo.workspace.Workspace.adopt_trees`). The A/A calibration, the noise, the
measured-but-undecided experiments and the session's budget are rows of the journal, so
they carry on.

``assay export --state FILE`` writes the same in one file (:func:`export_state`): a gzip'd
tar holding a manifest (``assay-state.json``: the run, its incumbent, every file's SHA-256),
a consistent copy of the journal, its key, a fresh bundle of the run branches and of every
commit the journal names, and the rest of ``.assay`` a run reads (logs, the verification's
journals, research notes); slot trees, compile caches and bytecode are left out (the next
machine builds its own). ``assay import --state FILE`` (:func:`import_state`) checks all of
it before it changes anything: the file whole, the journal's seals, the commits the bundle
builds on present in this clone; it refuses to replace a journal unless forced, and then
archives the old one first.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .config.spec import Target
from .errors import AssayError, JournalError, WorkspaceError
from .journal.lock import RunLock
from .journal.seal import key_path
from .journal.store import JOURNAL_NAME, Journal
from .model import ExperimentState
from .repo import carry

MANIFEST = "assay-state.json"
FORMAT = "assay-state"
VERSION = 1
# Not carried: what a machine makes for itself (trees, caches, bytecode, processes, locks),
# and what the export writes afresh (the journal, its bundle).
_SKIP_DIRS = frozenset({"worktrees", "pycache", "procs", "cache", "archive", "checks",
                        "compare", "stop"})
_SKIP_FILES = frozenset({JOURNAL_NAME, f"{JOURNAL_NAME}-wal", f"{JOURNAL_NAME}-shm",
                         f"{JOURNAL_NAME}-sealed", f"{JOURNAL_NAME}-key", "run.lock",
                         "run.lock.guard", carry.BUNDLE_NAME})
_OWN = frozenset({JOURNAL_NAME, f"{JOURNAL_NAME}-key", carry.BUNDLE_NAME})  # written afresh
_UNFINISHED = (ExperimentState.PROPOSED, ExperimentState.QUEUED, ExperimentState.RUNNING,
               ExperimentState.MEASURED)


def needed_commits(journal: Journal) -> list[str]:
    """The commits a session needs to go on: the baseline, the incumbent, every kept
    commit, and what the unfinished experiments were proposed against."""
    inc = journal.incumbent()
    out = [journal.base_commit() or "", inc.commit if inc else ""]
    out += [e.commit or "" for e in journal.experiments([ExperimentState.KEPT], patches=False)]
    out += [e.candidate.base_commit or "" for e in journal.experiments(list(_UNFINISHED),
                                                                       patches=False)]
    return [c for c in dict.fromkeys(out) if c]


def named_commits(journal: Journal) -> list[str]:
    """Every commit the journal names: :func:`needed_commits`, the commits every experiment
    started from, where each session started, and the verified pair."""
    out = needed_commits(journal)
    out += [e.candidate.base_commit or "" for e in journal.experiments(patches=False)]
    out += [s.incumbent for s in journal.sessions()]
    v = journal.verification()
    out += [v.base, v.final] if v else []
    return [c for c in dict.fromkeys(out) if c]


def ensure_commits(target: Target, journal: Journal) -> list[str]:
    """Fetch the run's commits from ``.assay/commits.bundle`` when this clone lacks any the
    journal needs (a copy of ``.assay`` in a fresh clone); what was done, one line each.
    WorkspaceError when they cannot be found."""
    need = needed_commits(journal)
    lacking = carry.missing(target.root, need)
    if not lacking:
        return []
    bundle = target.state_dir / carry.BUNDLE_NAME
    if not bundle.is_file():
        raise WorkspaceError(_lacking(target, lacking, f"and there is no {bundle} to fetch "
                                      "them from"))
    done = carry.restore(target.root, bundle)
    if still := carry.missing(target.root, need):
        raise WorkspaceError(_lacking(target, still, f"and {bundle} does not hold them"))
    return [f"fetched the run's commits into this clone from {bundle}"
            + (f": {'; '.join(done)}" if done else "")]


def _lacking(target: Target, commits: list[str], why: str) -> str:
    return (f"this clone of {target.root} lacks {len(commits)} commit(s) the journal needs "
            f"({', '.join(c[:12] for c in commits[:3])}: the incumbent, kept changes or the "
            f"baseline) {why}; copy all of .assay from the machine that ran the session, or "
            "carry it with `assay export --state FILE` there and `assay import --state FILE` "
            "here")


def save_commits(target: Target, journal: Journal) -> None:
    """Rewrite ``.assay/commits.bundle`` with every commit the journal names."""
    carry.write_bundle(target.root, target.state_dir / carry.BUNDLE_NAME,
                       named_commits(journal))


@dataclass(frozen=True)
class StateFile:
    """What an exported state file holds."""

    path: str
    run: str
    incumbent: str
    experiments: int
    files: int
    bytes: int


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _carried(state: Path) -> Iterator[tuple[str, Path]]:
    """The files of ``.assay`` carried besides the journal, its key and the bundle."""
    for dirpath, dirnames, filenames in os.walk(state):
        rel = Path(dirpath).relative_to(state)
        if rel == Path("."):
            dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and not d.startswith(".")]
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if (rel == Path(".") and name in _SKIP_FILES) or name.endswith(".tmp") \
                    or not path.is_file() or path.is_symlink():
                continue
            yield (rel / name).as_posix(), path


def export_state(target: Target, out: str | Path) -> StateFile:
    """Write the run's state into the one file ``out`` (see the module's docstring)."""
    jpath = target.state_dir / JOURNAL_NAME
    if not jpath.exists():
        raise AssayError(f"nothing to export: no journal at {jpath}; `assay run` first")
    dest = Path(out)
    with tempfile.TemporaryDirectory(prefix="assay-state-") as tmp:
        work = Path(tmp)
        journal = Journal.open(jpath, readonly=True)
        try:
            journal.backup(work / JOURNAL_NAME)
            named = named_commits(journal)
            inc = journal.incumbent()
            run = journal.run_name() or "main"
            count = journal.count_experiments()
        finally:
            journal.close()
        files: dict[str, Path] = {JOURNAL_NAME: work / JOURNAL_NAME}
        if key_path(jpath).is_file():
            files[key_path(jpath).name] = key_path(jpath)
        if carry.write_bundle(target.root, work / carry.BUNDLE_NAME, named):
            files[carry.BUNDLE_NAME] = work / carry.BUNDLE_NAME
        files.update(_carried(target.state_dir))
        manifest = {"format": FORMAT, "version": VERSION, "run": run,
                    "incumbent": inc.commit if inc else None, "experiments": count,
                    "created": time.time(), "bundle": carry.BUNDLE_NAME in files,
                    "files": {name: _sha256(p) for name, p in files.items()}}
        _write_tar(dest, manifest, files)
    return StateFile(str(dest), run, inc.commit if inc else "", count, len(files),
                     dest.stat().st_size)


def _write_tar(dest: Path, manifest: dict[str, Any], files: dict[str, Path]) -> None:
    aside = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    # the journal's key travels in it: readable by its owner alone, as in .assay
    os.close(os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    os.chmod(aside, 0o600)
    try:
        with tarfile.open(aside, "w:gz") as tar:
            body = json.dumps(manifest, indent=1).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mtime, info.mode = len(body), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(body))
            for name, path in files.items():
                tar.add(str(path), arcname=f"state/{name}", recursive=False)
        os.replace(aside, dest)
    finally:
        aside.unlink(missing_ok=True)


def _corrupt(path: Path, why: str) -> AssayError:
    return AssayError(f"{path}: not a whole assay state file ({why}); write it again with "
                      "`assay export --state FILE` on the machine that holds the run")


def _read_state(path: Path, into: Path) -> dict[str, Any]:
    """Unpack the state file ``path`` into ``into`` and check it against its manifest."""
    if not path.is_file():
        raise AssayError(f"{path}: no such file; give the file `assay export --state` wrote")
    try:
        with tarfile.open(path, "r:gz") as tar:
            manifest = _manifest(path, tar)
            for name in manifest["files"]:
                _extract(path, tar, name, into)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise _corrupt(path, f"{type(exc).__name__}: {exc}") from None
    for name, digest in manifest["files"].items():
        if _sha256(into / name) != digest:
            raise _corrupt(path, f"{name} does not match its checksum")
    return manifest


def _manifest(path: Path, tar: tarfile.TarFile) -> dict[str, Any]:
    member = tar.extractfile(MANIFEST) if MANIFEST in tar.getnames() else None
    if member is None:
        raise _corrupt(path, f"it has no {MANIFEST}")
    try:
        manifest = json.loads(member.read())
    except ValueError as exc:
        raise _corrupt(path, f"{MANIFEST} is not JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT \
            or not isinstance(manifest.get("files"), dict):
        raise _corrupt(path, f"{MANIFEST} is not an assay state manifest")
    if manifest.get("version") != VERSION:
        raise AssayError(f"{path}: state format version {manifest.get('version')!r}; this "
                         f"assay reads version {VERSION}: use the same assay on both machines")
    if JOURNAL_NAME not in manifest["files"]:
        raise _corrupt(path, "it holds no journal")
    return manifest


def _extract(path: Path, tar: tarfile.TarFile, name: str, into: Path) -> None:
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or ".." in parts or parts[0] in _SKIP_DIRS \
            or (len(parts) == 1 and name in _SKIP_FILES - _OWN):
        raise _corrupt(path, f"it names the path {name!r}, which no export writes")
    try:
        member = tar.getmember(f"state/{name}")
    except KeyError:
        raise _corrupt(path, f"{name} is listed but missing") from None
    src = tar.extractfile(member) if member.isfile() else None
    if src is None:
        raise _corrupt(path, f"{name} is not a plain file")
    dest = into / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as fh:
        shutil.copyfileobj(src, fh)


def import_state(target: Target, file: str | Path, force: bool = False) -> list[str]:
    """Restore the state file ``file`` into this clone's ``.assay`` (see the module's
    docstring); what was done, one line each. Nothing changes when a check fails."""
    path = Path(file)
    state = target.state_dir
    state.mkdir(parents=True, exist_ok=True)
    lock = RunLock(state / "run.lock")
    lock.acquire()  # refuses while a run is live
    try:
        if (state / JOURNAL_NAME).exists() and not force:
            raise AssayError(f"{state / JOURNAL_NAME} exists: importing would replace this "
                             "clone's journal; pass --force to archive it (under "
                             ".assay/archive/) and import, or import into a fresh clone")
        with tempfile.TemporaryDirectory(prefix=".import-", dir=state) as tmp:
            work = Path(tmp)
            manifest = _read_state(path, work)
            if key_path(work / JOURNAL_NAME).exists():
                os.chmod(key_path(work / JOURNAL_NAME), 0o600)
            _check_journal(path, work / JOURNAL_NAME)
            bundle = work / carry.BUNDLE_NAME
            contents = carry.contents(target.root, bundle) if bundle.is_file() else None
            if contents is not None and (lacking := carry.missing(target.root,
                                                                  contents.requires)):
                raise WorkspaceError(
                    f"{path}: this clone ({target.root}) lacks {len(lacking)} commit(s) the "
                    f"run's commits build on ({', '.join(c[:12] for c in lacking[:3])}): it "
                    "is a clone of another repository, or they were never pushed; import "
                    "into a clone of the repository the run was made in")
            done = []
            if bundle.is_file():
                moved = carry.restore(target.root, bundle)
                done.append("run branches: " + ("; ".join(moved) if moved else "up to date"))
            done += _set_aside(target)
            for name in manifest["files"]:
                dest = state / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(work / name, dest)
        done.append(f"imported run {manifest.get('run')!r}: {manifest.get('experiments')} "
                    f"experiment(s), incumbent {str(manifest.get('incumbent'))[:12]}; "
                    "`assay run` goes on from it")
        return done
    finally:
        lock.release()


def _check_journal(path: Path, journal_file: Path) -> None:
    """The carried journal opens with its key and every seal holds."""
    try:
        Journal.open(journal_file, readonly=True).close()
    except JournalError as exc:
        raise _corrupt(path, f"its journal does not check: {exc}") from None


def _set_aside(target: Target) -> list[str]:
    """Move this clone's journal, if any, and what was carried with it to
    ``.assay/archive/<time>``."""
    state = target.state_dir
    if not (state / JOURNAL_NAME).exists():
        return []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    archive = state / "archive" / stamp
    n = 1
    while archive.exists():  # never over an earlier archive
        archive, n = state / "archive" / f"{stamp}-{n}", n + 1
    names = [n for n in (JOURNAL_NAME, f"{JOURNAL_NAME}-wal", f"{JOURNAL_NAME}-shm",
                         f"{JOURNAL_NAME}-key", f"{JOURNAL_NAME}-sealed", carry.BUNDLE_NAME)
             if (state / n).exists()] + [rel for rel, _ in _carried(state)]
    for name in names:
        dest = archive / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(state / name), str(dest))
    return [f"archived this clone's journal and {len(names) - 1} file(s) to {archive}"]
