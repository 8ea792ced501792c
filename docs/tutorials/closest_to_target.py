"""Serve the tasks whose last reported loss is closest to their target first (ties by deadline)."""

import numpy as np

from core_env.observation import parse_observation
from mara_agents.heuristics.base import PriorityAgent


class ClosestToTarget(PriorityAgent):
    def priority(self, observation: np.ndarray, n_slots: int) -> np.ndarray:
        parsed = parse_observation(observation, n_slots)
        gap = parsed.log_gap                                               # log(last loss) − log(target)
        return gap * 1000.0 + parsed.steps_to_deadline / 1000.0            # a small gap first, then EDF
