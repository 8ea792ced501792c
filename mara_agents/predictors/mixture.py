"""An equal-weight mixture of predictors: the average of their posteriors (Bayesian model averaging with a
flat prior over the models), ``PREDICTORS["fm+pfn"]`` for the flow-matching and PFN predictors.

Each component gives its CDF on the node-step grid up to its own horizon
(:meth:`~mara_agents.protocols.Predictor.demand_cdf`); beyond it a component keeps its last value (its
censored mass stays beyond). The mixture's horizon is the largest component's; its median and quantiles are
read off the averaged CDF (the first b with F(b) ≥ q, ``inf`` if none), so they agree with
``p_within_budget``. A mixture reads each task's deadline window when any component does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from mara_agents.protocols import DemandSummary, Predictor, QUANTILE_LEVELS


class MixturePredictor(Predictor):
    """The average posterior of ``components`` (see the module docstring).

    Args:
        components: two or more predictors (not oracle ones).
        levels: quantile levels of the summaries.
    """

    name = "mixture"

    def __init__(self, components: Sequence[Predictor], levels: Sequence[float] = QUANTILE_LEVELS) -> None:
        components = list(components)
        if len(components) < 2 or not all(isinstance(c, Predictor) for c in components):
            raise TypeError(f"a mixture needs two or more Predictors, got {[type(c).__name__ for c in components]}")
        if any(c.needs_oracle for c in components):
            raise ValueError("a mixture of predictors cannot include an oracle predictor")
        super().__init__(max(c.horizon for c in components), levels)
        self.components = components
        self.uses_window = any(c.uses_window for c in components)

    def _predict(self, histories: list[np.ndarray], targets: np.ndarray, budgets: np.ndarray,
                 oracle: Mapping[str, np.ndarray] | None) -> DemandSummary:
        return DemandSummary.from_cdf(self._cdf(histories, targets, None), budgets, self.levels)

    def _predict_windowed(self, histories: list[np.ndarray], targets: np.ndarray, budgets: np.ndarray,
                          windows: np.ndarray) -> DemandSummary:
        return DemandSummary.from_cdf(self._cdf(histories, targets, windows), budgets, self.levels)

    def _cdf(self, histories: list[np.ndarray], targets: np.ndarray, windows: np.ndarray | None) -> np.ndarray:
        """(M, horizon + 1) the averaged CDF."""
        total = np.zeros((len(histories), self.horizon + 1))
        for component in self.components:
            cdf = component.demand_cdf(histories, targets, windows=windows if component.uses_window else None)
            total[:, : cdf.shape[1]] += cdf
            total[:, cdf.shape[1]:] += cdf[:, -1:]  # beyond its horizon a component adds no mass
        return total / len(self.components)
