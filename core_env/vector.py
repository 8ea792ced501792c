"""B environments in one object: the batch every view and every rollout runs on.

:class:`EnvBatch` owns the simulator, the team reward and the observation features of B environments
(no RL API: arrays in, arrays out). :class:`DiscreteCoREVectorEnv` is its public Gymnasium
``VectorEnv``; the PettingZoo and Gymnasium single views hold an ``EnvBatch`` of B = 1
(:class:`core_env.episode.Episode`).

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

Observers: objects with ``on_reset(batch, envs)`` and ``on_step(batch, outcome)`` appended to
``EnvBatch.observers`` are told after every reset (``envs``: the environments that started) and step
(the :class:`core_env.sim.StepOutcome`); the simulator itself knows nothing of observations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from core_env import dynamics, features, rules
from core_env.config import EnvConfig, make_config
from core_env.jit import compiled, unowned
from core_env.sim import InvalidActionError, Simulator, StepOutcome
from core_env.task_source import TaskSource, check_source
from core_env.state import EPISODE_KEYS, INFO_ROWS, STATS, EnvRow, NodeFlag, completion_rate, node_utilization
from core_env.generators import generator_for, generator_from_options, reset_options
from core_env.memory import check_num_envs
from core_env.workload import Workload

#: Team keys besides the statistics, the same for every node: ``potential``, the shaped reward's Φ(s) of the
#: state after the step (0 at reset and with ``reward="sparse"``; see :mod:`core_env.reward`).
TEAM_KEYS = ("potential",)
#: Per-node keys: what happened to this node's own action this step.
NODE_KEYS = ("conflict", "invalid_action")
#: Every info key, in the order infos list them (each followed, in the vector env, by its ``_key`` mask).
INFO_KEYS = EPISODE_KEYS + TEAM_KEYS + NODE_KEYS
OBSERVATIONS = ("per_node", "compact")


class Observer(Protocol):
    """Told after each reset and step of an :class:`EnvBatch` (e.g. a trace recorder, a predictor cache)."""

    def on_reset(self, batch: EnvBatch, envs: np.ndarray) -> None: ...

    def on_step(self, batch: EnvBatch, outcome: StepOutcome) -> None: ...


@unowned
def step_observing(actions, a, H, compact, rows, shared, mask):
    """:func:`core_env.dynamics.step` with each env's observation computed right after its own step (its
    state is still in cache): the same numbers as the step, then the observations. ``compact``: ``rows``
    (B, N, 3) node features and ``shared`` (B, 3 + K·F) (:func:`core_env.features.compact_env`); else
    ``rows`` (B, N, D) per-node observations and ``shared`` a (1, D − 3) scratch row
    (:func:`core_env.features.observe_env`)."""
    code, where = rules.begin_step(actions, a)
    if code == rules.OK:
        for b in range(actions.shape[0]):
            rules.step_env(b, actions, a)
            if compact:
                features.compact_env(b, a, H, rows, shared, mask)
            else:
                features.observe_env(b, a, H, rows, mask, shared[0])
    return code, where


@compiled
def step_and_observe(actions, s, H, compact, rows, shared, mask):
    """One compiled call: the step and reward, each env's observation after its step (:func:`step_observing`)."""
    return step_observing(actions, dynamics.arrays_of(s), H, compact, rows, shared, mask)


def check_seed(seed: Any) -> int:
    """``seed`` as an int >= 0; TypeError for a bool or a non-integer, ValueError for a negative int."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int >= 0 or None, got {type(seed).__name__} {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed}")
    return int(seed)


class EnvBatch:
    """Simulator (whose compiled step also computes the team reward) + observation features of B
    environments, each with its own seeded rng."""

    def __init__(self, config: EnvConfig, num_envs: int = 1) -> None:
        self.config = config
        self.sim = Simulator(config, num_envs)
        self.B, self.N, self.K = self.sim.B, self.sim.N, self.sim.K
        self.rngs = [np.random.default_rng() for _ in range(self.B)]
        self.observers: list[Observer] = []
        #: What served tasks report (:mod:`core_env.task_source`); None: the curve bank, in the compiled step.
        self.source: TaskSource | None = None
        self._stepped = False  # a step since the last reset: its outcome is in the simulator's arenas
        self._outcome: StepOutcome | None = None
        self.started = False
        self._observed: tuple[np.ndarray, np.ndarray] | None = None
        self._observed_compact: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._history = config.history
        self._obs_shape = (self.B, self.N, features.obs_dim(self.K, config.history))
        self._mask_shape = (self.B, self.N, self.K + 1)
        self._scratch = np.empty((1, self._obs_shape[2] - features.NODE_FEATURES), np.float32)  # one env's shared row, while observing

    def seed(self, seed: int | Sequence[int | None] | None, envs: Sequence[int] | None = None) -> None:
        """Env i's rng becomes ``default_rng(seed + i)`` (an int), ``default_rng(seed[i])`` (a sequence of
        B seeds, None keeps an env's rng); with ``envs``, only those envs are reseeded (as Gymnasium's
        vector envs seed the envs a reset mask selects)."""
        if seed is None:
            return
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, (bool, np.bool_)):
            seeds = [check_seed(seed) + i for i in range(self.B)]
        elif isinstance(seed, Sequence) and not isinstance(seed, (str, bytes)):
            seeds = [None if s is None else check_seed(s) for s in seed]
        else:
            raise TypeError(f"seed must be None, an int >= 0 or a sequence of them, got {type(seed).__name__} {seed!r}")
        if len(seeds) != self.B:
            raise ValueError(f"need one seed per environment ({self.B}), got {len(seeds)}")
        for i in range(self.B) if envs is None else envs:
            if seeds[i] is not None:
                self.rngs[i] = np.random.default_rng(seeds[i])

    def seeded_bank(self):
        """The curve bank of the workloads drawn from the envs' rngs (what autoresets play on)."""
        return generator_for(self.config).bank

    def workloads_for(self, envs: Sequence[int], options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None) -> list[Workload]:
        """The workload of each environment in ``envs``: ``options`` (one mapping for all, or one per env
        of ``envs``, each checked by :func:`reset_options`) as in ``reset(options=...)`` of the single views,
        else drawn from the env's rng."""
        if isinstance(options, Sequence) and not isinstance(options, (str, bytes)):
            if len(options) != len(envs):
                raise ValueError(f"need one options mapping per environment reset ({len(envs)}), got {len(options)}")
            generators = [generator_from_options(self.config, reset_options(o, f"options[{i}]")) for i, o in enumerate(options)]
        else:  # one mapping: resolved (and an unknown name warned about) once
            generators = [generator_from_options(self.config, reset_options(options))] * len(envs)
        return [generator.workload(self.rngs[b]) for generator, b in zip(generators, envs)]

    def reset(self, workloads: Sequence[Workload], envs: Sequence[int] | None = None) -> None:
        """Start episodes on ``workloads``: all B environments, or only those in ``envs``."""
        if envs is None or not self.started:
            if envs is not None and len(envs) != self.B:
                raise RuntimeError("reset every environment before resetting some of them")
            self.sim.reset(workloads)
            envs = np.arange(self.B)
            self._stepped = False
        else:
            envs = np.asarray(envs, np.int64)
            self.sim.reset_envs(envs, workloads)  # their entries of the last outcome become zeros
        self.started = True
        self._outcome = None
        self._observed = self._observed_compact = None
        for observer in self.observers:
            observer.on_reset(self, envs)

    def step(self, actions: np.ndarray, observe: bool | str = False) -> np.ndarray:
        """Apply (B, N) int actions; returns the (B,) team rewards. Raises before changing any state.

        ``observe``: also compute the observations in the same compiled call, per-node (True or
        ``"per_node"``: the next :meth:`observe` returns them) or ``"compact"`` (the next
        :meth:`observe_compact`).
        """
        if not self.started:
            raise RuntimeError("call reset() before step()")
        sim = self.sim
        actions = sim.prepare(actions)
        observed = observed_compact = None
        if self.source is not None:  # two compiled halves around the source's reports; observed on demand
            sim.step(actions, source=self.source)
            result = (dynamics.OK, 0)
        elif observe == "compact":
            parts = features.empty_compact(self.B, self.N, self.K, self._history)
            result = step_and_observe(actions, sim._state, self._history, True, *parts)
            observed_compact = parts
        elif observe:
            obs, mask = np.empty(self._obs_shape, np.float32), np.empty(self._mask_shape, np.int8)
            result = step_and_observe(actions, sim._state, self._history, False, obs, self._scratch, mask)
            observed = obs, mask
        else:
            result = dynamics.step(actions, sim._state)
        if result[0]:
            sim.raise_for(result, actions)
        self._stepped, self._outcome, self._observed, self._observed_compact = True, None, observed, observed_compact
        if self.observers:
            for observer in self.observers:
                observer.on_step(self, self.last_outcome)
        return sim.reward.copy()

    @property
    def last_outcome(self) -> StepOutcome | None:
        """What the last step did (None after a reset); read from the simulator on first use."""
        if self._outcome is None and self._stepped:
            self._outcome = self.sim.outcome()
        return self._outcome

    def node_flag_lists(self, b: int = 0) -> tuple[list[int], list[int]]:
        """Env b's (N,) conflict and invalid-action flags of the last step as lists of ints (zeros after reset)."""
        if not self._stepped:
            return [0] * self.N, [0] * self.N
        flags = self.sim.node_flags_of(b)
        return flags[: self.N], flags[self.N :]

    # ------------------------------------------------------------------ observations and infos
    @property
    def potential(self) -> np.ndarray:
        """(B,) Φ(s) of the current states, as the shaped reward counts it (zeros with ``reward="sparse"``)."""
        return self.sim.potential

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """(B, N, D) float32 per-node observations and (B, N, K + 1) int8 masks (fresh arrays)."""
        if self._observed is not None:  # computed by step(observe=True); handed out once
            observed, self._observed = self._observed, None
            return observed
        obs, mask = self._empty_observation()
        features.observations_of(self.sim._state, self._history, obs, mask)
        return obs, mask

    def _empty_observation(self) -> tuple[np.ndarray, np.ndarray]:
        return np.empty(self._obs_shape, np.float32), np.empty(self._mask_shape, np.int8)

    def observe_compact(self) -> dict[str, np.ndarray]:
        """The compact observation: nodes (B, N, 3), global (B, 3), slots (B, K, F), action_mask (fresh)."""
        if self._observed_compact is not None:  # computed by step(observe="compact"); handed out once
            parts, self._observed_compact = self._observed_compact, None
            return features.compact_dict(*parts, self.K)
        return features.compact(self.sim, self._history)

    def state(self) -> np.ndarray:
        """(B, 3 + K·F) float32 global state of every environment."""
        return features.state(self.sim, self.config.history)

    def action_masks(self) -> np.ndarray:
        """(B, N, K + 1) bool."""
        return self.sim.action_choices[:, None, :].repeat(self.N, axis=1)

    def remaining_demand(self) -> np.ndarray:
        """(B, K) the HIDDEN nominal node-steps each active task still needs (oracle rows and bounds only)."""
        return self.sim.remaining_demand()

    def node_flags(self) -> tuple[np.ndarray, np.ndarray]:
        """(B, N) conflict and invalid-action flags of the last step (zeros after reset)."""
        if self.last_outcome is None:
            zeros = np.zeros((self.B, self.N), bool)
            return zeros, zeros.copy()
        return self.last_outcome.conflicts, self.last_outcome.invalid

    def infos(self) -> dict[str, np.ndarray]:
        """Every info key as a (B,) array (``conflict``/``invalid_action``: (B, N)): fresh arrays (the keys
        of one dtype are rows of one array), filled by one compiled call (:func:`fill_infos`)."""
        sim = self.sim
        block, rates = np.empty((INFO_ROWS, self.B), np.int64), np.empty((len(_RATE_KEYS), self.B))
        flags = np.empty((2, self.B, self.N), np.int64)
        fill_infos(sim.arrays.env, sim.potential, sim.arrays.nodes, self._stepped, block, rates, flags)
        parts = (block, rates)
        infos = {key: parts[which][row] for key, which, row in _INFO_LAYOUT}
        infos["conflict"], infos["invalid_action"] = flags[0], flags[1]
        return infos


#: Info keys read from the simulator's env table (statistics, t, active) or computed (rates, potential).
_TABLE_ROWS = {**{key: row for row, key in enumerate(STATS)}, "t": EnvRow.T, "active": EnvRow.N_ACTIVE}
_RATE_KEYS = ("completion_rate", "node_utilization", "potential")
#: (key, 0 = table row / 1 = rate row, row) for EPISODE_KEYS then TEAM_KEYS, in order.
_INFO_LAYOUT = tuple((key, 0, _TABLE_ROWS[key]) if key in _TABLE_ROWS else (key, 1, _RATE_KEYS.index(key)) for key in EPISODE_KEYS + TEAM_KEYS)


@compiled
def fill_infos(env, potential, node_flags, stepped, block, rates, flags):
    """The info arrays of :meth:`EnvBatch.infos`: ``block`` the first rows of the env table (statistics,
    t, ..., active), ``rates`` the completion rate (completed / arrived, 0 before an arrival), the node
    utilization (busy node-steps / (N · max(t, 1))) and Φ(s); ``flags`` the last step's conflict and
    invalid-action flags (zeros when nothing was stepped since the reset)."""
    B, N = flags.shape[1], flags.shape[2]
    for r in range(block.shape[0]):
        for b in range(B):
            block[r, b] = env[r, b]
    for b in range(B):
        rates[0, b] = completion_rate(block[EnvRow.COMPLETED, b], block[EnvRow.ARRIVED, b])
        rates[1, b] = node_utilization(block[EnvRow.BUSY_NODE_STEPS, b], N, block[EnvRow.T, b])
        rates[2, b] = potential[b]
        for n in range(N):
            flags[0, b, n] = node_flags[NodeFlag.CONFLICT, b, n] if stepped else 0
            flags[1, b, n] = node_flags[NodeFlag.INVALID, b, n] if stepped else 0


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
            rewards = self.batch.step(array, observe=self.observation_kind)
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


__all__ = ["DiscreteCoREVectorEnv", "EPISODE_KEYS", "EnvBatch", "NODE_KEYS", "Observer", "TEAM_KEYS", "make_vector_env"]
