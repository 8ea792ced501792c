"""Random: serve N active tasks drawn uniformly at random, one node each (a seeded baseline)."""

from __future__ import annotations

import numpy as np

from mara_agents.heuristics.base import PriorityAgent


class RandomAgent(PriorityAgent):
    """Masked random scheduling: a fresh random order of the active tasks every step.

    Never idles a node while an active task is unserved, and never sends two nodes to one task, so it
    is the scheduler that knows nothing rather than one that wastes nodes.

    Args:
        seed: seed of the agent's own numpy Generator (the global RNG is never used).
    """

    def __init__(self, seed: int | None = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def priority(self, observation: np.ndarray, n_slots: int) -> np.ndarray:
        return self.rng.random((observation.shape[0], n_slots))
