"""What the predictive allocators share: observed tasks, cached predictions, and one decision per step.

A :class:`PredictiveAllocator` rebuilds the tasks from observations (:class:`ObservedTasks`), predicts
the remaining demand of those whose history changed (:class:`PredictionCache`, with any predictor,
the oracle included), and hands an :class:`Estimates` to its :meth:`~PredictiveAllocator.decide`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from mara_agents.observed import ObservedTasks
from mara_agents.predictors.cache import PredictionCache
from mara_agents.protocols import REMAINING_DEMAND, Agent, Predictor


@dataclasses.dataclass
class Estimates:
    """What an allocator knows about the K slots of B environments at one step ((B, K) arrays)."""

    tasks: ObservedTasks  # histories, steps, ages, targets, budgets
    demand: np.ndarray  # predicted (median) remaining demand, nominal node-steps; inf when censored; 0 when empty
    p_within_budget: np.ndarray  # probability that the demand fits the budget
    n_nodes: int
    #: (B, K, H + 1) the posterior: P(demand ≤ b) for b = 0 … H node-steps (valid for b up to each task's
    #: budget; 0 for empty slots); None where an allocator was handed medians only.
    cdf: np.ndarray | None = None

    @property
    def active(self) -> np.ndarray:
        return self.tasks.active

    @property
    def budget(self) -> np.ndarray:
        """Steps to deadline (node-steps one node can still give the task)."""
        return self.tasks.budget

    @property
    def steps(self) -> np.ndarray:
        return self.tasks.steps

    @property
    def laxity(self) -> np.ndarray:
        """Budget minus predicted demand (−inf when the demand is censored)."""
        return np.where(self.active, self.budget - np.ceil(self.demand), 0.0)

    @property
    def feasible(self) -> np.ndarray:
        """Active tasks whose predicted demand fits their budget on one node."""
        return self.active & (np.ceil(self.demand) <= self.budget)


class PredictiveAllocator(Agent):
    """Base of the allocators that read a predictor (see the module docstring).

    Args:
        predictor: any :class:`Predictor`; with an oracle predictor the allocator is an oracle agent.
    """

    def __init__(self, predictor: Predictor) -> None:
        if not isinstance(predictor, Predictor):
            raise TypeError(f"{type(self).__name__} needs a Predictor, got {type(predictor).__name__}")
        self.predictor = predictor
        self.needs_oracle = predictor.needs_oracle
        self.tasks = ObservedTasks()
        self.cache = PredictionCache(predictor)

    def reset(self, batch_size: int, n_nodes: int, n_slots: int) -> None:
        self.tasks.reset(batch_size, n_slots)
        self.cache.reset()

    def act(self, observation: np.ndarray, action_mask: np.ndarray, oracle: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        if observation.ndim != 3 or action_mask.ndim != 3 or observation.shape[:2] != action_mask.shape[:2]:
            raise ValueError(f"expected observation (B, N, D) and action_mask (B, N, K+1), got {observation.shape} and {action_mask.shape}")
        n_slots = action_mask.shape[2] - 1
        self.tasks.update(observation, n_slots)
        demand = None
        if self.needs_oracle:
            if oracle is None or REMAINING_DEMAND not in oracle:
                raise ValueError(f"{type(self).__name__} with an oracle predictor needs oracle={{{REMAINING_DEMAND!r}: (B, K) array}}")
            demand = np.asarray(oracle[REMAINING_DEMAND], dtype=np.float64)
        self.cache.update(self.tasks.slot_tasks(), demand)
        active = self.tasks.active
        estimates = Estimates(self.tasks, np.where(active, self.cache.median, 0.0), self.cache.p_within_budget, observation.shape[1],
                              self.cache.cdf)
        return self.decide(estimates)

    def decide(self, estimates: Estimates) -> np.ndarray:
        """(B, N) int64 actions from the step's estimates."""
        raise NotImplementedError
