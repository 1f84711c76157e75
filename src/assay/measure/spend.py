"""What the run spent on model calls, per kept change and per percent of improvement.

One place computes it (:func:`of_journal`); ``assay status``, the run's summary, the
report and the MCP status tool show the dict it returns. The improvement is the run's
headline: the paired baseline-vs-best verification when it measured the present
incumbent, else the kept effects compounded (positive means better). Dollars count the
priced calls only; ``complete`` is False when some calls had no price or reported nothing,
and the words say how many.
"""

from __future__ import annotations

from typing import Any

from ..bench.meter import caps_of, prompt_tokens
from ..config.prices import for_target
from ..config.spec import Target
from ..journal.store import Journal
from ..model import ExperimentState
from ..proposers.llm import CONTEXT_TOKENS, MAX_TOKENS, RETRIES, SYSTEM_PROMPT
from ..usage import Spent, dollars
from . import verify as verify_mod


def improvement(journal: Journal) -> tuple[float | None, str]:
    """The run's improvement as a fraction, and what measured it."""
    v = verify_mod.current(journal)
    if v is not None and v.effect is not None:
        return float(v.effect), "verified"
    kept = journal.experiments([ExperimentState.KEPT], patches=False)
    comp = verify_mod.compounded(verify_mod.kept_effects(kept))
    return comp, "compounded" if comp is not None else ""


def of_journal(journal: Journal, target: Target) -> dict[str, Any]:
    """The spend so far, with what it bought."""
    s = journal.spent()
    kept = journal.state_counts().get(ExperimentState.KEPT.value, 0)
    gain, source = improvement(journal)
    caps = caps_of(target.run)
    stop = journal.stop_rule()
    return summarize(s, kept, gain, source) | {
        "caps": caps.set(), "caps_words": caps.words(),
        "stop": None if stop is None else stop.as_dict()}


def summarize(s: Spent, kept: int, gain: float | None, source: str) -> dict[str, Any]:
    complete = not s.unpriced and not s.unknown
    per_kept = s.usd / kept if kept and s.calls else None
    per_percent = s.usd / (gain * 100) if gain is not None and gain > 0 and s.calls else None
    out: dict[str, Any] = {
        "calls": s.calls, "usd": s.usd, "tokens": s.tokens, "tokens_in": s.tokens_in,
        "tokens_out": s.tokens_out, "tokens_cached": s.tokens_cached,
        "unpriced": s.unpriced, "unknown": s.unknown, "complete": complete,
        "kept": kept, "usd_per_kept": per_kept, "improvement": gain,
        "improvement_source": source, "usd_per_percent": per_percent}
    out["words"] = words(out, s)
    return out


def words(d: dict[str, Any], s: Spent) -> str:
    """``$0.0421 on 12 model calls (48,210 tokens); $0.0211 per kept change (2 kept),
    $0.0105 per 1% of improvement (+4.00%, compounded)``."""
    if not s.calls:
        return "no model calls"
    text = s.words()
    more = []
    if d["usd_per_kept"] is not None:
        more.append(f"{dollars(d['usd_per_kept'])} per kept change ({d['kept']} kept)")
    else:
        more.append("nothing kept for it")
    if d["usd_per_percent"] is not None:
        more.append(f"{dollars(d['usd_per_percent'])} per 1% of improvement "
                    f"({d['improvement']:+.2%}, {d['improvement_source']})")
    return text + "; " + ", ".join(more)


def estimate(target: Target, journal: Journal | None) -> list[str]:
    """What a planned run of ``[run] budget`` experiments may spend on model calls (lines
    for ``assay plan``); [] when the proposer calls no model.

    The ``llm`` proposer's worst case is known in advance: at most ``1 + retries`` replies
    plus one re-ask for a duplicate per experiment, each of at most ``context_tokens`` of
    context plus the instructions and ``max_tokens`` of reply, at the price table's
    prices. An agent's is not; for both, the journal's calls so far give the mean spend
    per experiment."""
    name = target.run.proposer
    if name not in ("llm", "agent"):
        return []
    sec = target.section(f"proposer.{name}")  # a bad value: ConfigError naming key and line
    model = str(sec.get("model", str, ""))
    prices = for_target(target)
    price = prices.find(model)
    budget = target.run.budget
    lines = []
    priced = (f"${price.input:g} in / ${price.output:g} out per Mtok" if price else
              f"price unknown: add [prices.\"{model}\"] to assay.toml")
    head = f"spend: {name} proposer, model {model or '(the CLI default)'} ({priced})"
    if name == "llm":
        calls = 1 + int(sec.number("retries", RETRIES, integer=True)) + 1
        tin = (int(sec.number("context_tokens", CONTEXT_TOKENS, integer=True))
               + prompt_tokens(SYSTEM_PROMPT))
        tout = int(sec.number("max_tokens", MAX_TOKENS, integer=True))
        worst = prices.worst_case(model, tin, tout)
        each = dollars(worst) if worst is not None else "price unknown"
        lines.append(f"{head}: at most {calls} calls per experiment, each at most {tin:,} "
                     f"prompt and {tout:,} reply tokens ({each})")
        if worst is not None:
            lines.append(f"  worst case for {budget} experiments: "
                         f"{dollars(worst * calls * budget)}"
                         f" ({calls * budget * (tin + tout):,} tokens)")
    else:
        lines.append(f"{head}: an agent's calls are not bounded in advance; the estimate "
                     "comes from the calls it has made")
    s = journal.spent() if journal is not None else Spent()
    n = journal.count_experiments() if journal is not None else 0
    if s.calls and n:
        lines.append(f"  measured: {s.words()} over {n} experiments: {dollars(s.usd / n)} and "
                     f"{s.tokens // n:,} tokens per experiment; {budget} more: about "
                     f"{dollars(s.usd / n * budget)}")
    named = caps_of(target.run).words()
    lines.append("  caps: " + (named + " (checked before each call with its worst case)"
                               if named else "none ([run] max_usd, max_tokens)"))
    return lines
