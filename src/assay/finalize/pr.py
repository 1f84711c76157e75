"""The pull-request text of each group, and CHANGES.md for the whole run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config.spec import Target
from ..measure.compare import Measured
from ..model import Hypothesis
from ..records import Fingerprint
from .grouping import Group
from .review import ReviewResult

NOT_ALONE = "does not stand on its own"


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.2%}"


def interval(m: Measured | None) -> str:
    if m is None or m.lo is None or m.hi is None:
        return "-"
    return f"[{pct(m.lo)}, {pct(m.hi)}]"


@dataclass
class Outcome:
    """Everything finalize learned about one group."""

    group: Group
    branch: str
    tree: str  # merge-base + group
    alone: Measured | None = None
    without: Measured | None = None  # the final tree without this group, against the final
    review: ReviewResult = field(default_factory=ReviewResult)
    flags: list[str] = field(default_factory=list)
    commit: str = ""  # the branch's commit, once made

    @property
    def finalized(self) -> bool:
        return not self.review.blocked

    @property
    def status(self) -> str:
        if self.review.blocked:
            ids = ", ".join(f.id for f in self.review.blocking)
            return f"blocked by review ({ids})"
        if self.alone is None and self.without is None:
            return "not measured"  # `assay finalize --no-measure`
        return "; ".join(self.flags) if self.flags else "stands on its own"


def flags_for(alone: Measured | None, without: Measured | None) -> list[str]:
    """'does not stand on its own', with the reason, when either measurement sees nothing."""
    out: list[str] = []
    if alone is not None and not (alone.valid and alone.lo is not None and alone.lo > 0):
        why = (f"alone {pct(alone.effect)} {interval(alone)} includes zero" if alone.valid
               else f"alone it is {alone.state}: {alone.reason}")
        out.append(f"{NOT_ALONE}: {why}")
    if without is not None and not (without.valid and without.hi is not None
                                    and without.hi < 0):
        why = (f"leaving it out of the final tree changes it by {pct(without.effect)} "
               f"{interval(without)}, which includes zero" if without.valid
               else f"leaving it out is {without.state}: {without.reason}")
        out.append(f"{NOT_ALONE} in the final tree: {why}")
    return out


def _sources(group: Group, hypotheses: Mapping[int, Hypothesis]) -> list[str]:
    out: list[str] = []
    for c in group.changes:
        if c.hypothesis_id is not None and c.hypothesis_id in hypotheses:
            h = hypotheses[c.hypothesis_id]
            out.append(f"- research hypothesis H{h.id} ({h.source_kind}): {h.text}")
            out += [f"  - source: {s}" for s in h.sources]
        known = (hypotheses[c.hypothesis_id].sources
                 if c.hypothesis_id is not None and c.hypothesis_id in hypotheses else ())
        out += [f"- {c.label}: {s}" for s in c.sources if s not in known]
    return out


def text(o: Outcome, target: Target, run: str, base: str, fp: Fingerprint | None,
         hypotheses: Mapping[int, Hypothesis], checks_note: str, doubt: str = "") -> str:
    """The pull request's text; ``doubt``: the run's keeps are not reproduced (said first)."""
    g = o.group
    m = target.metric
    lines = [f"{g.title}", "", *([f"**Warning: {doubt}.**", ""] if doubt else []),
             f"{len(g.changes)} change(s) kept by assay run `{run}`, on top of {base[:12]}; "
             f"files: {', '.join(g.files)}.", ""]
    lines += ["## What changed and why", ""]
    for c in g.changes:
        lines.append(f"- {c.label} ({c.commit[:12]}): {c.hypothesis or '(no hypothesis)'}")
    if g.reason and len(g.changes) > 1:  # one change needs no reason to be alone
        lines += ["", f"Grouped because {g.reason}."]
    src = _sources(g, hypotheses)
    if src:
        lines += ["", "Sources from the research brief:", *src]
    if o.alone is None and o.without is None:
        lines += ["", "## Measured effect", "",
                  "Not measured: this branch was made without measuring it (`assay finalize "
                  "--no-measure`). The experiments below give each change's effect in the run, "
                  "against the incumbent of its time."]
        return _rest(o, lines, checks_note, fp)
    lines += ["", "## Measured effect", "",
              f"Metric `{m.name}` ({m.direction.value}{', ' + m.unit if m.unit else ''}); "
              "positive is better. Paired ABBA blocks, same decision rule as the run "
              f"(`{target.decision.rule}`, confidence {target.decision.confidence:g}).", "",
              "| comparison | effect | interval | pairs | runs | verdict |",
              "| --- | --- | --- | --- | --- | --- |"]
    for name, meas in (("merge-base + this change vs merge-base", o.alone),
                       ("final tree without this change vs final tree", o.without)):
        if meas is None:
            lines.append(f"| {name} | not measured | - | - | - | - |")
        else:
            lines.append(f"| {name} | {pct(meas.effect)} | {interval(meas)} | {meas.pairs} | "
                         f"{meas.runs} | {meas.state} |")
    lines += guard_table(o)
    lines += platform_table(o)
    lines += ["", *([f"**{f}**" for f in o.flags] or ["It stands on its own: its interval "
                                                     "excludes zero alone and in the final "
                                                     "tree."])]
    return _rest(o, lines, checks_note, fp)


def _rest(o: Outcome, lines: list[str], checks_note: str, fp: Fingerprint | None) -> str:
    """The pull request's text after its measured effect: checks, review, machine, runs."""
    g = o.group
    lines += ["", "## Checks and review", "", checks_note]
    rv = o.review
    if rv.reviewer == "none":
        lines.append("- review: no reviewer configured ([finalize.review] reviewer)")
    elif rv.skipped:
        lines.append(f"- review by `{rv.reviewer}`: skipped, not made: {rv.skipped}")
    else:
        lines.append(f"- review by `{rv.reviewer}`: {len(rv.findings)} finding(s), "
                     f"{len(rv.blocking)} blocking")
        for f in rv.findings:
            mark = " (waived)" if f.id in rv.waived else ""
            lines.append(f"  - {f.id} {f.severity}{mark} {f.where}: {f.message}")
    lines += ["", "## Measured on", ""]
    lines += [f"- {ln}" for ln in (fp.lines() if fp else ["(no fingerprint recorded)"])]
    lines += ["", "## Experiments", "", "| experiment | commit | effect in the run | interval |",
              "| --- | --- | --- | --- |"]
    for c in g.changes:
        iv = "-" if c.lo is None or c.hi is None else f"[{pct(c.lo)}, {pct(c.hi)}]"
        lines.append(f"| {c.label} | {c.commit[:12]} | {pct(c.effect)} | {iv} |")
    journals = [x.journal.rsplit("/", 1)[-1] for x in (o.alone, o.without) if x]
    lines += ["", f"Branch `{o.branch}`"
              + (f"; measurement journals: {', '.join(journals)}" if journals else ".")]
    return "\n".join(lines).rstrip() + "\n"


def guard_table(o: Outcome) -> list[str]:
    """With ``[[guards]]``: each guard's medians in both comparisons and the change."""
    rows = [(name, g) for name, meas in (("this change alone", o.alone),
                                         ("final tree without it", o.without))
            if meas is not None for g in meas.guards]
    if not rows:
        return []
    out = ["", "Guards (median of each side's runs in the same comparisons; positive is "
           "better):", "", "| guard | comparison | A (median) | B (median) | change | tolerance "
           "| |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, g in rows:
        unit = f" {g['unit']}" if g.get("unit") else ""

        def num(v: Any, unit: str = unit) -> str:
            return "-" if v is None else f"{v:.4g}{unit}"

        state = ("not measured on both sides" if g.get("better") is None
                 else "regressed" if g.get("regressed") else "holds")
        out.append(f"| {g['name']} | {name} | {num(g.get('incumbent'))} | "
                   f"{num(g.get('candidate'))} | {pct(g.get('better'))} | "
                   f"{float(g['tolerance']):.2%} | {state} |")
    return out


def platform_table(o: Outcome) -> list[str]:
    """With ``[[platforms]]``: each comparison's effect and interval on each platform."""
    rows = [(name, r) for name, meas in (("this change alone", o.alone),
                                         ("final tree without it", o.without))
            if meas is not None for r in meas.platforms]
    if not rows:
        return []
    out = ["", "Per platform (each measured against the same incumbent on its own machines):",
           "", "| platform | comparison | effect | interval | pairs | verdict |",
           "| --- | --- | --- | --- | --- | --- |"]
    order = list(dict.fromkeys(str(r.get("platform", "")) for _, r in rows))  # as declared
    for name, r in sorted(rows, key=lambda x: order.index(str(x[1].get("platform", "")))):
        lo, hi = r.get("lo"), r.get("hi")
        iv = "-" if lo is None or hi is None else f"[{pct(lo)}, {pct(hi)}]"
        out.append(f"| {r.get('platform', '?')} | {name} | {pct(r.get('effect'))} | {iv} | "
                   f"{r.get('pairs', 0)} | {r.get('state', '')} |")
    return out


def changes_md(outcomes: Sequence[Outcome], target: Target, run: str, base: str,
               notes: Sequence[str], fp: Fingerprint | None, doubt: str = "") -> str:
    lines = [f"# Changes from assay run `{run}`", "",
             *([f"**Warning: {doubt}.**", ""] if doubt else []),
             f"On top of {base[:12]}; metric `{target.metric.name}` "
             f"({target.metric.direction.value}), positive is better.", "",
             "| group | branch | experiments | files | alone | interval | without it | "
             "interval | status |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for o in outcomes:
        a, w = o.alone, o.without
        lines.append(f"| {o.group.slug} | {o.branch if o.finalized else '(none)'} | "
                     f"{', '.join(o.group.labels)} | {', '.join(o.group.files)} | "
                     f"{pct(a.effect if a else None)} | {interval(a)} | "
                     f"{pct(w.effect if w else None)} | {interval(w)} | {o.status} |")
    if notes:
        lines += ["", "Grouping:", *[f"- {n}" for n in notes]]
    lines += ["", "Measured on:", *[f"- {ln}" for ln in (fp.lines() if fp else ["unknown"])]]
    return "\n".join(lines) + "\n"
