"""What finished experiments taught: lessons that re-rank the hypotheses between waves.

After a wave, :func:`assay.research.rerank.after_wave` reads the decided experiments, sorts
each one's hypothesis into a kind of change (``memory``: cuts bytes moved, such as fusing,
lower precision, fewer passes, a better layout; ``compute``: cuts or widens the
arithmetic, such as SIMD, unrolling, FMA, a cheaper function) and finds the hot spot it
aimed at. Several changes of one kind decided within noise on one hot spot make a lesson;
where the hot spot's roofline class explains it (compute micro-optimizations on a
memory-bound hot spot), the lesson says so and ranks the other kind first. The brief's
"What the waves showed" section lists the lessons, and the hypotheses are re-scored in
the journal and the brief, so the next proposal reads them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config.spec import Target
from ..model import Experiment, ExperimentState, Verdict
from .research_journal import ResearchJournal

WAVE_SHARE = 50  # a large journal re-ranks after each fiftieth more decided experiments
MIN_SAME = 2  # changes of one kind within noise on one hot spot that make a lesson

_MEMORY = re.compile(
    r"fus|bandwidth|memory|bytes|cache|tile|tiling|layout|repack|interleav|precision|"
    r"quantiz|\bf16\b|\bbf16\b|\bfp16\b|\bint8\b|cop(y|ies)|\bpass(es)?\b|prefetch|"
    r"in[- ]place|traffic|round trip|contiguous|stride|blocking", re.I)
_COMPUTE = re.compile(
    r"simd|vectori[sz]|\bvector\b|avx|neon|\bsse\d?\b|sve|unroll|\bfma\b|intrinsic|"
    r"branch|inline|instruction|reciprocal|approximat|fast[- ]math|arithmetic|"
    r"multipl(y|ication) instead|strength reduc|\bexp\b|polynomial|lookup table", re.I)


@dataclass(frozen=True)
class Lesson:
    text: str
    ops: tuple[str, ...] = ()  # the hot spot it is about; () means everywhere
    adjust: dict[str, float] = field(default_factory=dict)  # kind of change -> prior move


def classify(text: str) -> str:
    """``memory``, ``compute`` or '' for a hypothesis or change described in words."""
    mem = len(_MEMORY.findall(text))
    comp = len(_COMPUTE.findall(text))
    if mem > comp:
        return "memory"
    if comp > mem:
        return "compute"
    return ""


def _canon(op: str) -> str:
    return op.replace("_", "").lower()


def adjustment(category: str, ops: Sequence[str], lessons: Sequence[Lesson]
               ) -> tuple[float, list[str]]:
    """How far the lessons move a hypothesis of this kind on these ops, and why."""
    total = 0.0
    said: list[str] = []
    mine = {_canon(o) for o in ops}
    for lesson in lessons:
        move = lesson.adjust.get(category, 0.0)
        if not move:
            continue
        here = not lesson.ops or not mine or bool(mine & {_canon(o) for o in lesson.ops})
        move = move if here else move / 2
        total += move
        said.append(f"waves: {'up' if move > 0 else 'down'} {abs(move):.2f} "
                    f"({lesson.text.split(':')[0]})")
    return total, said


def _within_noise(e: Experiment) -> bool:
    d = e.decision
    if d is None or d.verdict is not Verdict.DISCARD:
        return False
    if d.lo is not None and d.hi is not None:
        return d.lo <= 0.0 <= d.hi
    return d.effect is None or abs(d.effect) < max(d.delta, 1e-12)


def _spot(e: Experiment, hot: Sequence[dict[str, Any]],
          by_id: Mapping[int, Sequence[str]]) -> dict[str, Any] | None:
    """The hot spot an experiment aimed at: its linked hypothesis's ops, else its words."""
    ops = {_canon(o) for o in by_id.get(e.candidate.hypothesis_id or -1, ())}
    words = _canon(re.sub(r"[^A-Za-z0-9_]", "", e.candidate.hypothesis.replace(" ", "_")))
    for h in hot:
        op = _canon(str(h.get("op", "")))
        if op and (op in ops or op in words):
            return h
    return None


def last_research(target: Target) -> dict[str, Any] | None:
    path = target.state_dir / "research" / "last.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def lessons(journal: ResearchJournal, target: Target) -> list[Lesson]:
    """The lessons of every decided experiment so far."""
    last = last_research(target) or {}
    hot: list[dict[str, Any]] = list(last.get("hot_path", []))
    by_id = {int(h["id"]): tuple(h.get("ops", ())) for h in last.get("hypotheses", [])
             if h.get("id") is not None}
    groups: dict[tuple[str, str, str], list[Experiment]] = {}
    spots: dict[str, dict[str, Any]] = {}
    for e in journal.experiments((ExperimentState.KEPT, ExperimentState.DISCARDED),
                                 patches=False):
        kind = classify(e.candidate.hypothesis)
        if not kind:
            continue
        spot = _spot(e, hot, by_id)
        name = str(spot["op"]) if spot else ""
        if spot:
            spots[name] = spot
        outcome = "kept" if e.state is ExperimentState.KEPT else \
            "noise" if _within_noise(e) else "worse"
        groups.setdefault((name, kind, outcome), []).append(e)
    out: list[Lesson] = []
    for (name, kind, outcome), exps in sorted(groups.items()):
        spot = spots.get(name, {})
        where = (f"{name.upper()} ({float(spot.get('share', 0)):.0%} of the profiled time)"
                 if name else "the benchmark")
        ids = ", ".join(e.id for e in exps[:4])
        other = "compute" if kind == "memory" else "memory"
        bound = str(spot.get("bound", "unknown"))
        if outcome == "kept":
            out.append(Lesson(f"{kind} change kept on {where} ({ids}): more of the same "
                              "ranks higher", (name,) if name else (), {kind: 0.1}))
            continue
        if outcome != "noise" or len(exps) < MIN_SAME:
            continue
        explained = (kind == "compute" and bound == "memory-bound") or \
            (kind == "memory" and bound == "compute-bound")
        noun = "micro-optimizations" if kind == "compute" else "memory-traffic cuts"
        text = f"{len(exps)} {kind} {noun} decided within noise on {where} ({ids})"
        if explained:
            numbers = str(spot.get("numbers", ""))
            cut = "cut memory traffic" if other == "memory" else "cut arithmetic"
            text += (f": the path is {bound}" + (f" ({numbers})" if numbers else "")
                     + f", so hypotheses that {cut} rank first")
            out.append(Lesson(text, (name,) if name else (), {kind: -0.25, other: 0.2}))
        else:
            text += f": {kind} changes there rank lower (roofline class: {bound})"
            out.append(Lesson(text, (name,) if name else (), {kind: -0.15}))
    return out
