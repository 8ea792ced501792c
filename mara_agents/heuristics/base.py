"""What the priority heuristics share: serving slots in priority order.

Every heuristic here is "rank the admitted tasks, give the first N to nodes 0..N-1": it differs only
in its ranking (:meth:`PriorityAgent.priority`) and, for oracle agents, in which tasks it admits
(:meth:`PriorityAgent.admit`). Admission is separate from ordering, so EDF with admission control is
EDF plus one override, not a second copy. They read observations with
:func:`core_env.observation.parse_observation`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mara_agents.protocols import Agent


def serve_in_order(priority: np.ndarray, admitted: np.ndarray, n_nodes: int, tier: np.ndarray | None = None) -> np.ndarray:
    """Give the admitted slots with the lowest priority values to nodes 0, 1, ... (one node each).

    Args:
        priority: (B, K) lower is served first; ties go to the lower slot.
        admitted: (B, K) bool slots that may be served.
        n_nodes: N.
        tier: optional (B, K) ints ranked before the priority (every tier-0 slot before any tier-1 slot).

    Returns:
        (B, N) int64 actions: node i serves the i-th slot of the order (action slot + 1), or idles
        (0) when fewer than i + 1 slots are admitted.
    """
    B, K = admitted.shape
    keys = (priority, ~admitted) if tier is None else (priority, tier, ~admitted)
    order = np.lexsort(keys, axis=1)[:, :n_nodes]  # admitted first, then by tier and priority
    actions = np.where(np.take_along_axis(admitted, order, axis=1), order + 1, 0)
    if n_nodes > K:
        actions = np.concatenate([actions, np.zeros((B, n_nodes - K), np.int64)], axis=1)
    return actions.astype(np.int64, copy=False)


class PriorityAgent(Agent):
    """A heuristic that serves the N admitted tasks of highest priority, one node each."""

    def priority(self, observation: np.ndarray, n_slots: int) -> np.ndarray:
        """(B, K) ranking key of every slot; lower is served first."""
        raise NotImplementedError

    def admit(self, observation: np.ndarray, active: np.ndarray, oracle: Mapping[str, np.ndarray] | None) -> np.ndarray:
        """(B, K) bool tasks that may be served; by default every active one."""
        return active

    def demoted(self, observation: np.ndarray, admitted: np.ndarray) -> np.ndarray | None:
        """(B, K) bool admitted tasks served only on nodes left over after the others, or None (default)."""
        return None

    def act(self, observation: np.ndarray, action_mask: np.ndarray, oracle: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        if observation.ndim != 3 or action_mask.ndim != 3 or observation.shape[:2] != action_mask.shape[:2]:
            raise ValueError(f"expected observation (B, N, D) and action_mask (B, N, K+1), got {observation.shape} and {action_mask.shape}")
        n_slots = action_mask.shape[2] - 1
        active = action_mask[..., 1:].all(axis=1).astype(bool)  # a slot every node may choose
        admitted = self.admit(observation, active, oracle)
        demoted = self.demoted(observation, admitted)
        tier = None if demoted is None else demoted.astype(np.int8)
        return serve_in_order(self.priority(observation, n_slots), admitted, observation.shape[1], tier)
