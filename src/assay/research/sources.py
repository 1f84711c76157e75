"""What research reads: local documents and repositories, turned into line-addressed text.

A :class:`Source` is one thing the user pointed at (a document, a directory, a repository
path or a git URL) with the kind of evidence it gives (``doc``, ``paper``, ``fork``,
``backend``). :func:`read_documents` walks a source and yields :class:`Document` objects:
the text of one file with a citation path, split into lines so passages can cite
``file:line``. PDFs are read page by page with pypdf; their "lines" are page numbers.

Git URLs are cloned shallow into ``.assay/research/repos/<name>-<hash>`` once and reused.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..config.spec import glob_match
from ..errors import AssayError, require
from ..repo.git import git

DOC_EXTS = frozenset({".md", ".markdown", ".txt", ".rst", ".adoc", ".org", ".tex"})
CODE_EXTS = frozenset({
    ".py", ".pyx", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".cu", ".cuh",
    ".m", ".mm", ".metal", ".cl", ".comp", ".glsl", ".wgsl", ".rs", ".go", ".java",
    ".js", ".ts", ".jl", ".zig", ".swift", ".kt", ".scala", ".f90", ".s", ".S",
})
PDF_EXT = ".pdf"
SKIP_DIRS = frozenset({
    ".git", ".assay", ".venv", "venv", "node_modules", "__pycache__", "build", "dist",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", "site-packages",
})
MAX_FILE_BYTES = 2_000_000
_URL = re.compile(r"^(https?://|git@|ssh://|git://|file://)")


class SourceError(AssayError):
    """A research source cannot be read or fetched."""


@dataclass(frozen=True)
class Source:
    """One thing to read. ``location`` is a path or URL; ``kind`` the evidence it gives."""

    location: str
    kind: str = "doc"
    label: str = ""  # short name used in citations; defaults to the file or repo name
    subdir: str = ""  # for repositories: the part to compare (a backend directory)

    @property
    def is_url(self) -> bool:
        return bool(_URL.match(self.location))

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        tail = self.location.rstrip("/").rsplit("/", 1)[-1]
        tail = tail.removesuffix(".git") or self.location
        return f"{tail}/{self.subdir}" if self.subdir else tail


@dataclass(frozen=True)
class Document:
    """The text of one file, with the citation path it is known by."""

    source: Source
    path: str  # citation path: "<source name>/<relative path>"
    lines: tuple[str, ...]
    kind: str  # evidence kind (the source's)
    paged: bool = False  # True for PDFs: line numbers are page numbers
    title: str = ""


@dataclass
class SourceReport:
    """What was read, and what could not be (with the reason), for the brief."""

    read: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def parse_source(spec: str, root: Path, default_kind: str | None = None) -> Source:
    """Turn a ``--source`` value or a config entry into a :class:`Source`.

    ``PATH_OR_URL`` may end with ``#subdir`` to name a part of a repository. A directory
    inside the target's repository is a ``backend`` (another backend of the same project);
    a directory outside it, or a git URL, is a ``fork``; a file is a ``doc``.
    """
    location, _, subdir = spec.partition("#")
    location = location.strip()
    if not location:
        raise SourceError(f"research source {spec!r} is empty; give a path or a git URL")
    if _URL.match(location):
        return Source(location, default_kind or "fork", subdir=subdir.strip("/"))
    path = Path(location).expanduser()
    if not path.is_absolute():
        path = (root / path).resolve()
    if path.is_file():
        kind = default_kind or ("paper" if path.suffix.lower() == PDF_EXT else "doc")
        return Source(str(path), kind)
    if path.is_dir():
        if default_kind:
            kind = default_kind
        elif _inside(path, root):
            kind = "backend" if _has_code(path) else "doc"
        else:
            kind = "fork" if _has_code(path) else "doc"
        return Source(str(path), kind, subdir=subdir.strip("/"))
    raise SourceError(
        f"research source {location!r} does not exist (looked at {path}); "
        "give an existing file or directory, or a git URL"
    )


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def _has_code(path: Path, limit: int = 2000) -> bool:
    for n, p in enumerate(walk_files(path)):
        if p.suffix in CODE_EXTS:
            return True
        if n > limit:
            break
    return False


def walk_files(root: Path) -> Iterator[Path]:
    """Regular files under ``root`` in a stable order, skipping build and VCS folders."""
    if root.is_file():
        yield root
        return
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            entries = sorted(d.iterdir(), key=lambda p: p.name)
        except OSError:
            continue
        subdirs = []
        for p in entries:
            if p.is_symlink():
                continue
            if p.is_dir():
                if p.name not in SKIP_DIRS and not p.name.startswith("."):
                    subdirs.append(p)
            elif p.is_file():
                yield p
        stack.extend(reversed(subdirs))


def repo_cache_dir(state_dir: Path) -> Path:
    return state_dir / "research" / "repos"


def materialize(source: Source, state_dir: Path, *, offline: bool = False,
                timeout_s: float = 600.0) -> Path:
    """The local directory or file for ``source``: git URLs are cloned shallow, once."""
    if not source.is_url:
        return Path(source.location)
    digest = hashlib.sha256(source.location.encode()).hexdigest()[:10]
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", source.location.rstrip("/").rsplit("/", 1)[-1])
    dest = repo_cache_dir(state_dir) / f"{stem.removesuffix('.git')}-{digest}"
    if (dest / ".git").exists() or (dest / "HEAD").exists():
        return dest
    if offline:
        raise SourceError(
            f"{source.location} is not in the clone cache ({dest}) and research is offline; "
            "run once with the network, or give a local path"
        )
    if shutil.which("git") is None:
        raise SourceError(f"cannot clone {source.location}: git is not installed")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        proc = git(["clone", "--depth", "1", "--quiet", source.location, str(tmp)], Path.cwd(),
                   check=False, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SourceError(f"cloning {source.location} took over {timeout_s:.0f}s; "
                          "clone it yourself and pass the local path") from None
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise SourceError(f"cannot clone {source.location}: {err[-1] if err else 'git failed'}"
                          "; check the URL and the network, or pass a local path")
    tmp.rename(dest)
    return dest


def read_documents(source: Source, base: Path, report: SourceReport | None = None, *,
                   max_files: int = 20_000) -> Iterator[Document]:
    """Every readable text, code or PDF file of a materialized source."""
    report = report if report is not None else SourceReport()
    top = base / source.subdir if source.subdir and base.is_dir() else base
    if not top.exists():
        report.skipped.append(f"{source.name}: {top} does not exist")
        return
    count = 0
    for path in walk_files(top):
        suffix = path.suffix.lower()
        if suffix not in DOC_EXTS and suffix not in CODE_EXTS and suffix != PDF_EXT:
            continue
        rel = path.name if top.is_file() else path.relative_to(top).as_posix()
        cite = f"{source.name}/{rel}" if not top.is_file() else source.name
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                report.skipped.append(f"{cite}: larger than {MAX_FILE_BYTES} bytes")
                continue
            if suffix == PDF_EXT:
                doc = _read_pdf(path, source, cite)
            else:
                raw = path.read_bytes()
                if b"\0" in raw[:4096]:
                    continue
                text = raw.decode("utf-8", errors="replace")
                doc = Document(source, cite, tuple(text.splitlines()), source.kind)
        except (OSError, ValueError) as exc:
            report.skipped.append(f"{cite}: {exc}")
            continue
        except SourceError as exc:
            report.skipped.append(f"{cite}: {exc}")
            continue
        count += 1
        yield doc
        if count >= max_files:
            report.skipped.append(f"{source.name}: stopped after {max_files} files")
            break
    report.read.append(f"{source.name} ({source.kind}, {count} files)")


def _read_pdf(path: Path, source: Source, cite: str) -> Document:
    pypdf = require("pypdf", "research", "Reading PDF documents")
    try:
        reader = pypdf.PdfReader(str(path))  # type: ignore[attr-defined]
        pages = [(page.extract_text() or "").replace("\n", " ").strip()
                 for page in reader.pages]
    except Exception as exc:  # pypdf raises many kinds on damaged files
        raise SourceError(f"cannot read PDF: {exc}") from exc
    title = ""
    try:
        meta = reader.metadata
        title = str(meta.title) if meta is not None and meta.title else ""
    except Exception:
        title = ""
    kind = "paper" if source.kind == "doc" else source.kind
    return Document(source, cite, tuple(pages), kind, paged=True, title=title)


def code_files(top: Path, patterns: Sequence[str] = ()) -> list[Path]:
    """Code files under ``top`` (optionally only those matching repository globs)."""
    out = []
    for p in walk_files(top):
        if p.suffix not in CODE_EXTS:
            continue
        if patterns:
            rel = p.relative_to(top).as_posix()
            if not any(glob_match(rel, g) for g in patterns):
                continue
        out.append(p)
    return out
