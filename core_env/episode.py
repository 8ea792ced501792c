"""One environment (B = 1 of :class:`core_env.batch.EnvBatch`): workload choice, reward, infos and trace.

Both single views (PettingZoo and Gymnasium) hold an :class:`Episode` and only translate its arrays into
their API's containers, so they and the vector env can never disagree on dynamics, rewards or statistics.
A step is one :meth:`core_env.batch.EnvBatch.advance` that also fills the observation and the infos.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from core_env.batch import EPISODE_KEYS, NODE_KEYS, TEAM_KEYS, EnvBatch
from core_env.config import EnvConfig
from core_env.generators import reset_options
from core_env.render import render
from core_env.sim import StepOutcome, statistics_dict
from core_env.task_source import TaskSource, check_source
from core_env.workload import Workload


class TraceRecorder:
    """An observer of a B = 1 batch: per step, the task each node served and the losses reported (Gantt charts)."""

    def __init__(self) -> None:
        self.trace: list[np.ndarray] = []  # per step: (N,) task index served by each node (-1 idle)
        self.trace_losses: list[dict[int, float]] = []
        self._tasks = np.zeros(0, np.int64)  # the task in each slot when the next actions are chosen

    def on_reset(self, batch: EnvBatch, envs: np.ndarray) -> None:
        self.trace, self.trace_losses = [], []
        self._tasks = batch.sim.task[0].copy()

    def on_step(self, batch: EnvBatch, outcome: StepOutcome) -> None:
        before, slot = self._tasks, batch.sim.node_slot[0]
        self.trace.append(np.where(slot >= 0, before[np.maximum(slot, 0)], -1))
        self.trace_losses.append({int(before[k]): float(outcome.reported[0, k]) for k in np.flatnonzero(outcome.served[0])})
        self._tasks = batch.sim.task[0].copy()


class Episode:
    """A single environment (an :class:`EnvBatch` of B = 1): reset from a seed or a chosen workload, step
    with an (N,) action array. ``task_source``: what served tasks report (:mod:`core_env.task_source`;
    default the curve bank), e.g. a :class:`core_env.live.LiveSource` whose tasks train for real.
    ``observation``: what each step computes with it, ``"per_node"`` (:meth:`observe`) or ``"compact"``."""

    def __init__(self, config: EnvConfig, task_source: TaskSource | None = None, observation: str = "per_node") -> None:
        self.batch = EnvBatch(config, 1)
        self.batch.source = check_source(task_source)
        self.observation = observation
        self.workload: Workload | None = None
        self.recorder = TraceRecorder()
        if config.render_mode == "rgb_array":
            self.batch.observers.append(self.recorder)

    @property
    def config(self) -> EnvConfig:
        return self.batch.config

    @property
    def sim(self):
        return self.batch.sim

    @property
    def rng(self) -> np.random.Generator:
        return self.batch.rngs[0]

    @rng.setter
    def rng(self, value: np.random.Generator) -> None:
        self.batch.rngs[0] = value

    @property
    def last_outcome(self) -> StepOutcome | None:
        return self.batch.last_outcome

    @property
    def trace(self) -> list[np.ndarray]:
        return self.recorder.trace

    @property
    def trace_losses(self) -> list[dict[int, float]]:
        return self.recorder.trace_losses

    def set_max_cycles(self, value: int) -> None:
        self.batch.config = self.batch.sim.config = dataclasses.replace(self.config, max_cycles=value)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start an episode: ``options`` one mapping (or None), checked by :func:`core_env.generators.reset_options`
        as in every view (an option that would be ignored, e.g. ``root`` without ``suite``, is refused)."""
        options = reset_options(options)  # before the seed: a refused reset changes nothing
        self.batch.seed(seed)
        self.workload = self.batch.workloads_for([0], options)[0]
        self.batch.reset([self.workload])

    @property
    def started(self) -> bool:
        return self.workload is not None

    def require_started(self, what: str) -> None:
        """RuntimeError (instead of an AttributeError from the empty simulator) before the first reset."""
        if not self.started:
            raise RuntimeError(f"call reset() before {what}")

    def step(self, actions: np.ndarray) -> float:
        """Apply an (N,) (or (1, N)) int action array; returns the team reward. Raises before changing any state."""
        if self.workload is None:
            self.require_started("step()")
        if type(actions) is not np.ndarray or actions.ndim != 2:  # (1, N) is taken as it is
            actions = np.asarray(actions).reshape(1, -1)
        self.batch.advance(actions, self.observation, True)
        return float(self.sim.reward[0])

    @property
    def terminated(self) -> bool:
        return bool(self.sim.terminated[0])

    @property
    def truncated(self) -> bool:
        return bool(self.sim.truncated[0])

    def ended(self) -> list[bool]:
        """[terminated, truncated] as Python bools (one read for both)."""
        return self.sim.arrays.flags[1:, 0].tolist()

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """(N, D) float32 observations and (N, K+1) int8 masks (fresh arrays)."""
        if self.workload is None:
            self.require_started("observing")
        obs, mask = self.batch.observe()
        return obs[0], mask[0]

    def state(self) -> np.ndarray:
        self.require_started("state()")
        return self.batch.state()[0]

    def statistics(self) -> dict[str, float]:
        """Episode statistics (running) as plain Python numbers."""
        return self.sim.statistics_of(0)

    def info(self) -> tuple[dict[str, int | float], list[list[int]]]:
        """The statistics and ``potential`` by their info names as plain Python numbers
        (:func:`core_env.sim.statistics_dict`), and the last step's [conflict, invalid-action] flags of
        every node (zeros after reset): the infos of the single views, filled by the step."""
        counts, rates, flags = self.batch.statistics_lists(0)
        return statistics_dict(counts, rates), flags

    def potential(self) -> float:
        """Φ(s) of the current state, as the shaped reward counts it (0.0 with ``reward="sparse"``)."""
        self.require_started("reading the potential")
        return float(self.batch.potential[0])

    def node_flags(self) -> tuple[np.ndarray, np.ndarray]:
        """(N,) conflict and invalid-action flags of the last step (zeros after reset)."""
        if self.last_outcome is None:  # two arrays: the Gymnasium view hands both out in one info dict
            return np.zeros(self.config.n_nodes, np.int64), np.zeros(self.config.n_nodes, np.int64)
        return self.last_outcome.conflicts[0].astype(np.int64), self.last_outcome.invalid[0].astype(np.int64)

    def reported_history(self, slot: int) -> np.ndarray:
        """Every loss reported so far by the task in ``slot`` (oldest first; empty if the slot is empty)."""
        self._check_slot(slot)
        return self.sim.reported_history(0, slot)

    def slot_task(self, slot: int) -> int:
        """Workload index of the task in ``slot`` (-1 if empty); stable for the task's lifetime."""
        self._check_slot(slot)
        return int(self.sim.task[0, slot])

    def _check_slot(self, slot: int) -> None:
        self.require_started("reading slots")
        if not isinstance(slot, (int, np.integer)) or not 0 <= slot < self.config.n_slots:
            raise ValueError(f"slot must be an int in [0, {self.config.n_slots}), got {slot!r}")


class EpisodeView:
    """What both single views (:class:`core_env.gym_env.DiscreteCoREEnv`,
    :class:`core_env.parallel.DiscreteCoREParallelEnv`) answer straight from their :class:`Episode`
    (``self.episode``): the global state, a render in their ``render_mode``, and a close that has nothing to free."""

    episode: Episode
    render_mode: str | None

    def state(self) -> np.ndarray:
        """The global state (RuntimeError before the first reset)."""
        return self.episode.state()

    def render(self):
        """The episode drawn in ``render_mode`` (:func:`core_env.render.render`); None without one."""
        if self.render_mode is None:
            return None
        return render(self.episode, self.render_mode)

    def close(self) -> None:
        pass


__all__ = ["EPISODE_KEYS", "Episode", "EpisodeView", "NODE_KEYS", "TEAM_KEYS", "TraceRecorder"]
