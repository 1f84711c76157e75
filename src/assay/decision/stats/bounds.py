"""Group-sequential boundaries: alpha spending over planned looks (Lan & DeMets 1983).

The keep boundary is a one-sided efficacy boundary for the standardised mean of the pair
log-ratios. The error allowed by time ``t`` (the fraction of the pair budget measured) is
``alpha * t**rho`` (the power family of Kim & DeMets 1987: ``rho = 1`` behaves like
Pocock, ``rho = 3`` like O'Brien-Fleming). Boundaries are found by the recursive numerical
integration of Armitage, McPherson & Rowe (1969): the density of the running sum is
carried from look to look on a grid, restricted to paths that have not crossed yet.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr, ndtri, stdtrit

_GRID = 241  # grid points per look; plenty for three-digit boundaries
_LOW = 8.0  # the grid spans [-8 sd, boundary]


def spent(alpha: float, t: float, rho: float) -> float:
    """The error spent by information fraction ``t`` (power family)."""
    return float(alpha * min(max(t, 0.0), 1.0) ** rho)


@lru_cache(maxsize=256)
def efficacy_bounds(looks: tuple[int, ...], alpha: float, rho: float) -> tuple[float, ...]:
    """Upper z boundaries at looks of ``looks[k]`` pairs, spending ``alpha`` in total.

    Crossing any boundary under a true mean of zero (known variance) happens with
    probability ``alpha``; the boundary at the last look is at least as strict as a plain
    one-sided test would need at that look for the error still left to spend.
    """
    if not looks or any(b <= a for a, b in itertools.pairwise(looks)):
        raise ValueError("looks must be a non-empty increasing tuple")
    total = float(looks[-1])
    out: list[float] = []
    grid = np.empty(0)
    dens = np.empty(0)
    prev_n = 0.0
    prev_spent = 0.0
    for n in looks:
        target = spent(alpha, n / total, rho) - prev_spent
        sq = math.sqrt(n)
        if not out:
            c = float(-ndtri(target)) if target > 0 else _LOW
        elif target <= 1e-12:
            c = _LOW
        else:
            c = _solve(grid, _weights(grid) * dens, math.sqrt(n - prev_n), sq, target)
        c = min(c, _LOW)
        out.append(c)
        # density of the running sum at this look, over paths still running
        new_grid = np.linspace(-_LOW * sq, c * sq, _GRID)
        if grid.size == 0:
            dens = np.exp(-0.5 * (new_grid / sq) ** 2) / (sq * math.sqrt(2 * math.pi))
        else:
            sd = math.sqrt(n - prev_n)
            kern = np.exp(-0.5 * ((new_grid[:, None] - grid[None, :]) / sd) ** 2)
            kern /= sd * math.sqrt(2 * math.pi)
            dens = kern @ (_weights(grid) * dens)
        grid = new_grid
        prev_n = float(n)
        prev_spent += spent(alpha, n / total, rho) - prev_spent
    return tuple(out)


def _solve(grid: np.ndarray, w: np.ndarray, sd: float, sq: float, target: float) -> float:
    """The boundary c where the probability of first crossing at this look is ``target``."""

    def excess(c: float) -> float:
        return float(np.dot(w, ndtr((grid - c * sq) / sd))) - target

    if excess(_LOW) > 0:
        return _LOW
    if excess(-_LOW) < 0:
        return -_LOW
    return float(brentq(excess, -_LOW, _LOW, xtol=1e-6))


def _weights(grid: np.ndarray) -> np.ndarray:
    """Trapezoid weights for a uniform grid."""
    h = float(grid[1] - grid[0]) if grid.size > 1 else 1.0
    w = np.full(grid.size, h)
    w[0] = w[-1] = h / 2
    return w


def planned_looks(block: int, budget: int, first: int = 1) -> tuple[int, ...]:
    """Looks after every block from ``first`` pairs up to the budget (the last look)."""
    block = max(1, block)
    budget = max(budget, 1)
    start = min(max(block, -(-first // block) * block), budget)
    looks = list(range(start, budget, block))
    looks.append(budget)
    return tuple(looks)


def bound_at(n: int, block: int, budget: int, alpha: float, rho: float, first: int = 1
             ) -> float:
    """The z boundary that applies with ``n`` pairs measured (the look at or after n).

    Before the first look nothing is spent: the boundary is infinite."""
    looks = planned_looks(block, budget, first)
    if n < looks[0]:
        return math.inf
    bounds = efficacy_bounds(looks, alpha, rho)
    for look, c in zip(looks, bounds, strict=True):
        if n <= look:
            return c
    return bounds[-1]


def t_quantile_for(z: float, df: float) -> float:
    """The t multiplier with the same one-sided tail as the normal ``z``."""
    if not math.isfinite(df) or df > 1e6:
        return z
    return float(stdtrit(max(df, 1.0), float(ndtr(z))))
