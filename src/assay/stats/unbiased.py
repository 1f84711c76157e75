"""The effect of a kept change, median-unbiased among keeps (stagewise ordering).

A rule that stops as soon as the lower bound clears δ stops early on lucky draws, so the
mean at the stopping look overstates the effect (the winner's curse: about twofold near
δ). The effect reported for a keep is instead median-unbiased under the stagewise ordering
of the sample space (Armitage 1957; Emerson & Fleming 1990, "Parameter estimation
following group sequential hypothesis testing", Biometrika 77; Jennison & Turnbull 2000,
*Group Sequential Methods*, §8.4), *conditional on the keep* (the conditional estimator
of Fan, DeMets & Lan 2004, "Conditional bias of point estimates following a group
sequential test", J. Biopharm. Stat. 14): the effect ``θ̂`` for which, among the
experiments that end in a keep, stopping at an earlier look or at this look with a larger
sum has probability one half. Kept changes are what users read, so for a true effect
``θ`` the reported effect of its keeps is above ``θ`` half the time and below half the
time, however early the rule stopped.

The probabilities come from the null sub-densities of the running sum on the continuation
region (carried on one uniform grid from look to look), tilted to any ``θ`` by the
likelihood ratio ``exp(θ S − θ² n / 2)``, so one recursion serves every ``θ``. The design
is the keep boundary alone, in units of the per-pair sd: stopping for futility is
non-binding and not modelled, and pairs measured after the stopping look (the
confirmation block) are fresh, unselected evidence, averaged in with their weight.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr

_STEP = 0.25  # grid spacing, in per-pair sds of the running sum
_WIDTH = 10.0
MAX_Z = 8.0  # beyond this the tilted null density is too thin to carry the tail


@lru_cache(maxsize=256)
def _design(looks: tuple[int, ...], upper: tuple[float, ...]
            ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """The grid, and the weighted null density of the running sum on the continuation
    region before each look (the first is a point mass at zero)."""
    top = max([u for u in upper if math.isfinite(u)] + [0.0])
    span = _WIDTH * math.sqrt(looks[-1])
    grid = np.arange(-span, max(top, span) + _STEP, _STEP)
    zero = int(np.argmin(np.abs(grid)))
    grid = grid - grid[zero]
    dens = np.zeros(grid.size)
    dens[zero] = 1.0
    out = [dens.copy()]
    prev = 0
    for n, u in zip(looks[:-1], upper[:-1], strict=True):
        sd = math.sqrt(n - prev)
        half = math.ceil(_WIDTH * sd / _STEP)
        k = np.arange(-half, half + 1) * _STEP
        kern = np.exp(-0.5 * (k / sd) ** 2)
        kern /= kern.sum()
        dens = np.convolve(dens, kern, mode="same")
        if math.isfinite(u):
            dens[grid >= u] = 0.0
        out.append(dens.copy())
        prev = n
    return grid, tuple(out)


def _probs(looks: tuple[int, ...], upper: tuple[float, ...], k: int, s_obs: float,
           theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each θ: (P_θ(keep before look k, or at look k with a sum of at least s_obs),
    P_θ(keep at any look))."""
    grid, dens = _design(looks, upper)
    th = theta[:, None]
    before = np.zeros(theta.size)
    total = np.zeros(theta.size)
    prev = 0
    for j, n in enumerate(looks):
        step = n - prev
        edge = upper[j]
        if math.isfinite(edge) or j == k:
            live = dens[j] > 0
            g = grid[live]
            w = dens[j][live][None, :] * np.exp(th * g[None, :] - 0.5 * th * th * prev)
            sq = math.sqrt(step)
            if math.isfinite(edge):
                p = (w * ndtr((g[None, :] + th * step - edge) / sq)).sum(axis=1)
                total += p
                if j < k:
                    before += p
            if j == k:
                before += (w * ndtr((g[None, :] + th * step - s_obs) / sq)).sum(axis=1)
        prev = n
    return before, np.minimum(total, 1.0)


def median_unbiased(looks: tuple[int, ...], upper: tuple[float, ...], k: int,
                    s_obs: float) -> float:
    """θ̂ with P_θ̂(more extreme than a keep at look ``k`` with sum ``s_obs`` | keep) = 1/2.

    ``looks`` are pair counts, ``upper[j]`` the keep boundary for the running sum (in
    per-pair sd units) at look ``j`` (``inf`` where no keep is allowed); the rule kept at
    look ``k`` with sum ``s_obs``. θ̂ is in per-pair sd units. Conditional on a keep the
    tail probability first falls, then rises with θ (very low θ keep only early); the
    estimate is the root on the rising branch."""
    n = looks[k]
    centre = s_obs / n
    if centre * math.sqrt(n) > MAX_Z:
        return centre  # so far beyond every boundary that selection has no pull

    def ratio(theta: np.ndarray) -> np.ndarray:
        before, total = _probs(looks, upper, k, s_obs, theta)
        return np.where(total > 1e-300, before / np.maximum(total, 1e-300), 1.0)

    thetas = np.linspace(centre - 6.0 / math.sqrt(n) - 0.5, centre + 3.0 / math.sqrt(n), 20)
    r = ratio(thetas)
    i = int(np.argmin(r))
    if r[i] >= 0.5:
        return float(thetas[i])
    up = np.flatnonzero(r[i:] >= 0.5)
    if up.size == 0:
        return centre
    j = i + int(up[0])
    a, b = float(thetas[j - 1]), float(thetas[j])
    return float(brentq(lambda t: float(ratio(np.array([t]))[0]) - 0.5, a, b,
                        xtol=1e-4 / math.sqrt(n)))
