"""Robust, noise-weighted location estimates of pair log-ratios (M-estimators).

Heavy tails and noisy neighbours are handled by one symmetric rule instead of re-runs:
each pair's log-ratio ``x_i`` is standardised by its block's pair noise ``s_i`` (the
block's own scale, :func:`assay.decision.stats.noise.block_scale`) and the location ``μ`` solves
``Σ ψ((x_i − μ)/s_i)/s_i = 0``. The sequential rule uses :func:`biweight`, Tukey's
redescending ψ (Beaton & Tukey 1974): a pair more than :data:`BIWEIGHT_K` noise units from
the estimate, on either side, candidate-fast or candidate-slow, first measurement or
re-run, has no influence; nothing is gated, nothing is dropped, and the decision lists the
pairs that were down-weighted. Pairs from a noisier block weigh less (``1/s_i²``), so
slots of very different noise share one estimate.

The variance is the sandwich ``Σ ψ_i²/s_i² / (Σ ψ'_i/s_i²)²`` with the observed slope,
which matches the estimator whatever the true tail; for few pairs it is pooled with the
value the noise model predicts (``κ/γ²`` per unit information, ``κ = E ψ(Z)²``,
``γ = E ψ'(Z)``), worth ``prior_df`` degrees of freedom, and bounds use the t quantile
with the pooled degrees of freedom.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Robust:
    mean: float  # log scale
    se: float  # standard error of ``mean``
    sd: float  # per-pair sd equivalent: se * sqrt(n)
    df: float
    n: int
    weights: tuple[float, ...]  # weights in [0, 1]: 1 = full weight


def _median(v: np.ndarray) -> float:
    s = np.sort(v)
    k = s.size
    return float(s[k // 2]) if k % 2 else float(0.5 * (s[k // 2 - 1] + s[k // 2]))


def _inputs(x: Sequence[float], scales: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The values and their noise scales as arrays; a scale that is missing, zero or not
    finite is filled with the median of the others (or the values' own spread)."""
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
    return xv, sv


BIWEIGHT_K = 4.685  # noise units; 95% efficient for normal noise


def _bw_constants(k: float) -> tuple[float, float]:
    """``E ψ(Z)²`` and ``E ψ'(Z)`` of Tukey's biweight at ``k`` for standard normal Z."""
    z = np.linspace(-k, k, 4001)
    u = z / k
    phi = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    psi = z * (1 - u * u) ** 2
    dpsi = (1 - u * u) * (1 - 5 * u * u)
    h = float(z[1] - z[0])
    return float(np.sum(psi * psi * phi) * h), float(np.sum(dpsi * phi) * h)


_BW_KAPPA, _BW_GAMMA = _bw_constants(BIWEIGHT_K)


def biweight(x: Sequence[float], scales: Sequence[float], prior_df: int) -> Robust:
    """The redescending M-estimate of the location of ``x`` (Tukey's biweight) with
    per-value noise ``scales``, started from the plain median.

    ``ψ(r) = r (1 − (r/k)²)²`` for ``|r| ≤ k`` and 0 beyond (Beaton & Tukey 1974, "The
    fitting of power series, meaning polynomials, illustrated on band-spectroscopic data",
    Technometrics 16): a pair more than :data:`BIWEIGHT_K` noise units from the estimate
    has no influence at all, on either side. This matters when a share of runs is hit by a
    noisy neighbour: a block whose two incumbent runs were both slowed looks quiet (its
    runs agree) while both its pairs are far off, and a monotone ψ would still let that
    quiet, heavily weighted block pull the estimate by 1.5 noise units per pair. The
    start from the unweighted median keeps the estimate on the bulk of the pairs. The
    variance is the sandwich ``Σ ψ_i²/s_i² / (Σ ψ'_i/s_i²)²`` with the observed slope
    (pairs rejected carry no information), pooled with the variance the noise model
    predicts (``κ/γ²`` per unit information of the pairs kept), worth ``prior_df``
    degrees of freedom."""
    xv, sv = _inputs(x, scales)
    n = xv.size
    w_inv = 1.0 / (sv * sv)
    tol = 1e-10 * _median(sv)

    def solve(mu: float) -> tuple[float, float]:
        for _ in range(200):
            u = (xv - mu) / (sv * BIWEIGHT_K)
            w = np.where(np.abs(u) < 1, (1 - u * u) ** 2, 0.0) * w_inv
            if not w.sum() > 0:
                break
            new = float(np.dot(w, xv) / w.sum())
            if abs(new - mu) <= tol:
                mu = new
                break
            mu = new
        u2 = np.minimum(((xv - mu) / (sv * BIWEIGHT_K)) ** 2, 1.0)
        return float(np.sum(1 - (1 - u2) ** 3)), mu

    _, mu = solve(_median(xv))
    r = (xv - mu) / sv
    u = r / BIWEIGHT_K
    inside = np.abs(u) < 1
    psi = np.where(inside, r * (1 - u * u) ** 2, 0.0)
    dpsi = np.where(inside, (1 - u * u) * (1 - 5 * u * u), 0.0)
    info = float(w_inv[inside].sum())
    emp_b = float(np.dot(psi * psi, w_inv))
    emp_a = float(np.dot(dpsi, w_inv))
    m = int(inside.sum())
    if m >= 2:
        emp_b *= m / (m - 1)
    dof = prior_df + m - 1
    if dof <= 0 or emp_a <= 0 or info <= 0:
        var = math.inf
    else:
        model = _BW_KAPPA / (_BW_GAMMA * _BW_GAMMA) / info
        var = (prior_df * model + (m - 1) * emp_b / (emp_a * emp_a)) / dof
    se = math.sqrt(var) if math.isfinite(var) else math.inf
    weights = tuple(float(v) for v in np.where(inside, (1 - u * u) ** 2, 0.0))
    return Robust(mean=mu, se=se, sd=se * math.sqrt(n), df=float(max(dof, 0)), n=n,
                  weights=weights)
