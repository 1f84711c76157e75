"""A robust, noise-weighted location estimate of pair log-ratios (Huber's M-estimator).

Heavy tails and noisy neighbours are handled by one symmetric rule instead of re-runs:
each pair's log-ratio ``x_i`` is standardised by its block's pair noise ``s_i`` (the noise
tracker's estimate when the block was measured) and the location ``μ`` solves
``Σ ψ((x_i − μ)/s_i)/s_i = 0`` with Huber's ψ (clipped at ±:data:`HUBER_C`; Huber 1964,
"Robust estimation of a location parameter", Ann. Math. Statist. 35). A pair far out on
either side, candidate-fast or candidate-slow, first measurement or re-run, counts as
:data:`HUBER_C` noise units, never more: nothing is gated, nothing is dropped, and the
decision lists the pairs that were down-weighted. Pairs from a noisier block weigh less
(``1/s_i²``), so slots of very different noise share one estimate.

The variance is the sandwich ``Σ ψ_i²/s_i² / (Σ ψ'_i/s_i²)²``, which matches the
estimator whatever the true tail; for few pairs it is pooled with the value the noise
model predicts (``κ/γ²`` per unit information, ``κ = E ψ(Z)²``, ``γ = E ψ'(Z)``), worth
``prior_df`` degrees of freedom, and bounds use the t quantile with the pooled degrees of
freedom.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

HUBER_C = 1.5  # noise units; 96% efficient for normal noise
_GAMMA = float(2 * ndtr(HUBER_C) - 1)  # E psi'(Z)
_KAPPA = float(_GAMMA - 2 * HUBER_C * math.exp(-HUBER_C**2 / 2) / math.sqrt(2 * math.pi)
               + 2 * HUBER_C**2 * (1 - ndtr(HUBER_C)))  # E psi(Z)^2


@dataclass(frozen=True)
class Robust:
    mean: float  # log scale
    se: float  # standard error of ``mean``
    sd: float  # per-pair sd equivalent: se * sqrt(n)
    df: float
    n: int
    weights: tuple[float, ...]  # Huber weights in [0, 1]: 1 = full weight


def _median(v: np.ndarray) -> float:
    s = np.sort(v)
    k = s.size
    return float(s[k // 2]) if k % 2 else float(0.5 * (s[k // 2 - 1] + s[k // 2]))


def huber(x: Sequence[float], scales: Sequence[float], prior_df: int) -> Robust:
    """The M-estimate of the location of ``x`` with per-value noise ``scales``."""
    n = len(x)
    if n == 0:
        raise ValueError("no values")
    xv = np.asarray(x, dtype=float)
    sv = np.asarray(scales, dtype=float)
    bad = ~(np.isfinite(sv) & (sv > 0))
    if bad.any():
        spread = _median(np.abs(xv - _median(xv))) * 1.4826 if n >= 3 else 0.0
        good = sv[~bad]
        fill = _median(good) if good.size else spread
        if not fill > 0:
            fill = float(np.max(np.abs(xv))) or 1e-9
        sv = np.where(bad, fill, sv)
    w_inv = 1.0 / (sv * sv)
    mu = _median(xv)
    tol = 1e-10 * _median(sv)
    for _ in range(100):
        r = np.abs(xv - mu) / sv
        w = np.where(r <= HUBER_C, 1.0, HUBER_C / np.maximum(r, 1e-300)) * w_inv
        new = float(np.dot(w, xv) / w.sum())
        if abs(new - mu) <= tol:
            mu = new
            break
        mu = new
    r = (xv - mu) / sv
    inside = np.abs(r) <= HUBER_C
    psi = np.clip(r, -HUBER_C, HUBER_C)
    info = float(w_inv.sum())
    emp_b = float(np.dot(psi * psi, w_inv))
    emp_a = float(w_inv[inside].sum())
    if n >= 2:
        emp_b *= n / (n - 1)
    dof = prior_df + n - 1
    if dof <= 0:
        var = math.inf
    else:
        b = (prior_df * _KAPPA * info + (n - 1) * emp_b) / dof
        a = (prior_df * _GAMMA * info + n * emp_a) / (prior_df + n)
        a = max(a, 0.25 * _GAMMA * info)  # every pair clipped: no better than a median
        var = b / (a * a)
    se = math.sqrt(var) if math.isfinite(var) else math.inf
    weights = tuple(float(v) for v in np.where(inside, 1.0, HUBER_C / np.maximum(
        np.abs(r), 1e-300)))
    return Robust(mean=mu, se=se, sd=se * math.sqrt(n), df=float(max(dof, 0)), n=n,
                  weights=weights)
