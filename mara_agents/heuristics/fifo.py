"""FIFO: serve the N oldest active tasks; the lowest node gets the oldest."""

from __future__ import annotations

import numpy as np

from core_env.observation import parse_observation
from mara_agents.heuristics.base import PriorityAgent


class FIFO(PriorityAgent):
    """First in, first out by task age (ties by slot)."""

    def priority(self, observation: np.ndarray, n_slots: int) -> np.ndarray:
        return -parse_observation(observation, n_slots).age
