"""Remaining-demand predictors behind :class:`mara_agents.protocols.Predictor`.

``PREDICTORS`` maps each name used in benchmarks and docs to a factory (call with no arguments for the
defaults). Everything here is numpy only except ``"fm"`` (the MARA flow-matching predictor, torch) and ``"pfn"``
(the prior-fitted network trained on a synthetic curve prior, which also reads each task's deadline
window; torch), ``"fm+pfn"`` and ``"pfn-ens"`` (equal-weight mixtures: of those two, and of five PFNs), which are
imported only when their factory is called and load the shipped checkpoints. :mod:`mara_agents.predictors.features` turns any predictor into per-slot
observation features (PettingZoo, Gymnasium and the batched simulator). See docs/agents.md.
"""

from __future__ import annotations

from mara_agents.predictors.dkf import DKF, DKFFit, DKFState
from mara_agents.predictors.forecast import ForecastPredictor
from mara_agents.predictors.last_slope import LastSlope
from mara_agents.predictors.oracle import OraclePredictor
from mara_agents.predictors.parametric import ParametricCurve, mmf4, pow4
from mara_agents.predictors.wls import WLS, WLSFit, WLSState
from mara_agents.protocols import HORIZON, QUANTILE_LEVELS, DemandSummary, Predictor



def flow_matching(**overrides):
    """The shipped MARA flow-matching predictor (imports torch; see flow_matching.FlowMatchingPredictor.load)."""
    from mara_agents.predictors.flow_matching import FlowMatchingPredictor

    return FlowMatchingPredictor.load(**overrides)


def pfn(**overrides):
    """The shipped PFN predictor, trained on the synthetic curve prior (imports torch; see pfn.PFNPredictor.load)."""
    from mara_agents.predictors.pfn import PFNPredictor

    return PFNPredictor.load(**overrides)


def fm_pfn(**overrides):
    """The equal-weight mixture of the shipped flow-matching and PFN predictors (imports torch; see mixture.py)."""
    from mara_agents.predictors.flow_matching import FlowMatchingPredictor
    from mara_agents.predictors.mixture import MixturePredictor
    from mara_agents.predictors.pfn import PFNPredictor  # (importing it rebinds this package's name ``pfn`` to the module)

    return MixturePredictor([FlowMatchingPredictor.load(), PFNPredictor.load()], **overrides)


#: The members of ``"pfn-ens"`` besides the shipped ``pfn.pt``: PFNs of the same architecture trained on the same curve
#: prior with other options (their manifests give each one's command): ``checkpoints/pfn_ensemble/<member>/pfn.pt``.
PFN_ENSEMBLE_MEMBERS = ("perstep", "bce", "wide", "wider")


def pfn_ensemble(**overrides):
    """The equal-weight mixture of the shipped PFN and the :data:`PFN_ENSEMBLE_MEMBERS` (imports torch; each
    checkpoint verified against its manifest on load; see docs/prediction.md for how it was chosen)."""
    from pathlib import Path

    from mara_agents.predictors.mixture import MixturePredictor
    from mara_agents.predictors.pfn import DEFAULT_CHECKPOINT, PFNPredictor

    folder = Path(DEFAULT_CHECKPOINT).parent / "pfn_ensemble"
    paths = [DEFAULT_CHECKPOINT, *(folder / member / "pfn.pt" for member in PFN_ENSEMBLE_MEMBERS)]
    return MixturePredictor([PFNPredictor.load(path) for path in paths], **overrides)


PREDICTORS = {"wls": WLS, "dkf": DKF, "last_slope": LastSlope, "oracle": OraclePredictor, "fm": flow_matching, "pfn": pfn, "fm+pfn": fm_pfn,
              "pfn-ens": pfn_ensemble,
              "pow4": pow4, "mmf4": mmf4}

__all__ = ["DKF", "DKFFit", "DKFState", "DemandSummary", "ForecastPredictor", "HORIZON", "LastSlope", "OraclePredictor",
           "PFN_ENSEMBLE_MEMBERS", "PREDICTORS", "ParametricCurve", "Predictor", "QUANTILE_LEVELS", "WLS", "WLSFit", "WLSState"]
