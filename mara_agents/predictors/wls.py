"""WLS (LARA): discounted ridge regression of log loss on log cumulative node-steps.

LARA (Wang, Yu, Zhao, Zhou, ICML 2024) models a loss curve as a negative power law ℓ(s) = a·s^(−b) of
the cumulative data s, fitted in log–log space by weighted least squares and extrapolated to the
target. We use the estimator as LaiRA (AAAI 2026, Eq. 9) writes it: with X_i = [ln s_i, 1] and
r_i = ln ℓ_i,

    θ̂_n = argmin_θ λ‖θ‖² + Σ_{i ≤ n} γ^(n−i) (X_iᵀθ − r_i)² = (λI + A_n)⁻¹ b_n,
    A_n = Σ γ^(n−i) X_i X_iᵀ,  b_n = Σ γ^(n−i) r_i X_i,

so θ̂ = [θ₁, θ₂] = [−b̂, ln â]. A and b follow the O(1) recursion A ← γA + XXᵀ, b ← γb + rX
(:class:`WLSState`); the batch API (:meth:`WLS.fit`) computes the same sums at once.

Our adaptations for discrete nodes (docs/agents.md, "WLS (LARA)"): s_i = i, the node-steps received when report i was made
(the batches per node-step are not observed; with nominal service s is proportional to the data); and
an uncertainty for the demand summary. The fit is read as a Gaussian posterior θ ~ N(θ̂, σ̂²(λI + A)⁻¹)
with σ̂² the discounted residual variance, shrunk towards a prior noise level σ₀ with weight ν₀:
σ̂² = (RSS_γ + ν₀σ₀²) / (max(n_γ − 2, 0) + ν₀), n_γ = Σ γ^(n−i). On an exact power law RSS = 0, and
with ν₀ = 0 the summary is a point mass at the extrapolated crossing. The demand distribution is then
derived by :mod:`mara_agents.predictors.forecast`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from core_env.curves import LOSS_FLOOR
from mara_agents.predictors.forecast import ForecastPredictor, pad_histories
from mara_agents.protocols import HORIZON, QUANTILE_LEVELS, DemandSummary

#: The discounted sums a fit needs, in order (u = ln s, r = ln loss, "1" is the discounted count n_γ).
SUMS = ("uu", "u", "1", "ur", "r", "rr")


def _terms(u: np.ndarray, r: np.ndarray) -> np.ndarray:
    """(..., 6) the terms of :data:`SUMS` for points (u, r)."""
    return np.stack([u * u, u, np.ones_like(u), u * r, r, r * r], axis=-1)


@dataclasses.dataclass
class WLSFit:
    """Fitted WLS models of M tasks."""

    theta: np.ndarray  # (M, 2) [θ₁ = −b (slope of ln loss in ln s), θ₂ = ln a (intercept)]
    cov: np.ndarray  # (M, 2, 2) posterior covariance σ̂²(λI + A)⁻¹
    lengths: np.ndarray  # (M,) int64 reports seen


@dataclasses.dataclass
class WLSState:
    """One task's WLS sufficient statistics, updated in O(1) per report (LaiRA Eq. 9's recursion)."""

    discount: float
    sums: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(len(SUMS)))  # (6,) the discounted SUMS
    steps: int = 0  # reports seen

    def update(self, loss: float) -> None:
        """Add the task's next reported loss (positive, finite)."""
        if not (np.isfinite(loss) and loss > 0):
            raise ValueError(f"a reported loss must be positive and finite, got {loss!r}")
        self.steps += 1
        self.sums = self.discount * self.sums + _terms(np.log(float(self.steps)), np.log(max(float(loss), LOSS_FLOOR)))


class WLS(ForecastPredictor):
    """LARA's discounted least-squares power-law extrapolation (see the module docstring).

    Args:
        discount: γ in (0, 1], weight decay per report (γ = 1: ordinary ridge regression).
        ridge: λ > 0.
        noise: σ₀ >= 0, prior standard deviation of a report's log loss around the fitted curve.
        noise_weight: ν₀ >= 0, how many reports the prior noise level counts as (0: residuals only).
        horizon, levels: see :class:`mara_agents.protocols.Predictor`.
    """

    name = "wls"

    def __init__(self, discount: float = 0.9, ridge: float = 1e-6, noise: float = 0.05, noise_weight: float = 2.0,
                 horizon: int = HORIZON, levels: Sequence[float] = QUANTILE_LEVELS) -> None:
        super().__init__(horizon, levels)
        if not 0 < discount <= 1:
            raise ValueError(f"discount must be in (0, 1], got {discount!r}")
        if not ridge > 0:
            raise ValueError(f"ridge must be > 0, got {ridge!r}")
        if not (noise >= 0 and noise_weight >= 0):
            raise ValueError(f"noise and noise_weight must be >= 0, got {noise!r} and {noise_weight!r}")
        self.discount, self.ridge, self.noise, self.noise_weight = float(discount), float(ridge), float(noise), float(noise_weight)

    # ------------------------------------------------------------------ online API
    def state(self) -> WLSState:
        """A fresh per-task state (no reports yet) with this predictor's discount."""
        return WLSState(self.discount)

    def fit_states(self, states: Sequence[WLSState]) -> WLSFit:
        """The fit of M tasks from their online states."""
        sums = np.array([s.sums for s in states], dtype=np.float64).reshape(len(states), len(SUMS))
        return self._fit_sums(sums, np.array([s.steps for s in states], dtype=np.int64))

    def predict_states(self, states: Sequence[WLSState], targets: np.ndarray, budgets: np.ndarray) -> DemandSummary:
        """:meth:`predict` from online states instead of histories."""
        return self.summarize(self.fit_states(states), targets, budgets)

    # ------------------------------------------------------------------ batch API
    def fit(self, histories: Sequence[np.ndarray]) -> WLSFit:
        """The fit of M histories (reported losses, oldest first), all at once."""
        log_losses, lengths = pad_histories([np.asarray(h, dtype=np.float64) for h in histories])
        L = log_losses.shape[1]
        # Reports along axis 0, summed one report at a time: strictly in order (np.sum may sum pairwise,
        # depending on the shape), so each task's sums depend neither on the padding nor on the batch.
        r = np.ascontiguousarray(log_losses.T)  # (L, M)
        age = lengths[None, :] - 1 - np.arange(L)[:, None]  # reports after report i, (L, M)
        weight = np.where(age >= 0, self.discount ** np.arange(L, dtype=np.float64)[np.clip(age, 0, L - 1)], 0.0)
        u = np.log(np.arange(1.0, L + 1.0))[:, None]
        wr = weight * r
        terms = np.stack([weight * (u * u), weight * u, weight, wr * u, wr, wr * r], -1)  # (L, M, 6)
        sums = terms[0].copy()
        for row in terms[1:]:
            sums += row
        return self._fit_sums(sums, lengths)

    def _fit_sums(self, sums: np.ndarray, lengths: np.ndarray) -> WLSFit:
        """Fits from (M, 6) discounted sums: the 2×2 ridge solve and residual variance, vectorized."""
        suu, su, s1, sur, sr, srr = sums.T
        v00, v01, v11 = suu + self.ridge, su, s1 + self.ridge  # V = λI + A
        det = v00 * v11 - v01 * v01  # > 0: V is positive definite
        inv = np.stack([np.stack([v11, -v01], -1), np.stack([-v01, v00], -1)], -2) / det[:, None, None]  # (M, 2, 2) V⁻¹
        b = np.stack([sur, sr], -1)
        theta = np.einsum("mij,mj->mi", inv, b)
        t0, t1 = theta.T
        rss = np.maximum(srr - 2 * (t0 * sur + t1 * sr) + t0 * t0 * suu + 2 * t0 * t1 * su + t1 * t1 * s1, 0.0)
        dof = np.maximum(s1 - 2.0, 0.0) + self.noise_weight
        with np.errstate(divide="ignore", invalid="ignore"):
            variance = np.where(dof > 0, (rss + self.noise_weight * self.noise**2) / dof, 0.0)
        return WLSFit(theta=theta, cov=variance[:, None, None] * inv, lengths=lengths)

    def forecast(self, model: WLSFit) -> tuple[np.ndarray, np.ndarray]:
        u = np.log(model.lengths[:, None] + self._ahead())  # ln s of the reports ahead
        (t0, t1), c = model.theta.T[:, :, None], model.cov
        mean = t0 * u + t1
        var = c[:, 0, 0, None] * u * u + 2 * c[:, 0, 1, None] * u + c[:, 1, 1, None]
        return mean, np.sqrt(np.maximum(var, 0.0))
