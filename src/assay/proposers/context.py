"""The text every LLM or agent proposal reads, bounded by a token budget.

:func:`build_context` renders a :class:`~assay.proposers.base.ProposalContext` as Markdown,
in this order:

1. **Task**: the metric (name, direction, unit), the editable scope, the protected paths.
2. **Brief**: the target's task brief (``[target] brief``, a program.md-style file).
3. **Measurement**: the noise floor and δ, so the proposer does not chase effects smaller
   than the benchmark can see.
4. **Journal**: counts per state, the incumbent, then one line per experiment (kept ones
   first, then the others newest first): hypothesis, effect with its interval, the reason
   for the verdict, the diffstat. Never logs.
5. **Research brief** and **open hypotheses**, when present.
6. **Editable files** at the incumbent, in full where they fit (left out for agents,
   which read the files themselves).

Size. Tokens are estimated as ``ceil(characters / 4)``: about right for English and code
with the usual BPE tokenizers, and cheap. When the text is over ``budget_tokens``, it is cut
in this order, each step only as far as needed:

1. the oldest journal lines that are not kept experiments (replaced by one line counting
   them), then the oldest kept ones;
2. the lowest-scored open hypotheses;
3. the research brief, keeping its beginning;
4. the editable files: every file is cut to a common cap (small files stay whole, the
   largest lose most), keeping each file's beginning and saying how many lines are not
   shown; a file left with under 400 characters is listed by path and size only;
5. the task brief, keeping its beginning.

The task, measurement and wave-note sections are never cut. What was cut is listed in
:attr:`BuiltContext.truncated` (and said in the text, so the model knows it is not seeing
everything).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..config.spec import Target
from ..errors import ProposerError
from ..model import Hypothesis
from ..repo.git import git
from ..repo.holdout import holdout_files
from .base import ExperimentSummary, ProposalContext

CHARS_PER_TOKEN = 4
MIN_FILE_CHARS = 400
MAX_LINE_CHARS = 240


def estimate_tokens(text: str) -> int:
    """Tokens, estimated as ceil(characters / 4)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class BuiltContext:
    text: str
    tokens: int  # estimate_tokens(text)
    truncated: tuple[str, ...] = ()  # what was cut to fit, in words


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x * 100:+.2f}%"


def _one_line(text: str, limit: int = MAX_LINE_CHARS) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3].rstrip() + "..."


def summary_line(e: ExperimentSummary) -> str:
    """One journal line: what was tried, what it did, why it was decided so."""
    parts = [f"- {e.id} [{e.state}] {_one_line(e.hypothesis or '(no hypothesis)', 160)}"]
    if e.effect is not None and _pct(e.effect) not in e.reason:  # else the reason says it
        interval = f" [{_pct(e.lo)}, {_pct(e.hi)}]" if e.lo is not None or e.hi is not None else ""
        parts.append(f"effect {_pct(e.effect)}{interval}")
    if e.params:
        parts.append("params " + ", ".join(f"{k}={v}" for k, v in sorted(e.params.items())))
    if e.reason:
        parts.append(f"why: {_one_line(e.reason, 200)}")
    if e.diffstat:
        parts.append(f"changed: {_one_line(e.diffstat, 120)}")
    return "; ".join(parts)


def _ordered_history(history: Sequence[ExperimentSummary]) -> list[ExperimentSummary]:
    """Priority order, most important first: kept (newest first), then the rest newest first."""
    items = list(history)
    kept = [e for e in reversed(items) if e.state == "kept"]
    rest = [e for e in reversed(items) if e.state != "kept"]
    return kept + rest


def incumbent_files(target: Target, commit: str, max_files: int = 200,
                    max_bytes: int = 1_000_000) -> dict[str, str]:
    """Editable, unprotected text files of ``commit`` (for contexts that were not given any)."""
    out: dict[str, str] = {}
    try:
        names = git(["ls-tree", "-r", "-z", "--name-only", commit], target.root, plain=True,
                    binary=True, error=ProposerError).stdout
    except (ProposerError, OSError):  # no repository or no such commit: no files
        return out
    listed = [raw.decode(errors="replace") for raw in names.split(b"\0")]
    held = holdout_files(target, [p for p in listed if p])
    for path in listed:
        if not path or not target.is_editable(path) or target.is_protected(path) \
                or path in held:  # a file the holdout command names never reaches a proposer
            continue
        blob = git(["show", f"{commit}:{path}"], target.root, check=False, plain=True, binary=True,
                   error=ProposerError).stdout
        if b"\0" in blob[:8000] or len(blob) > max_bytes:
            continue
        try:
            out[path] = blob.decode()
        except UnicodeDecodeError:
            continue
        if len(out) >= max_files:
            break
    return out


def _read_brief(target: Target) -> str:
    if not target.brief:
        return ""
    path = target.root / target.brief
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return f"(the brief file {target.brief} could not be read)"


def _cut(text: str, keep_chars: int, what: str) -> str:
    """The beginning of ``text`` (whole lines) within ``keep_chars``, with a marker."""
    if len(text) <= keep_chars:
        return text
    head = text[: max(0, keep_chars)]
    if "\n" in head:
        head = head[: head.rindex("\n")]
    lines_left = text[len(head):].count("\n") + 1
    return f"{head}\n[... {what}: {lines_left} more lines not shown]"


def _fence(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return fence


def _task_text(ctx: ProposalContext) -> str:
    """The task: the metric and its direction, what may change, the incumbent."""
    t = ctx.target
    metric = t.metric
    unit = f" {metric.unit}" if metric.unit else ""
    head = [
        "# Task",
        f"Improve the benchmark metric `{metric.name}`{unit}: "
        f"{'higher' if metric.direction.value == 'maximize' else 'lower'} is better.",
        f"Editable files (globs): {', '.join(t.editable)}.",
    ]
    if t.protected:
        head.append(f"Protected, never changed: {', '.join(t.protected)}, assay.toml.")
    else:
        head.append("Protected, never changed: assay.toml.")
    inc = ctx.incumbent
    params = ", ".join(f"{k}={v}" for k, v in sorted(inc.params.items()))
    head.append(f"Current best (incumbent): commit {inc.commit[:12]}"
                + (f" with {params}" if params else "") + ".")
    return "\n".join(head)


def _measurement_text(ctx: ProposalContext) -> str:
    """The noise floor and δ, and what follows for the size of a proposal."""
    t = ctx.target
    delta = ctx.delta or t.decision.delta
    meas = ["## Measurement"]
    if ctx.noise_floor is not None:
        meas.append(f"Noise floor: one A/B pair of runs varies by about "
                    f"{ctx.noise_floor * 100:.2f}% (sd of the log-ratio).")
    else:
        meas.append("Noise floor: not measured yet.")
    meas.append(f"A change is kept only when its effect is credibly above δ = {delta * 100:.2f}% "
                "(paired runs against the incumbent).")
    floor = max(delta, ctx.noise_floor or 0.0)
    meas.append(f"Do not propose changes expected to move `{t.metric.name}` by less than "
                f"{floor * 100:.2f}%: the benchmark cannot tell them from noise. Prefer one "
                "clear, substantial idea over a bundle of tweaks.")
    return "\n".join(meas)


@dataclass
class _Sections:
    """The sections of a context in their order: the fixed ones (task, measurement, note)
    and those cut to fit (journal lines, hypotheses, research brief, files, task brief),
    with what was cut so far."""

    task: str
    measurement: str
    note: str
    journal_head: str
    include_files: bool
    journal: list[str]
    hypotheses: list[str]
    research: str
    files: dict[str, str]
    brief: str
    omitted: int = 0  # journal lines cut
    listed: list[str] = field(default_factory=list)  # files named only
    truncated: list[str] = field(default_factory=list)

    def render(self) -> str:
        parts = [self.task]
        if self.brief:
            parts.append("## Brief\n" + self.brief)
        parts.append(self.measurement)
        jtext = self.journal_head
        if self.journal:
            jtext += "\n" + "\n".join(self.journal)
        if self.omitted:
            jtext += f"\n- ({self.omitted} older experiments not shown)"
        parts.append(jtext)
        if self.research:
            parts.append("## Research brief\n" + self.research)
        if self.hypotheses:
            parts.append("## Open hypotheses\n" + "\n".join(self.hypotheses))
        if self.include_files:
            parts.append(self._files_text())
        if self.note:
            parts.append(self.note)
        return "\n\n".join(parts) + "\n"

    def _files_text(self) -> str:
        ftext = ["## Editable files at the incumbent"]
        for path, body in self.files.items():
            fence = _fence(body)
            ftext.append(f"{path}\n{fence}\n{body.rstrip(chr(10))}\n{fence}")
        for name in self.listed:
            ftext.append(f"{name} (not shown: over the context budget)")
        if len(ftext) == 1:
            ftext.append("(no editable file exists yet)")
        return "\n\n".join(ftext)

    def cut_journal(self, over: int) -> int:
        """Drop journal lines, least important (end of the priority list) first, until
        ``over`` characters are gone; returns what is still over."""
        if over > 0 and self.journal:
            dropped = 0
            while self.journal and over > 0:
                over -= len(self.journal.pop()) + 1
                dropped += 1
            self.omitted = dropped
            over += 45  # the "(N older experiments not shown)" line
            self.truncated.append(f"journal: {dropped} oldest lines")
        return over

    def cut_hypotheses(self, over: int) -> int:
        """Drop hypotheses, lowest score first; returns what is still over."""
        if over > 0 and self.hypotheses:
            dropped = 0
            while self.hypotheses and over > 0:
                over -= len(self.hypotheses.pop()) + 1
                dropped += 1
            self.truncated.append(f"hypotheses: {dropped} lowest-scored")
        return over

    def cut_research(self, over: int) -> int:
        """Keep the research brief's beginning (or nothing); returns what is still over."""
        if over > 0 and self.research:
            res = self.research
            keep = max(0, len(res) - over - 60)
            new = _cut(res, keep, "research brief") if keep > 200 else ""
            over -= len(res) - len(new) + (0 if new else 20)
            self.research = new
            self.truncated.append("research brief")
        return over

    def cut_files(self, over: int, budget: int) -> int:
        """Cut every file to a common cap (water-filling), naming only those left too short;
        returns what is still over, measured on the text rendered anew."""
        if over > 0 and self.files:
            sizes = {p: len(b) for p, b in self.files.items()}
            total_files = sum(sizes.values())
            allowed = max(0, total_files - over - 80 * len(self.files))
            cap = _water_cap(list(sizes.values()), allowed)
            new_fl: dict[str, str] = {}
            for p, body in self.files.items():
                if len(body) <= cap:
                    new_fl[p] = body
                elif cap >= MIN_FILE_CHARS:
                    new_fl[p] = _cut(body, cap, f"{p} is cut here; quote only lines shown above")
                    self.truncated.append(f"file {p}")
                else:
                    self.listed.append(f"{p} ({len(body)} characters)")
                    self.truncated.append(f"file {p} (listed only)")
            self.files = new_fl
            over = len(self.render()) - budget
        return over

    def cut_brief(self, over: int) -> None:
        """Keep the task brief's beginning, or say it is over the budget."""
        if over > 0 and self.brief:
            br = self.brief
            keep = max(0, len(br) - over - 60)
            self.brief = _cut(br, keep, "brief") if keep > 200 \
                else "(the brief is over the context budget)"
            self.truncated.append("task brief")


def _journal_head(ctx: ProposalContext) -> str:
    """The journal's heading: the experiments so far by state, and how to read a line."""
    t = ctx.target
    counts: dict[str, int] = {}
    for e in ctx.history:
        counts[e.state] = counts.get(e.state, 0) + 1
    journal_head = "## Journal\n"
    if ctx.history:
        journal_head += (f"{len(ctx.history)} experiments so far: " + ", ".join(
            f"{n} {s}" for s, n in sorted(counts.items())) + ". Effects are relative changes "
            f"of `{t.metric.name}` against the incumbent of the time (+ = better), with their "
            f"{t.decision.confidence:.0%} interval.")
    else:
        journal_head += "No experiments yet."
    return journal_head


def _hypothesis_lines(ctx: ProposalContext) -> list[str]:
    """One line per open (or testing) hypothesis, highest score first."""
    hyps: list[Hypothesis] = sorted(
        (h for h in ctx.hypotheses if h.status in ("open", "testing")),
        key=lambda h: -h.score)
    return [f"- H{h.id} ({h.status}, score {h.score:.2f}) {_one_line(h.text, 300)}"
            + (f" [sources: {', '.join(h.sources[:3])}]" if h.sources else "")
            for h in hyps]


def _sections(ctx: ProposalContext, include_files: bool, note: str,
              files: Mapping[str, str] | None) -> _Sections:
    """Every section of the context, in full."""
    t = ctx.target
    file_map: dict[str, str] = {}
    if include_files:
        file_map = dict(files if files is not None else ctx.files)
        if not file_map:
            file_map = incumbent_files(t, ctx.incumbent.commit)
    return _Sections(
        task=_task_text(ctx), measurement=_measurement_text(ctx), note=note.strip(),
        journal_head=_journal_head(ctx), include_files=include_files,
        journal=[summary_line(e) for e in _ordered_history(ctx.history)],
        hypotheses=_hypothesis_lines(ctx), research=ctx.research_brief.strip(),
        files=dict(sorted(file_map.items())), brief=_read_brief(t))


def build_context(ctx: ProposalContext, budget_tokens: int = 24_000, *,
                  include_files: bool = True, note: str = "",
                  files: Mapping[str, str] | None = None) -> BuiltContext:
    """The proposal context as Markdown text of at most ``budget_tokens`` (estimated)."""
    sections = _sections(ctx, include_files, note, files)
    budget = budget_tokens * CHARS_PER_TOKEN
    over = len(sections.render()) - budget
    over = sections.cut_journal(over)
    over = sections.cut_hypotheses(over)
    over = sections.cut_research(over)
    over = sections.cut_files(over, budget)
    sections.cut_brief(over)
    text = sections.render()
    if sections.truncated:
        text += f"\n(Cut to fit the context budget: {'; '.join(sections.truncated)}.)\n"
    return BuiltContext(text, estimate_tokens(text), tuple(sections.truncated))


def _water_cap(sizes: list[int], allowed: int) -> int:
    """The largest cap c with sum(min(s, c)) <= allowed."""
    if sum(sizes) <= allowed:
        return max(sizes, default=0)
    ordered = sorted(sizes)
    remaining = allowed
    for i, s in enumerate(ordered):
        share = remaining // (len(ordered) - i)
        if s > share:
            return max(0, share)
        remaining -= s
    return ordered[-1]
