"""LAS (Tiresias): serve the N active tasks that have received the least service so far."""

from __future__ import annotations

import numpy as np

from core_env.observation import parse_observation
from mara_agents.heuristics.base import PriorityAgent


class LAS(PriorityAgent):
    """Least attained service first (node-steps received; ties: the older task, then the lower slot).

    No prediction at all: a floor that shows what prediction buys (Tiresias, NSDI 2019, discretized
    to one node per task per step).
    """

    def priority(self, observation: np.ndarray, n_slots: int) -> np.ndarray:
        parsed = parse_observation(observation, n_slots)
        return parsed.node_steps * 100_000 - parsed.age
