"""EDF: serve the N active tasks with the earliest deadlines."""

from __future__ import annotations

import numpy as np

from core_env.observation import parse_observation
from mara_agents.heuristics.base import PriorityAgent


class EDF(PriorityAgent):
    """Earliest deadline first (ties by slot)."""

    def priority(self, observation: np.ndarray, n_slots: int) -> np.ndarray:
        return parse_observation(observation, n_slots).steps_to_deadline
