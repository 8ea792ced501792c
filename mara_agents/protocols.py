"""The Agent interface shared by heuristics and learned schedulers, and its PettingZoo adapter.

An agent decides for B environments at once: observations (B, N, D) float32 and action masks
(B, N, K+1) int8 in (the layout of :func:`core_env.features.observations`), actions (B, N) int64 out,
0 = idle and k = the task in slot k - 1. Oracle agents (upper bounds, not schedulers a cluster could
run) set ``needs_oracle = True`` and also receive the hidden remaining demand.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

#: The oracle key: (B, K) hidden nominal node-steps each slot's task still needs (inf if never, 0 when
#: empty), as returned by :meth:`core_env.sim.Simulator.remaining_demand`.
REMAINING_DEMAND = "remaining_demand"


class Agent(abc.ABC):
    """A batched scheduler: one joint decision for every node of B environments."""

    #: True only for oracle agents; they need ``oracle={"remaining_demand": (B, K) float}``.
    needs_oracle: ClassVar[bool] = False

    def reset(self, batch_size: int, n_nodes: int, n_slots: int) -> None:
        """Called before a batch of B episodes with N nodes and K slots starts (stateless agents ignore it)."""

    @abc.abstractmethod
    def act(self, observation: np.ndarray, action_mask: np.ndarray, oracle: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """Actions for every node.

        Args:
            observation: (B, N, D) float32 per-node observations.
            action_mask: (B, N, K+1) int8; column 0 (idle) is always 1.
            oracle: hidden information for oracle agents (``REMAINING_DEMAND``: (B, K)), else None.

        Returns:
            (B, N) int64 actions in [0, K], each allowed by ``action_mask``.
        """


class PettingZooPolicy:
    """Turns an :class:`Agent` into a per-step policy of a PettingZoo ParallelEnv (B = 1).

    Call it with the dict of per-agent observations ``{"observation": (D,), "action_mask": (K+1,)}`` and,
    for oracle agents, the infos of the last step, each carrying ``"remaining_demand"`` (K,). It returns
    a dict of per-agent int actions. Agents are taken as nodes in the order of the observation dict
    (``node_0`` first in core_env). Call :meth:`reset` at the start of each episode.

    Example::

        policy = PettingZooPolicy(EDF())
        observations, infos = env.reset(seed=0)
        while env.agents:
            observations, rewards, terminations, truncations, infos = env.step(policy(observations, infos))
    """

    def __init__(self, agent: Agent) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"PettingZooPolicy needs an Agent, got {type(agent).__name__}")
        self.agent = agent
        self._fresh = True

    def reset(self) -> None:
        """Start a new episode: the agent is reset on the next call."""
        self._fresh = True

    def __call__(self, observations: Mapping[str, Mapping[str, np.ndarray]], infos: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, int]:
        names = list(observations)
        if not names:
            return {}
        obs = np.stack([observations[a]["observation"] for a in names])[None]
        mask = np.stack([observations[a]["action_mask"] for a in names])[None]
        if self._fresh:
            self.agent.reset(1, len(names), mask.shape[-1] - 1)
            self._fresh = False
        oracle = {REMAINING_DEMAND: self._remaining_demand(names, infos)[None]} if self.agent.needs_oracle else None
        actions = self.agent.act(obs, mask, oracle)[0]
        return {a: int(actions[i]) for i, a in enumerate(names)}

    def _remaining_demand(self, names: list[str], infos: Mapping[str, Mapping[str, Any]] | None) -> np.ndarray:
        info = (infos or {}).get(names[0], {})
        if REMAINING_DEMAND not in info:
            raise ValueError(f"{type(self.agent).__name__} is an oracle agent: pass infos whose entries carry "
                             f"{REMAINING_DEMAND!r} (K,), e.g. from Simulator.remaining_demand()")
        return np.asarray(info[REMAINING_DEMAND], dtype=np.float64)
