"""What one model call used: tokens by kind, the model, and what it cost if that is known.

A :class:`Usage` is one call (an ``llm`` request, an agent CLI run). Token counts follow
the providers' own meaning, normalized to one shape:

- ``tokens_in``: every input token, cached ones included (OpenAI's ``prompt_tokens``;
  Anthropic's ``input_tokens`` plus its two cache counts; Codex's ``input_tokens``);
- ``tokens_cached``: the part of ``tokens_in`` read from the provider's prompt cache;
- ``tokens_cache_write``: the part of ``tokens_in`` written to it (Anthropic);
- ``tokens_out``: output tokens.

``None`` means the caller did not report that count (an agent CLI that prints no usage,
or leaves out ``output_tokens``): such a call is *of unknown usage*, never zero.
``cost_usd`` is ``None`` when no price is known; ``priced_by`` says where a cost came
from: ``"table"`` (the price table), ``"reported"`` (the CLI's own figure, e.g.
Claude Code's ``total_cost_usd``) or ``"unknown"``.

:class:`Spent` adds calls up; it is what the caps, ``assay status`` and the report read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


def dollars(v: float) -> str:
    """``$12.35``, ``$0.0308``, ``$0.000034``: enough digits to tell small sums apart."""
    if v >= 1:
        return f"${v:,.2f}"
    return f"${v:.4f}" if v >= 0.01 or v == 0 else f"${v:.6f}"


@dataclass(frozen=True)
class Usage:
    """One model call."""

    model: str
    tokens_in: int | None
    tokens_out: int | None
    tokens_cached: int = 0
    tokens_cache_write: int = 0
    cost_usd: float | None = None
    priced_by: str = "unknown"
    estimated: bool = False  # the server sent no usage: the counts are chars/4 estimates

    @property
    def known(self) -> bool:
        """Whether both token counts were reported (or estimated)."""
        return self.tokens_in is not None and self.tokens_out is not None

    @property
    def tokens(self) -> int:
        return (self.tokens_in or 0) + (self.tokens_out or 0)


@dataclass(frozen=True)
class Spent:
    """Calls added up: dollars of the priced ones, and how many were not priced."""

    calls: int = 0
    usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0
    unpriced: int = 0  # calls with known tokens but no price (their dollars are not in usd)
    unknown: int = 0  # calls of unknown usage: a token count not reported (not in tokens)

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def plus(self, u: Usage) -> Spent:
        return Spent(calls=self.calls + 1, usd=self.usd + (u.cost_usd or 0.0),
                     tokens_in=self.tokens_in + (u.tokens_in or 0),
                     tokens_out=self.tokens_out + (u.tokens_out or 0),
                     tokens_cached=self.tokens_cached + u.tokens_cached,
                     unpriced=self.unpriced + (u.known and u.cost_usd is None),
                     unknown=self.unknown + (not u.known))

    @classmethod
    def of(cls, usages: Iterable[Usage]) -> Spent:
        out = cls()
        for u in usages:
            out = out.plus(u)
        return out

    def words(self) -> str:
        """``$0.0421 on 12 calls (48,210 tokens)``, naming calls with no price and calls of
        unknown usage: a total over them is not the whole."""
        text = (f"{dollars(self.usd)} on {self.calls} model call{'s' if self.calls != 1 else ''} "
                f"({self.tokens:,} tokens)")
        if self.unpriced:
            text += f"; {self.unpriced} with price unknown, not counted in the dollars"
        if self.unknown:
            text += (f"; {self.unknown} call{'s' if self.unknown != 1 else ''} of unknown usage,"
                     " not fully counted")
        return text
