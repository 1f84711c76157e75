"""The price table: US dollars per million tokens, per model, as data.

The bundled table is ``prices.toml`` in this package (its header says what each field
means); ``[prices."<model>"]`` tables in ``assay.toml`` add a model or replace one::

    [prices."my-model"]
    input = 0.5          # required: uncached input tokens
    output = 1.5         # required
    cached = 0.05        # optional: input tokens read from the prompt cache
    cache_write = 0.625  # optional: input tokens written to the prompt cache

A model is found by its exact name, else by its name less a trailing date
(``-20250929``, ``-2024-08-06``). A model not found has no price: its calls keep their
tokens and a cost of ``None`` ("price unknown"); a call whose cached or cache-write
tokens have no price of their own is unknown too. Nothing is guessed.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

from ..errors import ConfigError
from ..usage import Usage
from .section import Section
from .spec import Target

TABLE_NAME = "prices.toml"
FIELDS = ("input", "output", "cached", "cache_write")
_DATE = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2})$")


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens of one model."""

    input: float
    output: float
    cached: float | None = None
    cache_write: float | None = None
    source: str = "bundled"  # "bundled" or the assay.toml that set it

    def cost(self, tokens_in: int, tokens_out: int, cached: int = 0,
             cache_write: int = 0) -> float | None:
        """Dollars for one call; None when cached tokens have no price of their own."""
        if (cached and self.cached is None) or (cache_write and self.cache_write is None):
            return None
        fresh = max(tokens_in - cached - cache_write, 0)
        return (fresh * self.input + tokens_out * self.output
                + cached * (self.cached or 0.0) + cache_write * (self.cache_write or 0.0)) / 1e6


@dataclass(frozen=True)
class PriceTable:
    models: Mapping[str, Price]
    as_of: str = ""

    def find(self, model: str) -> Price | None:
        """The model's price: its exact name, else its name less a date suffix."""
        if model in self.models:
            return self.models[model]
        return self.models.get(_DATE.sub("", model))

    def priced(self, u: Usage) -> Usage:
        """``u`` with its cost from this table (a cost the caller reported is kept)."""
        if u.cost_usd is not None or u.tokens_in is None or u.tokens_out is None:
            return u
        price = self.find(u.model)
        cost = None if price is None else price.cost(u.tokens_in, u.tokens_out,
                                                     u.tokens_cached, u.tokens_cache_write)
        if cost is None:
            return u
        return Usage(u.model, u.tokens_in, u.tokens_out, u.tokens_cached,
                     u.tokens_cache_write, cost, "table", u.estimated)

    def worst_case(self, model: str, tokens_in: int, tokens_out: int) -> float | None:
        """The most a call may cost: every input token uncached, every output token used."""
        price = self.find(model)
        return None if price is None else price.cost(tokens_in, tokens_out)


def _price(data: object, where: str, sec: Section | None) -> Price:
    def bad(message: str) -> ConfigError:
        if sec is not None:
            return sec.error(where, message, "input, output (required), cached, cache_write: "
                             "dollars per million tokens")
        return ConfigError(message, file=TABLE_NAME, key=where)

    if not isinstance(data, dict):
        raise bad("must be a table")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise bad(f"unknown key(s) {unknown}")
    values: dict[str, float | None] = {}
    for name in FIELDS:
        v = data.get(name)
        if v is None and name in ("input", "output"):
            raise bad(f"needs `{name}`")
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or v < 0 or v != v):
            raise bad(f"`{name}` must be a number >= 0, got {v!r}")
        values[name] = None if v is None else float(v)
    source = "bundled" if sec is None else sec.file
    return Price(float(values["input"] or 0.0), float(values["output"] or 0.0),
                 values["cached"], values["cache_write"], source)


def bundled() -> PriceTable:
    """The table shipped with assay."""
    text = resources.files("assay.config").joinpath(TABLE_NAME).read_text(encoding="utf-8")
    data = tomllib.loads(text)
    models = {name: _price(p, f"models.{name}", None)
              for name, p in data.get("models", {}).items()}
    return PriceTable(models, str(data.get("as_of", "")))


def for_target(target: Target) -> PriceTable:
    """The bundled table with the target's ``[prices."<model>"]`` tables over it."""
    base = bundled()
    sec = target.section("prices")
    own = {name: _price(p, name, sec) for name, p in sec.data.items()}
    return PriceTable({**base.models, **own}, base.as_of)
