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
from dataclasses import dataclass

from ..config import Target
from ..errors import ProposerError
from ..git import git
from ..model import Hypothesis
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
    from .sandbox import holdout_files

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


def build_context(ctx: ProposalContext, budget_tokens: int = 24_000, *,
                  include_files: bool = True, note: str = "",
                  files: Mapping[str, str] | None = None) -> BuiltContext:
    """The proposal context as Markdown text of at most ``budget_tokens`` (estimated)."""
    t = ctx.target
    truncated: list[str] = []

    # ---- fixed parts (never cut)
    inc = ctx.incumbent
    head_text = _task_text(ctx)
    meas_text = _measurement_text(ctx)
    note_text = note.strip()

    # ---- cuttable parts
    brief = _read_brief(t)
    history = _ordered_history(ctx.history)
    lines = [summary_line(e) for e in history]
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
    hyps: list[Hypothesis] = sorted(
        (h for h in ctx.hypotheses if h.status in ("open", "testing")),
        key=lambda h: -h.score)
    hyp_lines = [f"- H{h.id} ({h.status}, score {h.score:.2f}) {_one_line(h.text, 300)}"
                 + (f" [sources: {', '.join(h.sources[:3])}]" if h.sources else "")
                 for h in hyps]
    research = ctx.research_brief.strip()
    file_map: dict[str, str] = {}
    if include_files:
        file_map = dict(files if files is not None else ctx.files)
        if not file_map:
            file_map = incumbent_files(t, inc.commit)

    budget = budget_tokens * CHARS_PER_TOKEN

    def render(jl: list[str], omitted: int, hl: list[str], res: str,
               fl: Mapping[str, str], listed: Sequence[str], br: str) -> str:
        parts = [head_text]
        if br:
            parts.append("## Brief\n" + br)
        parts.append(meas_text)
        jtext = journal_head
        if jl:
            jtext += "\n" + "\n".join(jl)
        if omitted:
            jtext += f"\n- ({omitted} older experiments not shown)"
        parts.append(jtext)
        if res:
            parts.append("## Research brief\n" + res)
        if hl:
            parts.append("## Open hypotheses\n" + "\n".join(hl))
        if include_files:
            ftext = ["## Editable files at the incumbent"]
            for path, body in fl.items():
                fence = _fence(body)
                ftext.append(f"{path}\n{fence}\n{body.rstrip(chr(10))}\n{fence}")
            for name in listed:
                ftext.append(f"{name} (not shown: over the context budget)")
            if len(ftext) == 1:
                ftext.append("(no editable file exists yet)")
            parts.append("\n\n".join(ftext))
        if note_text:
            parts.append(note_text)
        return "\n\n".join(parts) + "\n"

    jl, hl, res, br = list(lines), list(hyp_lines), research, brief
    fl: dict[str, str] = dict(sorted(file_map.items()))
    listed: list[str] = []
    omitted = 0
    text = render(jl, omitted, hl, res, fl, listed, br)
    over = len(text) - budget

    # 1. journal lines, least important (end of the priority list) first
    if over > 0 and jl:
        dropped = 0
        while jl and over > 0:
            over -= len(jl.pop()) + 1
            dropped += 1
        omitted = dropped
        over += 45  # the "(N older experiments not shown)" line
        truncated.append(f"journal: {dropped} oldest lines")
    # 2. hypotheses, lowest score first
    if over > 0 and hl:
        dropped = 0
        while hl and over > 0:
            over -= len(hl.pop()) + 1
            dropped += 1
        truncated.append(f"hypotheses: {dropped} lowest-scored")
    # 3. research brief
    if over > 0 and res:
        keep = max(0, len(res) - over - 60)
        new = _cut(res, keep, "research brief") if keep > 200 else ""
        over -= len(res) - len(new) + (0 if new else 20)
        res = new
        truncated.append("research brief")
    # 4. files: water-fill to a common cap
    if over > 0 and fl:
        sizes = {p: len(b) for p, b in fl.items()}
        total_files = sum(sizes.values())
        allowed = max(0, total_files - over - 80 * len(fl))
        cap = _water_cap(list(sizes.values()), allowed)
        new_fl: dict[str, str] = {}
        for p, body in fl.items():
            if len(body) <= cap:
                new_fl[p] = body
            elif cap >= MIN_FILE_CHARS:
                new_fl[p] = _cut(body, cap, f"{p} is cut here; quote only lines shown above")
                truncated.append(f"file {p}")
            else:
                listed.append(f"{p} ({len(body)} characters)")
                truncated.append(f"file {p} (listed only)")
        fl = new_fl
        text = render(jl, omitted, hl, res, fl, listed, br)
        over = len(text) - budget
    # 5. the task brief
    if over > 0 and br:
        keep = max(0, len(br) - over - 60)
        br = _cut(br, keep, "brief") if keep > 200 else "(the brief is over the context budget)"
        truncated.append("task brief")
    text = render(jl, omitted, hl, res, fl, listed, br)
    if truncated:
        text += f"\n(Cut to fit the context budget: {'; '.join(truncated)}.)\n"
    return BuiltContext(text, estimate_tokens(text), tuple(truncated))


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
