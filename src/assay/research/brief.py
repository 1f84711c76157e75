"""Hypotheses from the evidence, ranked by what the benchmark spends, and the research
brief (``.assay/research.md``).

Each hypothesis says what to try and why, cites where the idea comes from (``file:line``,
a paper URL, a profile line) and names its kind of source: ``backend`` or ``fork`` (a gap
another implementation shows), ``diff`` (how a fork changed a hot function), ``profile``
(a measured hot spot), ``paper`` or ``doc`` (a passage that bears on a hot spot).

Ranking. Every hypothesis carries ``share``: the fraction of the profiled time spent in
the hot functions it could touch (a function touches a hypothesis when, after the
kernel/op normalization of :mod:`.gaps`, it computes one of the hypothesis's ops). Its
*prior* says how good the evidence is (a fusion three backends ship and whose parts the
target already runs beats a kernel one fork names). With a profile, a hypothesis on the
hot path (share of 1% or more) always ranks above one off it, and among each group the
share and the prior weigh equally; without one, the prior alone orders the list. Lessons
of earlier waves (:mod:`.waves`) move priors by the kind of change they showed to work
or not. Scores are in [0, 1] and only order the list; ``why`` says what made each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..config.spec import glob_match
from .diffs import FunctionDiff
from .gaps import Gap, GapReport, normalize
from .index import Hit
from .profile import HotSpot, ProfileResult
from .remote import Paper, RepoHit
from .roofline import Placement, Roof, Workload, op_bound
from .waves import Lesson, adjustment, classify

HOT = 0.01  # a share from which a hypothesis is on the hot path


@dataclass
class ResearchHypothesis:
    text: str
    sources: tuple[str, ...]
    source_kind: str  # paper, fork, backend, diff, profile, doc
    score: float
    evidence: tuple[str, ...] = ()  # quoted lines backing it
    id: int | None = None  # the journal's id once stored
    key: str = ""  # the idea: kind, ops, cited files (what makes two runs' ideas one)
    share: float = 0.0  # of the profiled time, what it could touch
    prior: float = 0.0  # the strength of its evidence, before the share
    reasons: str = ""  # what its evidence is (the part of ``why`` before the share)
    why: str = ""  # why it ranks where it does
    category: str = ""  # memory (cuts bytes moved), compute (cuts work), or ''
    ops: tuple[str, ...] = ()


@dataclass
class Findings:
    """Everything the research found, handed to :func:`rank` and :func:`render`."""

    target: str
    metric: str
    profile: ProfileResult | None = None
    roof: Roof | None = None
    workload: Workload | None = None
    placement: Placement | None = None
    # (guard metric, its placement) for the guards with a batch in [research] batches
    guard_placements: list[tuple[str, Placement]] = field(default_factory=list)
    gaps: list[tuple[str, GapReport]] = field(default_factory=list)  # (source kind, report)
    hits: list[Hit] = field(default_factory=list)
    papers: list[Paper] = field(default_factory=list)
    repos: list[RepoHit] = field(default_factory=list)
    sources_read: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    editable: tuple[str, ...] = ()  # globs of what may change; () means anything
    diffs: list[FunctionDiff] = field(default_factory=list)
    lessons: list[Lesson] = field(default_factory=list)

    def may_change(self, path: str) -> bool:
        return not self.editable or any(glob_match(path, g) for g in self.editable)

    def vocabulary(self) -> set[str]:
        """Every op name the compared implementations know."""
        out: set[str] = set()
        for _kind, rep in self.gaps:
            out |= rep.a.keys("op") | rep.b.keys("op")
        return out


def canon(op: str) -> str:
    """An op's spelling-free form: ``soft_max``, ``softmax`` and ``SoftMax`` agree."""
    return op.replace("_", "").lower()


@dataclass(frozen=True)
class HotFunction:
    spot: HotSpot
    ops: tuple[str, ...]  # the ops it computes, normalized


def ops_of(function: str, vocab: set[str]) -> tuple[str, ...]:
    """The known ops a function's name computes: the longest matches, left to right."""
    words = normalize(function.split("(", 1)[0].rsplit("::", 1)[-1])
    if not words:
        return ()
    joined = [canon(w) for w in words]
    by_canon = {canon(v): v for v in vocab}
    found: list[tuple[int, int, str]] = []
    for i in range(len(joined)):
        for j in range(len(joined), i, -1):
            name = "".join(joined[i:j])
            if name in by_canon:
                found.append((i, j, by_canon[name]))
                break
    found.sort(key=lambda t: (t[0] - t[1], t[0]))
    taken: set[int] = set()
    out: list[tuple[int, str]] = []
    for i, j, op in found:
        if taken & set(range(i, j)):
            continue
        taken |= set(range(i, j))
        out.append((i, op))
    if not out and not vocab:
        return ("_".join(words),)
    return tuple(op for _i, op in sorted(out))


def hot_path(ev: Findings) -> list[HotFunction]:
    hot = ev.profile.hotspots if ev.profile else []
    vocab = ev.vocabulary()
    return [HotFunction(h, ops_of(h.function, vocab)) for h in hot]


def touched(ops: Sequence[str], path: Sequence[HotFunction]) -> list[HotFunction]:
    want = {canon(o) for o in ops}
    return [f for f in path if want & {canon(o) for o in f.ops}]


def _share(funcs: Sequence[HotFunction]) -> float:
    return min(1.0, sum(f.spot.share for f in funcs))


def _spent(funcs: Sequence[HotFunction]) -> str:
    return ", ".join(f"{f.spot.function} {f.spot.share:.0%}" for f in funcs[:3])


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _bound_text(ev: Findings, ops: Sequence[str]) -> tuple[str, str]:
    """(bound, the numbers) for a hot spot's ops: per-op estimate, else the benchmark's."""
    for op in ops:
        got = op_bound(op, ev.roof, ev.workload)
        if got is not None:
            return got
    if ev.placement is not None and ev.placement.bound != "unknown":
        return ev.placement.bound, f"whole-benchmark estimate: {ev.placement.explanation}"
    return "unknown", ""


def hot_path_rows(ev: Findings) -> list[dict[str, object]]:
    """The hot ops with their shares and roofline class (kept for the next wave)."""
    rows: dict[str, dict[str, object]] = {}
    for f in hot_path(ev):
        for op in f.ops[:1]:
            row = rows.setdefault(op, {"op": op, "share": 0.0, "functions": []})
            row["share"] = float(str(row["share"])) + f.spot.share
            funcs = row["functions"]
            if isinstance(funcs, list):
                funcs.append(f.spot.function)
    for op, row in rows.items():
        row["bound"], row["numbers"] = _bound_text(ev, (op,))
    return sorted(rows.values(), key=lambda r: -float(str(r["share"])))


def _gap_hypotheses(ev: Findings, path: Sequence[HotFunction], memory_bound: bool,
                    limit: int) -> list[ResearchHypothesis]:
    """One hypothesis per missing fusion or kernel, however many implementations show it."""
    groups: dict[tuple[str, str], list[tuple[str, GapReport, Gap]]] = {}
    generic = _generic_steps(ev)
    for kind, report in ev.gaps:
        for gap in report.only_a:
            if gap.kind == "op":
                continue  # an op the target never names is a feature, not a speed-up
            key = "+".join(generic.get(p, p) for p in gap.key.split("+")) \
                if gap.kind == "fusion" else gap.key
            groups.setdefault((gap.kind, key), []).append((kind, report, gap))
    out: list[ResearchHypothesis] = []
    for (gkind, key), members in groups.items():
        kinds = {m[0] for m in members}
        src_kind = "backend" if "backend" in kinds else sorted(kinds)[0]
        mine = members[0][1].b.label
        first = members[0][2]
        havers = [f"{rep.a.label} ({g.evidence[0].cite})" for _k, rep, g in members[:4]]
        cites = [g.evidence[0].cite for _k, _r, g in members[:4]]
        ops = tuple(dict.fromkeys(p for _k, _r, g in members for p in g.key.split("+"))) \
            if gkind == "fusion" else (key,)
        funcs = touched(ops, path)
        hotness = _share(funcs)
        absent: list[str] = []
        if gkind == "fusion" and funcs:
            # a fused kernel replaces the sequence only where the sequence runs: parts the
            # profile never shows scale down what it could touch
            steps = [p for p in key.split("+") if p not in ("unary", "glu")] or [key]
            absent = [p for p in dict.fromkeys(steps) if not touched((p,), path)]
            hotness *= 1 - len(absent) / len(set(steps))
        consensus = min(0.18, 0.06 * (len(members) - 1))
        why = [f"{len(members)} implementation{'s ship' if len(members) > 1 else ' ships'} "
               "it"]
        if gkind == "fusion":
            parts = " → ".join(_step(p, members, generic) for p in key.split("+"))
            local = bool(first.parts_present)
            prior = 0.5 + (0.15 if local else 0.0) + (0.1 if memory_bound else 0.0) \
                + consensus - 0.03 * max(0, len(ops) - 2)
            text = (f"Fuse {parts} in {mine}: {_and(havers)} "
                    f"{'runs' if len(havers) == 1 else 'run'} them as one kernel; {mine} "
                    + ("runs them one after another" if local else "lacks some of them")
                    + ".")
            if first.extends:
                text += (f" It extends the {first.extends.replace('+', ' + ').upper()} "
                         f"fusion {mine} already has.")
            if memory_bound:
                text += (" Fusing saves a write and a read of the intermediate tensor,"
                         " and the benchmark is memory-bound.")
            if local:
                why.append(f"{mine} already runs every part")
            cites += [e.cite for e in first.parts_present[:2]]
            category = "memory"
        else:
            prior = 0.3 + consensus
            text = f"Port '{key}' from {_and(havers)}: {mine} has no counterpart."
            category = ""
        if funcs:
            text += (f" A hot function of {mine} does this op "
                     f"({_share(funcs):.0%} of samples).")
        if absent:
            why.append(f"its other ops ({', '.join(absent)}) do not appear in the profile")
        files = sorted({c.rsplit(":", 1)[0] for c in cites})
        out.append(ResearchHypothesis(
            text, tuple(dict.fromkeys(cites)), src_kind, 0.0,
            tuple(e.text for e in first.evidence[:1]), key=f"{gkind}:{key}",
            share=hotness, prior=prior, reasons="; ".join(why), category=category, ops=ops))
        out[-1].key += "@" + ",".join(files)
    return out


def _generic_steps(ev: Findings) -> dict[str, str]:
    """Kinds of a generic op (``silu`` -> ``unary``, ``swiglu`` -> ``glu``), so a fusion
    one backend spells ``UNARY + MUL`` and another ``SILU + MUL`` is one hypothesis."""
    out: dict[str, str] = {}
    for _kind, rep in ev.gaps:
        for side in (rep.a, rep.b):
            for op, prefixes in side.op_prefixes.items():
                for generic, infix in (("unary", "UNARY_OP_"), ("glu", "GLU_OP_")):
                    if any(infix in p for p in prefixes):
                        out[op] = generic
    return out


def _step(part: str, members: Sequence[tuple[str, GapReport, Gap]],
          generic: dict[str, str]) -> str:
    """A fusion step as shown: a generic step names the kinds the backends fuse."""
    if part not in ("unary", "glu"):
        return part.upper()
    kinds = sorted({p for _k, _r, g in members for p in g.key.split("+")
                    if generic.get(p) == part})
    return part.upper() + (f" ({'/'.join(k.upper() for k in kinds)})" if kinds else "")


def _profile_hypotheses(ev: Findings, path: Sequence[HotFunction]
                        ) -> list[ResearchHypothesis]:
    """One per hot op (its functions together), or per hot function the vocabulary lacks."""
    prof = ev.profile
    if prof is None:
        return []
    groups: dict[str, list[HotFunction]] = {}
    for f in path:
        h = f.spot
        if not (h.in_target and ev.may_change(h.file)):
            continue
        groups.setdefault(f.ops[0] if f.ops else f"fn:{h.function}", []).append(f)
    out: list[ResearchHypothesis] = []
    for name, funcs in groups.items():
        share = _share(funcs)
        if share < 0.05:
            continue
        ops = () if name.startswith("fn:") else (name,)
        bound, numbers = _bound_text(ev, ops)
        if bound == "memory-bound":
            advice, category = ("cut bytes moved (fuse passes, lower precision, avoid "
                                "copies)", "memory")
        elif bound == "compute-bound":
            advice, category = "cut arithmetic or use wider SIMD / tensor units", "compute"
        else:
            advice, category = "cut its work (fewer passes, vectorize, hoist invariants)", ""
        lead = funcs[0].spot
        what = name.upper() if ops else lead.function
        text = (f"Speed up {what}: {_and([f'{f.spot.function} ({f.spot.where}) {f.spot.share:.0%}' for f in funcs[:3]])}"  # noqa: E501
                f" of the profiled time ({prof.profiler}); {advice}.")
        text += (f" It is {bound}: {numbers}." if numbers else
                 " Compute- or memory-bound: unknown (no flops/bytes per unit declared "
                 "and no per-op estimate).")
        sources = tuple(f"profile:{f.spot.file}::{f.spot.function}" for f in funcs[:3])
        out.append(ResearchHypothesis(
            text, sources, "profile", 0.0, key=f"profile:{name}@{lead.file}", share=share,
            prior=0.7 if bound != "unknown" else 0.6,
            reasons=f"the measured hot spot; {bound}" if bound != "unknown"
            else "the measured hot spot", category=category, ops=ops))
    return out


def _diff_hypotheses(ev: Findings, path: Sequence[HotFunction]) -> list[ResearchHypothesis]:
    out: list[ResearchHypothesis] = []
    vocab = ev.vocabulary()
    for d in ev.diffs:
        if not d.changed:
            continue
        ops = ops_of(d.function, vocab)
        funcs = [f for f in path if f.spot.function == d.function] or touched(ops, path)
        share = _share(funcs) or d.share
        summary = "; ".join(d.summary) or f"{d.added} lines added, {d.removed} removed"
        text = (f"Port {d.other}'s version of {d.function} ({d.theirs}, vs {d.mine}): "
                f"{summary}.")
        if share >= HOT:
            text += f" {d.function} takes {share:.0%} of the profiled time."
        category = classify(" ".join(d.summary))
        out.append(ResearchHypothesis(
            text, (d.theirs, d.mine), "diff", 0.0, (d.first_change,),
            key=f"diff:{d.function}@{d.theirs.rsplit(':', 1)[0]}", share=share,
            prior=0.6 + 0.1 * min(1.0, d.similarity),
            reasons=f"{d.other} changed this hot function ({d.added}+/{d.removed}- lines)",
            category=category, ops=ops))
    return out


def _passage_hypotheses(ev: Findings, path: Sequence[HotFunction]
                        ) -> list[ResearchHypothesis]:
    out: list[ResearchHypothesis] = []
    seen: set[str] = set()
    vocab = ev.vocabulary()
    for hit in ev.hits:
        p = hit.passage
        if p.citation in seen or p.kind not in ("paper", "doc"):
            continue
        seen.add(p.citation)
        ops = ops_of("_".join(hit.query.split()), vocab) if vocab else \
            tuple("_".join(hit.query.split()).split("_"))
        funcs = touched(ops, path)
        title = p.title or p.path
        snippet = " ".join(p.text.split())[:200]
        text = (f"Apply what {title} says about '{hit.query}' ({p.citation}): "
                f"\"{snippet}\"")
        prior = 0.15 + 0.25 * min(1.0, hit.score / 10.0)
        out.append(ResearchHypothesis(
            text, (p.citation,), p.kind, 0.0, (snippet,), key=f"{p.kind}:{p.citation}",
            share=_share(funcs), prior=prior,
            reasons=f"BM25 {hit.score:.1f} for '{hit.query}'",
            category=classify(p.text), ops=ops))
    return out


def _score(h: ResearchHypothesis, profiled: bool) -> float:
    prior = max(0.0, min(1.0, h.prior))
    if not profiled:
        return round(prior, 3)
    if h.share >= HOT:
        return round(0.5 + 0.25 * prior + 0.25 * min(1.0, 2 * h.share), 3)
    return round(0.45 * prior, 3)


def score_all(hyps: Sequence[ResearchHypothesis], lessons: Sequence[Lesson],
              profiled: bool) -> None:
    """Set each hypothesis's score and why from its prior, share and the lessons."""
    for h in hyps:
        moved, said = adjustment(h.category, h.ops, lessons)
        h.prior += moved
        h.score = _score(h, profiled)
        h.prior -= moved
        parts = [h.reasons] if h.reasons else []
        if profiled:
            parts.insert(0, f"touches {h.share:.0%} of the profiled time" if h.share >= HOT
                         else "its ops never appear in the profile")
        else:
            parts.insert(0, "no profile: ranked by its evidence alone")
        parts += said
        h.why = "; ".join(p for p in parts if p)


def rank(ev: Findings, top: int = 12) -> list[ResearchHypothesis]:
    path = hot_path(ev)
    profiled = bool(path)
    memory_bound = ev.placement is not None and ev.placement.bound == "memory-bound"
    out = _gap_hypotheses(ev, path, memory_bound, limit=max(top, 6))
    out += _profile_hypotheses(ev, path)
    out += _diff_hypotheses(ev, path)
    out += _passage_hypotheses(ev, path)
    score_all(out, ev.lessons, profiled)
    return choose(out, top)


def choose(hyps: Sequence[ResearchHypothesis], top: int) -> list[ResearchHypothesis]:
    """The best ``top``, one per text, keeping each kind of evidence represented."""
    ranked_all = sorted(hyps, key=lambda h: (-h.score, h.key))
    dedup: dict[str, ResearchHypothesis] = {}
    for hyp in ranked_all:
        dedup.setdefault(hyp.text, hyp)
    ranked = list(dedup.values())
    chosen = ranked[:top]
    # the best of a kind left out replaces the weakest of the most common kind
    for kind in ("profile", "diff", "paper", "doc", "fork", "backend"):
        best = next((r for r in ranked if r.source_kind == kind), None)
        if best is None or best in chosen or len(chosen) < 2:
            continue
        counts: dict[str, int] = {}
        for c in chosen:
            counts[c.source_kind] = counts.get(c.source_kind, 0) + 1
        crowded = max(counts, key=lambda k: counts[k])
        if counts[crowded] < 2:
            continue
        weakest = max(i for i, c in enumerate(chosen) if c.source_kind == crowded)
        chosen[weakest] = best
    chosen.sort(key=lambda h: (-h.score, h.key))
    return chosen


def render_lessons(lessons: Sequence[Lesson]) -> list[str]:
    """The brief's section on what finished waves showed ([] before any wave)."""
    if not lessons:
        return []
    w = ["## What the waves showed", ""]
    for lesson in lessons:
        w.append(f"- {lesson.text}")
    w.append("")
    return w


def render_hypotheses(hyps: Sequence[ResearchHypothesis]) -> list[str]:
    """The ranked table and each hypothesis with its reasons, as Markdown lines."""
    w = ["## Hypotheses, ranked", ""]
    if not hyps:
        w += ["No hypotheses: no gaps, hot spots or relevant passages were found.", ""]
        return w
    w.append("| rank | id | kind | score | share | hypothesis |")
    w.append("|---:|---:|---|---:|---:|---|")
    for n, hyp in enumerate(hyps, 1):
        ident = f"H{hyp.id}" if hyp.id is not None else "-"
        w.append(f"| {n} | {ident} | {hyp.source_kind} | {hyp.score:.2f} | "
                 f"{hyp.share:.0%} | {_short(hyp.text, 90).replace('|', '/')} |")
    w.append("")
    for n, hyp in enumerate(hyps, 1):
        ident = f" (hypothesis #{hyp.id})" if hyp.id is not None else ""
        w.append(f"{n}. **[{hyp.source_kind}, score {hyp.score:.2f}]**{ident} {hyp.text}")
        if hyp.why:
            w.append(f"   Why here: {hyp.why}.")
        w.append(f"   Sources: {', '.join(f'`{s}`' for s in hyp.sources)}")
        for e in hyp.evidence[:1]:
            w.append(f"   > `{e[:160]}`")
    w.append("")
    return w


def _short(name: str, limit: int = 80) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def render(ev: Findings, hyps: Sequence[ResearchHypothesis]) -> str:
    """The research brief as Markdown."""
    w: list[str] = [f"# Research brief: {ev.target}", ""]
    w.append(f"Metric: `{ev.metric}`. Sources read: "
             + (", ".join(ev.sources_read) if ev.sources_read else "none") + ".")
    w.append("")
    w.extend(render_lessons(ev.lessons))
    w.extend(render_hypotheses(hyps))
    for part in (_profile_section, _roofline_section, _diffs_section, _gaps_section,
                 _passages_section):
        w.extend(part(ev))
    return "\n".join(w)


def _profile_section(ev: Findings) -> list[str]:
    """The profiler, its notes and the hot functions."""
    w: list[str] = []
    w.append("## Profile")
    w.append("")
    prof = ev.profile
    if prof is None:
        w.append("Not profiled (disabled).")
    else:
        count = f"{prof.samples} samples, " if prof.samples else ""
        w.append(f"Profiler: **{prof.profiler}** on `{prof.command}` "
                 f"({count}{prof.wall_s:.1f}s, exit {prof.exit_code}).")
        for note in prof.notes:
            w.append(f"- {note}")
        if prof.hotspots:
            w.append("")
            w.append("| function | where | share | self | total |")
            w.append("|---|---|---:|---:|---:|")
            for h in prof.hotspots:
                w.append(f"| `{_short(h.function)}` | `{h.where}` | {h.share:.1%} | "
                         f"{h.self_share:.1%} | {h.total_share:.1%} |")
        if prof.operators:
            w.append("")
            w.append("torch operators (torch.profiler):")
            for h in prof.operators:
                w.append(f"- `{h.function}`: {h.share:.1%}")
    w.append("")

    return w


def _roofline_section(ev: Findings) -> list[str]:
    """The roof, the work, and each hot spot's bound with the numbers."""
    w: list[str] = []
    w.append("## Roofline")
    w.append("")
    if ev.roof is not None:
        r = ev.roof
        peak = f"{r.peak_flops / 1e9:.4g} GFLOP/s" if r.peak_flops else "unknown"
        bw = f"{r.bandwidth / 1e9:.4g} GB/s" if r.bandwidth else "unknown"
        w.append(f"Device: {r.device}; peak {peak} ({r.precision}), bandwidth {bw} "
                 f"({r.basis}).")
    if ev.workload is not None:
        w.append(f"Work per unit of the metric: {ev.workload.basis}.")
    if ev.placement is not None:
        w.append(f"Placement: **{ev.placement.bound}** — {ev.placement.explanation}.")
    for name, pl in ev.guard_placements:
        w.append(f"Placement of the guard {name}: **{pl.bound}** — {pl.explanation}.")
    path = hot_path(ev)
    if path:
        w.append("")
        w.append("| hot spot | share | ops | bound | the numbers |")
        w.append("|---|---:|---|---|---|")
        for f in path[:8]:
            bound, numbers = _bound_text(ev, f.ops)
            w.append(f"| `{_short(f.spot.function)}` | {f.spot.share:.0%} | "
                     f"{', '.join(f.ops) or '-'} | {bound} | {numbers or '-'} |")
    w.append("")

    return w


def _diffs_section(ev: Findings) -> list[str]:
    """Each hot function against another version of it."""
    w: list[str] = []
    if ev.diffs:
        w.append("## Hot functions in other implementations")
        w.append("")
        for d in ev.diffs:
            w.append(f"### `{d.function}`: {d.other} `{d.theirs}` vs `{d.mine}`")
            w.append("")
            w.append(f"Matched by {d.matched_by} (similarity {d.similarity:.2f}); "
                     f"{d.added} lines added, {d.removed} removed"
                     + (f": {'; '.join(d.summary)}." if d.summary else ".")
                     + ("" if d.substantive else " Only spelling differs (comments, "
                        "`struct`, macro names): no hypothesis."))
            if d.changed:
                w.append("")
                w.append("```diff")
                w.extend(d.diff.splitlines()[:60])
                if len(d.diff.splitlines()) > 60:
                    w.append(f"... ({len(d.diff.splitlines()) - 60} more lines)")
                w.append("```")
            w.append("")

    return w


def _gaps_section(ev: Findings) -> list[str]:
    """What each other implementation has and the target lacks."""
    w: list[str] = []
    w.append("## Gaps between implementations")
    w.append("")
    if not ev.gaps:
        w.append("No other implementation to compare (add `backends` or `repos` to "
                 "[research], or pass --source DIR).")
        w.append("")
    for kind, rep in ev.gaps:
        w.append(f"### {rep.a.label} ({kind}) vs {rep.b.label}")
        w.append("")
        w.append(f"{rep.a.files} vs {rep.b.files} files; in common: "
                 + ", ".join(f"{n} {k}s" for k, n in rep.common.items()) + ".")
        w.append("")
        for title, gaps in ((f"In {rep.a.label}, not in {rep.b.label}", rep.only_a),
                            (f"In {rep.b.label}, not in {rep.a.label}", rep.only_b)):
            w.append(f"{title}:")
            if not gaps:
                w.append("- nothing")
            for g in gaps[:25]:
                cites = ", ".join(f"`{e.cite}`" for e in g.evidence[:2])
                w.append(f"- {g.description}: {cites}" + (f" — {g.note}" if g.note else ""))
            if len(gaps) > 25:
                w.append(f"- … and {len(gaps) - 25} more")
            w.append("")

    return w


def _passages_section(ev: Findings) -> list[str]:
    """Passages found, remote finds and notes."""
    w: list[str] = []
    w.append("## Relevant passages")
    w.append("")
    if not ev.hits:
        w.append("None found.")
    shown: set[str] = set()
    for hit in ev.hits[:20]:
        if hit.passage.citation in shown:
            continue
        shown.add(hit.passage.citation)
        snippet = " ".join(hit.passage.text.split())[:220]
        w.append(f"- `{hit.passage.citation}` ({hit.passage.kind}, for '{hit.query}', "
                 f"BM25 {hit.score:.2f}): {snippet}")
    w.append("")

    if ev.papers or ev.repos:
        w.append("## Found remotely")
        w.append("")
        for p in ev.papers:
            w.append(f"- paper: [{p.title}]({p.url}) {p.published[:10]}")
        for r2 in ev.repos:
            w.append(f"- repository: [{r2.full_name}]({r2.url}) ★{r2.stars} — "
                     f"{r2.description[:120]}")
        w.append("")

    if ev.notes:
        w.append("## Notes")
        w.append("")
        for note in ev.notes:
            w.append(f"- {note}")
        w.append("")
    return w
