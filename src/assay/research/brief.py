"""Hypotheses from the evidence, ranked, and the research brief (``.assay/research.md``).

Each hypothesis says what to try and why, cites where the idea comes from (``file:line``,
a paper URL, a profile line) and names its kind of source: ``backend`` or ``fork`` (a gap
another implementation shows), ``profile`` (a measured hot spot), ``paper`` or ``doc`` (a
passage that bears on a hot spot).

Scores are in [0, 1] and only order the list. What raises one:

* a fusion or kernel another implementation has and the target lacks, more when the target
  already has every part (the port is local), more when a part is a measured hot spot, and
  more when the benchmark is memory-bound (fusing saves a round trip through memory);
* a hot spot's share of the time;
* a passage's relevance to a hot spot (BM25), scaled by that hot spot's share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..config import glob_match
from .gaps import Gap, GapReport, normalize
from .index import Hit
from .profile import HotSpot, ProfileResult
from .remote import Paper, RepoHit
from .roofline import Placement, Roof, Workload, percent


@dataclass
class ResearchHypothesis:
    text: str
    sources: tuple[str, ...]
    source_kind: str  # paper, fork, backend, profile, doc
    score: float
    evidence: tuple[str, ...] = ()  # quoted lines backing it
    id: int | None = None  # the journal's id once stored


@dataclass
class Findings:
    """Everything the research found, handed to :func:`rank` and :func:`render`."""

    target: str
    metric: str
    profile: ProfileResult | None = None
    roof: Roof | None = None
    workload: Workload | None = None
    placement: Placement | None = None
    gaps: list[tuple[str, GapReport]] = field(default_factory=list)  # (source kind, report)
    hits: list[Hit] = field(default_factory=list)
    papers: list[Paper] = field(default_factory=list)
    repos: list[RepoHit] = field(default_factory=list)
    sources_read: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    editable: tuple[str, ...] = ()  # globs of what may change; () means anything

    def may_change(self, path: str) -> bool:
        return not self.editable or any(glob_match(path, g) for g in self.editable)


def _hot_ops(hot: Sequence[HotSpot]) -> dict[str, float]:
    """Each hot function's normalized name, with its share (``rms_norm`` → 0.4)."""
    out: dict[str, float] = {}
    for h in hot:
        key = "_".join(normalize(h.function))
        if key:
            out[key] = max(out.get(key, 0.0), h.share)
    return out


def _gap_hotness(key: str, hot_ops: dict[str, float]) -> float:
    """The largest share of a hot function whose name contains one of the gap's ops."""
    best = 0.0
    for op in key.split("+"):
        for name, share in hot_ops.items():
            if f"_{op}_" in f"_{name}_":
                best = max(best, share)
    return best


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _gap_hypotheses(ev: Findings, hot_ops: dict[str, float], memory_bound: bool,
                    limit: int) -> list[ResearchHypothesis]:
    """One hypothesis per missing fusion or kernel, however many implementations show it."""
    groups: dict[tuple[str, str], list[tuple[str, GapReport, Gap]]] = {}
    for kind, report in ev.gaps:
        for gap in report.only_a:
            if gap.kind == "op":
                continue  # an op the target never names is a feature, not a speed-up
            groups.setdefault((gap.kind, gap.key), []).append((kind, report, gap))
    out: list[ResearchHypothesis] = []
    for (gkind, key), members in groups.items():
        kinds = {m[0] for m in members}
        src_kind = "backend" if "backend" in kinds else sorted(kinds)[0]
        mine = members[0][1].b.label
        first = members[0][2]
        havers = [f"{rep.a.label} ({g.evidence[0].cite})" for _k, rep, g in members[:4]]
        cites = [g.evidence[0].cite for _k, _r, g in members[:4]]
        hotness = _gap_hotness(key, hot_ops)
        consensus = min(0.18, 0.06 * (len(members) - 1))
        if gkind == "fusion":
            parts = " → ".join(p.upper() for p in key.split("+"))
            local = bool(first.parts_present)
            score = 0.5 + (0.15 if local else 0.0) + 0.2 * min(1.0, hotness * 2) \
                + (0.08 if memory_bound else 0.0) + consensus \
                - 0.03 * max(0, key.count("+") - 1)
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
            cites += [e.cite for e in first.parts_present[:2]]
        else:
            score = 0.3 + 0.3 * min(1.0, hotness * 2) + consensus
            text = f"Port '{key}' from {_and(havers)}: {mine} has no counterpart."
        if hotness >= 0.01:
            text += f" A hot function of {mine} does this op ({hotness:.0%} of samples)."
        out.append(ResearchHypothesis(text, tuple(dict.fromkeys(cites)), src_kind,
                                      round(min(score, 1.0), 3),
                                      tuple(e.text for e in first.evidence[:1])))
    out.sort(key=lambda h: -h.score)
    return out[:limit]


def rank(ev: Findings, top: int = 12) -> list[ResearchHypothesis]:
    out: list[ResearchHypothesis] = []
    hot = ev.profile.hotspots if ev.profile else []
    hot_ops = _hot_ops(hot)
    memory_bound = ev.placement is not None and ev.placement.bound == "memory-bound"
    out.extend(_gap_hypotheses(ev, hot_ops, memory_bound, limit=max(top, 6)))

    if ev.profile and ev.profile.hotspots:
        mine = [h for h in ev.profile.hotspots if h.in_target and ev.may_change(h.file)]
        for h in mine[:3]:
            if h.share < 0.05:
                continue
            roof_txt = ""
            if ev.placement is not None and ev.placement.bound != "unknown":
                roof_txt = (f" Whole-benchmark estimate: {ev.placement.bound}"
                            + (f" at {percent(ev.placement.fraction)} of the roof"
                               if ev.placement.fraction is not None else "") + ".")
                advice = ("cut bytes moved (fuse passes, lower precision, avoid copies)"
                          if ev.placement.bound == "memory-bound" else
                          "cut arithmetic or use wider SIMD / tensor units")
            else:
                why = ("no flops/bytes per unit or model declared in [research]"
                       if ev.workload is None or ev.workload.intensity is None
                       else "the device's peaks are unknown")
                roof_txt = f" Compute- or memory-bound: unknown ({why})."
                advice = "cut its work (fewer passes, vectorize, hoist invariants)"
            text = (f"Speed up {h.function} ({h.where}): it takes {h.share:.0%} of the "
                    f"profiled time ({ev.profile.profiler}); {advice}.{roof_txt}")
            out.append(ResearchHypothesis(
                text, (f"profile:{h.file}::{h.function}",), "profile",
                round(0.2 + 0.6 * h.share, 3)))

    seen: set[str] = set()
    for hit in ev.hits:
        p = hit.passage
        if p.citation in seen or p.kind not in ("paper", "doc"):
            continue
        seen.add(p.citation)
        heat = _gap_hotness("_".join(hit.query.split()), hot_ops)
        title = p.title or p.path
        snippet = " ".join(p.text.split())[:200]
        text = (f"Apply what {title} says about '{hit.query}' ({p.citation}): "
                f"\"{snippet}\"")
        score = 0.15 + 0.25 * min(1.0, hit.score / 10.0) + 0.3 * heat
        out.append(ResearchHypothesis(text, (p.citation,), p.kind, round(min(score, 0.8), 3),
                                      (snippet,)))

    out.sort(key=lambda h: -h.score)
    dedup: dict[str, ResearchHypothesis] = {}
    for hyp in out:
        dedup.setdefault(hyp.text, hyp)
    ranked = list(dedup.values())
    chosen = ranked[:top]
    # keep each kind of evidence represented: the best of a kind left out replaces the
    # weakest of the most common kind
    for kind in ("profile", "paper", "doc", "fork", "backend"):
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
    chosen.sort(key=lambda h: -h.score)
    return chosen


def _short(name: str, limit: int = 80) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def render(ev: Findings, hyps: Sequence[ResearchHypothesis]) -> str:
    """The research brief as Markdown."""
    w: list[str] = [f"# Research brief: {ev.target}", ""]
    w.append(f"Metric: `{ev.metric}`. Sources read: "
             + (", ".join(ev.sources_read) if ev.sources_read else "none") + ".")
    w.append("")
    w.append("## Hypotheses, ranked")
    w.append("")
    if not hyps:
        w.append("No hypotheses: no gaps, hot spots or relevant passages were found.")
    for n, hyp in enumerate(hyps, 1):
        ident = f" (hypothesis #{hyp.id})" if hyp.id is not None else ""
        w.append(f"{n}. **[{hyp.source_kind}, score {hyp.score:.2f}]**{ident} {hyp.text}")
        w.append(f"   Sources: {', '.join(f'`{s}`' for s in hyp.sources)}")
        for e in hyp.evidence[:1]:
            w.append(f"   > `{e[:160]}`")
    w.append("")

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
        if prof is not None and prof.hotspots:
            w.append("")
            w.append("| hot spot | share | bound | distance from roof |")
            w.append("|---|---:|---|---|")
            for h in prof.hotspots[:5]:
                w.append(f"| `{_short(h.function)}` | {h.share:.0%} | {ev.placement.bound} "
                         "(whole-benchmark estimate) | "
                         + (f"{percent(ev.placement.fraction)} of roof |"
                            if ev.placement.fraction is not None else "unknown |"))
    w.append("")

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
    return "\n".join(w)
