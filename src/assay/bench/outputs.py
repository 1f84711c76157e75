"""Differential checks: do the incumbent's and the candidate's outputs agree?

``[commands] compare`` runs on both trees; the two outputs must match line by line, each
line token by token, where numbers may differ by ``compare_rtol`` (relative) or
``compare_atol`` (absolute) and every other token must be identical. Used where a project's
own tests cannot see a wrong result (a kernel checked only against itself).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_NUMBER = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$|^[+-]?(?:inf|nan)$",
                     re.IGNORECASE)
_TOKEN = re.compile(r"[^\s,;:()\[\]{}=]+|[,;:()\[\]{}=]")


@dataclass(frozen=True)
class Mismatch:
    line: int  # 1-based
    incumbent: str
    candidate: str
    why: str

    def describe(self) -> str:
        return (f"line {self.line}: {self.why}\n  incumbent: {self.incumbent[:200]}\n"
                f"  candidate: {self.candidate[:200]}")


def _num(token: str) -> float | None:
    return float(token) if _NUMBER.match(token) else None


def _close(a: float, b: float, rtol: float, atol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def _line_diff(a: str, b: str, rtol: float, atol: float) -> str:
    if a == b:
        return ""
    ta, tb = _TOKEN.findall(a), _TOKEN.findall(b)
    if len(ta) != len(tb):
        return f"{len(ta)} tokens against {len(tb)}"
    for x, y in zip(ta, tb, strict=True):
        if x == y:
            continue
        nx, ny = _num(x), _num(y)
        if nx is None or ny is None:
            return f"{x!r} differs from {y!r}"
        if not _close(nx, ny, rtol, atol):
            return (f"{x} differs from {y} by more than rtol={rtol:g}, atol={atol:g}")
    return ""


def compare_outputs(incumbent: str, candidate: str, rtol: float = 0.0, atol: float = 0.0,
                    limit: int = 3) -> list[Mismatch]:
    """The first ``limit`` lines where the outputs disagree (empty: they agree)."""
    la, lb = incumbent.splitlines(), candidate.splitlines()
    out: list[Mismatch] = []
    for i in range(max(len(la), len(lb))):
        if i >= len(la) or i >= len(lb):
            out.append(Mismatch(i + 1, la[i] if i < len(la) else "<no line>",
                                lb[i] if i < len(lb) else "<no line>",
                                f"the outputs have {len(la)} and {len(lb)} lines"))
            break
        why = _line_diff(la[i], lb[i], rtol, atol)
        if why:
            out.append(Mismatch(i + 1, la[i], lb[i], why))
            if len(out) >= limit:
                break
    return out
