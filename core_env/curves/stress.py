"""The stress scenario's two constructed curves (its workload: :func:`core_env.workload.stress_workload`)."""

from __future__ import annotations

import functools

import numpy as np

from core_env.curves.bank import NON_LEARNER, CurveBank


@functools.lru_cache(maxsize=None)
def stress_bank() -> CurveBank:
    """Two deterministic curves: a learner (reported loss 1/(1+m/4)) and a flat non-learner."""
    learner = 1.0 / (1.0 + np.arange(64) / 4.0)
    return CurveBank("stress", [learner, np.ones(64)], ["stress_learner", "stress_decoy"], [0, NON_LEARNER])
