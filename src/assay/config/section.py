"""A validated view of one TOML table of `assay.toml`: typed getters whose errors name the
file, the dotted key, its line and what would be valid, and a check that every key was read
(a typo must not silently become a default)."""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from ..errors import ConfigError
from ..tomlpos import key_line

T = TypeVar("T")


class Section:
    """A validated view of one TOML table: typed getters whose errors point at the line."""

    def __init__(self, data: Mapping[str, Any], path: str, file: str, text: str) -> None:
        self.data = dict(data)
        self.path = path
        self.file = file
        self.text = text
        self._used: set[str] = set()

    def _key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, message: str, valid: str = "") -> ConfigError:
        dotted = self._key(key) if key else self.path
        return ConfigError(message, file=self.file, key=dotted,
                           line=key_line(self.text, dotted), valid=valid)

    def has(self, key: str) -> bool:
        self._used.add(key)  # asked about: a known key, listed when another one is misspelled
        return key in self.data

    def known(self, *keys: str) -> None:
        """Declare keys this section accepts though they were not read (optional ones)."""
        self._used.update(keys)

    def get(self, key: str, kind: type[T] | tuple[type, ...], default: Any = ...,
            valid: str = "") -> Any:
        self._used.add(key)
        if key not in self.data:
            if default is ...:
                raise self.error(key, f"is required but missing: add `{key} = ...` to "
                                 f"[{self.path or 'the top of the file'}]", valid)
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if bool not in kinds and isinstance(value, bool):
            raise self.error(key, f"must be {_kind_name(kinds)}, got a boolean", valid)
        if not isinstance(value, kinds):
            raise self.error(key, f"must be {_kind_name(kinds)}, got {type(value).__name__} "
                             f"{value!r}", valid)
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {value!r}", valid)
        return value

    def choice(self, key: str, choices: Sequence[str], default: Any = ...) -> Any:
        value = self.get(key, str, default, valid=", ".join(choices))
        if value is not default and value not in choices:
            raise self.error(key, f"{value!r} is not one of the choices", ", ".join(choices))
        return value

    def number(self, key: str, default: Any = ..., *, low: float | None = None,
               high: float | None = None, integer: bool = False) -> Any:
        kinds: tuple[type, ...] = (int,) if integer else (int, float)
        rng = f"{'an integer' if integer else 'a number'}"
        if low is not None:
            rng += f" >= {low:g}"
        if high is not None:
            rng += f" <= {high:g}"
        value = self.get(key, kinds, default, valid=rng)
        if value is default or value is None:
            return value
        if (low is not None and value < low) or (high is not None and value > high):
            raise self.error(key, f"{value!r} is out of range", rng)
        return value

    def strings(self, key: str, default: Any = ...) -> tuple[str, ...]:
        value = self.get(key, list, default, valid='a list of strings, e.g. ["a", "b"]')
        if value is default:
            return tuple(value) if isinstance(value, (list, tuple)) else value
        for item in value:
            if not isinstance(item, str):
                raise self.error(key, f"must hold only strings, found {item!r}",
                                 "a list of strings")
        return tuple(value)

    def table(self, key: str, required: bool = False) -> Section:
        self._used.add(key)
        value = self.data.get(key)
        if value is None:
            if required:
                raise self.error(key, f"table is required but missing: add a [{self._key(key)}]"
                                 " table")
            value = {}
        if not isinstance(value, dict):
            raise self.error(key, f"must be a table ([{self._key(key)}] with `key = value` "
                             f"lines), got {type(value).__name__}")
        return Section(value, self._key(key), self.file, self.text)

    def tables(self, key: str) -> list[Section]:
        self._used.add(key)
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.error(key, "must be an array of tables ([[" + self._key(key) + "]])")
        return [Section(v, f"{self._key(key)}[{i}]", self.file, self.text)
                for i, v in enumerate(value)]

    def reject_unknown(self, extra_ok: Iterable[str] = ()) -> None:
        allowed = self._used | set(extra_ok)
        for key in self.data:
            if key not in allowed:
                close = difflib.get_close_matches(key, sorted(allowed), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise self.error(key, f"is not a known key{hint}",
                                 ", ".join(sorted(allowed)) or "no keys here")


def _kind_name(kinds: tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
             list: "a list", dict: "a table"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)
