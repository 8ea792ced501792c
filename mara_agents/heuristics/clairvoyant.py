"""Clairvoyant: EDF among the tasks that can still finish, knowing every task's hidden demand.

A strong heuristic that knows the demand, not a scheduler a cluster could run — and **not an upper
bound**: the MILP offline optimum (:func:`mara_agents.bounds.milp_ceiling`) beats it (a hand-made
instance in tests/test_ceilings.py; 72.2 vs 76.0 on the v1 ``id`` suite at the training load).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from core_env.observation import parse_observation
from mara_agents.heuristics.edf import EDF
from mara_agents.protocols import REMAINING_DEMAND


class Clairvoyant(EDF):
    """EDF with exact admission control: a task is admitted iff its remaining demand (nominal
    node-steps) is at most its steps to deadline; nodes beyond the admitted tasks idle."""

    needs_oracle = True

    def admit(self, observation: np.ndarray, active: np.ndarray, oracle: Mapping[str, np.ndarray] | None) -> np.ndarray:
        if oracle is None or REMAINING_DEMAND not in oracle:
            raise ValueError(f"Clairvoyant needs oracle={{{REMAINING_DEMAND!r}: (B, K) array}}, got {oracle!r}")
        remaining = np.asarray(oracle[REMAINING_DEMAND])
        if remaining.shape != active.shape:
            raise ValueError(f"oracle[{REMAINING_DEMAND!r}] must have shape (B, K) = {active.shape}, got {remaining.shape}")
        return active & (remaining <= parse_observation(observation, active.shape[1]).steps_to_deadline)
