"""POW4 and MMF4: four-parameter learning-curve models fitted per history (strong rows of LCDB 1.1).

Each history is fitted in log space, r_i = ln f(i; θ) − ln ℓ_i over its reports i = 1 … k, by a
batched Levenberg–Marquardt (every history at once, a fixed number of iterations, a step accepted per
history only when it lowers that history's cost), with a weak ridge ``τ‖p − p₀‖²`` towards a start
p₀ read off the history, so one or two reports give a defined fit. Parameters are logs of positive
quantities:

* ``pow4``: f(n) = c + b · (n + d)^(−α), p = ln (c, b, d, α);
* ``mmf4`` (Morgan–Mercer–Flodin): f(n) = (a · β + c · n^δ) / (β + n^δ), p = ln (a, c, β, δ): from a
  at n = 0 to c as n grows.

The fit is read as a Gaussian posterior p ~ N(p̂, σ̂² (JᵀJ + τI)⁻¹) with σ̂² the residual variance
shrunk towards a prior noise level (as in :mod:`mara_agents.predictors.wls`), and the forecast of ln f
at each report ahead is Gaussian by the delta method; :mod:`mara_agents.predictors.forecast` turns it
into the demand summary. Numpy only; the Jacobian is by forward differences.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from mara_agents.predictors.forecast import ForecastPredictor, pad_histories
from mara_agents.protocols import HORIZON, QUANTILE_LEVELS

#: Models: name -> number of parameters (all four).
MODELS = ("pow4", "mmf4")


def log_curve(model: str, p: np.ndarray, n: np.ndarray) -> np.ndarray:
    """ln f(n; p) for parameters p (..., 4) broadcast against node-steps n."""
    p = np.clip(p, -30.0, 30.0)
    if model == "pow4":
        c, b, d, alpha = (np.exp(p[..., i, None]) for i in range(4))
        return np.log(c + b * np.exp(-alpha * np.log(n + d)))
    if model == "mmf4":
        a, c, beta, delta = (np.exp(p[..., i, None]) for i in range(4))
        power = np.exp(np.minimum(delta * np.log(n), 600.0))
        return np.log((a * beta + c * power) / (beta + power))
    raise ValueError(f"unknown curve model {model!r}; models are {list(MODELS)}")


def start(model: str, log_losses: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(M, 4) starting parameters read off each history (first, lowest and current loss, length)."""
    valid = np.arange(log_losses.shape[1]) < lengths[:, None]
    first = np.exp(log_losses[:, 0])
    low = np.exp(np.where(valid, log_losses, np.inf).min(axis=1))
    k = np.maximum(lengths, 1).astype(np.float64)
    if model == "pow4":
        return np.log(np.column_stack([0.5 * low, np.maximum(first - 0.5 * low, 1e-6), np.ones_like(k), np.full_like(k, 0.5)]))
    if model == "mmf4":
        return np.log(np.column_stack([first, 0.5 * low, np.maximum(k / 2.0, 1.0), np.ones_like(k)]))
    raise ValueError(f"unknown curve model {model!r}; models are {list(MODELS)}")


@dataclasses.dataclass
class CurveFit:
    """Fitted curve models of M histories."""

    params: np.ndarray  # (M, 4)
    cov: np.ndarray  # (M, 4, 4) posterior covariance of the parameters
    lengths: np.ndarray  # (M,) int64 reports seen


class ParametricCurve(ForecastPredictor):
    """A four-parameter curve model fitted per history (see the module docstring).

    Args:
        model: ``"pow4"`` or ``"mmf4"``.
        iterations: Levenberg–Marquardt iterations.
        ridge: τ > 0, weight of the pull towards the starting parameters.
        noise, noise_weight: σ₀ and ν₀ of the residual variance's prior (as WLS).
        horizon, levels: see :class:`mara_agents.protocols.Predictor`.
    """

    def __init__(self, model: str = "pow4", iterations: int = 30, ridge: float = 1e-2, noise: float = 0.05, noise_weight: float = 2.0,
                 horizon: int = HORIZON, levels: Sequence[float] = QUANTILE_LEVELS) -> None:
        super().__init__(horizon, levels)
        if model not in MODELS:
            raise ValueError(f"unknown curve model {model!r}; models are {list(MODELS)}")
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise ValueError(f"iterations must be an int >= 1, got {iterations!r}")
        if not (ridge > 0 and noise >= 0 and noise_weight >= 0):
            raise ValueError(f"ridge must be > 0 and noise, noise_weight >= 0, got {ridge!r}, {noise!r}, {noise_weight!r}")
        self.model, self.iterations, self.ridge, self.noise, self.noise_weight = model, iterations, float(ridge), float(noise), float(noise_weight)
        self.name = model

    def _residuals(self, p: np.ndarray, p0: np.ndarray, n: np.ndarray, r: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """(M, L + 4) weighted residuals: the fit's, then the ridge's."""
        fit = np.where(valid, log_curve(self.model, p, n) - r, 0.0)
        return np.concatenate([fit, np.sqrt(self.ridge) * (p - p0)], axis=1)

    def _jacobian(self, p: np.ndarray, p0: np.ndarray, n: np.ndarray, r: np.ndarray, valid: np.ndarray, base: np.ndarray,
                  h: float = 1e-6) -> np.ndarray:
        """(M, L + 4, 4) forward differences of the residuals ``base`` at p."""
        columns = []
        for i in range(4):
            step = np.zeros(4)
            step[i] = h
            columns.append((self._residuals(p + step, p0, n, r, valid) - base) / h)
        return np.stack(columns, axis=-1)

    def fit(self, histories: Sequence[np.ndarray]) -> CurveFit:
        """Fits of M histories (reported losses, oldest first), all at once."""
        log_losses, lengths = pad_histories([np.asarray(h, dtype=np.float64) for h in histories])
        valid = np.arange(log_losses.shape[1]) < lengths[:, None]
        n = np.arange(1.0, log_losses.shape[1] + 1.0)[None, :]
        p0 = start(self.model, log_losses, lengths)
        p, damping = p0.copy(), np.full(len(p0), 1e-2)
        residual = self._residuals(p, p0, n, log_losses, valid)
        cost = (residual**2).sum(axis=1)
        eye = np.eye(4)
        for _ in range(self.iterations):
            jac = self._jacobian(p, p0, n, log_losses, valid, residual)
            jtj = np.einsum("mli,mlj->mij", jac, jac)
            grad = np.einsum("mli,ml->mi", jac, residual)
            system = jtj + damping[:, None, None] * (jtj * eye + 1e-9 * eye)
            trial = p - np.linalg.solve(system, grad[..., None])[..., 0]
            trial_residual = self._residuals(trial, p0, n, log_losses, valid)
            trial_cost = (trial_residual**2).sum(axis=1)
            better = np.isfinite(trial_cost) & (trial_cost < cost)
            p = np.where(better[:, None], trial, p)
            residual = np.where(better[:, None], trial_residual, residual)
            cost = np.where(better, trial_cost, cost)
            damping = np.clip(np.where(better, damping / 3.0, damping * 4.0), 1e-9, 1e9)
        jac = self._jacobian(p, p0, n, log_losses, valid, residual)
        precision = np.einsum("mli,mlj->mij", jac, jac) + 1e-9 * eye  # the ridge rows make it definite
        rss = np.where(valid, residual[:, : valid.shape[1]], 0.0).__pow__(2).sum(axis=1)
        dof = np.maximum(lengths - 4.0, 0.0) + self.noise_weight
        with np.errstate(divide="ignore", invalid="ignore"):
            variance = np.where(dof > 0, (rss + self.noise_weight * self.noise**2) / dof, 0.0)
        return CurveFit(params=p, cov=variance[:, None, None] * np.linalg.inv(precision), lengths=lengths)

    def forecast(self, model: CurveFit) -> tuple[np.ndarray, np.ndarray]:
        ahead = model.lengths[:, None] + self._ahead()  # (M, H) node-steps of the reports ahead
        mean = log_curve(self.model, model.params, ahead)
        grads = []
        for i in range(4):
            step = np.zeros(4)
            step[i] = 1e-5
            grads.append((log_curve(self.model, model.params + step, ahead) - log_curve(self.model, model.params - step, ahead)) / 2e-5)
        g = np.stack(grads, axis=-1)  # (M, H, 4)
        var = np.einsum("mhi,mij,mhj->mh", g, model.cov, g)
        return mean, np.sqrt(np.maximum(np.nan_to_num(var, nan=0.0, posinf=0.0), 0.0))


def pow4(**kwargs) -> ParametricCurve:
    """POW4 fitted per history."""
    return ParametricCurve("pow4", **kwargs)


def mmf4(**kwargs) -> ParametricCurve:
    """MMF4 fitted per history."""
    return ParametricCurve("mmf4", **kwargs)
