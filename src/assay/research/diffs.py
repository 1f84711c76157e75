"""How another implementation wrote the target's hot functions: unified diffs of bodies.

For each hot function the profile places in the target's code, :func:`hot_function_diffs`
finds the same function in each fork or competitor, by name first and then by the most
similar name among definitions that compute the same ops, cuts both bodies out of their
files (the brace-matched block of C-like code, the indented block of Python), and diffs
them. Each diff cites ``file:line`` on both sides, and its hunks carry the files' own line
numbers. :func:`summarize` says in words what the other side's version does differently
(the intrinsics it adds, the functions it now calls, pragmas, how much it grew), which
becomes the hypothesis text.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .gaps import Evidence, Side, normalize
from .profile import ProfileResult

MAX_BODY_LINES = 400
MIN_SIMILARITY = 0.75  # of names, for a match not by the same name
MIN_BODY_SIMILARITY = 0.4  # of bodies, for such a match to count
_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_KEYWORDS = frozenset({"if", "for", "while", "switch", "return", "sizeof", "defined",
                       "static_cast", "reinterpret_cast", "const_cast", "assert",
                       "GGML_ASSERT", "GGML_UNUSED", "UNUSED", "catch", "decltype"})
_INTRINSICS = (
    (re.compile(r"_mm512_\w+"), "AVX-512 intrinsics"),
    (re.compile(r"_mm256_\w+"), "AVX2 intrinsics"),
    (re.compile(r"_mm_\w+"), "SSE intrinsics"),
    (re.compile(r"\bv\w+q_[fsu]\d+\b|\bvld1\w*|\bvfmaq\w*"), "NEON intrinsics"),
    (re.compile(r"__riscv_\w+"), "RISC-V vector intrinsics"),
    (re.compile(r"_mm512_dpbf16\w*|__m512bh|bf16"), "bf16 arithmetic"),
)
_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


@dataclass(frozen=True)
class FunctionDiff:
    function: str  # the hot function's name in the target
    other: str  # the other implementation's label
    mine: str  # file:line of the target's definition
    theirs: str  # file:line of the other's
    matched_by: str  # "name" or "similar name 'x'"
    similarity: float  # of the two bodies, 0..1
    added: int
    removed: int
    diff: str  # unified, with the files' line numbers
    summary: tuple[str, ...] = ()
    share: float = 0.0  # of the profiled time
    ops: tuple[str, ...] = ()
    substantive: bool = True  # False: renames, spelling and comments only

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed) and self.substantive

    @property
    def first_change(self) -> str:
        for line in self.diff.splitlines():
            if line.startswith("+") and not line.startswith("+++") and line[1:].strip():
                return line[1:].strip()[:160]
        return ""


def body(path: Path, line: int) -> list[str]:
    """The definition starting at ``line`` (1-based): through its matching brace, or its
    indented block for Python."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    start = line - 1
    if not 0 <= start < len(lines):
        return []
    if path.suffix in (".py", ".pyx"):
        indent = len(lines[start]) - len(lines[start].lstrip())
        end = start + 1
        while end < len(lines) and (not lines[end].strip() or
                                    len(lines[end]) - len(lines[end].lstrip()) > indent):
            end += 1
        return lines[start:end]
    depth = 0
    opened = False
    for i in range(start, min(len(lines), start + MAX_BODY_LINES)):
        code = _strip_strings(lines[i])
        for ch in code:
            if ch == "{":
                depth += 1
                opened = True
            elif ch == "}":
                depth -= 1
        if opened and depth <= 0:
            return lines[start:i + 1]
        if not opened and code.rstrip().endswith(";"):
            return []  # a declaration, not a definition
    return []


def _strip_strings(line: str) -> str:
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return line.split("//", 1)[0]


def _find(side: Side, name: str, ops: Sequence[str]) -> tuple[Evidence, str] | None:
    """The other side's definition of ``name``: same name, else the most similar one."""
    same = [ev for nm, ev in side.defs if nm == name]
    if same:
        return same[0], "name"
    words = set(normalize(name))
    best: tuple[float, str, Evidence] | None = None
    for nm, ev in side.defs:
        if not words & set(normalize(nm)):
            continue
        ratio = difflib.SequenceMatcher(None, name, nm).ratio()
        if ratio >= MIN_SIMILARITY and (best is None or ratio > best[0]):
            best = (ratio, nm, ev)
    if best is None:
        return None
    return best[2], f"similar name '{best[1]}'"


def diff_bodies(mine: Sequence[str], mine_at: str, mine_line: int, theirs: Sequence[str],
                theirs_at: str, theirs_line: int) -> tuple[str, int, int]:
    """A unified diff whose hunk headers carry both files' own line numbers."""
    out: list[str] = []
    added = removed = 0
    for raw in difflib.unified_diff(list(mine), list(theirs), fromfile=mine_at,
                                    tofile=theirs_at, n=2, lineterm=""):
        m = _HUNK.match(raw)
        if m:
            a = int(m[1]) + mine_line - 1
            b = int(m[3]) + theirs_line - 1
            raw = f"@@ -{a}{m[2] or ''} +{b}{m[4] or ''} @@"
        elif raw.startswith("+") and not raw.startswith("+++"):
            added += 1
        elif raw.startswith("-") and not raw.startswith("---"):
            removed += 1
        out.append(raw)
    return "\n".join(out), added, removed


_ARCH_BRANCH = re.compile(r"#\s*(?:el)?if\b.*?__(ARM_FEATURE_SVE|riscv_v\w*|POWER9_VECTOR__|"
                          r"wasm_simd128__|loongarch_asx|s390x__|ARM_NEON|AVX512F__|AVX2__)")
_ARCH_NAMES = {"ARM_FEATURE_SVE": "SVE", "ARM_NEON": "NEON", "POWER9_VECTOR__": "POWER9",
               "wasm_simd128__": "WASM SIMD", "loongarch_asx": "LoongArch", "s390x__": "s390x",
               "AVX512F__": "AVX-512", "AVX2__": "AVX2"}
_INTRINSIC_CALL = re.compile(r"^(_mm\d*_|__riscv_|sv[a-z]|v[a-z0-9]+q?_[a-z]\d|__lsx|__lasx|"
                             r"wasm_)")


def _norm(line: str) -> str:
    """A line as compared for substance: no comments, spacing, ``struct`` or nullptr."""
    code = _strip_strings(line).replace("nullptr", "NULL")
    code = re.sub(r"\bstruct\s+", "", code)
    return " ".join(code.split())


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _reduction_hoisted(mine: Sequence[str], theirs: Sequence[str]) -> bool:
    """A horizontal reduction that ran in the loop now runs once after it."""
    def live(lines: Sequence[str]) -> list[str]:
        return [ln for ln in lines if "reduce" in ln.lower() and _norm(ln)]
    gone = [ln for ln in live(mine) if _norm(ln) not in {_norm(t) for t in theirs}]
    new = [ln for ln in live(theirs) if _norm(ln) not in {_norm(m) for m in mine}]
    return bool(gone and new) and min(map(_indent, new)) < min(map(_indent, gone))


def summarize(mine: Sequence[str], theirs: Sequence[str]) -> tuple[str, ...]:
    """What the other version does differently, in a few phrases."""
    a = "\n".join(_strip_strings(s) for s in mine)
    b = "\n".join(_strip_strings(s) for s in theirs)
    out: list[str] = []
    if _reduction_hoisted(mine, theirs):
        out.append("accumulates in a vector register and reduces once after the loop "
                   "instead of a horizontal reduction every iteration")
    for pat, what in _INTRINSICS:
        if pat.search(b) and not pat.search(a):
            out.append(f"uses {what}")
    arch_a = {m for ln in mine for m in _ARCH_BRANCH.findall(ln)}
    arch_b = {m for ln in theirs for m in _ARCH_BRANCH.findall(ln)}
    if arch_a - arch_b:
        names = sorted({_ARCH_NAMES.get(x, "RISC-V vector" if x.startswith("riscv") else x)
                        for x in arch_a - arch_b})
        out.append("has no " + ", ".join(names) + " branch")
    calls_a = {c for c in _CALL.findall(a) if c not in _KEYWORDS}
    calls_b = {c for c in _CALL.findall(b) if c not in _KEYWORDS}
    new = sorted(c for c in calls_b - calls_a if not _INTRINSIC_CALL.match(c))
    gone = sorted(c for c in calls_a - calls_b if not _INTRINSIC_CALL.match(c))
    if new:
        out.append("calls " + ", ".join(new[:5]) + (" ..." if len(new) > 5 else ""))
    if gone:
        out.append("no longer calls " + ", ".join(gone[:5]) + (" ..." if len(gone) > 5
                                                              else ""))
    for word, what in (("#pragma", "adds pragmas"), ("prefetch", "prefetches"),
                       ("repack", "repacks data"), ("interleav", "interleaves rows"),
                       ("thread", "splits work across threads differently")):
        if word in b.lower() and word not in a.lower():
            out.append(what)
    if len(theirs) != len(mine):
        out.append(f"{len(theirs)} lines against {len(mine)}")
    return tuple(out)


def substantive(mine: Sequence[str], theirs: Sequence[str]) -> bool:
    """Whether the versions differ in more than spelling: comments, spacing, ``struct``,
    and renamed upper-case macros aside."""
    def strip(lines: Sequence[str]) -> list[str]:
        out = []
        for ln in lines:
            n = re.sub(r"\b[A-Z][A-Z0-9_]{3,}\b", "M", _norm(ln))
            if n and not n.startswith("#endif"):
                out.append(n)
        return out
    a, b = strip(mine), strip(theirs)
    changed = [ln for ln in difflib.unified_diff(a, b, n=0, lineterm="")
               if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return len(changed) > 4


def hot_function_diffs(prof: ProfileResult, mine: Side, others: Sequence[Side],
                       top: int = 5) -> list[FunctionDiff]:
    """Diffs of the target's hot functions against each other implementation's."""
    out: list[FunctionDiff] = []
    defs = {(ev.path, ev.line): (nm, ev) for nm, ev in mine.defs}
    hot = [h for h in prof.hotspots if h.in_target and h.line is not None][:top]
    for h in hot:
        found = defs.get((h.file, h.line or 0))
        if found is None:  # a sampled line inside the function: its nearest definition
            cands = [(ev.line, nm, ev) for nm, ev in mine.defs
                     if ev.path == h.file and ev.line <= (h.line or 0)]
            if not cands:
                continue
            _l, nm, ev = max(cands, key=lambda c: c[0])
            found = (nm, ev)
        name, ev = found
        path = mine.paths.get(ev.path)
        if path is None:
            continue
        mine_body = body(path, ev.line)
        if not mine_body:
            continue
        bare = h.function.split("(", 1)[0].rsplit("::", 1)[-1]
        for other in others:
            match = _find(other, bare if bare == name else name, ())
            if match is None:
                continue
            oev, how = match
            opath = other.paths.get(oev.path)
            theirs = body(opath, oev.line) if opath is not None else []
            if not theirs:
                continue
            text, added, removed = diff_bodies(mine_body, ev.cite, ev.line, theirs,
                                               oev.cite, oev.line)
            ratio = difflib.SequenceMatcher(None, mine_body, theirs).ratio()
            if how != "name" and ratio < MIN_BODY_SIMILARITY:
                continue  # a similar name, but not the same function
            out.append(FunctionDiff(name, other.label, ev.cite, oev.cite, how, ratio,
                                    added, removed, text, summarize(mine_body, theirs),
                                    h.share, substantive=substantive(mine_body, theirs)))
    return out
