"""B environments in one object: the batch every view and every rollout runs on (no RL API: arrays in, arrays out).

:class:`EnvBatch` holds the :class:`core_env.sim.Simulator` of B environments, their seeded rngs and
workload choice, and the buffers the views read: observations (per-node or compact, docs/env.md), the
statistics and the team rewards. :class:`core_env.vector.DiscreteCoREVectorEnv` is its Gymnasium
``VectorEnv``; the PettingZoo and Gymnasium single views hold an ``EnvBatch`` of B = 1
(:class:`core_env.episode.Episode`).

One step goes down and back once::

    EnvBatch.step(actions, observe, infos)
      └─ Simulator.advance(actions, fill=buffers)        checks the actions
           └─ sim.step_and_fill (one compiled call)
                ├─ dynamics.step_arrays → rules           every live env's step and team reward
                ├─ features.fill_observations / fill_compact   the observations of the new state
                └─ sim.fill_statistics                    its statistics, Φ and node flags (the infos)
      ← (code, node): InvalidActionError raised by the simulator, or the buffers are full

The batch hands each buffer out once (:meth:`EnvBatch.observe`, :meth:`EnvBatch.observe_compact`,
:meth:`EnvBatch.infos`); asked again, or after a reset, it has the simulator fill fresh ones from the
state as it stands. The single views read the statistics in place, as plain numbers
(:meth:`EnvBatch.statistics_lists`). The batch never reaches past the simulator (no dynamics call, no
state handle). With a task source (:mod:`core_env.task_source`) the step is two compiled halves around
the source's reports, and the observations and statistics are filled when read.

Observers: objects with ``on_reset(batch, envs)`` and ``on_step(batch, outcome)`` appended to
``EnvBatch.observers`` are told after every reset (``envs``: the environments that started) and step
(the :class:`core_env.sim.StepOutcome`); the simulator itself knows nothing of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from core_env import features
from core_env.config import EnvConfig
from core_env.generators import generator_for, generator_from_options, reset_options
from core_env.sim import RATES, Simulator, StepOutcome, statistics_dict
from core_env.state import EPISODE_KEYS, INFO_ROWS
from core_env.task_source import TaskSource
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


def check_seed(seed: Any) -> int:
    """``seed`` as an int >= 0; TypeError for a bool or a non-integer, ValueError for a negative int."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int >= 0 or None, got {type(seed).__name__} {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed}")
    return int(seed)


class EnvBatch:
    """Simulator (whose compiled step also computes the team reward) + observation and statistics buffers of
    B environments, each with its own seeded rng."""

    def __init__(self, config: EnvConfig, num_envs: int = 1) -> None:
        self.config = config
        self.sim = Simulator(config, num_envs)
        self.B, self.N, self.K = B, N, K = self.sim.B, self.sim.N, self.sim.K
        self.rngs = [np.random.default_rng() for _ in range(B)]
        self.observers: list[Observer] = []
        #: What served tasks report (:mod:`core_env.task_source`); None: the curve bank, in the compiled step.
        self.source: TaskSource | None = None
        self._stepped = False  # a step since the last reset: its outcome is in the simulator's arenas
        self._outcome: StepOutcome | None = None
        self.started = False
        # the observation the last step filled, handed out once (module docstring)
        self._observed: tuple[np.ndarray, np.ndarray] | None = None
        self._observed_compact: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._history = H = config.history
        self._obs_shape = (B, N, features.obs_dim(K, H))
        self._mask_shape = (B, N, K + 1)
        self._unshared = np.empty((0, self._obs_shape[2] - features.NODE_FEATURES), np.float32)  # the per-node fill's unread `shared`
        # the statistics (counts, rates, flags: Simulator.statistics), filled by a step with infos=True or when
        # read; read in place as lists (statistics_lists), or handed out (statistics, infos) and then replaced
        self._statistics = self._new_statistics()
        self._statistics_current = False
        self._columns: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # views of env b's column of each
        # buffers that hold no environment: the parts of a step's fill that were not asked for
        self._no_observation = (H, False, np.empty((0, N, self._obs_shape[2]), np.float32), self._unshared, np.empty((0, N, K + 1), np.int8))
        self._no_statistics = (np.empty((INFO_ROWS, 0), np.int64), np.empty((len(RATES), 0)), np.empty((2, 0, N), np.int64))

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
        self._statistics_current = False
        for observer in self.observers:
            observer.on_reset(self, envs)

    def step(self, actions: np.ndarray, observe: bool | str = False, infos: bool = False) -> np.ndarray:
        """Apply (B, N) int actions; returns the (B,) team rewards. Raises before changing any state.

        ``observe``: also compute the observations in the same compiled call, per-node (True or
        ``"per_node"``: the next :meth:`observe` returns them) or ``"compact"`` (the next
        :meth:`observe_compact`); ``infos``: also the statistics (the next :meth:`infos` or
        :meth:`statistics`).
        """
        self.advance(actions, observe, infos)
        return self.sim.reward.copy()

    def advance(self, actions: np.ndarray, observe: bool | str = False, infos: bool = False) -> None:
        """:meth:`step` without the copy of the rewards (they stand in ``sim.reward``)."""
        if not self.started:
            raise RuntimeError("call reset() before step()")
        sim, observed, observed_compact = self.sim, None, None
        statistics = self._statistics if infos else self._no_statistics
        if self.source is not None:  # two compiled halves around the source's reports; observed and counted on demand
            sim.advance(actions, self.source)
            infos = False
        elif observe == "compact":
            observed_compact = features.empty_compact(self.B, self.N, self.K, self._history)
            sim.advance(actions, None, (self._history, True, *observed_compact) + statistics)
        elif observe:
            observed = obs, mask = np.empty(self._obs_shape, np.float32), np.empty(self._mask_shape, np.int8)
            sim.advance(actions, None, (self._history, False, obs, self._unshared, mask) + statistics)
        elif infos:
            sim.advance(actions, None, self._no_observation + statistics)
        else:
            sim.advance(actions)
        self._stepped, self._outcome, self._statistics_current = True, None, infos
        self._observed, self._observed_compact = observed, observed_compact
        if self.observers:
            for observer in self.observers:
                observer.on_step(self, self.last_outcome)

    @property
    def last_outcome(self) -> StepOutcome | None:
        """What the last step did (None after a reset); read from the simulator on first use."""
        if self._outcome is None and self._stepped:
            self._outcome = self.sim.outcome()
        return self._outcome

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
        obs, mask = np.empty(self._obs_shape, np.float32), np.empty(self._mask_shape, np.int8)
        self.sim.observe(self._history, False, obs, self._unshared, mask)
        return obs, mask

    def observe_compact(self) -> dict[str, np.ndarray]:
        """The compact observation: nodes (B, N, 3), global (B, 3), slots (B, K, F), action_mask (fresh)."""
        if self._observed_compact is not None:  # computed by step(observe="compact"); handed out once
            parts, self._observed_compact = self._observed_compact, None
        else:
            parts = features.empty_compact(self.B, self.N, self.K, self._history)
            self.sim.observe(self._history, True, *parts)
        return features.compact_dict(*parts, self.K)

    def state(self) -> np.ndarray:
        """(B, 3 + K·F) float32 global state of every environment (the shared part of the compact observation)."""
        nodes, shared, mask = features.empty_compact(self.B, self.N, self.K, self._history)
        self.sim.observe(self._history, True, nodes, shared, mask)
        return shared

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

    def _new_statistics(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.empty((INFO_ROWS, self.B), np.int64), np.empty((len(RATES), self.B)), np.empty((2, self.B, self.N), np.int64)

    def _current_statistics(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The batch's statistics buffers, filled by the last step (``infos=True``) or now."""
        if not self._statistics_current:
            self.sim.statistics_into(*self._statistics)
            self._statistics_current = True
        return self._statistics

    def statistics(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`core_env.sim.Simulator.statistics` of every env: ``counts`` (INFO_ROWS, B), ``rates`` (3, B),
        ``flags`` (2, B, N), fresh (the step's, handed out: the batch takes new buffers)."""
        statistics = self._current_statistics()
        self._statistics, self._statistics_current, self._columns = self._new_statistics(), False, {}
        return statistics

    def statistics_lists(self, b: int = 0) -> tuple[list[int], list[float], list[list[int]]]:
        """Env b's statistics as lists of plain Python numbers: its counts, its rates and its [conflict,
        invalid-action] flags (per node); named by :func:`core_env.sim.statistics_dict`."""
        self._current_statistics()
        columns = self._columns.get(b)
        if columns is None:  # views of env b's column of each buffer, made once
            columns = self._columns[b] = tuple(part[:, b] for part in self._statistics)
        counts, rates, flags = columns
        return counts.tolist(), rates.tolist(), flags.tolist()

    def infos(self) -> dict[str, np.ndarray]:
        """Every info key (:data:`INFO_KEYS`) as a (B,) array (``conflict``/``invalid_action``: (B, N)):
        fresh arrays, the keys of one dtype rows of one array (:func:`core_env.sim.statistics_dict`)."""
        counts, rates, flags = self.statistics()
        infos = statistics_dict(list(counts), list(rates))  # (B,) rows, made in one pass
        infos["conflict"], infos["invalid_action"] = flags
        return infos


__all__ = ["EPISODE_KEYS", "EnvBatch", "INFO_KEYS", "NODE_KEYS", "OBSERVATIONS", "Observer", "TEAM_KEYS", "check_seed"]
