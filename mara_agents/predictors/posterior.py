"""Reading a posterior of the remaining demand: its truncated Gittins index, its quantiles within the budget and
draws from it. A posterior is ``F`` (..., H + 1), ``F[b] = P(demand ≤ b)`` for b = 0 … H node-steps, as
:meth:`mara_agents.protocols.Predictor.demand_cdf` and :attr:`mara_agents.predictors.cache.PredictionCache.cdf`
give it. Used by the posterior allocators (:mod:`mara_agents.allocators.posterior`) and the ``-post``
observation features (:mod:`mara_agents.predictors.features`).
"""

from __future__ import annotations

import numpy as np


def truncated_index(cdf: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """(...,) the truncated Gittins index max_{1 ≤ b ≤ budget} F(b) / E[min(D, b)] of each task.

    Args:
        cdf: (..., H + 1) P(demand ≤ b) for b = 0 … H (non-decreasing, F(0) = 0 as demand ≥ 1).
        budget: (...,) node-steps left (b beyond H counts as H); 0 or less gives index 0.
    """
    cdf = np.clip(cdf, 0.0, 1.0)
    width = cdf.shape[-1]
    expected = np.cumsum(1.0 - cdf[..., :-1], axis=-1)  # [..., b - 1] = E[min(D, b)] = Σ_{j<b} P(D > j) for b = 1 … H
    ratio = cdf[..., 1:] / np.maximum(expected, 1e-12)
    reach = np.arange(1, width) <= np.minimum(np.asarray(budget), width - 1)[..., None]
    return np.where(reach, ratio, 0.0).max(axis=-1, initial=0.0)


def cdf_quantile(cdf: np.ndarray, budget: np.ndarray, level: float) -> np.ndarray:
    """(...,) the smallest b ≤ budget with F(b) ≥ level, or inf when there is none (the level-quantile of
    the demand lies beyond the budget, or is censored)."""
    width = cdf.shape[-1]
    budget = np.minimum(np.maximum(np.asarray(budget), 0), width - 1)
    below = np.where(np.arange(width) <= budget[..., None], cdf < level - 1e-12, False).sum(axis=-1)
    return np.where(below <= budget, below, np.inf).astype(np.float64)


def sample_demands(cdf: np.ndarray, budget: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """(..., S) demands drawn by the inverse CDF: for each uniform u the smallest b ≤ budget with F(b) ≥ u,
    inf where F(budget) < u (the draw does not finish in time). ``cdf`` (..., H + 1), ``budget`` (...,),
    ``uniforms`` (..., S) in (0, 1)."""
    width = cdf.shape[-1]
    budget = np.minimum(np.maximum(np.asarray(budget), 0), width - 1)
    within = np.where(np.arange(width) <= budget[..., None], cdf, 2.0)  # only b ≤ budget are counted
    below = (within[..., None, :] < uniforms[..., :, None] - 1e-12).sum(axis=-1)  # (..., S): b ≤ budget with F(b) < u
    return np.where(below <= budget[..., None], below, np.inf).astype(np.float64)
