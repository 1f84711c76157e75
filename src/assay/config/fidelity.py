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
from collections.abc import Sequence
from dataclasses import dataclass

from ..model import ParamValue
from .section import Section

PROMOTE = ("interval", "top")


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
