"""Gap finder: what one implementation has that another lacks, with file:line evidence.

Compares two *sides* — the target's code and a competitor, a fork, or another backend of
the same project — by the features each one's source shows:

``op``
    members of an operation enum (``GGML_OP_RMS_NORM``, ``GGML_UNARY_OP_GELU``: an
    identifier with an ``X_OP_`` prefix shared by several members, or a prefix named in
    ``op_prefixes``), normalized to the op's own name (``rms_norm``). A prefix with one
    or two members is a macro, not an enum (``GGML_TENSOR_BINARY_OP_LOCALS``).
``fusion``
    a brace list of two or more ops, read whole however many lines it spans, that is an
    argument of a call about fusing (``can_fuse(g, i, { GGML_OP_RMS_NORM, GGML_OP_MUL })``),
    initializes a variable named for fusing or passed to such a call, or sits in a
    function or file named for fusing (a range-for over a list is a loop, not a fusion).
    A generic ``UNARY`` or ``GLU`` step takes the kind the call names in a second list
    (``{ GGML_UNARY_OP_SILU }``); view-only steps (``VIEW``, ``RESHAPE``, ...) are dropped
    and repeats collapsed, so one fusion has one key however a backend spells it. Or a
    defined function or kernel whose name is two or more
    op names joined (``rms_norm_mul``, ``kernel_rms_norm_mul_f32``,
    ``fused_add_rms_norm``). Where the code has an op enum, such a name counts only when
    it says "fuse" (in the name or the lines above) or a written op list confirms it, so
    ``conv2d_transpose`` stays one op. Both spellings give the key ``rms_norm+mul``, so a
    fusion is matched across backends however it is written.
``kernel``
    a defined function or kernel whose name mentions an op, normalized across backends by
    dropping backend, precision and plumbing words (``ggml_cuda_op_rms_norm`` and
    ``ggml_compute_forward_rms_norm`` are both ``rms_norm``).

String literals and comments are blanked before anything is read as an op, so an
environment variable (``getenv("GGML_OP_OFFLOAD_MIN_BATCH")``) is no op; neither is a
name a ``#define`` gives. A kernel another side has is a gap only where one of its ops is
missing from the lacking side (``rope_norm`` is a variant of ROPE, not a missing kernel).

Text-level, language-agnostic, and approximate by design: a feature is "present" when the
source names it; each one carries the lines that show it so a reader can check.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .sources import CODE_EXTS, MAX_FILE_BYTES, walk_files

_ENUM_OP = re.compile(r"\b((?:[A-Z][A-Z0-9]*_)*?OP_)([A-Z][A-Z0-9_]*[A-Z0-9])\b")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_PY_DEF = re.compile(r"^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(")
_C_DEF = re.compile(
    r"^(?!\s)(?!(?:if|for|while|switch|return|else|do|case|typedef|using|namespace|struct|"
    r"enum|union|class|#)\b)(?:[\w:<>,*&\[\]\s]|\(\([^)]*\)\))*?\b([A-Za-z_]\w*)\s*\([^;]*$")
_HOST_NAME = re.compile(r"host_name\(\s*\"([A-Za-z_]\w*)\"\s*\)")
_KERNEL_DEF = re.compile(r"^\s*(?:static\s+)?(?:__global__|kernel|__kernel)\s+\w+\s+"
                         r"([A-Za-z_]\w*)\s*\(")
_BRACES = re.compile(r"\{([^{}]*)\}")
_IDENT_LIST = re.compile(r"^\s*[A-Za-z_]\w*(\s*,\s*[A-Za-z_]\w*)+\s*,?\s*$")
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)", re.M)
_STRING_OR_COMMENT = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/',
                                re.S)
_FUSE_CALL = re.compile(r"\b[A-Za-z_]*fus[A-Za-z_]*\s*\(", re.I)
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
_APPENDERS = frozenset({"insert", "push_back", "emplace_back", "append", "extend"})
VIEW_OPS = frozenset({"view", "reshape", "permute", "transpose", "none"})
KIND_STEPS = {"unary": "UNARY_OP_", "glu": "GLU_OP_"}  # a generic step -> its kinds' infix

# Words that say where or how a function runs, not what it computes.
_NOISE_TEXT = """
ggml cpu cuda metal vulkan vk sycl hip rocm opencl cl cann musa webgpu wgpu gpu dev device
host global kernel kernels impl impls op ops compute forward fwd launch dispatch run do
encode exec execute apply call invoke wrapper helper internal generic ref reference naive
simd avx avx2 avx512 avx512f neon sve sse sse3 rvv vsx wasm amx blas mkl cublas mps np numpy
torch jax triton tl py cpp cc cu cuh f32 f16 bf16 fp32 fp16 fp8 fp64 f64 i8 i16 i32 i64 u8
q8 q4 q5 q6 q2 q3 k0 k1 float half double int t tt x4 x8 v1 v2 v3 vec4 static inline
fused fuse fusion the a an supports support vec backend
"""
NOISE = frozenset(_NOISE_TEXT.split())
FUSE_WORDS = frozenset({"fused", "fuse", "fusion"})
MAX_EVIDENCE = 3


@dataclass(frozen=True)
class Evidence:
    path: str  # citation path
    line: int
    text: str

    @property
    def cite(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Feature:
    kind: str  # "op", "fusion", "kernel"
    key: str  # normalized: "rms_norm", "rms_norm+mul"
    names: set[str] = field(default_factory=set)  # spellings seen
    evidence: list[Evidence] = field(default_factory=list)
    parts: tuple[str, ...] = ()  # fusions: the ops fused, in order

    def add(self, name: str, ev: Evidence) -> None:
        self.names.add(name)
        if any(e.cite == ev.cite for e in self.evidence):
            return
        # a `case OP:` line is the best evidence that code handles an op: put it first
        if self.kind == "op" and ev.text.startswith("case ") and not any(
                e.text.startswith("case ") for e in self.evidence):
            self.evidence.insert(0, ev)
            del self.evidence[MAX_EVIDENCE:]
        elif len(self.evidence) < MAX_EVIDENCE:
            self.evidence.append(ev)


@dataclass
class Side:
    label: str
    root: Path
    files: int = 0
    features: dict[tuple[str, str], Feature] = field(default_factory=dict)
    defs: list[tuple[str, Evidence]] = field(default_factory=list)  # defined functions
    fuse_context: set[str] = field(default_factory=set)  # cites of defs near "fuse"
    op_prefixes: dict[str, set[str]] = field(default_factory=dict)  # op -> enum prefixes
    paths: dict[str, Path] = field(default_factory=dict)  # citation path -> file
    macros: set[str] = field(default_factory=set)  # names a #define gives
    _finished: bool = False

    def feature(self, kind: str, key: str, parts: tuple[str, ...] = ()) -> Feature:
        f = self.features.get((kind, key))
        if f is None:
            f = self.features[(kind, key)] = Feature(kind, key, parts=parts)
        return f

    def keys(self, kind: str) -> set[str]:
        return {k for (kd, k) in self.features if kd == kind}

    def get(self, kind: str, key: str) -> Feature | None:
        return self.features.get((kind, key))


@dataclass(frozen=True)
class Gap:
    kind: str  # "fusion", "op", "kernel"
    key: str
    have: str  # label of the side that has it
    lack: str  # label of the side that lacks it
    evidence: tuple[Evidence, ...]  # where ``have`` shows it
    parts_present: tuple[Evidence, ...] = ()  # fusions: the lacking side has the parts here
    extends: str = ""  # fusions: a shorter fusion the lacking side already has
    note: str = ""

    @property
    def description(self) -> str:
        if self.kind == "fusion":
            ops = self.key.replace("+", " + ").upper()
            text = f"fused {ops}"
        elif self.kind == "op":
            text = f"op {self.key.upper()}"
        else:
            text = f"kernel/function '{self.key}'"
        return text


@dataclass
class GapReport:
    a: Side  # the other implementation
    b: Side  # the target's implementation
    only_a: list[Gap] = field(default_factory=list)  # a has it, b lacks it
    only_b: list[Gap] = field(default_factory=list)
    common: dict[str, int] = field(default_factory=dict)  # kind -> count in both


def split_words(name: str) -> list[str]:
    """``ggml_cuda_RmsNorm_f32`` → ggml, cuda, rms, norm, f32; ``CONV_2D`` → conv2d."""
    words: list[str] = []
    for chunk in name.split("_"):
        if not chunk:
            continue
        if chunk.islower() or chunk.isupper() or chunk.isdigit():
            parts = [chunk.lower()]  # conv2d, im2col, f32, RMS stay whole
        else:
            parts = [p.lower() for p in _CAMEL.findall(chunk)]
        for p in parts:
            if words and p[:1].isdigit() and not p.isdigit() and words[-1].isalpha():
                words[-1] += p  # conv + 2d → conv2d
            else:
                words.append(p)
    return words


def normalize(name: str) -> tuple[str, ...]:
    """The words of a function name that say what it computes."""
    return tuple(w for w in split_words(name) if w not in NOISE and not w.isdigit())


def collect(root: Path, label: str, *, files: Sequence[Path] | None = None,
            op_prefixes: Sequence[str] = (), cite_base: Path | None = None,
            cite_prefix: str | None = None) -> Side:
    """Scan code files under ``root`` (or the given ``files``) for ops, fusions, kernels.

    Evidence cites ``<cite_prefix>/<path relative to cite_base>``; the prefix defaults to
    the label (use ``""`` for paths relative to the target's root).
    """
    prefix = label if cite_prefix is None else cite_prefix
    side = Side(label, root)
    base = cite_base or root
    if files is not None:
        paths = list(files)
    elif root.is_file():  # one file named as the part to compare
        paths = [root]
    else:
        paths = [p for p in walk_files(root) if p.suffix in CODE_EXTS]
    prefix_re = None
    if op_prefixes:
        alts = "|".join(re.escape(p) for p in sorted(op_prefixes, key=len, reverse=True))
        prefix_re = re.compile(rf"\b({alts})([A-Za-z][A-Za-z0-9_]*)\b")
    defs: list[tuple[str, Evidence]] = []
    later: list[tuple[str, str, list[str], bool]] = []  # cite, code, lines, file fuses
    fuse_args: set[str] = set()  # names passed to a call about fusing, in any file
    for path in paths:
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        side.files += 1
        try:
            rel = path.relative_to(base).as_posix()
        except ValueError:
            rel = path.name
        cite = f"{prefix}/{rel}" if prefix else rel
        side.paths[cite] = path
        lines = text.splitlines()
        code = blank_strings(text)
        code_lines = code.splitlines()
        macros = set(_DEFINE.findall(code))
        side.macros |= macros
        file_fuses = "fus" in path.name.lower()
        for i, (line, cline) in enumerate(zip(lines, code_lines, strict=False), 1):
            ev = None
            for name, pfx, op in _ops_in(cline, prefix_re):
                if name in macros:
                    continue
                ev = ev or Evidence(cite, i, line.strip()[:160])
                side.feature("op", op).add(name, ev)
                side.op_prefixes.setdefault(op, set()).add(pfx)
            names = [m[1] for m in _HOST_NAME.finditer(line)]
            defined = _definition(cline, path.suffix)
            if defined:
                names.append(defined)
            for nm in names:
                defs.append((nm, Evidence(cite, i, line.strip()[:160])))
            if names and any("fus" in ln.lower() for ln in lines[max(0, i - 3): i]):
                side.fuse_context.add(f"{cite}:{i}")  # the line or the two above it
        later.append((cite, code, lines, file_fuses))
        for m in _FUSE_CALL.finditer(code):
            prev = re.search(r"([A-Za-z_]\w*|[*&])\s*$", code[max(0, m.start() - 40):m.start()])
            if prev is not None and prev[1] != "return":
                continue  # a definition or declaration, not a call
            fuse_args |= set(_IDENT.findall(code[m.end():_call_args_end(code, m.end())]))
    for cite, code, lines, file_fuses in later:
        file_defs = [(nm, ev.line) for nm, ev in defs if ev.path == cite]
        for parts, names_, at in fusion_lists(code, prefix_re, file_defs, file_fuses,
                                              fuse_args):
            ev = Evidence(cite, at, lines[at - 1].strip()[:160] if at <= len(lines) else "")
            side.feature("fusion", "+".join(parts), parts).add(names_, ev)
    side.defs = defs
    return side


def blank_strings(text: str) -> str:
    """``text`` with string literals and comments blanked (newlines and lengths kept)."""
    def blank(m: re.Match[str]) -> str:
        return "".join(c if c == "\n" else " " for c in m[0])
    return _STRING_OR_COMMENT.sub(blank, text)


def fusion_parts(ops: Sequence[str], kinds: Sequence[str] = ()) -> tuple[str, ...]:
    """The key parts of a fused op list: generic steps take the named kinds in order,
    view-only steps drop out, and a run of one op counts once (twice if alone)."""
    named = list(kinds)
    steps: list[str] = []
    for op in ops:
        if op in KIND_STEPS and named:
            op = named.pop(0)
        if op not in VIEW_OPS:
            steps.append(op)
    out: list[str] = []
    for op in steps:
        if not out or out[-1] != op:
            out.append(op)
    if len(out) == 1 and len(steps) >= 2:
        out.append(out[0])
    return tuple(out)


def top_blocks(code: str) -> list[tuple[int, int, str]]:
    """(start, end, function name) of each top-level brace block ('' for no function)."""
    out: list[tuple[int, int, str]] = []
    depth = 0
    start = 0
    header_from = 0
    for i, ch in enumerate(code):
        if ch == "{":
            if depth == 0:
                start = i
                header = re.sub(r"(?m)^\s*#.*$", "", code[header_from:i])
                names = [n for n in re.findall(r"([A-Za-z_]\w*)\s*\(", header)
                         if n not in ("__attribute__", "__declspec", "alignas")]
                name = names[0] if names else ""
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                out.append((start, i + 1, name))
                header_from = i + 1
        elif ch == ";" and depth == 0:
            header_from = i + 1
    return out


def _callee(code: str, pos: int) -> str:
    """The name of the call whose argument list holds ``pos`` ('' when none)."""
    depth = 0
    i = pos - 1
    while i >= 0:
        ch = code[i]
        if ch in ")]}":
            depth += 1
        elif ch in "([{":
            if depth == 0:
                if ch != "(":
                    return ""
                m = re.search(r"([A-Za-z_]\w*)\s*$", code[max(0, i - 200):i])
                return m[1] if m else ""
            depth -= 1
        elif ch == ";" and depth == 0:
            return ""
        i -= 1
    return ""


def _call_args_end(code: str, pos: int) -> int:
    """Where the call holding ``pos`` closes (its matching parenthesis)."""
    depth = 0
    for i in range(pos, min(len(code), pos + 2000)):
        ch = code[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return i
            depth -= 1
    return pos


def fusion_lists(code: str, prefix_re: re.Pattern[str] | None,
                 defs: Sequence[tuple[str, int]], file_fuses: bool,
                 fuse_args: set[str] | frozenset[str] = frozenset()
                 ) -> list[tuple[tuple[str, ...], str, int]]:
    """(parts, the list as written, line) for each fused op list in a file's code."""
    out: list[tuple[tuple[str, ...], str, int]] = []
    blocks: list[tuple[int, int, str]] | None = None
    for m in _BRACES.finditer(code):
        inner = m[1]
        if not _IDENT_LIST.match(inner):
            continue
        items = [t.strip() for t in inner.split(",") if t.strip()]
        ops = [_op_of(t, prefix_re) for t in items]
        if len(ops) < 2 or not all(ops) or any(
                any(infix in t for infix in KIND_STEPS.values()) for t in items):
            continue
        before = code[max(0, m.start() - 300):m.start()]
        if re.search(r"\bfor\s*\([^;]*:\s*$", before):
            continue  # a range-for over a list is a loop
        line = code.count("\n", 0, m.start()) + 1
        callee = _callee(code, m.start())
        if callee in _APPENDERS:
            continue  # a piece of a list built elsewhere
        if blocks is None:
            blocks = top_blocks(code)
        var = re.search(r"([A-Za-z_]\w*)\s*(\[\s*\d*\s*\])?\s*=?\s*$", before)
        fused = "fus" in callee.lower() or (var is not None and (
            "fus" in var[1].lower() or var[1] in fuse_args))
        if not fused:
            owner = next((name for a, b, name in blocks if a <= m.start() < b), "")
            fused = file_fuses or "fus" in owner.lower()
        if not fused:
            continue
        kinds: list[str] = []
        if callee:
            tail = code[m.end():_call_args_end(code, m.end())]
            for km in _BRACES.finditer(tail):
                for t in km[1].split(","):
                    em = _ENUM_OP.fullmatch(t.strip())
                    if em and any(infix in em[1] for infix in KIND_STEPS.values()):
                        kinds.append(_op_name(em[2]))
        parts = fusion_parts([o for o in ops if o], kinds)
        if len(parts) >= 2:
            out.append((parts, "{" + ", ".join(items) + "}", line))
    return out


USER_PREFIX = "<declared>"
MIN_ENUM_MEMBERS = 4  # an `X_OP_` prefix names an op enum when it has this many members


def _ops_in(line: str, prefix_re: re.Pattern[str] | None
            ) -> Iterable[tuple[str, str, str]]:
    """(identifier, prefix, op name) for each op enum member named on the line."""
    for m in _ENUM_OP.finditer(line):
        op = m[2]
        if op.endswith("COUNT") or op in ("NONE", "TYPE") or m[1] == "OP_":
            continue
        if line[m.end():].lstrip().startswith("["):
            continue  # an array named like an op (GGML_OP_NAME[op]), not an enum member
        yield m[0], m[1], _op_name(op)
    if prefix_re is not None:
        for m in prefix_re.finditer(line):
            yield m[0], USER_PREFIX, _op_name(m[2])


def _prune_ops(sides: Sequence[Side]) -> None:
    """Drop "ops" whose only prefix is no enum (``GGML_TENSOR_BINARY_OP_LOCALS``)."""
    members: dict[str, set[str]] = {}
    for s in sides:
        for op, prefixes in s.op_prefixes.items():
            for p in prefixes:
                members.setdefault(p, set()).add(op)
    valid = {p for p, ops in members.items()
             if p == USER_PREFIX or len(ops) >= MIN_ENUM_MEMBERS}
    if members:  # the largest family is the op enum even in a small code base
        valid.add(max(members, key=lambda p: (len(members[p]), p)))
    macros = {m for s in sides for m in s.macros}
    for s in sides:
        for op, prefixes in s.op_prefixes.items():
            feat = s.features.get(("op", op))
            if not prefixes & valid or (feat is not None and feat.names <= macros):
                s.features.pop(("op", op), None)


def _op_name(raw: str) -> str:
    return "_".join(split_words(raw))


def _op_of(token: str, prefix_re: re.Pattern[str] | None) -> str | None:
    m = _ENUM_OP.fullmatch(token)
    if m and not m[2].endswith("COUNT"):
        return _op_name(m[2])
    if prefix_re is not None:
        m = prefix_re.fullmatch(token)
        if m:
            return _op_name(m[2])
    return None


def _definition(line: str, suffix: str) -> str | None:
    if suffix in (".py", ".pyx"):
        m = _PY_DEF.match(line)
        return m[1] if m else None
    m = _KERNEL_DEF.match(line)
    if m:
        return m[1]
    if "(" not in line or line.rstrip().endswith((";", ",")) or "=" in line.split("(", 1)[0]:
        return None
    m = _C_DEF.match(line)
    if not m or m[1] in ("if", "for", "while", "switch", "return", "sizeof", "defined"):
        return None
    return m[1]


def finish(sides: Sequence[Side]) -> None:
    """Classify every side's definitions with the vocabulary of all sides together."""
    _prune_ops(sides)
    vocab: set[tuple[str, ...]] = set()
    for s in sides:
        vocab |= {tuple(k.split("_")) for k in s.keys("op")}
    # single-purpose functions of a few words also name ops (rms_norm, softmax, mul)
    for s in sides:
        for name, _ev in s.defs:
            words = normalize(name)
            if 1 <= len(words) <= 2 and not (set(split_words(name)) & FUSE_WORDS):
                vocab.add(words)
    # With an op enum, a name of two op names is only a fusion when it says so or a
    # written op list confirms it (conv2d_transpose is one op, not two fused).
    has_enum = any(s.keys("op") for s in sides)
    listed = {k for s in sides for k in s.keys("fusion")}
    frozen = frozenset(vocab)
    enum_ops = {k for s in sides for k in s.keys("op")}
    frozen_ops = frozenset(enum_ops)
    for s in sides:
        if s._finished:
            continue
        s._finished = True
        for name, ev in s.defs:
            words = normalize(name)
            if not words:
                continue
            parts = segment(words, frozen, frozen_ops)
            fuse_word = bool(set(split_words(name)) & FUSE_WORDS) or \
                ev.cite in s.fuse_context
            is_fusion = bool(parts) and len(parts or ()) >= 2 and (
                not has_enum or fuse_word or "+".join(parts or ()) in listed) and (
                not has_enum or all(p in enum_ops for p in parts or ()))
            if parts and is_fusion:
                s.feature("fusion", "+".join(parts), parts).add(name, ev)
            elif (parts or fuse_word) and (
                    not has_enum or any(p in enum_ops for p in parts or ())):
                key = "_".join(words)
                s.feature("kernel", key, tuple(parts or ())).add(name, ev)


def segment(words: tuple[str, ...], vocab: frozenset[tuple[str, ...]],
            preferred: frozenset[str] = frozenset()) -> tuple[str, ...] | None:
    """Split ``words`` into known op names; None if some word is not covered.

    Among the splits, the one with the fewest names outside ``preferred`` (the enum's
    ops) wins, then the one with the fewest names: ``norm_mul_add`` is NORM + MUL + ADD
    even where some function happens to be called ``norm_mul``.
    """
    return _segment(words, vocab, preferred)


@lru_cache(maxsize=65536)
def _segment(words: tuple[str, ...], vocab: frozenset[tuple[str, ...]],
             preferred: frozenset[str]) -> tuple[str, ...] | None:
    n = len(words)
    best: list[tuple[tuple[int, int], tuple[str, ...]] | None] = [None] * (n + 1)
    best[0] = ((0, 0), ())
    for i in range(1, n + 1):
        for j in range(max(0, i - 4), i):
            prev = best[j]
            if prev is None or words[j:i] not in vocab:
                continue
            name = "_".join(words[j:i])
            cost = (prev[0][0] + (name not in preferred), prev[0][1] + 1)
            cur = best[i]
            if cur is None or cost < cur[0]:
                best[i] = (cost, (*prev[1], name))
    last = best[n]
    return last[1] if last is not None else None


def find_gaps(a: Side, b: Side) -> GapReport:
    """Features of ``a`` missing from ``b`` and the reverse, most telling first."""
    finish([a, b])
    report = GapReport(a, b)
    for kind in ("fusion", "op", "kernel"):
        report.common[kind] = len(a.keys(kind) & b.keys(kind))
    report.only_a = _missing(a, b)
    report.only_b = _missing(b, a)
    return report


def _missing(have: Side, lack: Side) -> list[Gap]:
    gaps: list[Gap] = []
    lack_ops = lack.keys("op") | lack.keys("kernel")
    enum_ops = have.keys("op") | lack.keys("op")
    lack_fusions = {f.parts: f for (kd, _), f in lack.features.items() if kd == "fusion"}
    for (kind, key), feat in sorted(have.features.items()):
        if lack.get(kind, key) is not None:
            continue
        if kind == "fusion":
            present: list[Evidence] = []
            for part in feat.parts:
                got = lack.get("op", part) or lack.get("kernel", part)
                if got is not None and got.evidence:
                    present.append(got.evidence[0])
            extends = ""
            for parts, other in lack_fusions.items():
                if len(parts) < len(feat.parts) and _is_sub(parts, feat.parts) and (
                        not extends or len(other.parts) > extends.count("+") + 1):
                    extends = other.key
            all_parts = len(present) == len(feat.parts)
            note = (f"{lack.label} has every part ({', '.join(feat.parts)}) but runs them "
                    "separately" if all_parts else
                    f"{lack.label} lacks some of its parts")
            if extends:
                note += f"; extends {lack.label}'s fusion {extends.replace('+', ' + ')}"
            gaps.append(Gap(kind, key, have.label, lack.label, tuple(feat.evidence),
                            tuple(present) if all_parts else (), extends, note))
        elif kind == "op":
            gaps.append(Gap(kind, key, have.label, lack.label, tuple(feat.evidence),
                            note=f"{lack.label} never names this op"))
        elif kind == "kernel" and key not in lack_ops and _missing_op(feat, enum_ops,
                                                                        lack_ops):
            gaps.append(Gap(kind, key, have.label, lack.label, tuple(feat.evidence),
                            note=f"no function of {lack.label} normalizes to '{key}'"))
    order = {"fusion": 0, "op": 1, "kernel": 2}
    gaps.sort(key=lambda g: (order[g.kind], not g.parts_present, g.key.count("+"), g.key))
    return gaps


def _missing_op(feat: Feature, enum_ops: set[str], lack_ops: set[str]) -> bool:
    """A kernel is a gap only where it computes an op the lacking side lacks; one whose
    ops the lacking side all has is a variant or plumbing (``rope_norm``,
    ``convert_unary_cont``, ``get_dm_scale``)."""
    parts = feat.parts or tuple(feat.key.split("+"))
    ops = [p for p in parts if p in enum_ops] if enum_ops else list(parts)
    return any(p not in lack_ops for p in ops)


def _is_sub(short: tuple[str, ...], long: tuple[str, ...]) -> bool:
    n = len(short)
    return any(long[i:i + n] == short for i in range(len(long) - n + 1))
