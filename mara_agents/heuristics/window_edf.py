"""Window-EDF: a leak probe. EDF with admission whose demand guess reads only the deadline window.

It sees no learning curve at all: a task's remaining demand is guessed as ``factor · window − k``
(window = age + steps to deadline, k = node-steps received), tasks whose guess exceeds their steps to
deadline are demoted to nodes left over, and the rest are served by earliest deadline. If the workload
derives deadlines from the hidden demand (as v0 did), this rule schedules almost as well as an agent
that predicts demand from the curve; on a workload that hides the demand it should be no better than
EDF. Its ``factor`` is fitted on seeded *train* workloads (``python -m benchmarks leakage`` refits it
and reports the fit); :data:`FACTOR` is the value fitted on v1 ``id`` train workloads.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mara_agents.heuristics.base import AGE, STEPS_TO_DEADLINE, serve_in_order, slot_steps
from mara_agents.heuristics.edf import EDF
from core_env.features import NODE_STEPS

#: Factor fitted on seeded v1 ``id`` train workloads at the training load (grid 0.05..1.5).
FACTOR = 0.5


class WindowEDF(EDF):
    """EDF with the window-only admission rule of the module docstring (demoted tasks on spare nodes)."""

    def __init__(self, factor: float = FACTOR) -> None:
        factor = float(factor)
        if not np.isfinite(factor) or factor < 0:
            raise ValueError(f"WindowEDF factor must be a finite number >= 0, got {factor!r}")
        self.factor = factor

    def act(self, observation: np.ndarray, action_mask: np.ndarray, oracle: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        if observation.ndim != 3 or action_mask.ndim != 3 or observation.shape[:2] != action_mask.shape[:2]:
            raise ValueError(f"expected observation (B, N, D) and action_mask (B, N, K+1), got {observation.shape} and {action_mask.shape}")
        n_slots = action_mask.shape[2] - 1
        active = action_mask[..., 1:].all(axis=1).astype(bool)
        left = slot_steps(observation, n_slots, STEPS_TO_DEADLINE)
        window = slot_steps(observation, n_slots, AGE) + left
        guess = self.factor * window - slot_steps(observation, n_slots, NODE_STEPS)
        demoted = active & (guess > left)
        return serve_in_order(left, active, observation.shape[1], tier=demoted.astype(np.int8))
