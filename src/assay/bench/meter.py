"""The meter: every model call checked against the spending caps before it is made, and
recorded after.

A proposer that calls a model asks ``meter.check(...)`` with the call's worst case
before each call, and hands ``meter.charge(usage)`` what the call used after it. The loop
builds the meter (its record function writes each call to the journal at once, so a run
killed mid-wave has still counted what it spent) and hands it to the proposer in the
:class:`~assay.proposers.base.ProposalContext`.

Caps (``[run]`` in assay.toml), each checked for the whole run (every session of the
journal) or, with the ``session_`` prefix, for this ``assay run`` alone:

- ``max_usd`` / ``session_max_usd``: dollars, from the price table (or a CLI's own figure);
- ``max_tokens`` / ``session_max_tokens``: input plus output tokens.

The worst case of an ``llm`` call is its prompt's tokens at the input price plus
``max_tokens`` of reply at the output price. An agent CLI's worst case is not known in
advance (it runs many calls of its own): it is checked with what is already spent, and a
run whose dollars cannot be counted (a model with no price, a CLI that reports nothing)
stops at the next check when ``max_usd`` is set, saying why. A cap reached raises
:class:`~assay.errors.CapReached`; ``reached`` keeps the reason.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..config.prices import PriceTable
from ..config.spec import RunSpec
from ..errors import CapReached
from ..usage import Spent, Usage, dollars

BYTES_PER_TOKEN = 3  # a conservative count: tokenizers average about 4 bytes of text a token
Record = Callable[[Usage, str], int]  # (usage, call kind) -> the journal's id for it


@dataclass(frozen=True)
class Caps:
    max_usd: float | None = None
    max_tokens: int | None = None
    session_max_usd: float | None = None
    session_max_tokens: int | None = None

    @property
    def usd(self) -> bool:
        return self.max_usd is not None or self.session_max_usd is not None

    @property
    def tokens(self) -> bool:
        return self.max_tokens is not None or self.session_max_tokens is not None

    def set(self) -> dict[str, float | int]:
        """The caps that are set, by their assay.toml key."""
        return {k: v for k, v in vars(self).items() if v is not None}

    def words(self) -> str:
        """``max_usd $0.04, max_tokens 40,000`` ('' when none is set): how every face
        names the caps."""
        return ", ".join(f"{k} {'$' if 'usd' in k else ''}{v:,}" for k, v in self.set().items())


def prompt_tokens(*texts: str) -> int:
    """A conservative count of a prompt's tokens, before a tokenizer has seen it: its UTF-8
    bytes over :data:`BYTES_PER_TOKEN`, rounded up (the worst case the caps check)."""
    size = sum(len(t.encode()) for t in texts)
    return -(-size // BYTES_PER_TOKEN)


def caps_of(run: RunSpec) -> Caps:
    return Caps(run.max_usd, run.max_tokens, run.session_max_usd, run.session_max_tokens)


class Meter:
    """Caps checked before each call; each call recorded after. Thread-safe (agents of one
    wave run in parallel)."""

    def __init__(self, prices: PriceTable, caps: Caps = Caps(), *, before: Spent = Spent(),
                 record: Record | None = None) -> None:
        self.prices = prices
        self.caps = caps
        self.run = before  # every session of the journal, this one included
        self.session = Spent()
        self.reached = ""  # why the calls stopped ('' while no cap is reached)
        self._record = record
        self._lock = threading.Lock()

    def check(self, model: str, tokens_in: int, tokens_out: int | None) -> None:
        """Raise :class:`CapReached` when a call of at most ``tokens_in`` prompt tokens and
        ``tokens_out`` reply tokens (None: not known in advance) could pass a cap."""
        with self._lock:
            if self.reached:
                raise CapReached(self.reached)
            why = self._over(model, tokens_in, tokens_out)
            if why:
                self.reached = why
                raise CapReached(why)

    def charge(self, usage: Usage, call: str = "propose") -> tuple[Usage, int | None]:
        """Price ``usage`` from the table (unless it carries its own cost), add it up and
        record it; returns it priced, with the journal's id for it (None unrecorded)."""
        u = self.prices.priced(usage)
        with self._lock:
            self.run = self.run.plus(u)
            self.session = self.session.plus(u)
            rid = self._record(u, call) if self._record is not None else None
            if self.caps.usd and u.cost_usd is None and not self.reached:
                what = ("has no price in the price table (add [prices.\"" + u.model + "\"] "
                        "to assay.toml)" if u.known
                        else "is of unknown usage and reported no cost")
                self.reached = (f"a dollar cap is set, but a call of model {u.model or '?'} "
                                f"{what}: the spend can no longer be counted; spent "
                                f"{self.run.words()}")
            elif self.caps.tokens and not u.known and not self.reached:
                self.reached = (f"a token cap is set, but a call of model {u.model or '?'} "
                                "is of unknown usage: the tokens can no longer be counted; "
                                f"spent {self.run.words()}")
        return u, rid

    def _over(self, model: str, tokens_in: int, tokens_out: int | None) -> str:
        c = self.caps
        extra_tokens = tokens_in + (tokens_out or 0)
        worst = self.prices.worst_case(model, tokens_in, tokens_out or 0)
        call = (f"the next call may use {tokens_in:,} prompt tokens"
                + (f" and {tokens_out:,} reply tokens" if tokens_out is not None else "")
                + (f" (up to {dollars(worst)} at {model}'s prices)" if worst is not None else ""))
        for key, cap, spent in (("max_tokens", c.max_tokens, self.run),
                                ("session_max_tokens", c.session_max_tokens, self.session)):
            if cap is not None and spent.tokens + extra_tokens > cap:
                return (f"the cap [run] {key} = {cap:,} is reached: {call}, and "
                        f"{spent.tokens:,} are spent ({spent.words()})")
        for key, usd, spent in (("max_usd", c.max_usd, self.run),
                                ("session_max_usd", c.session_max_usd, self.session)):
            if usd is None:
                continue
            if worst is None and tokens_out is not None:
                return (f"the cap [run] {key} = ${usd:g} cannot be kept: model {model} has no "
                        f"price in the price table (add [prices.\"{model}\"] to assay.toml)")
            if spent.usd + (worst or 0.0) > usd or (worst is None and spent.usd >= usd):
                return (f"the cap [run] {key} = ${usd:g} is reached: {call}, and "
                        f"{spent.words()} are spent")
        return ""
