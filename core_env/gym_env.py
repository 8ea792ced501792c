"""Gymnasium centralized view: one agent chooses every node's action.

Observation ``{"observation": Box (N, D) float32, "action_mask": Box (N, K+1) int8}``, action
``MultiDiscrete([K+1] * N)``, scalar team reward. ``action_masks()`` returns the flat boolean mask of
length N·(K+1) that sb3-contrib's MaskablePPO expects for MultiDiscrete actions. Registered as
``core_env/DiscreteCoRE-v1`` on ``import core_env``; ``gym.make("core_env:core_env/DiscreteCoRE-v1")``
works without an explicit import.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from core_env import features
from core_env.batch import OBSERVATIONS, check_seed
from core_env.config import make_config
from core_env.episode import Episode, EpisodeView
from core_env.sim import InvalidActionError
from core_env.vector import single_observation_space


class DiscreteCoREEnv(EpisodeView, gym.Env):
    """Discrete-node CoRE-Learning, centralized (keyword arguments: see :class:`EnvConfig`, and
    ``task_source``: what served tasks report, default the curve bank; :mod:`core_env.task_source`).

    ``observation="compact"`` returns the slot table once instead of once per node:
    ``{"nodes": (N, 3), "global": (3,), "slots": (K, F), "action_mask": (N, K + 1)}`` (docs/env.md, Vector env).
    """

    metadata = {"render_modes": ["ansi", "rgb_array", "human"], "render_fps": 4}

    def __init__(self, observation: str = "per_node", **kwargs: Any) -> None:
        if observation not in OBSERVATIONS:
            raise ValueError(f"observation must be one of {OBSERVATIONS}, got {observation!r}")
        task_source = kwargs.pop("task_source", None)
        config = make_config(**kwargs)
        self.episode = Episode(config, task_source, observation)
        self.render_mode = config.render_mode
        self.observation_kind = observation
        self.observation_space = single_observation_space(config, observation)
        self.action_space = spaces.MultiDiscrete([config.n_slots + 1] * config.n_nodes)

    @property
    def config(self):
        return self.episode.config

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=None if seed is None else check_seed(seed))
        self.episode.rng = self.np_random
        self.episode.reset(None, options)
        return self._observation(), self._info()

    def step(self, action: Any):
        if not self.episode.started:
            raise RuntimeError("call reset() before step()")
        array = np.asarray(action)
        n = self.config.n_nodes
        if array.shape != (n,):
            raise ValueError(f"action must have shape ({n},), one entry per node, got shape {array.shape}")
        if array.dtype.kind not in "iu":
            raise TypeError(f"action must be an integer array, got dtype {array.dtype}")
        try:
            reward = self.episode.step(array)
        except InvalidActionError as error:
            raise ValueError(f"node_{error.node}: {error}") from error
        if self.render_mode == "human":
            self.render()
        return self._observation(), reward, self.episode.terminated, self.episode.truncated, self._info()

    def _observation(self) -> dict[str, np.ndarray]:
        if self.observation_kind == "compact":
            return {key: value[0] for key, value in self.episode.batch.observe_compact().items()}
        obs, mask = self.episode.observe()
        return {"observation": obs, "action_mask": mask}

    def _info(self) -> dict[str, Any]:
        info, (conflict, invalid) = self.episode.info()
        info["conflict"], info["invalid_action"] = np.array(conflict, np.int64), np.array(invalid, np.int64)
        return info

    def action_masks(self) -> np.ndarray:
        """(N·(K+1),) bool: the flat per-node masks (sb3-contrib MultiDiscrete convention)."""
        self.episode.require_started("action_masks()")
        return features.action_masks(self.episode.sim)[0].reshape(-1).astype(bool)

