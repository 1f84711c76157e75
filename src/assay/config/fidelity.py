"""``[fidelity]``: the levels a candidate climbs, cheapest first, before it can be kept.

A fidelity is one declared parameter (``[[params]]``, an environment variable or an
assignment) whose value sets how much a run costs and how much it tells, e.g. the training
time of a fixed-budget training script::

    [fidelity]
    param = "TIME_BUDGET"
    levels = [30, 120, 300]     # cheapest first; a keep happens only at the last level
    promote = "interval"        # a level's screen: "interval" or "top"
    top = 2                     # with promote = "top": how many go on from a level

A block measured at level ``i`` runs the incumbent and the candidate with the parameter set
to ``levels[i]``; a candidate that clears a level's screen is measured again at the next
level, against the incumbent at that level. ``promote = "interval"`` lets through every
candidate whose interval's upper end is above δ (it could still be a win);
``promote = "top"`` the ``top`` best lower bounds among the candidates screened at that
level so far. Candidates never set the fidelity parameter themselves.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..model import ParamValue
from .section import Section

PROMOTE = ("interval", "top")
NO_FIDELITY = "none"  # what a journal records of a run measured without [fidelity]


@dataclass(frozen=True)
class FidelitySpec:
    """The fidelity parameter and its levels, cheapest first."""

    param: str
    levels: tuple[ParamValue, ...]
    promote: str = "interval"
    top: int = 2

    @property
    def last(self) -> int:
        """The index of the level a keep is decided at."""
        return len(self.levels) - 1

    def value(self, level: int) -> ParamValue:
        """The parameter's value at ``level`` (an index into ``levels``)."""
        return self.levels[level]

    def at_last(self) -> FidelitySpec:
        """Only the last level: a verification or a comparison measures where keeps are
        decided, with no screen before."""
        return dataclasses.replace(self, levels=(self.levels[-1],))

    def label(self, level: int) -> str:
        """A level as people read it: ``TIME_BUDGET=30``."""
        v = self.levels[level]
        text = f"{v:g}" if isinstance(v, float) else str(v)
        return f"{self.param}={text}"


def last_level(spec: FidelitySpec | None) -> int:
    """The level keeps are decided at: its index, 0 without [fidelity]."""
    return 0 if spec is None else spec.last


def parse_fidelity(top: Section, params: Sequence[str]) -> FidelitySpec | None:
    """``[fidelity]`` (None when the file has none); ``params`` are the declared names."""
    if "fidelity" not in top.data:
        top.known("fidelity")
        return None
    sec = top.table("fidelity")
    param = sec.get("param", str, valid="the name of a [[params]] entry, e.g. TIME_BUDGET")
    if param not in params:
        raise sec.error("param", f"{param!r} is not a declared parameter",
                        f"one of the [[params]] names: {', '.join(params) or 'none declared'}")
    raw = sec.get("levels", list, valid="two or more values, cheapest first, e.g. [30, 300]")
    if len(raw) < 2:
        raise sec.error("levels", f"has {len(raw)} value(s): a fidelity needs a cheap level "
                        "and the level that decides", "two or more values, cheapest first")
    levels: list[ParamValue] = []
    for v in raw:
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise sec.error("levels", f"holds {v!r}", "numbers or strings")
        if v in levels:
            raise sec.error("levels", f"repeats {v!r}", "distinct values, cheapest first")
        levels.append(v)
    nums = [v for v in levels if isinstance(v, (int, float))]
    if len(nums) == len(levels) and any(b <= a for a, b in itertools.pairwise(nums)):
        raise sec.error("levels", f"{levels} is not increasing: the levels go cheapest first",
                        "increasing values, e.g. [30, 120, 300]")
    promote = sec.choice("promote", PROMOTE, "interval")
    top_k = sec.number("top", 2, low=1, high=10_000, integer=True)
    sec.reject_unknown()
    return FidelitySpec(param=param, levels=tuple(levels), promote=promote, top=int(top_k))


def setup_record(spec: FidelitySpec | None) -> dict[str, Any] | str:
    """What a journal records of the ``[fidelity]`` its blocks were measured under: the
    parameter, the levels as values, the screen; ``"none"`` without ``[fidelity]``."""
    if spec is None:
        return NO_FIDELITY
    return {"param": spec.param, "levels": list(spec.levels), "promote": spec.promote,
            "top": spec.top}


def setup_words(setup: object) -> str:
    """A recorded setup as ``assay.toml`` says it."""
    if not isinstance(setup, dict):
        return "no [fidelity]"
    words = (f"param = {json.dumps(setup.get('param'))}, levels = "
             f"{json.dumps(setup.get('levels'))}, promote = {json.dumps(setup.get('promote'))}")
    return words + (f", top = {setup.get('top')}" if setup.get("promote") == "top" else "")


def _same(old: object, new: object) -> bool:
    """Whether two recorded setups measure alike: the same parameter, the same values (30
    and 30.0 differ: the benchmark reads them as text), the same screen (``top`` counts
    only where a side promotes the top)."""
    if isinstance(old, dict) and isinstance(new, dict) \
            and old.get("promote") == new.get("promote") == "interval":
        old, new = {**old, "top": None}, {**new, "top": None}
    return json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True)


def check_setup(recorded: object, spec: FidelitySpec | None, deepest: int | None,
                config_file: str) -> None:
    """Refuse (ConfigError) to measure into a journal under another ``[fidelity]`` than the
    one its blocks were measured under: a level's calibration, blocks and decisions are
    stored by the level's index, so a changed parameter, changed values, an added or removed
    ``[fidelity]`` would pool measurements of different things.

    ``recorded``: the journal's record (:func:`setup_record`; None in a journal older than
    the record); ``deepest``: the highest level of the journal's blocks (None when it has
    none: nothing was measured, any setup may start). Without a record only what the blocks
    show can be checked: a level the config does not have."""
    if deepest is None:
        return
    new = setup_record(spec)
    back = ("remove [fidelity] from assay.toml" if recorded == NO_FIDELITY else
            "restore the [fidelity] the journal was measured under in assay.toml")
    todo = (f"; {back} to go on with this run, or `assay reset` (it archives the journal) "
            "to start a new run under the new one")
    if recorded is None:
        if deepest > last_level(spec):
            has = "only level 0" if spec is None else f"levels 0 to {spec.last}"
            raise ConfigError(
                f"the journal holds blocks measured at fidelity level {deepest}, and "
                f"{setup_words(new)} has {has}: the journal was measured under another "
                f"[fidelity]{todo}", file=config_file, key="fidelity")
        return
    if not _same(recorded, new):
        raise ConfigError(
            f"changed since the journal's blocks were measured: they were measured under "
            f"{setup_words(recorded)}, assay.toml now has {setup_words(new)}; a level's "
            "calibration, blocks and decisions are kept by the level's place in the list "
            f"and cannot be reused under other levels{todo}",
            file=config_file, key="fidelity")
