"""Screening of pair log-ratios: outliers and implausible results are re-measured.

Nothing is dropped silently. A pair far from its peers (beyond ``OUTLIER_K`` robust
standard deviations of the median) or implausibly far above the incumbent (beyond
``SUSPICIOUS_K`` noise units, or with a value outside the metric's declared bounds) asks
for a re-run. Once its re-run exists, an outlier is set aside and listed in the decision's
details; a suspicious pair stays in the estimate but the result may only be kept once a
re-run has reproduced it. Re-runs are capped; past the cap outliers stay in the estimate
and the decision says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...model import BlockKind, Pair

OUTLIER_K = 4.5  # robust sds from the median
SUSPICIOUS_K = 6.0  # noise units above the incumbent
MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class Screened:
    """The evidence after screening, and what still needs re-measuring."""

    values: tuple[float, ...]  # log-ratios used in the estimate, in measured order
    kinds: tuple[BlockKind, ...]
    index: tuple[int, ...]  # positions in the input of the values used
    pending: int  # flagged pairs still waiting for a re-run
    reruns: int  # re-run pairs measured
    outliers: int  # pairs flagged as outliers (whether re-run yet or not)
    suspicious: int  # pairs flagged as implausible
    unreproduced: int  # suspicious pairs whose re-run did not reproduce them
    over_cap: int  # flagged pairs kept in the estimate because the re-run cap was reached
    set_aside: tuple[dict[str, Any], ...] = field(default_factory=tuple)


def rerun_cap(max_pairs: int) -> int:
    return max(2, max_pairs // 4)


def screen(pairs: Sequence[Pair], x: Sequence[float], noise: float,
           bounds: tuple[float, float] | None, max_pairs: int) -> Screened:
    """Flag outliers and suspicious pairs; match them, in order, with the re-runs measured."""
    primary = [i for i, p in enumerate(pairs) if p.kind is not BlockKind.RERUN]
    reruns = [i for i, p in enumerate(pairs) if p.kind is BlockKind.RERUN]
    base = np.asarray([x[i] for i in primary], dtype=float)
    med = float(np.median(base)) if base.size else 0.0
    mad = float(np.median(np.abs(base - med))) * MAD_TO_SD if base.size >= 3 else 0.0
    scale = max(mad, noise) if noise > 0 else mad
    high = SUSPICIOUS_K * max(noise, mad)
    sus = base > high if scale > 0 else np.zeros(base.size, dtype=bool)
    if bounds is not None:
        b = np.asarray([pairs[i].b for i in primary], dtype=float)
        sus |= ~((b >= bounds[0]) & (b <= bounds[1]))
    far = (np.abs(base - med) > OUTLIER_K * scale) if scale > 0 and base.size >= 2 else (
        np.zeros(base.size, dtype=bool))
    flagged: list[tuple[int, str]] = [
        (primary[k], "suspicious" if sus[k] else "outlier")
        for k in np.flatnonzero(sus | far)]
    cap = rerun_cap(max_pairs)
    drop: set[int] = set()
    set_aside: list[dict[str, Any]] = []
    pending = over_cap = unreproduced = 0
    reproduced = False
    used = 0
    for i, why in flagged:
        if why == "suspicious" and reproduced:
            continue  # the implausible level has been reproduced once: it is real
        if used >= cap:
            over_cap += 1
            continue
        if used >= len(reruns):
            pending += 1
            used += 1
            continue
        j = reruns[used]
        used += 1
        if why == "outlier":
            drop.add(i)
            set_aside.append({"block": pairs[i].block_id, "log_ratio": round(x[i], 6),
                              "rerun_log_ratio": round(x[j], 6), "why": why})
        elif x[j] > SUSPICIOUS_K * max(noise, mad) / 2:
            reproduced = True
        else:
            unreproduced += 1
            drop.add(i)
            set_aside.append({"block": pairs[i].block_id, "log_ratio": round(x[i], 6),
                              "rerun_log_ratio": round(x[j], 6), "why": why})
    if reproduced:
        unreproduced = 0
    keep = [i for i in range(len(pairs)) if i not in drop]
    return Screened(values=tuple(x[i] for i in keep),
                    kinds=tuple(pairs[i].kind for i in keep), index=tuple(keep),
                    pending=pending, reruns=len(reruns),
                    outliers=sum(1 for _, w in flagged if w == "outlier"),
                    suspicious=sum(1 for _, w in flagged if w == "suspicious"),
                    unreproduced=unreproduced, over_cap=over_cap, set_aside=tuple(set_aside))

