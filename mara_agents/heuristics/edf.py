"""EDF: serve the N active tasks with the earliest deadlines."""

from __future__ import annotations

import numpy as np

from mara_agents.heuristics.base import STEPS_TO_DEADLINE, PriorityAgent, slot_steps


class EDF(PriorityAgent):
    """Earliest deadline first (ties by slot)."""

    def priority(self, observation: np.ndarray, n_slots: int) -> np.ndarray:
        return slot_steps(observation, n_slots, STEPS_TO_DEADLINE)
