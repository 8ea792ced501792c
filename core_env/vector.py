"""The Gymnasium ``VectorEnv`` of B environments: :class:`DiscreteCoREVectorEnv` on one :class:`core_env.batch.EnvBatch`.

>>> import gymnasium as gym, core_env
>>> envs = gym.make_vec("core_env/DiscreteCoRE-v1", num_envs=8, vectorization_mode="vector_entry_point")
>>> obs, infos = envs.reset(seed=0)                 # env i draws its workload from default_rng(0 + i)
>>> obs["observation"].shape, obs["action_mask"].shape
((8, 4, 262), (8, 4, 17))

Observations: ``observation="per_node"`` (default) gives every node its own copy of the slot table,
``{"observation": (B, N, D), "action_mask": (B, N, K + 1)}``, exactly the Gymnasium single view's
observation stacked; ``observation="compact"`` gives the slot table once per environment,
``{"nodes": (B, N, 3), "global": (B, 3), "slots": (B, K, F), "action_mask": (B, N, K + 1)}`` (the same
numbers: the per-node observation of node n is ``nodes[b, n] ++ global[b] ++ slots[b].ravel()``).

This module adds the Gymnasium API to the batch: spaces, autoreset, reset masks and the ``_key`` masks of
the infos. A step is one :meth:`core_env.batch.EnvBatch.step` (whose one compiled call also fills the
observations and the infos; see :mod:`core_env.batch` for the call path). ``EnvBatch``, ``Observer`` and
the info keys are re-exported here for existing imports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from core_env import features
from core_env.batch import EPISODE_KEYS, INFO_KEYS, NODE_KEYS, OBSERVATIONS, TEAM_KEYS, EnvBatch, Observer, check_seed
from core_env.config import EnvConfig, make_config
from core_env.memory import check_num_envs
from core_env.sim import InvalidActionError
from core_env.task_source import TaskSource, check_source
from core_env.workload import Workload


def single_observation_space(config: EnvConfig, observation: str = "per_node") -> spaces.Dict:
    """One environment's observation space (the Gymnasium single view's for ``per_node``)."""
    n, k, h = config.n_nodes, config.n_slots, config.history
    bound = features.OBS_BOUND
    mask = spaces.Box(0, 1, (n, k + 1), np.int8)
    if observation == "per_node":
        return spaces.Dict({"observation": spaces.Box(-bound, bound, (n, features.obs_dim(k, h)), np.float32), "action_mask": mask})
    return spaces.Dict({"nodes": spaces.Box(-bound, bound, (n, features.NODE_FEATURES), np.float32),
                        "global": spaces.Box(-bound, bound, (features.GLOBAL_FEATURES,), np.float32),
                        "slots": spaces.Box(-bound, bound, (k, features.slot_width(h)), np.float32), "action_mask": mask})


#: ``autoreset_mode`` by name (Gymnasium's own values, e.g. ``"NextStep"``, are accepted too).
AUTORESET_MODES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP, "disabled": AutoresetMode.DISABLED}


def autoreset(mode: str | AutoresetMode) -> AutoresetMode:
    """The AutoresetMode named ``mode``; ValueError listing the names otherwise."""
    if isinstance(mode, str) and mode in AUTORESET_MODES:
        return AUTORESET_MODES[mode]
    try:
        return AutoresetMode(mode)
    except ValueError:
        raise ValueError(f"autoreset_mode must be one of {sorted(AUTORESET_MODES)} (or an AutoresetMode), got {mode!r}") from None


class DiscreteCoREVectorEnv(VectorEnv):
    """B environments of discrete-node CoRE-Learning as one Gymnasium ``VectorEnv`` (docs/env.md, Vector API).

    Args:
        num_envs: B, in [1, :data:`MAX_NUM_ENVS`] and within this machine's memory by the estimate of
            :func:`bytes_per_env` (checked before anything is allocated: ValueError naming num_envs).
        autoreset_mode: ``"next_step"`` (default: the step after an episode ends resets that env, its
            action ignored, reward 0), ``"same_step"`` (reset at once; the final observation and infos in
            ``infos["final_obs"]`` / ``infos["final_info"]``, masked by ``infos["_final_obs"]``) or
            ``"disabled"`` (a finished env is frozen until ``reset(options={"reset_mask": mask})``).
            Autoresets draw a seeded workload from the env's rng (reset options are not repeated).
        observation: ``"per_node"`` or ``"compact"`` (module docstring).
        task_source: what served tasks report (:mod:`core_env.task_source`); None, the curve bank in
            the compiled step (a source steps in two compiled halves around its reports).
        **kwargs: the environment arguments (:class:`core_env.config.EnvConfig`), or ``config=`` an
            EnvConfig (with optional overrides).

    Actions: (B, N) ints in [0, K]. Rewards (B,) float64; infos: every key of the single views as a
    (B,) array (``conflict``/``invalid_action`` (B, N)), each with its all-True ``_key`` mask.
    ``action_masks()`` (B, N, K + 1) bool.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 1, autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP, observation: str = "per_node",
                 task_source: TaskSource | None = None, **kwargs: Any) -> None:
        if observation not in OBSERVATIONS:
            raise ValueError(f"observation must be one of {OBSERVATIONS}, got {observation!r}")
        self.autoreset_mode = autoreset(autoreset_mode)
        config = make_config(**kwargs)
        num_envs = check_num_envs(num_envs, config, observation)
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        self.batch = EnvBatch(config, num_envs)
        self.batch.source = check_source(task_source)
        self.num_envs = num_envs
        self.observation_kind = observation
        self.single_observation_space = single_observation_space(config, observation)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.single_action_space = spaces.MultiDiscrete([config.n_slots + 1] * config.n_nodes)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = None
        self._pending = np.zeros(self.num_envs, bool)  # envs to reset at the next step (next_step mode)
        self._ones = np.ones(self.num_envs, bool)
        self._ones.setflags(write=False)  # shared by every "_key" mask: read-only, so no caller can corrupt it
        self._present = {"_" + key: self._ones for key in INFO_KEYS}

    @property
    def config(self) -> EnvConfig:
        return self.batch.config

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None):
        """Reset every env, or with ``options={"reset_mask": (B,) bool, ...}`` only the masked ones.

        ``seed``: env i gets ``default_rng(seed + i)`` (or ``seed[i]`` from a sequence). ``options``: one
        mapping for every env (the single views' reset options: ``suite``, ``root``, ``episode``,
        ``workload``, ..., checked by :func:`reset_options`), or a sequence with one mapping per env reset.
        ``reset_mask``: a (B,) bool array (any other dtype is refused: TypeError), in the one mapping.
        """
        envs = np.arange(self.num_envs)
        if isinstance(options, Sequence) and any(isinstance(o, Mapping) and "reset_mask" in o for o in options):
            raise ValueError("reset_mask goes in one options mapping for every env (options={'reset_mask': mask, ...}), "
                             "not in a per-env sequence")
        if isinstance(options, Mapping) and "reset_mask" in options:
            try:
                mask = np.asarray(options["reset_mask"])
            except (TypeError, ValueError):
                mask = np.asarray(None)
            if mask.dtype != bool:  # 0.5, NaN, -1 or 2 would each read as True
                raise TypeError(f"reset_mask must be a ({self.num_envs},) array of bools, got {type(options['reset_mask']).__name__} "
                                f"of dtype {mask.dtype}")
            if mask.shape != (self.num_envs,):
                raise ValueError(f"reset_mask must have shape ({self.num_envs},), got {mask.shape}")
            if not self.batch.started and not mask.all():
                raise RuntimeError("the first reset must reset every env (reset_mask all True, or no reset_mask)")
            envs = np.flatnonzero(mask)
            options = {k: v for k, v in options.items() if k != "reset_mask"} or None
        if not len(envs):
            return self._observation(), self._infos()
        if seed is not None:
            self.batch.seed(seed, envs)
        workloads = self.batch.workloads_for(envs, options)
        banks = {id(w.bank): w.bank for w in workloads}
        if len(envs) < self.num_envs:
            banks.setdefault(id(self.batch.sim.bank), self.batch.sim.bank)
        if len(banks) > 1:
            raise ValueError("the envs of one vector env play on one curve bank: these workloads are on "
                             f"{sorted(b.name for b in banks.values())} (e.g. a suite episode, on eval curves, beside a seeded draw, "
                             "on train curves); reset every env onto workloads of one bank")
        if self.autoreset_mode != AutoresetMode.DISABLED and workloads[0].bank is not self.batch.seeded_bank():
            raise ValueError(f"autoreset_mode={self.autoreset_mode.value!r} starts each new episode on a seeded draw "
                             f"(train curves of {self.config.task_set_name!r}), but these workloads are on bank "
                             f"{workloads[0].bank.name!r}: replay suites or your own workloads with autoreset_mode='disabled'")
        self.batch.reset(workloads, None if len(envs) == self.num_envs else envs)
        self._pending[envs] = False
        return self._observation(), self._infos()

    def checked_actions(self, actions: Any) -> np.ndarray:
        """``actions`` as a (B, N) integer array (not cast: a float or bool action is refused, as a NaN is,
        before any cast could read it as a number); the step checks the range [0, K]."""
        array = np.asarray(actions)
        if array.shape != (self.num_envs, self.batch.N):
            raise ValueError(f"actions must have shape (num_envs, n_nodes) = {(self.num_envs, self.batch.N)}, got {array.shape}")
        if array.dtype.kind not in "iu":
            raise TypeError(f"actions must be integers, got dtype {array.dtype}")
        return array

    def step(self, actions: Any):
        if not self.batch.started:
            raise RuntimeError("call reset() before step()")
        array = self.checked_actions(actions)
        if self.autoreset_mode == AutoresetMode.NEXT_STEP and self._pending.any():
            array = np.array(array, np.int64)
            array[self._pending] = 0  # envs that reset at this step ignore their actions (they are frozen until then)
        try:
            rewards = self.batch.step(array, observe=self.observation_kind, infos=True)
        except InvalidActionError as error:
            raise ValueError(f"env {error.env}, node_{error.node}: {error}") from error
        sim = self.batch.sim
        if self.autoreset_mode == AutoresetMode.NEXT_STEP and self._pending.any():
            envs = np.flatnonzero(self._pending)
            self._pending[:] = False
            self.batch.reset(self.batch.workloads_for(envs, None), envs)
            rewards[envs] = 0.0
        terminated, truncated = sim.terminated.copy(), sim.truncated.copy()
        if self.autoreset_mode == AutoresetMode.DISABLED:
            return self._observation(), rewards, terminated, truncated, self._infos()
        ended = np.flatnonzero(terminated | truncated)
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            self._pending[ended] = True
            return self._observation(), rewards, terminated, truncated, self._infos()
        infos = self._infos()
        if ended.size:  # same_step: keep the final observation and infos, then reset those envs
            final_obs = np.full(self.num_envs, None, dtype=object)
            observation = self._observation()
            for b in ended:
                final_obs[b] = {key: value[b] for key, value in observation.items()}
            final_mask = np.zeros(self.num_envs, bool)
            final_mask[ended] = True
            final_info = {key: value for key, value in infos.items() if not key.startswith("_")}
            self.batch.reset(self.batch.workloads_for(ended, None), ended)
            infos = {**self._infos(), "final_obs": final_obs, "_final_obs": final_mask, "final_info": final_info, "_final_info": final_mask}
        return self._observation(), rewards, terminated, truncated, infos

    def _observation(self) -> dict[str, np.ndarray]:
        if self.observation_kind == "compact":
            return self.batch.observe_compact()
        obs, mask = self.batch.observe()
        return {"observation": obs, "action_mask": mask}

    def _infos(self) -> dict[str, np.ndarray]:
        infos = self.batch.infos()
        infos.update(self._present)
        return infos

    def action_masks(self) -> np.ndarray:
        """(B, N, K + 1) bool: the actions each node may take now."""
        if not self.batch.started:
            raise RuntimeError("call reset() before action_masks()")
        return self.batch.action_masks()

    def state(self) -> np.ndarray:
        """(B, 3 + K·F) float32: every env's global state (centralized critics)."""
        return self.batch.state()

    def remaining_demand(self) -> np.ndarray:
        """(B, K) float64 the HIDDEN remaining nominal demand of each slot's task (inf if never, 0 when
        empty): for oracle rows and bounds only, never for an agent that claims to learn."""
        return self.batch.remaining_demand()

    def reported_history(self, env: int, slot: int) -> np.ndarray:
        """Every loss the task in ``slot`` of env ``env`` has reported, oldest first (a copy)."""
        self._check(env, slot)
        return self.batch.sim.reported_history(env, slot)

    def slot_task(self, env: int, slot: int) -> int:
        """Workload index of the task in ``slot`` of env ``env`` (-1 when empty)."""
        self._check(env, slot)
        return int(self.batch.sim.task[env, slot])

    @property
    def workloads(self) -> list[Workload]:
        """The workload each env is playing."""
        return list(self.batch.sim.workloads)

    def _check(self, env: int, slot: int) -> None:
        if not self.batch.started:
            raise RuntimeError("call reset() first")
        if not 0 <= env < self.num_envs or not 0 <= slot < self.batch.K:
            raise ValueError(f"env must be in [0, {self.num_envs}) and slot in [0, {self.batch.K}), got {env}, {slot}")

    def close(self, **kwargs: Any) -> None:
        pass


def make_vector_env(num_envs: int = 1, **kwargs: Any) -> DiscreteCoREVectorEnv:
    """The ``vector_entry_point`` of ``core_env/DiscreteCoRE-v1`` (``gymnasium.make_vec``)."""
    return DiscreteCoREVectorEnv(num_envs, **kwargs)


__all__ = ["DiscreteCoREVectorEnv", "EPISODE_KEYS", "EnvBatch", "INFO_KEYS", "NODE_KEYS", "OBSERVATIONS", "Observer", "TEAM_KEYS", "check_seed",
           "make_vector_env", "single_observation_space"]
