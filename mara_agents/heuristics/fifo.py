"""FIFO: serve the N oldest active tasks; the lowest node gets the oldest."""

from __future__ import annotations

import numpy as np

from mara_agents.heuristics.base import AGE, PriorityAgent, slot_steps


class FIFO(PriorityAgent):
    """First in, first out by task age (ties by slot)."""

    def priority(self, observation: np.ndarray, n_slots: int) -> np.ndarray:
        return -slot_steps(observation, n_slots, AGE)
