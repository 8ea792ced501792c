"""One environment on the simulator (B = 1): workload choice, reward, infos and trace.

Both views (PettingZoo and Gymnasium) hold an :class:`Episode` and only translate its arrays into their
API's containers, so the two can never disagree on dynamics, rewards or statistics.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from core_env import features
from core_env.config import EnvConfig
from core_env.reward import TeamReward
from core_env.sim import Simulator, StepOutcome
from core_env.workload import Workload, select_workload

#: Episode statistics reported in every info (running values; final at the last step).
EPISODE_KEYS = ("arrived", "completed", "failed", "rejected", "completion_rate", "active", "node_utilization",
                "busy_node_steps", "wasted_node_steps", "switches", "conflicts", "invalid_actions", "t")
#: Team keys besides the statistics, the same for every node: ``potential``, the shaped reward's Φ(s) of the
#: state after the step (0 at reset and with ``reward="sparse"``; see :mod:`core_env.reward`).
TEAM_KEYS = ("potential",)
#: Per-node keys: what happened to this node's own action this step.
NODE_KEYS = ("conflict", "invalid_action")


class Episode:
    """A single environment: reset from a seed or a chosen workload, step with an (N,) action array."""

    def __init__(self, config: EnvConfig) -> None:
        self.config = config
        self.sim = Simulator(config, 1)
        self.reward = TeamReward(config.reward, config.kappa)
        self.rng = np.random.default_rng()
        self.workload: Workload | None = None
        self.last_outcome: StepOutcome | None = None
        self.trace: list[np.ndarray] = []  # per step: (N,) task index served by each node (-1 idle)
        self.trace_losses: list[dict[int, float]] = []

    def set_max_cycles(self, value: int) -> None:
        self.config = dataclasses.replace(self.config, max_cycles=value)
        self.sim.config = self.config

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.workload = select_workload(self.config, self.rng, options)
        self.sim.reset([self.workload])
        self.reward.reset(self.sim)
        self.last_outcome = None
        self.trace, self.trace_losses = [], []

    @property
    def started(self) -> bool:
        return self.workload is not None

    def require_started(self, what: str) -> None:
        """RuntimeError (instead of an AttributeError from the empty simulator) before the first reset."""
        if not self.started:
            raise RuntimeError(f"call reset() before {what}")

    def step(self, actions: np.ndarray) -> float:
        """Apply an (N,) int action array; returns the team reward. Raises before changing any state."""
        self.require_started("step()")
        tracing = self.config.render_mode == "rgb_array"
        before = self.sim.task[0].copy() if tracing else None
        outcome = self.sim.step(np.asarray(actions).reshape(1, -1))
        self.last_outcome = outcome
        if tracing:
            slot = self.sim.node_slot[0]
            served = np.where(slot >= 0, before[np.maximum(slot, 0)], -1)
            self.trace.append(served)
            self.trace_losses.append({int(before[k]): float(outcome.reported[0, k]) for k in np.flatnonzero(outcome.served[0])})
        return float(self.reward(self.sim, outcome)[0])

    @property
    def terminated(self) -> bool:
        return bool(self.sim.terminated[0])

    @property
    def truncated(self) -> bool:
        return bool(self.sim.truncated[0])

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """(N, D) float32 observations and (N, K+1) int8 masks (fresh arrays)."""
        self.require_started("observing")
        obs, mask = features.observations(self.sim, self.config.history)
        return obs[0], mask[0]

    def state(self) -> np.ndarray:
        self.require_started("state()")
        return features.state(self.sim, self.config.history)[0]

    def statistics(self) -> dict[str, float]:
        """Episode statistics (running) as plain Python numbers."""
        return self.sim.statistics_of(0)

    def potential(self) -> float:
        """Φ(s) of the current state, as the shaped reward counts it (0.0 with ``reward="sparse"``)."""
        self.require_started("reading the potential")
        return float(self.reward.current[0])

    def node_flags(self) -> tuple[np.ndarray, np.ndarray]:
        """(N,) conflict and invalid-action flags of the last step (zeros after reset)."""
        if self.last_outcome is None:  # two arrays: the Gymnasium view hands both out in one info dict
            return np.zeros(self.config.n_nodes, np.int64), np.zeros(self.config.n_nodes, np.int64)
        return self.last_outcome.conflicts[0].astype(np.int64), self.last_outcome.invalid[0].astype(np.int64)

    def node_flag_lists(self) -> tuple[list[int], list[int]]:
        """:meth:`node_flags` as lists of Python ints."""
        if self.last_outcome is None:
            return [0] * self.config.n_nodes, [0] * self.config.n_nodes
        return self.last_outcome.conflicts[0].view(np.int8).tolist(), self.last_outcome.invalid[0].view(np.int8).tolist()

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
