"""Predictor outputs as observation features: PettingZoo, Gymnasium and the batched simulator.

Each view appends K × 3 floats to the env's observation, slot by slot (slot 0's three first), named by
:data:`PREDICTOR_FEATURE_NAMES` (K × 4 with ``index=True``, the ``-post`` feature sets of MARA on the posterior):

* ``predicted_demand``: min(median remaining demand, cap) / TIME_SCALE (a censored median reads as
  the cap);
* ``demand_spread``: (min(q75, cap) − min(q25, cap)) / TIME_SCALE, the interquartile range of the
  capped demand (0 for point-mass predictors);
* ``p_within_budget``: the probability that the demand fits the task's steps to deadline;
* with ``index=True``, ``index``: the truncated Gittins index of the task's posterior within its budget,
  max_b P(demand ≤ b) / E[min(demand, b)] (:func:`mara_agents.predictors.posterior.truncated_index`), in [0, 1].

Demands are in nominal node-steps (see :mod:`mara_agents.protocols`), scaled like the env's other step
counts (TIME_SCALE = 100); ``cap`` defaults to the predictor's horizon. An empty slot's features are 0;
every feature is finite and lies in the extended observation space. The state (``state()`` and
``state_space``) gets the same K × 3 features.

Caching: :class:`SlotPredictions` remembers, per slot, the task and history length it last predicted and
recomputes only the tasks whose history changed (newly admitted or served since); it predicts
``p_within_budget`` for every budget the task can still have (its budget only shrinks while its history
stands still), so a cached task costs a lookup per step. Its counters say how many tasks were predicted.

Example::

    env = PredictorFeatures(discrete_core_v1.parallel_env(), WLS())
    observations, infos = env.reset(seed=0)  # each observation: (D + 3K,) float32
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from core_env import features
from core_env.sim import Simulator, StepOutcome
from core_env.vector import DiscreteCoREVectorEnv, EnvBatch
from core_env.wrappers import canonical_space, ObservationWrapper
from mara_agents.observed import ObservedTasks
from mara_agents.predictors.cache import PredictionCache, SlotTasks, update_together
from mara_agents.predictors.posterior import truncated_index
from mara_agents.protocols import DemandSummary, Predictor

__all__ = ["append_to_nodes", "cache_features", "ObservedFeatures", "predict_together", "observed_features", "DEMAND_SPREAD", "PREDICTED_DEMAND", "PREDICTOR_FEATURE_NAMES", "P_WITHIN_BUDGET", "GymPredictorFeatures", "PredictorFeatures",
           "SlotPredictions", "predictor_observation", "predictor_observations", "summary_features"]

#: The per-slot predictor features, in order.
PREDICTOR_FEATURE_NAMES = ("predicted_demand", "demand_spread", "p_within_budget")
#: Their positions within a slot's three features.
PREDICTED_DEMAND, DEMAND_SPREAD, P_WITHIN_BUDGET = range(len(PREDICTOR_FEATURE_NAMES))
#: A feature set named ``<predictor>-post`` (e.g. ``pfn-post``) adds the truncated Gittins index as a 4th feature.
POSTERIOR_SUFFIX = "-post"


def split_feature_set(name: str) -> tuple[str, bool]:
    """(predictor name, whether the index feature is added) of a feature set name (``"pfn-post"`` → ``("pfn", True)``)."""
    return (name[: -len(POSTERIOR_SUFFIX)], True) if name.endswith(POSTERIOR_SUFFIX) else (name, False)


def feature_width(index: bool) -> int:
    """Predictor features per slot: 3, or 4 with the index."""
    return len(PREDICTOR_FEATURE_NAMES) + bool(index)


def summary_features(summary: DemandSummary, cap: float) -> np.ndarray:
    """(M, 3) float64 the features of a summary with (M,) budgets (see the module docstring)."""
    if summary.p_within_budget.ndim != 1:
        raise ValueError(f"summary_features needs one budget per task, got p_within_budget of shape {summary.p_within_budget.shape}")
    return np.column_stack([_demand_features(summary.median, summary.quantile(0.25), summary.quantile(0.75), cap), summary.p_within_budget])


def _demand_features(median: np.ndarray, q25: np.ndarray, q75: np.ndarray, cap: float) -> np.ndarray:
    """(..., 2) float64 the predicted-demand and spread features (they do not depend on the budget)."""
    def capped(demand: np.ndarray) -> np.ndarray:
        return np.minimum(demand, cap) / features.TIME_SCALE

    return np.stack([capped(median), capped(q75) - capped(q25)], axis=-1)


class SlotPredictions:
    """Per-slot predictor features of a :class:`Simulator` (B environments), with a per-task cache.

    Call it with the simulator after each reset and step: ``predictions(sim)`` is (B, K, 3) float64; or
    :meth:`attach` it to a vector env's batch and read the features with :func:`predictor_observation`.

    Args:
        predictor: any :class:`Predictor`; oracle predictors get ``sim.remaining_demand()``.
        cap: node-steps at which demand features saturate (default: the predictor's horizon).
        index: add the truncated Gittins index as a 4th feature per slot.

    Attributes:
        cache: the :class:`PredictionCache` (its ``recomputed`` and ``last_recomputed`` count the tasks
            predicted since construction and by the last call).
    """

    def __init__(self, predictor: Predictor, cap: float | None = None, index: bool = False) -> None:
        if not isinstance(predictor, Predictor):
            raise TypeError(f"SlotPredictions needs a Predictor, got {type(predictor).__name__}")
        self.index = bool(index)
        cap = float(predictor.horizon if cap is None else cap)
        if not (np.isfinite(cap) and cap > 0):
            raise ValueError(f"cap must be a positive number of node-steps, got {cap!r}")
        self.predictor, self.cap = predictor, cap
        self.cache = PredictionCache(predictor)
        self._workloads: list | None = None
        self._batch: EnvBatch | None = None
        self._stale = True
        self._group: list[SlotPredictions] = []  # linked by predict_together

    @property
    def recomputed(self) -> int:
        return self.cache.recomputed

    @property
    def last_recomputed(self) -> int:
        return self.cache.last_recomputed

    @property
    def high(self) -> np.ndarray:
        """(3,) float32 upper bounds of the three features, (4,) with the index (lower bounds are 0)."""
        return feature_high(self.cap, self.index).astype(np.float32)

    def reset(self) -> None:
        """Forget every cached prediction (done automatically when the simulator starts new episodes)."""
        self._workloads = None

    # An observer of a core_env.vector.EnvBatch (attach()): predictions are made when read, so a step
    # nobody observes predicts nothing.
    def attach(self, batch: EnvBatch) -> SlotPredictions:
        """Observe ``batch`` (a :class:`core_env.vector.EnvBatch`, e.g. ``envs.batch`` of a vector env):
        :func:`predictor_observation` then appends these features to its observations."""
        batch.observers.append(self)
        self._batch, self._stale = batch, True
        return self

    def on_reset(self, batch: EnvBatch, envs: np.ndarray) -> None:
        self.reset()
        self._stale = True

    def on_step(self, batch: EnvBatch, outcome: StepOutcome) -> None:
        self._stale = True

    def features_of(self, batch: EnvBatch) -> np.ndarray:
        """(B, 3K) float32 :meth:`observed` features of an attached batch. Linked by
        :func:`predict_together`, the first read after a step predicts for every linked batch at once."""
        if not self._group:
            return self.observed(batch.sim)
        if self._stale:
            stale = [member for member in self._group if member._stale]
            update_together([member._update_of(member._batch.sim) for member in stale])
            for member in stale:
                member._stale = False
        return observed_features(cache_features(self.cache, batch.sim.active, self.cap, self.index), self.cap)

    def _update_of(self, sim: Simulator) -> tuple[PredictionCache, SlotTasks, np.ndarray | None]:
        if self._workloads is not sim.workloads:  # new episodes: a new workload list
            self._workloads = sim.workloads
            self.cache.reset()
        return self.cache, SlotTasks.of_simulator(sim), sim.remaining_demand() if self.predictor.needs_oracle else None

    def __call__(self, sim: Simulator) -> np.ndarray:
        update_together([self._update_of(sim)])
        return cache_features(self.cache, sim.active, self.cap, self.index)

    def observed(self, sim: Simulator) -> np.ndarray:
        """(B, 3K) float32 the features as observed: clipped into the observation space's bounds."""
        return observed_features(self(sim), self.cap)


def predict_together(batches: list[EnvBatch]) -> None:
    """Link the :class:`SlotPredictions` attached to ``batches`` (one each, sharing one predictor): after a
    step, the first read of any of them predicts for all in one batched predictor call
    (:func:`mara_agents.predictors.cache.update_together`; the features equal unlinked ones). The trainer
    links its env groups this way."""
    members = []
    for batch in batches:
        found = [observer for observer in batch.observers if isinstance(observer, SlotPredictions)]
        if len(found) != 1:
            raise ValueError(f"predict_together needs exactly one SlotPredictions attached to each batch, found {len(found)}")
        members.append(found[0])
    if len({id(member.predictor) for member in members}) != 1:
        raise ValueError("batches predicted together must share one predictor object")
    for member in members:
        member._group = members


def cache_features(cache: PredictionCache, active: np.ndarray, cap: float, index: bool = False) -> np.ndarray:
    """(B, K, 3) float64 the features of a :class:`PredictionCache`'s current predictions (0 for empty slots);
    (B, K, 4) with the truncated Gittins index."""
    demand = _demand_features(cache.median, cache.q25, cache.q75, cap)
    columns = [demand, cache.p_within_budget[..., None]]
    if index:
        columns.append(truncated_index(cache.cdf, cache.budget)[..., None])
    out = np.concatenate(columns, axis=-1)
    out *= active[..., None]
    return out


def feature_high(cap: float, index: bool = False) -> np.ndarray:
    """(3,) or (4,) float64 upper bounds of the features (lower bounds are 0)."""
    demand = cap / features.TIME_SCALE
    return np.array([demand, demand, 1.0, 1.0][: feature_width(index)])


def observed_features(values: np.ndarray, cap: float) -> np.ndarray:
    """(B, width·K) float32: (B, K, width) features clipped into the observation space's bounds, flattened per env."""
    high = feature_high(cap, values.shape[-1] > len(PREDICTOR_FEATURE_NAMES))
    # float32 rounding is monotonic, so values clipped in float64 stay within the float32 bounds.
    return np.minimum(np.maximum(values, 0.0), high).astype(np.float32).reshape(values.shape[0], -1)  # np.clip: slower


class ObservedFeatures:
    """The per-slot predictor features rebuilt from an agent's own observations, for an agent that sees only
    what the env shows (no simulator): :class:`mara_agents.observed.ObservedTasks` reconstructs
    each task's full reported-loss history from consecutive observations, a :class:`PredictionCache`
    predicts the tasks whose history changed, and the features are formed as :class:`SlotPredictions`
    forms them in training (losses pass through the float32 observation, so they agree to float32
    precision). Call :meth:`reset` before each batch of episodes and then once per step, in order.

    Attributes:
        seconds: wall seconds spent rebuilding features (benchmarks split decision time with it).
    """

    def __init__(self, predictor: Predictor, index: bool = False) -> None:
        self.predictor, self.index = predictor, bool(index)
        self._observed = self._cache = None
        self.seconds = 0.0

    def reset(self, batch_size: int, n_slots: int) -> None:
        self._observed, self._cache = ObservedTasks(), PredictionCache(self.predictor)
        self._observed.reset(batch_size, n_slots)

    def __call__(self, observation: np.ndarray, n_slots: int) -> np.ndarray:
        """(B, 3K) float32 the features after (B, N, D) ``observation`` (the plain env observation)."""
        if self._observed is None:
            self.reset(observation.shape[0], n_slots)
        started = time.perf_counter()
        self._observed.update(observation, n_slots)
        tasks = self._observed.slot_tasks()
        self._cache.update(tasks)
        cap = float(self.predictor.horizon)
        out = observed_features(cache_features(self._cache, tasks.active, cap, self.index), cap)
        self.seconds += time.perf_counter() - started
        return out


def predictor_observations(sim: Simulator, predictions: SlotPredictions, history: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Batched observations with predictor features: (B, N, D + 3K) float32 and (B, N, K+1) int8 masks.

    The observation of :func:`core_env.features.observations` (with ``history``, default the config's H)
    followed by the K × 3 predictor features of :class:`SlotPredictions`, the same for every node.
    """
    observation, mask = features.observations(sim, sim.config.history if history is None else history)
    return append_to_nodes(observation, predictions.observed(sim)), mask


def append_to_nodes(observation: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """(B, N, D) observations with (B, E) features appended to every node's row."""
    B, N = observation.shape[:2]
    return np.concatenate([observation, np.broadcast_to(extra[:, None, :], (B, N, extra.shape[1]))], axis=2)


def predictor_observation(envs: DiscreteCoREVectorEnv, obs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A vector env's per-node observation followed, for every node, by the K × 3 features of the
    :class:`SlotPredictions` attached to its batch (the plain observation without one), and the masks:
    :func:`predictor_observations`' layout, as an ``observe`` of :func:`mara_agents.rollout.play`."""
    observation, mask = obs["observation"], obs["action_mask"]
    for observer in envs.batch.observers:
        if isinstance(observer, SlotPredictions):
            return append_to_nodes(observation, observer.features_of(envs.batch)), mask
    return observation, mask


def _extended_box(box: spaces.Box, high: np.ndarray, n_slots: int) -> spaces.Box:
    """``box`` with K × len(high) predictor features appended along its last axis."""
    extra_high = np.broadcast_to(np.tile(high, n_slots), box.shape[:-1] + (high.size * n_slots,))
    low = np.concatenate([box.low, np.zeros_like(extra_high)], axis=-1)
    return spaces.Box(low, np.concatenate([box.high, extra_high], axis=-1), dtype=np.float32)


class PredictorFeatures(ObservationWrapper):
    """PettingZoo wrapper: each node's ``observation`` gets the K × 3 predictor features appended.

    Wrap an env whose observations are still ``{"observation", "action_mask"}`` (observation-reshaping
    wrappers such as ``MaskToInfo`` go outside). ``state()`` and ``state_space`` are extended too.

    Args:
        env: a core_env PettingZoo ParallelEnv (possibly wrapped).
        predictor: any :class:`Predictor` (an oracle one gives oracle-only features).
        cap: node-steps at which demand features saturate (default: the predictor's horizon).
        index: add the truncated Gittins index as a 4th feature per slot.
    """

    def __init__(self, env: ParallelEnv, predictor: Predictor, cap: float | None = None, index: bool = False) -> None:
        super().__init__(env)
        self.predictions = SlotPredictions(predictor, cap, index)
        self._n_slots = env.unwrapped.config.n_slots
        self.state_space = _extended_box(env.state_space, self.predictions.high, self._n_slots)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        self.predictions.reset()
        return super().reset(seed=seed, options=options)

    def _transform_space(self, space: spaces.Space) -> spaces.Dict:
        space = canonical_space(space, type(self).__name__)
        return spaces.Dict({**space.spaces, "observation": _extended_box(space["observation"], self.predictions.high, self._n_slots)})

    def _transform(self, observations, infos):
        extra = self._features()
        return {a: {**o, "observation": np.concatenate([o["observation"], extra])} for a, o in observations.items()}, infos

    def state(self) -> np.ndarray:
        return np.concatenate([self.env.state(), self._features()])

    def _features(self) -> np.ndarray:
        """(3K,) float32 the current predictor features."""
        return self.predictions.observed(self.unwrapped.episode.sim)[0]


class GymPredictorFeatures(gym.ObservationWrapper):
    """Gymnasium wrapper (centralized view): the (N, D) ``observation`` becomes (N, D + 3K).

    Every node's row gets the same K × 3 predictor features. ``action_masks()`` and ``state()``
    (extended like the observation) reach the unwrapped env.

    Args:
        env: a core_env Gymnasium env (``gym.make("core_env/DiscreteCoRE-v1")``), possibly wrapped.
        predictor, cap, index: as for :class:`PredictorFeatures`.
    """

    def __init__(self, env: gym.Env, predictor: Predictor, cap: float | None = None, index: bool = False) -> None:
        super().__init__(env)
        self.predictions = SlotPredictions(predictor, cap, index)
        space = env.observation_space
        if not (isinstance(space, spaces.Dict) and "observation" in space.spaces):
            raise TypeError(f"GymPredictorFeatures needs Dict observations with an 'observation' entry, got {space}")
        n_slots = env.unwrapped.config.n_slots
        self.observation_space = spaces.Dict({**space.spaces, "observation": _extended_box(space["observation"], self.predictions.high, n_slots)})

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.predictions.reset()
        return super().reset(seed=seed, options=options)

    def observation(self, observation: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        extra = self._features()
        rows = observation["observation"]
        return {**observation, "observation": np.concatenate([rows, np.broadcast_to(extra, (rows.shape[0], extra.size))], axis=1)}

    def action_masks(self) -> np.ndarray:
        return self.unwrapped.action_masks()

    def state(self) -> np.ndarray:
        return np.concatenate([self.unwrapped.state(), self._features()])

    def _features(self) -> np.ndarray:
        return self.predictions.observed(self.unwrapped.episode.sim)[0]
