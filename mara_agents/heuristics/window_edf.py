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

import numpy as np

from core_env.observation import parse_observation
from mara_agents.heuristics.edf import EDF

#: Factor fitted on seeded v1 ``id`` train workloads at the training load (grid 0.1, 0.2, ..., 1.5).
FACTOR = 0.5


class WindowEDF(EDF):
    """EDF with the window-only admission rule of the module docstring (demoted tasks on spare nodes)."""

    def __init__(self, factor: float = FACTOR) -> None:
        factor = float(factor)
        if not np.isfinite(factor) or factor < 0:
            raise ValueError(f"WindowEDF factor must be a finite number >= 0, got {factor!r}")
        self.factor = factor

    def demoted(self, observation: np.ndarray, admitted: np.ndarray) -> np.ndarray:
        parsed = parse_observation(observation, admitted.shape[1])
        left = parsed.steps_to_deadline
        window = parsed.age + left
        guess = self.factor * window - parsed.node_steps
        return admitted & (guess > left)
