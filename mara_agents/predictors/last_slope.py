"""Last-slope baseline: extrapolate the log-loss slope of the last k reports in a straight line.

The simplest predictor a prediction benchmark should beat. With L reports r_1 … r_L (log losses) and
k' = min(k, L − 1), the slope per node-step is m = (r_L − r_{L−k'}) / k'; the predicted demand is the
first j >= 1 with r_L + m·j <= log target, i.e. ceil((log target − r_L) / m) when m < 0 (at least 1),
and never (inf) when m >= 0 or fewer than 2 reports exist (1 when the last report already reached the
target). A point mass: every quantile is that demand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from mara_agents.predictors.forecast import pad_histories
from mara_agents.protocols import HORIZON, QUANTILE_LEVELS, DemandSummary, Predictor


class LastSlope(Predictor):
    """Straight-line extrapolation of the last ``k`` reports' log-loss slope (see the module docstring)."""

    name = "last_slope"

    def __init__(self, k: int = 5, horizon: int = HORIZON, levels: Sequence[float] = QUANTILE_LEVELS) -> None:
        super().__init__(horizon, levels)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        self.k = int(k)

    def _predict(self, histories: list[np.ndarray], targets: np.ndarray, budgets: np.ndarray,
                 oracle: Mapping[str, np.ndarray] | None) -> DemandSummary:
        log_losses, lengths = pad_histories(histories)
        rows = np.arange(lengths.size)
        span = np.minimum(self.k, lengths - 1)
        last = log_losses[rows, np.maximum(lengths - 1, 0)]
        earlier = log_losses[rows, np.maximum(lengths - 1 - span, 0)]
        gap = np.log(targets) - last  # >= 0: already at the target
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = np.where(span > 0, (last - earlier) / np.maximum(span, 1), 0.0)
            steps = np.where(slope < 0, np.ceil(gap / slope), np.inf)
        demand = np.where((lengths > 0) & (gap >= 0), 1.0, np.where(span > 0, np.maximum(steps, 1.0), np.inf))
        return DemandSummary.point_mass(demand, budgets, self.levels, self.horizon)
