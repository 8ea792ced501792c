"""Remaining-demand predictors behind :class:`mara_agents.protocols.Predictor` (numpy only).

``PREDICTORS`` maps each name used in benchmarks and docs to its class (construct with no arguments
for the defaults). :mod:`mara_agents.predictors.features` turns any predictor into per-slot
observation features (PettingZoo, Gymnasium and the batched simulator). See docs/agents.md.
"""

from __future__ import annotations

from mara_agents.predictors.dkf import DKF, DKFFit, DKFState
from mara_agents.predictors.forecast import ForecastPredictor
from mara_agents.predictors.last_slope import LastSlope
from mara_agents.predictors.oracle import OraclePredictor
from mara_agents.predictors.wls import WLS, WLSFit, WLSState
from mara_agents.protocols import HORIZON, QUANTILE_LEVELS, DemandSummary, Predictor

PREDICTORS = {"wls": WLS, "dkf": DKF, "last_slope": LastSlope, "oracle": OraclePredictor}

__all__ = ["DKF", "DKFFit", "DKFState", "DemandSummary", "ForecastPredictor", "HORIZON", "LastSlope", "OraclePredictor",
           "PREDICTORS", "Predictor", "QUANTILE_LEVELS", "WLS", "WLSFit", "WLSState"]
