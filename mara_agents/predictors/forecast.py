"""From a Gaussian forecast of future log losses to a remaining-demand summary (WLS and DKF share it).

A forecasting predictor fits a model to each task's log-loss history and forecasts the log loss of
every future report j = 1 … horizon (the report after j more node-steps) as a Gaussian with mean
``mean[m, j-1]`` and standard deviation ``sd[m, j-1]``: the spread of the *fitted curve* under the
model's parameter uncertainty (observation noise is left out: the demand is where the curve crosses the
target, not where one noisy report happens to).

The crossing distribution follows without sampling. With z(j) = (log target − mean(j)) / sd(j),
Φ(z(j)) is the probability that the curve is at or below the target at j; the task has then crossed by
j, so F(j) = max_{i ≤ j} Φ(z(i)) is a lower bound on P(demand ≤ j) (equal to it when every curve the
model considers plausible decreases). The q-quantile of the demand is the first j with F(j) ≥ q, i.e.
the first j where the running maximum of z reaches Φ⁻¹(q) (so the median is the first j where the mean
forecast reaches the target), ``inf`` when no j ≤ horizon does. P(demand ≤ budget) = F(budget).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from core_env.curves import LOSS_FLOOR
from mara_agents.protocols import DemandSummary, Predictor


def pad_histories(histories: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(M, L) float64 log losses (floored at LOSS_FLOOR; zero past each history's end, L >= 1) and (M,)
    int64 lengths."""
    lengths = np.array([len(h) for h in histories], dtype=np.int64)
    log_losses = np.zeros((len(histories), max(1, int(lengths.max(initial=0)))))
    if lengths.sum():
        rows = np.repeat(np.arange(lengths.size), lengths)
        columns = np.arange(rows.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        log_losses[rows, columns] = np.log(np.maximum(np.concatenate(histories), LOSS_FLOOR))
    return log_losses, lengths


def normal_cdf(z: np.ndarray) -> np.ndarray:
    """Φ(z) elementwise (Abramowitz & Stegun 7.1.26, absolute error < 2e-7; Φ(±inf) = 1, 0)."""
    x = np.abs(z) / np.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    half_erfc = 0.5 * poly * np.exp(-x * x)  # 0.5 · erfc(|z| / √2)
    return np.where(z >= 0, 1.0 - half_erfc, half_erfc)


def standardized_margin(log_targets: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """(M, H) z = (log target − mean) / sd; with sd = 0, +inf where the mean reaches the target, else −inf."""
    margin = log_targets[:, None] - mean
    with np.errstate(divide="ignore", invalid="ignore"):
        z = margin / sd
    z = np.where(sd > 0, z, np.where(margin >= 0, np.inf, -np.inf))
    return np.where(np.isnan(z), -np.inf, z)


def crossing_summary(z: np.ndarray, levels: np.ndarray, budgets: np.ndarray) -> DemandSummary:
    """The :class:`DemandSummary` of standardized margins z (M, H) (see the module docstring).

    Args:
        z: (M, H) z of reports 1 … H ahead.
        levels: (Q,) quantile levels.
        budgets: (M,) or (M, J) int64 in [0, H].
    """
    M, H = z.shape
    running = np.maximum.accumulate(z, axis=1) if H else z
    thresholds = np.array([NormalDist().inv_cdf(q) for q in levels.tolist()] + [0.0])  # the median last
    before = (running[:, None, :] < thresholds[None, :, None]).sum(axis=2)  # (M, Q + 1) reports short of each level
    demand = np.where(before < H, before + 1.0, np.inf)
    flat = budgets.reshape(M, -1 if M else 1)
    at = np.take_along_axis(running, np.maximum(flat - 1, 0), axis=1)
    p = np.where(flat > 0, normal_cdf(at), 0.0).reshape(budgets.shape)
    return DemandSummary(levels=levels, median=demand[:, -1], quantiles=demand[:, :-1], p_within_budget=p)


class ForecastPredictor(Predictor):
    """A predictor that fits a model per task and forecasts Gaussian future log losses.

    Subclasses implement :meth:`fit` (histories → fitted model of the M tasks, an object with a
    ``lengths`` (M,) attribute: reports seen) and :meth:`forecast` (fitted model → (M, H) mean and sd of
    the log loss of reports 1 … H ahead).
    """

    @abc.abstractmethod
    def fit(self, histories: Sequence[np.ndarray]) -> Any:
        """The fitted model of M histories (reported losses, oldest first)."""

    @abc.abstractmethod
    def forecast(self, model: Any) -> tuple[np.ndarray, np.ndarray]:
        """(M, H) mean and standard deviation of the log loss of the reports 1 … H ahead."""

    def summarize(self, model: Any, targets: np.ndarray, budgets: np.ndarray) -> DemandSummary:
        """The summary of a fitted model; ``targets`` (M,) and ``budgets`` as :meth:`predict` takes them."""
        targets, budgets = self._check_targets_and_budgets(targets, budgets, model.lengths.size)
        return self._summarize(model, targets, budgets)

    def _summarize(self, model: Any, targets: np.ndarray, budgets: np.ndarray) -> DemandSummary:
        mean, sd = self.forecast(model)
        z = standardized_margin(np.log(targets), mean, sd)
        return crossing_summary(z, self.levels, budgets)

    def _predict(self, histories: list[np.ndarray], targets: np.ndarray, budgets: np.ndarray,
                 oracle: Mapping[str, np.ndarray] | None) -> DemandSummary:
        return self._summarize(self.fit(histories), targets, budgets)

    def _ahead(self) -> np.ndarray:
        """(1, H) float64 the reports ahead j = 1 … H that a forecast covers."""
        return np.arange(1, self.horizon + 1, dtype=np.float64)[None, :]
