"""Read a metric out of a benchmark's output: three explicit readers, no guessing.

Which reader applies is set per metric in ``assay.toml`` (``reader = ...``); assay never
sniffs the format, so a log line that happens to look like another format cannot be
mistaken for the result.

``metric_lines``
    Lines ``METRIC name=value`` (the pi-autoresearch format). Whitespace around the line
    and around ``=`` is allowed. The value must be a plain number (``52``, ``-1.5``,
    ``3e-4``); ``inf``/``nan`` parse but are rejected as non-finite, and anything else on
    the line (``52 tok/s``) makes the value non-numeric. A name printed twice is an error:
    a second line could be a forged result printed after the real one.

``summary_block``
    The karpathy/autoresearch summary: a line ``---`` followed by ``key: value`` lines.
    Only the LAST ``---`` line starts the block that counts. Inside it, blank lines are
    skipped and the block ends at the first line that is neither blank nor ``key: value``;
    whatever follows that line is ignored. A key repeated inside the block is an error.

``json``
    The whole output parsed as JSON or, when it is not pure JSON, the last top-level JSON
    object or array in it; ``json_path`` is then followed step by step (``results.0.tps``:
    list indices are numbers, negative ones count from the end). A step that does not
    exist is an error naming the step and the keys available at that level, so a path
    that silently selects nothing cannot turn into a plausible wrong number. A key that
    appears twice in one object along the path is an error too.

For every reader the text comes from stdout when ``source = "stdout"``; otherwise from
the file ``source`` relative to the work directory (absolute paths and paths that leave
the work directory are refused).

Every failure raises :class:`MetricError` with the reason in words: which metric, which
reader, where it looked and what it saw.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from ..config.spec import MetricSpec
from ..errors import MetricError
from ..registry import READERS

__all__ = [
    "Reading",
    "check_bounds",
    "follow_json_path",
    "parse_json",
    "parse_metric_lines",
    "parse_summary_block",
    "read_metric",
    "read_source",
]

_METRIC_LINE = re.compile(r"^\s*METRIC\s+(?P<name>[^\s=]+)\s*=\s*(?P<value>.*?)\s*$")
_SUMMARY_LINE = re.compile(r"^\s*(?P<name>[A-Za-z_][\w.\-/]*)\s*:\s*(?P<value>.*?)\s*$")
_NUMBER = re.compile(
    r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
    r"|[+-]?(?:inf|infinity|nan)",
    re.IGNORECASE,
)
_MAX_SHOWN = 20  # names listed in a message before "..."
_JSON_START = re.compile(r"(?:^|(?<=[\s:=,(]))[\[{]")
_MAX_JSON_ATTEMPTS = 2000


@dataclass(frozen=True)
class Reading:
    """One ``name``/``value`` occurrence in the output, with its 1-based line number."""

    name: str
    raw: str
    line: int


def _shown(names: list[str]) -> str:
    if not names:
        return "none"
    head = ", ".join(names[:_MAX_SHOWN])
    return head + (f", ... ({len(names) - _MAX_SHOWN} more)" if len(names) > _MAX_SHOWN else "")


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- parsers


def parse_metric_lines(text: str) -> dict[str, list[Reading]]:
    """Every ``METRIC name=value`` line, grouped by name in order of appearance."""
    found: dict[str, list[Reading]] = {}
    for no, line in enumerate(text.splitlines(), start=1):
        m = _METRIC_LINE.match(line)
        if m:
            found.setdefault(m["name"], []).append(Reading(m["name"], m["value"], no))
    return found


def _summary_starts(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if line.strip() == "---"]


def parse_summary_block(text: str) -> dict[str, list[Reading]]:
    """The ``key: value`` lines of the last block opened by a ``---`` line.

    Blank lines inside the block are skipped; the first other line that is not
    ``key: value`` ends the block. Empty when there is no ``---`` line.
    """
    lines = text.splitlines()
    starts = _summary_starts(lines)
    found: dict[str, list[Reading]] = {}
    if not starts:
        return found
    for i in range(starts[-1] + 1, len(lines)):
        line = lines[i]
        if not line.strip():
            continue
        m = _SUMMARY_LINE.match(line)
        if not m:
            break
        found.setdefault(m["name"], []).append(Reading(m["name"], m["value"], i + 1))
    return found


class _Object(dict[str, Any]):
    """A JSON object that remembers which of its keys appeared more than once."""

    repeated: frozenset[str] = frozenset()


def _pairs_hook(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object()
    repeated = set()
    for key, value in pairs:
        if key in obj:
            repeated.add(key)
        obj[key] = value
    if repeated:
        obj.repeated = frozenset(repeated)
    return obj


def parse_json(text: str) -> Any:
    """The JSON document in ``text``: all of it, or else its last top-level object/array.

    Raises :class:`ValueError` when no JSON object or array can be found.
    """
    decoder = json.JSONDecoder(object_pairs_hook=_pairs_hook)
    stripped = text.strip()
    if not stripped:
        raise ValueError("the text is empty")
    try:
        return decoder.decode(stripped)
    except (ValueError, RecursionError):
        pass
    # Candidates: '{' or '[' at the start of the text or after whitespace or one of
    # ':=,(' (so '[[[[' is one candidate, not thousands), and only before the last
    # closing bracket. Failed attempts are capped, so hostile output stays cheap.
    last_close = max(text.rfind("}"), text.rfind("]"))
    last: Any = None
    found = False
    failures = 0
    pos = 0
    while pos < last_close:
        m = _JSON_START.search(text, pos, last_close)
        if m is None:
            break
        start = pos = m.start()
        pos += 1
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            failures += 1
            if failures > _MAX_JSON_ATTEMPTS:
                break
            continue
        last, found = value, True
        pos = max(end, pos)
    if not found:
        raise ValueError("no JSON object or array found")
    return last


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, bool):
        return f"a boolean ({json.dumps(value)})"
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"a string {_clip(value)!r}"
    return f"a number ({value!r})"


def follow_json_path(doc: Any, path: str) -> Any:
    """The value at dotted ``path`` in ``doc``; raises :class:`LookupError` in words.

    The message names the first step that does not exist and what exists at that level.
    """
    steps = path.split(".")
    if not path or any(s == "" for s in steps):
        raise LookupError(f"json_path {path!r} has an empty step")
    here: Any = doc
    for i, step in enumerate(steps):
        at = ".".join(steps[:i]) or "the top level"
        where = f"at {at!r}" if i else "at the top level"
        if isinstance(here, dict):
            if step not in here:
                keys = sorted(str(k) for k in here)
                raise LookupError(
                    f"json_path {path!r}: key {step!r} does not exist {where}; "
                    f"keys available there: {_shown(keys)}")
            if step in getattr(here, "repeated", ()):
                raise LookupError(
                    f"json_path {path!r}: key {step!r} appears more than once in the object "
                    f"{where}: refusing to pick one")
            here = here[step]
        elif isinstance(here, list):
            try:
                index = int(step)
            except ValueError:
                raise LookupError(
                    f"json_path {path!r}: step {step!r} is not a list index, but {where} is "
                    f"{_describe(here)} (use a number 0..{len(here) - 1})") from None
            if not -len(here) <= index < len(here):
                raise LookupError(
                    f"json_path {path!r}: index {index} does not exist {where}, which is "
                    f"{_describe(here)}" + (f" (valid: 0..{len(here) - 1})" if here else ""))
            here = here[index]
        else:
            raise LookupError(
                f"json_path {path!r}: cannot take step {step!r} {where}, which is "
                f"{_describe(here)}, not an object or list")
    return here


# --------------------------------------------------------------------------- reading


def _value(raw: str) -> float:
    """A float from a strict number token; ValueError when it is not one."""
    if not _NUMBER.fullmatch(raw.strip()):
        raise ValueError(raw)
    return float(raw)


def read_source(spec: MetricSpec, stdout: str, workdir: Path) -> tuple[str, str]:
    """The text a metric is read from, and a short description of where it came from."""
    source = spec.source or "stdout"
    if source == "stdout":
        return stdout, "stdout"
    posix, windows = PurePosixPath(source), PureWindowsPath(source)
    if posix.is_absolute() or windows.is_absolute() or windows.drive:
        raise MetricError(f"metric {spec.name!r}: source {source!r} is an absolute path; "
                          "give a path relative to the repository")
    if ".." in posix.parts or ".." in windows.parts:
        raise MetricError(f"metric {spec.name!r}: source {source!r} leaves the work "
                          "directory ('..' is not allowed)")
    base = workdir.resolve()
    path = (base / source).resolve()
    if not path.is_relative_to(base):
        raise MetricError(f"metric {spec.name!r}: source {source!r} resolves outside the "
                          "work directory (through a symbolic link)")
    where = f"file {source}"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MetricError(f"metric {spec.name!r}: the benchmark did not write {source!r} "
                          f"(reader {spec.reader})") from None
    except OSError as exc:
        raise MetricError(f"metric {spec.name!r}: cannot read {source!r}: "
                          f"{exc.strerror or exc}") from None
    return data.decode("utf-8", errors="replace"), where


def from_readings(spec: MetricSpec, found: dict[str, list[Reading]], where: str,
                   text: str, suffix: str) -> float:
    name = spec.name
    seen = found.get(name, [])
    if not seen:
        if spec.reader == "metric_lines":
            what = f"no line 'METRIC {name}=<number>' in {where}"
            others = f"METRIC lines seen for: {_shown(list(found))}"
        else:
            lines = text.splitlines()
            starts = _summary_starts(lines)
            if not starts:
                raise MetricError(f"metric {name!r} not found: {where} has no '---' line "
                                  f"opening a summary block{suffix}")
            what = f"no '{name}: <number>' line in the last '---' block (line {starts[-1] + 1})"
            if len(starts) > 1:
                what += (f"; only the last block counts ({len(starts)} '---' lines in "
                         f"{where})")
            others = f"keys in that block: {_shown(list(found))}"
        empty = "; the output is empty" if not text.strip() else ""
        raise MetricError(f"metric {name!r} not found: {what} ({others}){empty}{suffix}")
    if len(seen) > 1:
        lines_at = ", ".join(str(r.line) for r in seen[:-1]) + f" and {seen[-1].line}"
        raise MetricError(f"metric {name!r} printed {len(seen)} times (lines {lines_at}) "
                          f"in {where}: refusing to pick one{suffix}")
    reading = seen[0]
    try:
        value = _value(reading.raw)
    except ValueError:
        raise MetricError(f"metric {name!r} on line {reading.line} of {where} is not a "
                          f"number: {_clip(reading.raw)!r}{suffix}") from None
    if not math.isfinite(value):
        raise MetricError(f"metric {name!r} on line {reading.line} of {where} is not "
                          f"finite: {reading.raw.strip()!r}{suffix}")
    return value


def from_json(spec: MetricSpec, text: str, where: str, suffix: str) -> float:
    if not spec.json_path:
        raise MetricError(f"metric {spec.name!r}: reader json needs a json_path{suffix}")
    name = spec.name
    try:
        doc = parse_json(text)
    except ValueError as exc:
        raise MetricError(f"metric {name!r}: {where} holds no JSON ({exc}){suffix}") from None
    try:
        value = follow_json_path(doc, spec.json_path)
    except LookupError as exc:
        raise MetricError(f"metric {name!r}: {exc.args[0]}{suffix}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MetricError(f"metric {name!r}: json_path {spec.json_path!r} holds "
                          f"{_describe(value)}, not a number{suffix}")
    try:
        number = float(value)
    except OverflowError:
        raise MetricError(f"metric {name!r}: json_path {spec.json_path!r} holds an integer "
                          f"too large for a float{suffix}") from None
    if not math.isfinite(number):
        raise MetricError(f"metric {name!r}: json_path {spec.json_path!r} holds a "
                          f"non-finite number ({number!r}){suffix}")
    return number


def read_metric(spec: MetricSpec, stdout: str, workdir: Path) -> float:
    """The value of ``spec`` in a benchmark's output; raises :class:`MetricError`."""
    text, where = read_source(spec, stdout, workdir)
    suffix = f" [reader {spec.reader}, source {spec.source or 'stdout'}]"
    try:
        read = READERS.get(spec.reader)
    except KeyError as exc:
        raise MetricError(f"metric {spec.name!r}: {exc.args[0]}") from None
    return read(spec, text, where, suffix)


def check_bounds(spec: MetricSpec, value: float) -> str | None:
    """Why ``value`` is implausible for ``spec`` (outside ``bounds``), or None when fine."""
    if not math.isfinite(value):
        return f"metric {spec.name!r} = {value!r} is not finite"
    if spec.bounds is None:
        return None
    low, high = spec.bounds
    if low <= value <= high:
        return None
    unit = f" {spec.unit}" if spec.unit else ""
    side = "below" if value < low else "above"
    return (f"metric {spec.name!r} = {value:g}{unit} is {side} its bounds "
            f"[{low:g}, {high:g}]: implausible, not trusted")
