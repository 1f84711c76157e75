"""Early stop: progress lines a benchmark prints while it runs, and the conditions that end
a run that looks alive while doing something useless.

Declared under ``[metric.watch]``::

    [metric.watch]
    line = 'step\\s+(?P<step>\\d+) \\| loss (?P<loss>\\S+) \\| (?P<tokens_per_second>\\d+) tok/s'
    let = { vocab = 8192 }
    stop = ["tokens_per_second < 0.2 * incumbent", "loss is not finite",
            "loss > 1.5 * ln(vocab) after step 10", "no progress line for 60 s"]
    persist = 3

``line`` is a regular expression with named groups; every line of the run's output that
it matches is a progress line and its groups are numbers (``nan`` and ``inf`` included).
A condition is one of:

- ``EXPR OP EXPR`` with ``OP`` one of ``< <= > >= == !=``;
- ``EXPR is not finite`` (NaN or infinite);
- ``no progress line for N s``: the clock starts at the first progress line (the time
  before it, compiling or loading, is bounded by the bench timeout) and a run that
  prints none for N seconds after that is stopped.

``after NAME N`` at the end of the first two kinds makes the condition apply only once the
field ``NAME`` exceeds ``N``. A comparison stops the run when it holds on ``persist``
progress lines in a row (3 unless ``[metric.watch] persist`` says otherwise): one slow or
spiky line, a step that waited for a busy CPU or a loss spike, is not a run doing something
useless. ``is not finite`` stops the run at the first such line. Expressions are numbers,
field names, ``let`` constants, the functions ``ln log exp sqrt abs min max``,
``+ - * /`` and parentheses; ``incumbent`` is the incumbent's value of the field on the
left of the comparison (the median over its latest run on the same slot); a condition
naming it is inactive until the slot has one, and on the incumbent's own runs. The text
is parsed by a small recursive-descent parser: nothing is evaluated by Python.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..errors import ConfigError

FUNCS: dict[str, Callable[..., float]] = {
    "ln": math.log, "log": math.log, "exp": math.exp, "sqrt": math.sqrt, "abs": abs,
    "min": min, "max": max}
OPS: dict[str, Callable[[float, float], bool]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)|([A-Za-z_]\w*)"
                    r"|(<=|>=|==|!=|[-+*/(),<>]))")
_SILENCE = re.compile(r"^\s*no progress line for\s+(\d+(?:\.\d*)?)\s*(?:s|sec|seconds?)\s*$")
_AFTER = re.compile(r"^(.*?)\s+after\s+([A-Za-z_]\w*)\s+(-?\d+(?:\.\d*)?)\s*$")
_NOT_FINITE = re.compile(r"^(.*?)\s+is not finite\s*$")


EARLY_STOP = "stopped early"  # how the reason of a run a condition stopped begins
PERSIST = 3  # progress lines in a row a comparison must hold on before it stops a run


class WatchError(ValueError):
    """A condition that does not parse; the message says where."""


Node = tuple[object, ...]


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise WatchError(f"unexpected {text[pos:].strip()[:12]!r} at character {pos + 1}")
        out.append(next(g for g in m.groups() if g is not None))
        pos = m.end()
    return out


class _Parser:
    """expr := term (('+'|'-') term)*; term := unary (('*'|'/') unary)*;
    unary := '-' unary | atom;
    atom := NUMBER | NAME | NAME '(' expr (',' expr)* ')' | '(' expr ')'"""

    def __init__(self, tokens: list[str]) -> None:
        self.t = tokens
        self.i = 0

    def peek(self) -> str | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise WatchError(f"expected {want or 'more'}, found {tok or 'the end'}")
        self.i += 1
        return tok

    def expr(self) -> Node:
        node = self.term()
        while self.peek() in ("+", "-"):
            node = ("bin", self.take(), node, self.term())
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.peek() in ("*", "/"):
            node = ("bin", self.take(), node, self.unary())
        return node

    def unary(self) -> Node:
        if self.peek() == "-":
            self.take()
            return ("neg", self.unary())
        return self.atom()

    def atom(self) -> Node:
        tok = self.take()
        if tok == "(":
            node = self.expr()
            self.take(")")
            return node
        if tok[0].isdigit() or tok[0] == ".":
            return ("num", float(tok))
        if tok[0].isalpha() or tok[0] == "_":
            if self.peek() == "(":
                if tok not in FUNCS:
                    raise WatchError(f"unknown function {tok!r} (known: {', '.join(FUNCS)})")
                self.take("(")
                args = [self.expr()]
                while self.peek() == ",":
                    self.take()
                    args.append(self.expr())
                self.take(")")
                return ("call", tok, *args)
            return ("name", tok)
        raise WatchError(f"unexpected {tok!r}")


def _parse_expr(text: str) -> Node:
    p = _Parser(_tokens(text))
    node = p.expr()
    if p.peek() is not None:
        raise WatchError(f"unexpected {p.peek()!r} after a complete expression")
    return node


def _eval(node: Node, env: Mapping[str, float]) -> float:
    kind = node[0]
    if kind == "num":
        return float(node[1])  # type: ignore[arg-type]
    if kind == "name":
        name = str(node[1])
        if name not in env:
            raise KeyError(name)
        return env[name]
    if kind == "neg":
        return -_eval(node[1], env)  # type: ignore[arg-type]
    if kind == "call":
        args = [_eval(a, env) for a in node[2:]]  # type: ignore[arg-type]
        try:
            return float(FUNCS[str(node[1])](*args))
        except (ValueError, OverflowError):
            return math.nan
    a = _eval(node[2], env)  # type: ignore[arg-type]
    b = _eval(node[3], env)  # type: ignore[arg-type]
    op = node[1]
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    return a / b if b != 0 else (math.copysign(math.inf, a) if a else math.nan)


def _names(node: Node) -> set[str]:
    if node[0] == "name":
        return {str(node[1])}
    if node[0] == "num":
        return set()
    return set().union(*(_names(c) for c in node[1:] if isinstance(c, tuple)))


@dataclass(frozen=True)
class Condition:
    text: str
    kind: str  # "compare", "not_finite" or "silence"
    left: Node = ()
    op: str = ""
    right: Node = ()
    after: tuple[str, float] | None = None
    seconds: float = 0.0

    @property
    def field(self) -> str:
        """The field ``incumbent`` stands for: the left side, when it is a bare name."""
        return str(self.left[1]) if self.left and self.left[0] == "name" else ""

    def names(self) -> set[str]:
        out = set()
        for n in (self.left, self.right):
            if n:
                out |= _names(n)
        if self.after:
            out.add(self.after[0])
        return out


def parse_condition(text: str) -> Condition:
    m = _SILENCE.match(text)
    if m:
        return Condition(text, "silence", seconds=float(m.group(1)))
    body, after = text.strip(), None
    ma = _AFTER.match(body)
    if ma:
        body, after = ma.group(1), (ma.group(2), float(ma.group(3)))
    mn = _NOT_FINITE.match(body)
    if mn:
        return Condition(text, "not_finite", left=_parse_expr(mn.group(1)), after=after)
    for op in ("<=", ">=", "==", "!=", "<", ">"):
        if op in body:
            lhs, rhs = body.split(op, 1)
            if any(o in rhs for o in ("<", ">", "==", "!=")):
                raise WatchError("one comparison per condition")
            return Condition(text, "compare", left=_parse_expr(lhs), op=op,
                             right=_parse_expr(rhs), after=after)
    raise WatchError("a condition is `EXPR OP EXPR`, `EXPR is not finite` or "
                     "`no progress line for N s`, optionally followed by `after FIELD N`")


@dataclass(frozen=True)
class WatchSpec:
    line: str
    stop: tuple[str, ...]
    let: Mapping[str, float] = field(default_factory=dict)
    persist: int = PERSIST

    def pattern(self) -> re.Pattern[str]:
        return re.compile(self.line)

    def conditions(self) -> tuple[Condition, ...]:
        return tuple(parse_condition(c) for c in self.stop)


def validate(spec: WatchSpec) -> str:
    """'' when the spec is usable, else what is wrong (for a config error)."""
    try:
        pat = spec.pattern()
    except re.error as exc:
        return f"line is not a regular expression: {exc}"
    fields = set(pat.groupindex)
    if not fields:
        return "line has no named groups, e.g. (?P<loss>\\S+)"
    known = fields | set(spec.let) | {"incumbent"}
    for text in spec.stop:
        try:
            cond = parse_condition(text)
        except WatchError as exc:
            return f"stop condition {text!r}: {exc}"
        unknown = cond.names() - known
        if unknown:
            return (f"stop condition {text!r} names {sorted(unknown)}, which are neither groups "
                    f"of line ({sorted(fields)}) nor let constants")
        if "incumbent" in cond.names() and not cond.field:
            return f"stop condition {text!r} uses incumbent but its left side is not a field"
    return ""


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


class Watcher:
    """Follows one run's output; :meth:`feed` and :meth:`tick` return the reason to stop
    it ('' while it may go on)."""

    def __init__(self, spec: WatchSpec, incumbent: Mapping[str, float] | None = None) -> None:
        self.spec = spec
        self.pattern = spec.pattern()
        self.conds = spec.conditions()
        self.incumbent = dict(incumbent or {})
        self.last_line_at: float | None = None
        self.values: dict[str, list[float]] = {}
        self.lines = 0
        self.reason = ""
        self.streaks = [0] * len(self.conds)  # lines in a row each condition has held on

    def feed(self, line: str, now: float) -> str:
        m = self.pattern.search(line)
        if not m or self.reason:
            return self.reason
        fields = {k: v for k, v in ((k, _number(s)) for k, s in m.groupdict().items()
                                    if s is not None) if v is not None}
        if not fields:
            return ""
        self.lines += 1
        self.last_line_at = now
        for k, v in fields.items():
            self.values.setdefault(k, []).append(v)
        env = {**self.spec.let, **fields}
        for i, c in enumerate(self.conds):
            if c.kind == "silence":
                continue
            why = self._check(c, env)
            if why is None:  # this line does not carry the condition's fields
                continue
            self.streaks[i] = self.streaks[i] + 1 if why else 0
            need = 1 if c.kind == "not_finite" else self.spec.persist
            if why and self.streaks[i] >= need:
                times = f", {need} lines in a row" if need > 1 else ""
                self.reason = f"{c.text} ({why}{times})"
                return self.reason
        return ""

    def _check(self, c: Condition, env: dict[str, float]) -> str | None:
        """Why ``c`` holds on this line, '' when it does not, None when it cannot tell."""
        if c.after is not None:
            name, limit = c.after
            if name not in env or not env[name] > limit:
                return ""
        if "incumbent" in c.names():
            if c.field not in self.incumbent:
                return ""
            env = {**env, "incumbent": self.incumbent[c.field]}
        try:
            left = _eval(c.left, env)
            if c.kind == "not_finite":
                return f"{_show(c.left)} = {left}" if not math.isfinite(left) else ""
            right = _eval(c.right, env)
        except KeyError:
            return None  # a field this line does not carry
        if OPS[c.op](left, right):
            return f"{_show(c.left)} = {left:g}, limit {right:g}"
        return ""

    def tick(self, now: float) -> str:
        if self.reason or self.last_line_at is None:
            return self.reason
        for c in self.conds:
            if c.kind == "silence" and now - self.last_line_at > c.seconds:
                self.reason = f"{c.text} (silent for {now - self.last_line_at:.0f} s)"
        return self.reason

    def medians(self) -> dict[str, float]:
        """Each field's median over the run's progress lines (finite values only)."""
        out = {}
        for k, vs in self.values.items():
            fin = [v for v in vs if math.isfinite(v)]
            if fin:
                out[k] = statistics.median(fin)
        return out


def against_incumbent(reason: str) -> bool:
    """Whether the early stop of ``reason`` (as the worker records it) came from a
    condition that names ``incumbent``."""
    text = reason.removeprefix(EARLY_STOP).lstrip(": ")
    cond = text.split(" (", 1)[0]
    try:
        return "incumbent" in parse_condition(cond).names()
    except WatchError:
        return False


def _show(node: Node) -> str:
    return str(node[1]) if node and node[0] in ("name", "num") else "value"


def from_table(data: Mapping[str, object], where: str,
               error: Callable[[str, str, str], ConfigError]) -> WatchSpec:
    """A WatchSpec from the ``[metric.watch]`` table; ``error(key, message, valid)``."""
    unknown = set(data) - {"line", "stop", "let", "persist"}
    if unknown:
        raise error(sorted(unknown)[0], "is not a key of [metric.watch]",
                    "line, stop, let, persist")
    persist = data.get("persist", PERSIST)
    if not isinstance(persist, int) or isinstance(persist, bool) or persist < 1:
        raise error("persist", "must be a whole number of progress lines, at least 1",
                    f"e.g. {PERSIST}: a comparison stops the run when it holds on that many "
                    "lines in a row")
    line = data.get("line")
    if not isinstance(line, str) or not line:
        raise error("line", "is required: a regular expression with named groups",
                    "e.g. 'loss (?P<loss>\\S+)'")
    stop = data.get("stop", [])
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or not stop:
        raise error("stop", "must be a non-empty list of conditions",
                    '["loss is not finite", "no progress line for 60 s"]')
    let = data.get("let", {})
    if not isinstance(let, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in let.values()):
        raise error("let", "must be a table of numbers", "{ vocab = 8192 }")
    spec = WatchSpec(line, tuple(stop), {str(k): float(v) for k, v in let.items()}, persist)
    why = validate(spec)
    if why:
        raise error("stop" if why.startswith("stop") else "line", why, "")
    return spec

