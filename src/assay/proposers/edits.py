"""SEARCH/REPLACE edit blocks: parse a model's reply, apply it, turn it into a git diff.

The reply format (what :data:`FORMAT_RULES` tells the model)::

    HYPOTHESIS: caching the parsed config halves the time spent in load()

    src/app/config.py
    ```python
    <<<<<<< SEARCH
    def load(path):
        return parse(open(path).read())
    =======
    @functools.cache
    def load(path):
        return parse(open(path).read())
    >>>>>>> REPLACE
    ```

- The line before ``<<<<<<< SEARCH`` (fences and blank lines skipped) names the file,
  relative to the repository root. A block without one reuses the previous block's file.
- SEARCH must quote whole lines of the file as it was given. Matching tries, in order:
  exact lines; lines with trailing whitespace ignored; lines with one uniform indentation
  offset (the replacement is re-indented by the same offset). Exactly one place must
  match: no match or several matches is an error, never a skipped block.
- An empty SEARCH creates a new file (the path must not exist yet).
- Whole-file replacement, for small files only (both the current and the new text at most
  ``whole_file_max_bytes``, 8000 bytes by default)::

      src/app/tiny.py
      <<<<<<< FILE
      ...the complete new content...
      >>>>>>> FILE

- Blocks apply in order; a later block sees the result of the earlier ones.
- A reply whose only content is ``NO_MORE_IDEAS`` means the model has nothing left.

Every problem raises :class:`EditError` (a :class:`~assay.errors.PatchError`) whose
message is written for the model: the llm proposer sends it back verbatim and asks again.

The result becomes a unified diff through a scratch git repository (git's own ``diff``,
with the user's git configuration shut out), so the patch is exactly what ``git apply``
expects. The scope check (:func:`path_problem`) and the rejection convention
(:func:`rejected`, :func:`rejection`, shared with the agent proposer) live here too.
"""

from __future__ import annotations

import difflib
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ..config.spec import Target
from ..errors import PatchError, ProposerError
from ..model import Candidate
from ..repo.git import git

WHOLE_FILE_MAX_BYTES = 8000
HYPOTHESIS_MAX_CHARS = 300
REJECTED = "rejected"  # Candidate.meta key: why the proposer rejected its own candidate
NO_MORE_IDEAS = "NO_MORE_IDEAS"

_SEARCH = re.compile(r"^\s*<{5,9} ?SEARCH\s*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9} ?REPLACE\s*$")
_FILE = re.compile(r"^\s*<{5,9} ?FILE\s*$")
_FILE_END = re.compile(r"^\s*>{5,9} ?(FILE|REPLACE)\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HYPOTHESIS = re.compile(r"^\W*hypothesis\W*:\s*(.*?)\s*\**\s*$", re.IGNORECASE)

FORMAT_RULES = f"""\
Reply with exactly this structure and nothing that could be mistaken for it:

HYPOTHESIS: <one line, in your own words: what the change is and why it should help>

then one or more edit blocks. Each edit block is the file's path (relative to the
repository root) alone on a line, then:

<<<<<<< SEARCH
<lines copied exactly from the current file, enough to be unique>
=======
<the lines that replace them>
>>>>>>> REPLACE

Rules:
- SEARCH must match whole lines of the file exactly as shown to you, including
  indentation and comments; it must match exactly one place. Keep blocks small: quote a
  few lines around the change, not the whole function.
- Several changes to one file: several blocks, in file order.
- To create a new file, give its path and an empty SEARCH section.
- A file of at most {WHOLE_FILE_MAX_BYTES} bytes may instead be replaced whole with
  <<<<<<< FILE
  <the complete new content>
  >>>>>>> FILE
- Edit only files inside the editable scope; protected files can never change.
- If the change tests one of the open hypotheses listed as H<number>, begin the
  HYPOTHESIS line with that id, e.g. `HYPOTHESIS: H4: ...`.
- One idea per reply. If you have no idea left worth measuring, reply only NO_MORE_IDEAS.
"""


class EditError(PatchError):
    """A reply cannot be parsed or applied; the message is feedback for the model."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind  # "malformed", "no_match", "ambiguous", "scope", "no_change", ...


@dataclass(frozen=True)
class EditBlock:
    path: str
    search: str  # for kind "file": unused ("")
    replace: str
    kind: str = "replace"  # "replace" or "file"
    index: int = 1  # 1-based position in the reply


@dataclass(frozen=True)
class ParsedReply:
    hypothesis: str
    blocks: tuple[EditBlock, ...]
    no_more_ideas: bool = False


@dataclass
class Applied:
    """The edited files: path -> (text at the incumbent or None when new, new text)."""

    changes: dict[str, tuple[str | None, str]] = field(default_factory=dict)

    @property
    def paths(self) -> list[str]:
        return sorted(self.changes)


# ---------------------------------------------------------------------------- parsing


def _clean_path(line: str) -> str:
    s = line.strip()
    s = re.sub(r"^(#+|[-*]|\d+\.)\s+", "", s)  # markdown heading / list markers
    s = s.strip("`*_\"' ")
    s = re.sub(r"^(file|path)\s*:\s*", "", s, flags=re.IGNORECASE)
    s = s.rstrip(":").strip("`*_\"' ")
    return s


def _path_before(lines: list[str], start: int, floor: int) -> str:
    """The file path named on the nearest meaningful line above ``start``."""
    i = start - 1
    seen = 0
    while i >= floor and seen < 3:
        line = lines[i]
        if not line.strip() or _FENCE.match(line):
            i -= 1
            continue
        candidate = _clean_path(line)
        if candidate and " " not in candidate and ("." in candidate or "/" in candidate):
            return candidate
        seen += 1
        i -= 1
    return ""


def parse_reply(text: str) -> ParsedReply:
    """The hypothesis and the edit blocks of a reply; :class:`EditError` when malformed."""
    lines = [ln.rstrip("\r") for ln in text.split("\n")]
    blocks: list[EditBlock] = []
    hypothesis = ""
    i = 0
    floor = 0  # the previous block's end: a path must come after it
    last_path = ""
    while i < len(lines):
        line = lines[i]
        is_search, is_file = bool(_SEARCH.match(line)), bool(_FILE.match(line))
        if not (is_search or is_file):
            if _DIVIDER.match(line) or _REPLACE.match(line):
                raise EditError(
                    f"line {i + 1}: '{line.strip()}' appears outside an edit block; every "
                    "block starts with '<<<<<<< SEARCH' (or '<<<<<<< FILE').", "malformed")
            hypothesis = hypothesis or _hypothesis_in(line)
            i += 1
            continue
        n = len(blocks) + 1
        path = _path_before(lines, i, floor) or last_path
        marker = "<<<<<<< FILE" if is_file else "<<<<<<< SEARCH"
        if not path:
            raise EditError(
                f"edit block {n} has no file path: put the path, relative to the repository "
                f"root, alone on the line before '{marker}'.", "malformed")
        read = _file_block if is_file else _replace_block
        block, j = read(lines, i + 1, n, path)
        blocks.append(block)
        last_path = path
        floor = j + 1
        i = j + 1
    return _reply(hypothesis, blocks, lines)


def _hypothesis_in(line: str) -> str:
    """The hypothesis a ``HYPOTHESIS: ...`` line states, or ''."""
    m = _HYPOTHESIS.match(line)
    if m and m.group(1).strip():
        return m.group(1).strip().strip("*").strip()
    return ""


def _file_block(lines: list[str], j: int, n: int, path: str) -> tuple[EditBlock, int]:
    """Whole-file block ``n``, its body starting at line ``j``; with the line that ends it."""
    body: list[str] = []
    while j < len(lines) and not _FILE_END.match(lines[j]):
        if _SEARCH.match(lines[j]) or _FILE.match(lines[j]):
            raise EditError(f"edit block {n} ({path}): '<<<<<<< FILE' is never closed "
                            "with '>>>>>>> FILE' before the next block starts.",
                            "malformed")
        body.append(lines[j])
        j += 1
    if j >= len(lines):
        raise EditError(f"edit block {n} ({path}): '<<<<<<< FILE' is never closed "
                        "with '>>>>>>> FILE'.", "unterminated")
    return EditBlock(path, "", _join(body), "file", n), j


def _replace_block(lines: list[str], j: int, n: int, path: str) -> tuple[EditBlock, int]:
    """SEARCH/REPLACE block ``n``, its SEARCH section starting at line ``j``; with the
    line that ends it."""
    search: list[str] = []
    while j < len(lines) and not _DIVIDER.match(lines[j]):
        if _SEARCH.match(lines[j]) or _REPLACE.match(lines[j]) or _FILE.match(lines[j]):
            raise EditError(f"edit block {n} ({path}): the SEARCH section has no "
                            "'=======' line before the block ends.", "malformed")
        search.append(lines[j])
        j += 1
    if j >= len(lines):
        raise EditError(f"edit block {n} ({path}): the reply ends inside the SEARCH "
                        "section ('=======' and '>>>>>>> REPLACE' are missing).",
                        "unterminated")
    j += 1
    replace: list[str] = []
    while j < len(lines) and not _REPLACE.match(lines[j]):
        if _SEARCH.match(lines[j]) or _FILE.match(lines[j]) or _DIVIDER.match(lines[j]):
            raise EditError(f"edit block {n} ({path}): the REPLACE section is not "
                            "closed with '>>>>>>> REPLACE'.", "malformed")
        replace.append(lines[j])
        j += 1
    if j >= len(lines):
        raise EditError(f"edit block {n} ({path}): the reply ends inside the REPLACE "
                        "section ('>>>>>>> REPLACE' is missing).", "unterminated")
    return EditBlock(path, _join(search), _join(replace), "replace", n), j


def _reply(hypothesis: str, blocks: list[EditBlock], lines: list[str]) -> ParsedReply:
    """The parsed reply, once it is known to hold blocks and a hypothesis (or to say it has
    no more ideas)."""
    if not blocks:
        if any(ln.strip().strip("*`") == NO_MORE_IDEAS for ln in lines):
            return ParsedReply(hypothesis, (), no_more_ideas=True)
        raise EditError("the reply holds no edit block: give the file path, then "
                        "'<<<<<<< SEARCH', the old lines, '=======', the new lines and "
                        "'>>>>>>> REPLACE'.", "malformed")
    if not hypothesis:
        raise EditError("the reply has no 'HYPOTHESIS: ...' line: state in one line what "
                        "the change does and why it should improve the metric.", "malformed")
    if len(hypothesis) > HYPOTHESIS_MAX_CHARS:
        hypothesis = hypothesis[: HYPOTHESIS_MAX_CHARS - 3].rstrip() + "..."
    return ParsedReply(hypothesis, tuple(blocks))


def _join(lines: list[str]) -> str:
    return "".join(ln + "\n" for ln in lines)


# ---------------------------------------------------------------------------- scope


def normalize_path(path: str) -> str | None:
    """A clean repository-relative POSIX path, or None when it escapes the tree."""
    p = path.strip()
    if not p or p.startswith(("/", "~")) or "\\" in p or "\0" in p or re.match(r"^[A-Za-z]:", p):
        return None
    parts = [x for x in PurePosixPath(p).parts if x not in ("", ".")]
    if not parts or ".." in parts or ".git" in parts:
        return None
    return "/".join(parts)


def path_problem(target: Target, path: str) -> str | None:
    """Why a candidate may not change ``path``, or None when it may."""
    clean = normalize_path(path)
    if clean is None:
        return f"{path!r} is not a path inside the repository"
    if target.is_protected(clean):
        return (f"{clean} is protected (the benchmark harness, checks and assay.toml can "
                "never change)")
    if not target.is_editable(clean):
        return (f"{clean} is outside the editable scope (editable: "
                f"{', '.join(target.editable)})")
    return None


# ---------------------------------------------------------------------------- applying


def _split(text: str) -> tuple[list[str], bool, bool]:
    """Lines (a CRLF file keeps its "\\r"), whether it ends with a newline, whether CRLF."""
    ends = text.endswith("\n")
    body = text[:-1] if ends else text
    raw = body.split("\n") if body or ends else []
    crlf = bool(raw) and sum(x.endswith("\r") for x in raw) * 2 > len(raw)
    return raw, ends, crlf


def _find(hay: list[str], needle: list[str], key: Callable[[str], str]) -> list[int]:
    k = len(needle)
    keyed = [key(x) for x in needle]
    first = keyed[0]
    out = []
    for i in range(len(hay) - k + 1):
        if key(hay[i]) == first and [key(x) for x in hay[i:i + k]] == keyed:
            out.append(i)
    return out


def _indent(s: str) -> str:
    return s[: len(s) - len(s.lstrip())]


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _find_reindented(hay: list[str], needle: list[str]) -> list[tuple[int, str, str]]:
    """Places where ``needle`` matches with one uniform indentation change.

    Returns (index, indentation to remove from the needle, indentation to add).
    """
    k = len(needle)
    ref = next((x for x in needle if x.strip()), None)
    if ref is None:
        return []
    out = []
    stripped = [x.rstrip() for x in needle]
    for i in range(len(hay) - k + 1):
        window = [x.rstrip() for x in hay[i:i + k]]
        line_ref = window[stripped.index(ref.rstrip())]
        if not line_ref.strip() or line_ref.strip() != ref.strip():
            continue
        have, want = _indent(ref), _indent(line_ref)
        # the common part is kept; the needle's extra indentation is removed, the file's added
        common = _common_prefix(have, want)
        drop, add = have[len(common):], want[len(common):]
        ok = True
        for a, b in zip(stripped, window, strict=True):
            if not a.strip():
                if b.strip():
                    ok = False
                    break
                continue
            if not a.startswith(common + drop) or add + a[len(drop):] != b:
                ok = False
                break
        if ok:
            out.append((i, drop, add))
    return out


def _closest(hay: list[str], needle: list[str]) -> str:
    """The lines of the file that look most like the SEARCH text, for the feedback."""
    a = [x.strip() for x in needle]
    b = [x.strip() for x in hay]
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    blocks = [m for m in sm.get_matching_blocks() if m.size and any(a[m.a:m.a + m.size])]
    if not blocks:
        return ""
    best = max(blocks, key=lambda m: m.size)
    start = max(0, best.b - best.a - 1)
    end = min(len(hay), start + len(needle) + 2)
    return "\n".join(hay[start:end])


@dataclass(frozen=True)
class _Problem:
    """Why one block could not be applied: the :class:`EditError` kind and the message."""

    kind: str
    message: str


def apply_blocks(blocks: Iterable[EditBlock], read: Callable[[str], str | None],
                 whole_file_max_bytes: int = WHOLE_FILE_MAX_BYTES) -> Applied:
    """Apply ``blocks`` to the files ``read(path)`` returns (None: no such file).

    Raises :class:`EditError` listing every block that failed (kind of the first one);
    nothing is applied partially.
    """
    current: dict[str, str | None] = {}
    original: dict[str, str | None] = {}
    problems: list[_Problem] = []

    def text_of(path: str) -> str | None:
        if path not in current:
            original[path] = current[path] = read(path)
        return current[path]

    for b in blocks:
        path = normalize_path(b.path) or b.path
        where = f"edit block {b.index} ({path})"
        old = text_of(path)
        if b.kind == "file":
            result = _whole_file(b, old, where, whole_file_max_bytes)
        elif not b.search.strip():
            result = _new_file(b, old, where)
        elif old is None:
            result = _no_file(b, where, current)
        else:
            result = _replaced(b, old, path, where)
        if isinstance(result, _Problem):
            problems.append(result)
        else:
            current[path] = result
    if problems:
        raise EditError("\n".join(p.message for p in problems), problems[0].kind)
    changes = {p: (original[p], t) for p, t in current.items()
               if t is not None and t != original[p]}
    if not changes:
        raise EditError("the edits change nothing (every REPLACE equals its SEARCH).",
                        "no_change")
    return Applied(changes)


def _whole_file(b: EditBlock, old: str | None, where: str, max_bytes: int) -> str | _Problem:
    """The file's new text from a whole-file block (keeping CRLF line ends)."""
    size_old = len(old.encode()) if old is not None else 0
    size_new = len(b.replace.encode())
    if max(size_old, size_new) > max_bytes:
        return _Problem("too_large", f"{where}: whole-file replacement is only for files of "
                        f"at most {max_bytes} bytes (this one has {max(size_old, size_new)}); "
                        "use SEARCH/REPLACE blocks.")
    crlf = _split(old)[2] if old else False
    return b.replace.replace("\n", "\r\n") if crlf else b.replace


def _new_file(b: EditBlock, old: str | None, where: str) -> str | _Problem:
    """The text of a file an empty SEARCH creates; a problem when it exists."""
    if old is not None:
        return _Problem("malformed", f"{where}: SEARCH is empty but the file exists; quote "
                        "the lines to replace (an empty SEARCH only creates a new file).")
    return b.replace


def _no_file(b: EditBlock, where: str, current: Mapping[str, str | None]) -> _Problem:
    """The problem of a SEARCH in a file that does not exist, naming a file that has it."""
    others = [p for p, t in current.items() if t and b.search in t]
    hint = f" The SEARCH text is in {others[0]}." if others else ""
    return _Problem("no_file", f"{where}: the file does not exist; to create it give an "
                    f"empty SEARCH section.{hint}")


def _replaced(b: EditBlock, old: str, path: str, where: str) -> str | _Problem:
    """``old`` with the block's SEARCH lines replaced, where they match exactly one place."""
    hay, ends, crlf = _split(old)
    needle = b.search.split("\n")[:-1]
    repl = b.replace.split("\n")[:-1]
    placed, hits = _place(hay, needle, repl)
    if placed is None:
        return _unplaced(hay, needle, hits, path, where)
    i, new_lines = placed
    if crlf:
        new_lines = [x + "\r" for x in new_lines]
    out = hay[:i] + new_lines + hay[i + len(needle):]
    return "\n".join(out) + ("\n" if out and ends else "")


def _place(hay: list[str], needle: list[str], repl: list[str]
           ) -> tuple[tuple[int, list[str]] | None, list[int]]:
    """Where the SEARCH lines go and their replacement (re-indented where the match was),
    or None with the places that matched (several, or none)."""
    hits = _find(hay, needle, lambda s: s.rstrip("\r"))
    if not hits:
        hits = _find(hay, needle, str.rstrip)
    if len(hits) == 1:
        return (hits[0], repl), hits
    if not hits:
        re_hits = _find_reindented(hay, needle)
        if len(re_hits) == 1:
            i, drop, add = re_hits[0]
            fixed = [(add + x[len(drop):] if x.startswith(drop) else add + x.lstrip())
                     if x.strip() else x for x in repl]
            return (i, fixed), hits
        if len(re_hits) > 1:
            hits = [h[0] for h in re_hits]
    return None, hits


def _unplaced(hay: list[str], needle: list[str], hits: list[int], path: str,
              where: str) -> _Problem:
    """The problem of SEARCH lines that match several places, or none (with the closest)."""
    if len(hits) > 1:
        lines_at = ", ".join(str(h + 1) for h in hits[:6])
        return _Problem("ambiguous", f"{where}: SEARCH matches {len(hits)} places (lines "
                        f"{lines_at}); add surrounding lines so it matches exactly one.")
    near = _closest(hay, needle)
    msg = (f"{where}: SEARCH does not match the file. It must quote existing lines "
           "exactly (whitespace, comments and all).")
    if near:
        msg += f" The closest lines in {path} are:\n```\n{near}\n```"
    else:
        msg += f" No line of it appears in {path}."
    return _Problem("no_match", msg)


# ---------------------------------------------------------------------------- diffs


DIFF_ARGS = ("diff", "--no-color", "--no-ext-diff", "--binary", "--no-renames",
             "--src-prefix=a/", "--dst-prefix=b/")


def unified_diff(changes: Mapping[str, tuple[str | None, str]]) -> str:
    """``git diff`` of old -> new texts, computed in a scratch repository."""
    with tempfile.TemporaryDirectory(prefix="assay-diff-") as tmp:
        root = Path(tmp)
        git(["init", "-q"], root, plain=True, binary=True, error=ProposerError)
        for path, (old, _) in changes.items():
            if old is not None:
                f = root / path
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_bytes(old.encode())
        git(["add", "-A"], root, plain=True, binary=True, error=ProposerError)
        git(["-c", "user.name=assay", "-c", "user.email=assay@localhost", "-c",
             "commit.gpgsign=false", "commit", "-q", "--allow-empty", "-m", "base"], root,
            plain=True, binary=True, error=ProposerError)
        for path, (_, new) in changes.items():
            f = root / path
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(new.encode())
        git(["add", "-N", "--", *changes], root, plain=True, binary=True, error=ProposerError)
        return git([*DIFF_ARGS], root, plain=True, binary=True, error=ProposerError).stdout.decode()


# ---------------------------------------------------------------------------- rejection


def rejected(base_commit: str, proposer: str, reason: str, *, patch: str = "",
             hypothesis: str = "", meta: Mapping[str, Any] | None = None) -> Candidate:
    """A candidate the proposer itself rejects: ``meta["rejected"]`` holds the reason."""
    full = dict(meta or {})
    full[REJECTED] = reason
    return Candidate(base_commit=base_commit, patch=patch, hypothesis=hypothesis or
                     f"(rejected) {reason.splitlines()[0][:200]}", proposer=proposer,
                     meta=full)


def rejection(candidate: Candidate) -> str | None:
    """The reason a proposer rejected ``candidate``, or None for a candidate to measure."""
    reason = candidate.meta.get(REJECTED)
    return str(reason) if reason else None
