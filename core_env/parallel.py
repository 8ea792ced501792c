"""PettingZoo ParallelEnv view of the simulator: agents are the nodes ``node_0 … node_{N-1}``.

See docs/env.md (and :mod:`core_env.discrete_core_v1`) for spaces, rewards and episode end.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from core_env import features
from core_env.config import make_config
from core_env.episode import EPISODE_KEYS, Episode, EpisodeView
from core_env.sim import InvalidActionError


_PLAIN_INT = {int}


def node_name(i: int) -> str:
    return f"node_{i}"


def observation_space(n_slots: int, history: int) -> spaces.Dict:
    """The per-node observation space (identical for every node)."""
    return spaces.Dict({
        "observation": spaces.Box(-features.OBS_BOUND, features.OBS_BOUND, (features.obs_dim(n_slots, history),), np.float32),
        "action_mask": spaces.Box(0, 1, (n_slots + 1,), np.int8),
    })


def scalar_action(value: Any, agent: str, n_slots: int) -> int:
    """A validated action in [0, K]; TypeError/ValueError naming the agent otherwise."""
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"action for {agent} must be an integer in [0, {n_slots}], got {type(value).__name__} {value!r}")
    if not 0 <= value <= n_slots:
        raise ValueError(f"action {value} for {agent} is outside the action space [0, {n_slots}]")
    return int(value)


class DiscreteCoREParallelEnv(EpisodeView, ParallelEnv):
    """Discrete-node CoRE-Learning as a PettingZoo ParallelEnv (keyword arguments: see :class:`EnvConfig`,
    and ``task_source``: what served tasks report, default the curve bank; :mod:`core_env.task_source`)."""

    metadata = {"name": "discrete_core_v1", "render_modes": ["ansi", "rgb_array", "human"], "is_parallelizable": True, "render_fps": 4}

    def __init__(self, **kwargs: Any) -> None:
        task_source = kwargs.pop("task_source", None)
        config = make_config(**kwargs)
        self.episode = Episode(config, task_source)
        self.render_mode = config.render_mode
        self.possible_agents = [node_name(i) for i in range(config.n_nodes)]
        self.agents: list[str] = []
        self._observation_space = observation_space(config.n_slots, config.history)
        self._action_space = spaces.Discrete(config.n_slots + 1)
        self.state_space = spaces.Box(-features.OBS_BOUND, features.OBS_BOUND, (features.state_dim(config.n_slots, config.history),), np.float32)
        self._actions = np.zeros((1, config.n_nodes), np.int64)  # the step's actions (read by the step only, never kept)

    @property
    def config(self):
        return self.episode.config

    @property
    def max_cycles(self) -> int:
        return self.config.max_cycles

    @max_cycles.setter
    def max_cycles(self, value: int) -> None:
        self.episode.set_max_cycles(value)

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent: str) -> spaces.Space:
        return self._observation_space

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent: str) -> spaces.Space:
        return self._action_space

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        self.episode.reset(seed, options)
        self.agents = list(self.possible_agents)
        return self._observations(), self._infos()

    def step(self, actions: Mapping[str, Any]):
        agents = self.agents
        if not agents:
            raise RuntimeError("the episode is over (or reset() was not called): call reset() before step()")
        array = self._action_array(actions, agents)
        try:
            reward = self.episode.step(array)
        except InvalidActionError as error:
            self._checked_action_array(actions)  # an action outside [0, K]: raise as the checks word it
            raise ValueError(f"{node_name(error.node)}: {error}") from error
        observations, infos = self._observations(), self._infos()
        terminated, truncated = self.episode.ended()
        rewards = dict.fromkeys(agents, reward)
        terminations = dict.fromkeys(agents, terminated)
        truncations = dict.fromkeys(agents, truncated)
        if terminated or truncated:
            self.agents = []
        if self.render_mode == "human":
            self.render()
        return observations, rewards, terminations, truncations, infos

    def _action_array(self, actions: Mapping[str, Any], agents: list[str]) -> np.ndarray:
        if type(actions) is not dict and not isinstance(actions, Mapping):
            raise TypeError(f"actions must be a dict from agent name to action, got {type(actions).__name__}")
        if len(actions) == len(agents):  # fast path: exactly the live agents, plain ints (the step checks the range)
            try:
                values = [actions[a] for a in agents]
            except KeyError:
                values = None
            if values is not None and set(map(type, values)) == _PLAIN_INT:
                try:
                    self._actions[0] = values
                    return self._actions
                except OverflowError:  # an int beyond int64: the checked path names the agent and the range
                    pass
        return self._checked_action_array(actions)

    def _checked_action_array(self, actions: Mapping[str, Any]) -> np.ndarray:
        """The action array, every agent's action checked (errors name the agent)."""
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(f"missing action for agent(s) {missing}")
        unknown = [a for a in actions if a not in self.agents]
        if unknown:
            raise ValueError(f"actions given for unknown or finished agent(s) {unknown}")
        n_slots = self.config.n_slots
        return np.array([scalar_action(actions[a], a, n_slots) for a in self.possible_agents], dtype=np.int64)

    def _observations(self) -> dict[str, dict[str, np.ndarray]]:
        obs, mask = self.episode.observe()
        return {a: {"observation": o, "action_mask": m} for a, o, m in zip(self.possible_agents, obs, mask)}

    def _infos(self) -> dict[str, dict[str, float]]:
        stats, (conflict, invalid) = self.episode.info()
        infos = {}
        for agent, c, i in zip(self.possible_agents, conflict, invalid):
            infos[agent] = info = stats.copy()
            info["conflict"], info["invalid_action"] = c, i
        return infos

    # Read-only accessors for observation wrappers and predictors (full histories, task identity).
    def reported_history(self, slot: int) -> np.ndarray:
        """Every loss reported so far by the task in ``slot``, oldest first (a copy)."""
        return self.episode.reported_history(slot)

    def slot_task(self, slot: int) -> int:
        """Workload index of the task in ``slot`` (-1 when empty)."""
        return self.episode.slot_task(slot)


__all__ = ["DiscreteCoREParallelEnv", "EPISODE_KEYS", "node_name", "observation_space"]
