"""Paired statistics at the level of the evaluation root.

The unit of replication is the **evaluation root**: the committed suites hold 10 roots per task set and
load, each a seeded draw of 4 episodes, and every row runs the same roots. A learned row's training
seeds are averaged within a root first (:func:`root_means`), so a fixed row's root never counts more
than once; the spread over training seeds is reported on its own (:func:`seed_spread`). A difference
"A − B" is then the vector of per-root differences d_r = a_r − b_r, and:

* :func:`t_interval`: the t-based confidence interval of mean(d): mean ± t_{n−1} · sd / √n;
* :func:`sign_flip_p`: the two-sided sign-flip test of "mean d = 0" (under the null each d_r is as likely
  to be −d_r), exact over all 2^n sign patterns for n <= 16 (Monte Carlo beyond). With 10 roots the
  smallest possible p is 2/1024 ≈ 0.002 (every root on the same side);
* :func:`paired_difference`: mean, sd, n, both of the above in one dict.

A percentile bootstrap is not used on fewer than :data:`MIN_BOOTSTRAP_UNITS` units: with 5 or 10 values
its intervals are too narrow (they exclude 0 next to an exact p of 0.0625).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np

from core_env.extras import needs

#: n up to which the sign-flip test enumerates every sign pattern.
EXACT_UP_TO = 16
#: Fewest units :func:`bootstrap_ci` resamples.
MIN_BOOTSTRAP_UNITS = 10


def _differences(a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if b is not None and np.shape(b) != a.shape:
        raise ValueError(f"need two equally long 1-D arrays of paired values, got shapes {a.shape} and {np.shape(b)}")
    d = a - (0.0 if b is None else np.asarray(b, dtype=np.float64))
    if d.ndim != 1 or d.size == 0 or not np.all(np.isfinite(d)):
        raise ValueError(f"need two equally long 1-D arrays of finite paired values, got shapes {np.shape(a)} and {np.shape(b)}")
    return d


def t_interval(a: np.ndarray, b: np.ndarray | None = None, level: float = 0.95) -> tuple[float, float]:
    """The t-based ``level`` CI of mean(a − b) (of mean(a) when ``b`` is None); (mean, mean) for one unit."""
    with needs(__name__):
        from scipy.stats import t

    d = _differences(a, b)
    if d.size < 2:
        return float(d[0]), float(d[0])
    half = float(t.ppf(0.5 + level / 2, d.size - 1)) * d.std(ddof=1) / np.sqrt(d.size)
    return float(d.mean() - half), float(d.mean() + half)


def sign_flip_p(a: np.ndarray, b: np.ndarray | None = None, resamples: int = 100_000, seed: int = 0) -> float:
    """Two-sided sign-flip p-value of mean(a − b) = 0 (exact for n <= :data:`EXACT_UP_TO`)."""
    d = _differences(a, b)
    observed = abs(d.mean())
    if d.size <= EXACT_UP_TO:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
    else:
        signs = np.random.default_rng(seed).choice((1.0, -1.0), size=(resamples, d.size))
        signs[0] = 1.0  # the observed pattern counts (a valid Monte Carlo p is never 0)
    means = np.abs(signs @ d) / d.size
    return float(np.mean(means >= observed - 1e-12 * max(1.0, observed)))


def bootstrap_ci(a: np.ndarray, b: np.ndarray | None = None, level: float = 0.95, resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap ``level`` CI of mean(a − b), for at least :data:`MIN_BOOTSTRAP_UNITS` units."""
    d = _differences(a, b)
    if d.size < MIN_BOOTSTRAP_UNITS:
        raise ValueError(f"a percentile bootstrap needs at least {MIN_BOOTSTRAP_UNITS} units, got {d.size}: use t_interval")
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def paired_difference(a: np.ndarray, b: np.ndarray, level: float = 0.95, seed: int = 0) -> dict[str, float]:
    """Mean, sd, n, t-based CI and sign-flip p of the per-unit differences a − b (units: evaluation roots)."""
    d = _differences(a, b)
    lo, hi = t_interval(d, level=level)
    return {"mean": float(d.mean()), "sd": float(d.std(ddof=1)) if d.size > 1 else 0.0, "n": int(d.size),
            "ci_low": lo, "ci_high": hi, "p_value": sign_flip_p(d, seed=seed)}


def root_means(values: Mapping[tuple[int, int], float]) -> dict[int, float]:
    """{root: mean over training seeds} of ``{(seed, root): value}``."""
    by_root: dict[int, list[float]] = {}
    for (_, root), value in values.items():
        by_root.setdefault(root, []).append(float(value))
    return {root: float(np.mean(v)) for root, v in sorted(by_root.items())}


def seed_spread(values: Mapping[tuple[int, int], float]) -> dict[str, float]:
    """Mean ± sd over training seeds of each seed's mean over the roots every seed ran (n = seeds)."""
    seeds = sorted({seed for seed, _ in values})
    roots = set.intersection(*({root for s, root in values if s == seed} for seed in seeds))
    means = np.array([np.mean([values[(seed, root)] for root in sorted(roots)]) for seed in seeds])
    return {"mean": float(means.mean()), "sd": float(means.std(ddof=1)) if means.size > 1 else 0.0, "n": int(means.size)}
