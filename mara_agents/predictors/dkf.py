"""DKF (LaiRA): a Kalman filter over a drifting power law with second-order parameter dynamics.

LaiRA (Wang, Liu, Zhou, AAAI 2026, §"Dynamic Kalman Filtering") lets the power law's parameters drift:
r_n = ln ℓ(s_n) = H_nᵀΘ_n + v_n with state Θ = [θ; θ̇; θ̈] ∈ R⁶, θ = [θ₁ = −b, θ₂ = ln a],
H_n = [ln s_n, 1, 0, 0, 0, 0], v ~ N(0, R), and Θ_{n+1} = FΘ_n + w, w ~ N(0, Q), with

    F(Δ) = [[I, ΔI, ½Δ²I], [0, I, ΔI], [0, 0, I]]   (2×2 blocks).

Filtering is the textbook predict/update (the gain L = P⁻H / (R + HᵀP⁻H)). LaiRA's look-ahead
feasibility check extrapolates the state D reports ahead, Θ̂_{n+D} = F^D Θ̂_n = F(DΔ) Θ̂_n, and calls a
task feasible when â·s_{n+D}^(−b̂) ≤ ε: :meth:`DKF.lookahead`.

Our adaptations: s_n = n node-steps and one transition per report (Δ per node-step; batches per
node-step are not observed); LaiRA gives no values for Q, R, the prior or Δ, so ours are defaults to
tune. For the demand summary the forecast of report L + j is the mean log loss H_{L+j}ᵀF(jΔ)Θ̂ with
variance gᵀPg, g = F(jΔ)ᵀH_{L+j}: the uncertainty of the current state carried forward (future
process noise is left out), turned into a demand distribution by
:mod:`mara_agents.predictors.forecast`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from core_env.curves import LOSS_FLOOR
from mara_agents.predictors.forecast import ForecastPredictor, pad_histories
from mara_agents.protocols import HORIZON, QUANTILE_LEVELS, DemandSummary

STATE = ("theta1", "theta2", "theta1_rate", "theta2_rate", "theta1_accel", "theta2_accel")


def transition(delta: float) -> np.ndarray:
    """(6, 6) F(Δ) as a matrix (the filter applies it block by block); F(Δ)^j = F(jΔ)."""
    eye = np.eye(2)
    return np.block([[eye, delta * eye, 0.5 * delta**2 * eye], [0 * eye, eye, delta * eye], [0 * eye, 0 * eye, eye]])


@dataclasses.dataclass
class DKFFit:
    """Filtered states of M tasks after their last report."""

    state: np.ndarray  # (M, 6) Θ̂ (order: STATE)
    cov: np.ndarray  # (M, 6, 6) P
    lengths: np.ndarray  # (M,) int64 reports seen


@dataclasses.dataclass
class DKFState:
    """One task's filter, updated in O(1) per report."""

    predictor: DKF
    state: np.ndarray  # (6,)
    cov: np.ndarray  # (6, 6)
    steps: int = 0

    def update(self, loss: float) -> None:
        """Add the task's next reported loss (positive, finite)."""
        if not (np.isfinite(loss) and loss > 0):
            raise ValueError(f"a reported loss must be positive and finite, got {loss!r}")
        state, cov = self.predictor._step(self.state[None], self.cov[None], self.steps, np.array([np.log(max(float(loss), LOSS_FLOOR))]))
        self.state, self.cov, self.steps = state[0], cov[0], self.steps + 1


class DKF(ForecastPredictor):
    """LaiRA's dynamic Kalman filter (see the module docstring).

    Args:
        delta: Δ, transition step per report (node-step).
        observation_noise: √R, standard deviation of a report's log loss around the curve.
        process_noise: standard deviations of w per report for (θ, θ̇, θ̈) (each for both components).
        prior: prior standard deviations of (θ, θ̇, θ̈); the prior mean is 0 (a flat curve at loss 1).
        horizon, levels: see :class:`mara_agents.protocols.Predictor`.
    """

    name = "dkf"

    def __init__(self, delta: float = 1.0, observation_noise: float = 0.05, process_noise: Sequence[float] = (1e-3, 1e-5, 1e-7),
                 prior: Sequence[float] = (3.0, 1e-3, 1e-5), horizon: int = HORIZON, levels: Sequence[float] = QUANTILE_LEVELS) -> None:
        super().__init__(horizon, levels)
        process_noise, prior = np.asarray(process_noise, dtype=np.float64), np.asarray(prior, dtype=np.float64)
        if not delta > 0 or not observation_noise > 0:
            raise ValueError(f"delta and observation_noise must be > 0, got {delta!r} and {observation_noise!r}")
        if process_noise.shape != (3,) or prior.shape != (3,) or np.any(process_noise < 0) or np.any(prior <= 0):
            raise ValueError("process_noise (>= 0) and prior (> 0) must give 3 standard deviations: θ, θ̇, θ̈")
        self.delta, self.observation_noise = float(delta), float(observation_noise)
        self.Q = np.diag(np.repeat(process_noise**2, 2))
        self.prior_cov = np.diag(np.repeat(prior**2, 2))

    # ------------------------------------------------------------------ filtering
    def state(self) -> DKFState:
        """A fresh per-task filter at the prior."""
        return DKFState(self, np.zeros(6), self.prior_cov.copy())

    def _step(self, state: np.ndarray, cov: np.ndarray, seen: int, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The next report of M filters that have each seen ``seen`` reports: transition (except before
        a first report), then the measurement update.

        Args:
            state: (M, 6); cov: (M, 6, 6); r: (M,) the reports' log losses.
        """
        if seen > 0:
            state = self._transition(state, 1)
            cov = self._transition(self._transition(cov, 1), 2) + self.Q
        u = np.log(seen + 1.0)
        ph = cov[:, :, 0] * u + cov[:, :, 1]  # P H, (M, 6)
        innovation_var = ph[:, 0] * u + ph[:, 1] + self.observation_noise**2
        gain = ph / innovation_var[:, None]
        residual = r - (state[:, 0] * u + state[:, 1])
        state = state + gain * residual[:, None]
        cov = cov - gain[:, :, None] * ph[:, None, :]
        return state, 0.5 * (cov + cov.transpose(0, 2, 1))

    def _transition(self, x: np.ndarray, axis: int) -> np.ndarray:
        """F applied along ``axis`` (1 or 2, of length 6) of ``x``: F·Θ for states (M, 6), F·P (axis 1)
        or P·Fᵀ (axis 2) for covariances (M, 6, 6).

        Written out per block rather than as a matrix product, so that each task's result is the same
        in any batch (a BLAS product may sum in a batch-dependent order)."""
        def block(i: int) -> np.ndarray:
            return x[:, 2 * i : 2 * i + 2] if axis == 1 else x[:, :, 2 * i : 2 * i + 2]

        d = self.delta
        return np.concatenate([block(0) + d * block(1) + (0.5 * d * d) * block(2), block(1) + d * block(2), block(2)], axis=axis)

    def fit(self, histories: Sequence[np.ndarray]) -> DKFFit:
        """Filter M histories (reported losses, oldest first) in one pass over their reports."""
        log_losses, lengths = pad_histories([np.asarray(h, dtype=np.float64) for h in histories])
        order = np.argsort(-lengths, kind="stable")  # longest first: the tasks still filtering are a prefix
        log_losses, by_length = log_losses[order], lengths[order]
        M = lengths.size
        state, cov = np.zeros((M, 6)), np.broadcast_to(self.prior_cov, (M, 6, 6)).copy()
        for i in range(int(lengths.max(initial=0))):
            n = int(np.count_nonzero(by_length > i))
            state[:n], cov[:n] = self._step(state[:n], cov[:n], i, log_losses[:n, i])
        fitted = DKFFit(state=np.empty_like(state), cov=np.empty_like(cov), lengths=lengths)
        fitted.state[order], fitted.cov[order] = state, cov
        return fitted

    def fit_states(self, states: Sequence[DKFState]) -> DKFFit:
        """The fit of M tasks from their online filters."""
        return DKFFit(state=np.array([s.state for s in states]).reshape(-1, 6), cov=np.array([s.cov for s in states]).reshape(-1, 6, 6),
                      lengths=np.array([s.steps for s in states], dtype=np.int64))

    def predict_states(self, states: Sequence[DKFState], targets: np.ndarray, budgets: np.ndarray) -> DemandSummary:
        """:meth:`predict` from online filters instead of histories."""
        return self.summarize(self.fit_states(states), targets, budgets)

    # ------------------------------------------------------------------ extrapolation
    def _observation_rows(self, lengths: np.ndarray, ahead: np.ndarray) -> list[np.ndarray]:
        """The 6 entries of g = F(jΔ)ᵀH_{L+j}, each (M, J), for reports j = ``ahead`` (1, J) or (M, J) ahead."""
        u = np.log(np.maximum(lengths[:, None] + ahead, 1.0))  # s >= 1: a look-ahead of 0 reports from none
        tau = np.broadcast_to(ahead * self.delta, u.shape)
        half = 0.5 * tau * tau
        return [u, np.ones_like(u), u * tau, tau, u * half, half]

    def _mean_log_loss(self, model: DKFFit, ahead: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        g = self._observation_rows(model.lengths, ahead)
        return sum(g[i] * model.state[:, i, None] for i in range(6)), g

    def forecast(self, model: DKFFit) -> tuple[np.ndarray, np.ndarray]:
        mean, g = self._mean_log_loss(model, self._ahead())
        P = model.cov
        var = sum(g[i] * g[i] * P[:, i, i, None] for i in range(6))
        var = var + 2 * sum(g[i] * g[j] * P[:, i, j, None] for i in range(6) for j in range(i + 1, 6))
        return mean, np.sqrt(np.maximum(var, 0.0))

    def lookahead(self, histories: Sequence[np.ndarray], targets: np.ndarray, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """LaiRA's look-ahead feasibility check.

        Args:
            histories: M reported-loss histories; targets: (M,); budgets: (M,) node-steps D left (as
                :meth:`predict` takes them: beyond the horizon counts as the horizon).

        Returns:
            (M,) the loss predicted after D more reports, â·s_{L+D}^(−b̂) from Θ̂_{L+D} = F(DΔ)Θ̂_L, and
            (M,) bool whether it reaches the target (LaiRA's feasible set).
        """
        histories, targets, budgets = self._check(histories, targets, budgets)
        if budgets.ndim != 1:
            raise ValueError(f"lookahead takes one budget per task, (M,), got {budgets.shape}")
        mean, _ = self._mean_log_loss(self.fit(histories), budgets[:, None].astype(np.float64))
        loss = np.exp(mean[:, 0])
        return loss, loss <= targets
