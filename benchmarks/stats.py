"""Paired statistics for benchmark differences: bootstrap confidence intervals and permutation tests.

Differences are paired by cell (evaluation root, and training seed for learned agents): agent A and
agent B ran on the same workloads, so the unit of analysis is the per-cell difference d_i = a_i − b_i.

* :func:`bootstrap_ci`: percentile bootstrap CI of the mean of d (resampling cells with replacement).
* :func:`permutation_p`: two-sided sign-flip permutation test of "mean d = 0" (under the null each d_i
  is as likely to be −d_i); exact over all 2^n sign patterns for n <= 16, Monte Carlo otherwise.
* :func:`paired_difference`: both, plus the mean and sd, in one dict.
"""

from __future__ import annotations

import itertools

import numpy as np

#: n up to which the permutation test enumerates every sign pattern.
EXACT_UP_TO = 16


def _differences(a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if b is not None and np.shape(b) != a.shape:
        raise ValueError(f"need two equally long 1-D arrays of paired values, got shapes {a.shape} and {np.shape(b)}")
    d = a - (0.0 if b is None else np.asarray(b, dtype=np.float64))
    if d.ndim != 1 or d.size == 0 or not np.all(np.isfinite(d)):
        raise ValueError(f"need two equally long 1-D arrays of finite paired values, got shapes {np.shape(a)} and {np.shape(b)}")
    return d


def bootstrap_ci(a: np.ndarray, b: np.ndarray | None = None, level: float = 0.95, resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap ``level`` CI of mean(a − b) (of mean(a) when ``b`` is None)."""
    d = _differences(a, b)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def permutation_p(a: np.ndarray, b: np.ndarray | None = None, resamples: int = 100_000, seed: int = 0) -> float:
    """Two-sided sign-flip permutation p-value of mean(a − b) = 0 (see the module docstring)."""
    d = _differences(a, b)
    observed = abs(d.mean())
    if d.size <= EXACT_UP_TO:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
    else:
        signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(resamples, d.size))
        signs[0] = 1.0  # the observed pattern counts (a valid Monte Carlo p is never 0)
    means = np.abs(signs @ d) / d.size
    return float(np.mean(means >= observed - 1e-12 * max(1.0, observed)))


def paired_difference(a: np.ndarray, b: np.ndarray, level: float = 0.95, seed: int = 0) -> dict[str, float]:
    """Mean, sd, n, bootstrap CI and permutation p-value of the paired difference a − b."""
    d = _differences(a, b)
    lo, hi = bootstrap_ci(d, level=level, seed=seed)
    return {"mean": float(d.mean()), "sd": float(d.std(ddof=1)) if d.size > 1 else 0.0, "n": int(d.size),
            "ci_low": lo, "ci_high": hi, "p_value": permutation_p(d, seed=seed)}
