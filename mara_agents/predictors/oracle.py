"""Oracle predictor: the hidden remaining demand, as a point mass. For oracle rows only (strong heuristics that know the demand; the ceiling is the MILP).

It reads ``oracle={"remaining_demand": (M,)}``, the simulator's hidden nominal remaining demand
(:meth:`core_env.sim.Simulator.remaining_demand`, or :class:`core_env.wrappers.OracleDemand`'s infos),
and reports it with certainty: every quantile is the demand (``inf`` beyond the horizon) and
``p_within_budget`` is 1 exactly when the demand fits the budget. Never feed its features to an agent
whose results are reported as non-clairvoyant.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mara_agents.protocols import REMAINING_DEMAND, DemandSummary, Predictor


class OraclePredictor(Predictor):
    """The true remaining demand (needs ``oracle``; see the module docstring)."""

    name = "oracle"
    needs_oracle = True

    def _predict(self, histories: list[np.ndarray], targets: np.ndarray, budgets: np.ndarray,
                 oracle: Mapping[str, np.ndarray] | None) -> DemandSummary:
        return DemandSummary.point_mass(oracle[REMAINING_DEMAND], budgets, self.levels, self.horizon)
