"""Stable-Baselines3 ``VecEnv`` over one batched core_env: B environments stepped in one call.

:class:`CoreVecEnv` wraps a single :class:`core_env.vector.DiscreteCoREVectorEnv` in ``same_step`` autoreset
mode, so MaskablePPO (or any SB3 on-policy algorithm) steps all B environments with one numpy call instead
of B Python ``gym.Env.step`` calls through ``DummyVecEnv``.

* **Spaces:** the observation space is the single env's ``Dict`` (``"observation"`` (N, D) float32,
  ``"action_mask"`` (N, K+1) int8; ``observation="compact"`` gives the compact Dict), which SB3's
  ``MultiInputPolicy`` (``CombinedExtractor``) flattens; the action space is ``MultiDiscrete([K+1] * N)``.
* **Masks:** ``env_method("action_masks")`` returns one flat (N·(K+1),) bool mask per env, sb3-contrib's
  convention for ``MultiDiscrete`` (``get_action_masks`` stacks them to (B, N·(K+1))); ``action_masks()``
  returns that (B, N·(K+1)) array directly.
* **Conflicts:** the nodes are independent ``MultiDiscrete`` dimensions, so two nodes may pick one task; the
  env resolves it (the lowest-index node trains the task, the others idle) and counts it in ``conflicts``.
* **Infos** (SB3 conventions, as ``DummyVecEnv`` + ``Monitor`` give them): one dict per env with the env's
  statistics (``core_env.vector.EPISODE_KEYS``, ``potential``, ``conflict``, ``invalid_action``). For an env
  whose episode ended at this step the dict holds the *final* statistics (from the vector env's
  ``final_info``, not the reset's), ``"terminal_observation"``, ``"TimeLimit.truncated"`` and
  ``"episode": {"r", "l", "t"}``; the returned observation is already the next episode's first one and
  the reset's infos go to ``reset_infos``.
* **Attributes:** the B envs live in one object: ``get_attr``/``set_attr`` read and write the vector
  env's shared attribute (``set_attr`` only for all envs at once); ``env_method`` supports the batched
  methods in :data:`BATCHED_METHODS`, returning one entry per env.

>>> from mara_agents.integrations.sb3_vec import CoreVecEnv
>>> venv = CoreVecEnv(8, n_nodes=2, n_slots=4, arrival_steps=60)
>>> venv.seed(0)                                   # env i draws its workloads from default_rng(0 + i)
[0, 1, 2, 3, 4, 5, 6, 7]
>>> obs = venv.reset()
>>> obs["observation"].shape, venv.action_masks().shape
((8, 2, 70), (8, 10))
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from core_env.extras import needs
from core_env.vector import DiscreteCoREVectorEnv

with needs(__name__, "sb3"):
    from stable_baselines3.common.vec_env import VecEnv

#: Methods of the vector env that ``env_method`` forwards; each returns one (B, ...) array, split per env.
BATCHED_METHODS = ("action_masks", "state", "remaining_demand")


class CoreVecEnv(VecEnv):
    """B core_env environments as one SB3 ``VecEnv`` (module docstring).

    Args:
        num_envs: B.
        observation: ``"per_node"`` (default) or ``"compact"``, as in :class:`DiscreteCoREVectorEnv`.
        **env_kwargs: the environment arguments (:class:`core_env.config.EnvConfig`).
    """

    def __init__(self, num_envs: int, observation: str = "per_node", **env_kwargs: Any) -> None:
        self.env = DiscreteCoREVectorEnv(num_envs, autoreset_mode="same_step", observation=observation, **env_kwargs)
        super().__init__(num_envs, self.env.single_observation_space, self.env.single_action_space)
        self._actions: np.ndarray | None = None
        self._returns = np.zeros(num_envs)
        self._lengths = np.zeros(num_envs, np.int64)
        self._start = time.perf_counter()

    # ------------------------------------------------------------------ reset and step
    def reset(self) -> dict[str, np.ndarray]:
        """Reset all B envs, with the seeds of :meth:`seed` and options of ``set_options`` (used once)."""
        seeds = None if all(s is None for s in self._seeds) else self._seeds
        options = [o or None for o in self._options] if any(self._options) else None
        obs, infos = self.env.reset(seed=seeds, options=options)
        self.reset_infos = [_env_info(infos, b) for b in range(self.num_envs)]
        self._reset_seeds()
        self._reset_options()
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        # not cast: a float or bool action is refused by the vector env, never read as a node's choice
        self._actions = self.env.checked_actions(np.asarray(actions).reshape(self.num_envs, -1))

    def step_wait(self) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, list[dict[str, Any]]]:
        if self._actions is None:
            raise RuntimeError("call step_async() before step_wait()")
        obs, rewards, terminated, truncated, infos = self.env.step(self._actions)
        self._actions = None
        self._returns += rewards
        self._lengths += 1
        dones = terminated | truncated
        env_infos = [_env_info(infos, b) for b in range(self.num_envs)]
        for b in np.flatnonzero(dones):
            self.reset_infos[b] = env_infos[b]  # the reset's infos: the new episode's first statistics
            env_infos[b] = {**_env_info(infos["final_info"], b), "terminal_observation": infos["final_obs"][b],
                            "TimeLimit.truncated": bool(truncated[b] and not terminated[b]),
                            "episode": {"r": float(self._returns[b]), "l": int(self._lengths[b]),
                                        "t": round(time.perf_counter() - self._start, 6)}}
            self._returns[b] = 0.0
            self._lengths[b] = 0
        return obs, rewards.astype(np.float32), dones, env_infos

    def action_masks(self) -> np.ndarray:
        """(B, N·(K+1)) bool: every env's flat per-node masks (sb3-contrib's MultiDiscrete convention)."""
        return self.env.action_masks().reshape(self.num_envs, -1)

    def close(self) -> None:
        self.env.close()

    # ------------------------------------------------------------------ attributes and methods
    def has_attr(self, attr_name: str) -> bool:
        return attr_name in BATCHED_METHODS or hasattr(self.env, attr_name)

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        """The vector env's (shared) attribute once per env; a batched method comes back as env i's own callable."""
        indices = self._get_indices(indices)
        if attr_name in BATCHED_METHODS:
            return [_EnvCall(self, attr_name, i) for i in indices]
        value = getattr(self.env, attr_name)
        return [value for _ in indices]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        if sorted(self._get_indices(indices)) != list(range(self.num_envs)):
            raise ValueError("the B envs share one DiscreteCoREVectorEnv: set_attr sets an attribute of all of them (indices=None)")
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list[Any]:
        """One result per env of a batched method (:data:`BATCHED_METHODS`), e.g. ``env_method("action_masks")``."""
        if method_name not in BATCHED_METHODS:
            raise AttributeError(f"CoreVecEnv.env_method supports the batched methods {BATCHED_METHODS}, not {method_name!r}")
        result = self.action_masks() if method_name == "action_masks" else getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result[i] for i in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]


class _EnvCall:
    """``get_attr(<batched method>)[i]``: calling it returns env i's row of the batched result."""

    def __init__(self, venv: CoreVecEnv, name: str, index: int) -> None:
        self.venv, self.name, self.index = venv, name, index

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.venv.env_method(self.name, *args, indices=[self.index], **kwargs)[0]


def _env_info(infos: dict[str, Any], b: int) -> dict[str, Any]:
    """Env ``b``'s entries of the vector env's batched infos (no ``_key`` masks, no final_* entries)."""
    return {key: value[b] for key, value in infos.items() if not key.startswith(("_", "final_"))}


__all__ = ["BATCHED_METHODS", "CoreVecEnv"]
