"""The dynamics: B environments stepped together as a struct of arrays. No RL API here.

One step (DESIGN.md §2), for every live environment:

1. Each node's action is 0 (idle) or ``k`` (the task in slot ``k - 1``). A choice of an empty slot is
   invalid and treated as idle (or raises with ``strict=True``). If several nodes choose one task, the
   lowest-index node serves it and the others idle (conflicts).
2. A served task trains ``batches_per_step × speed`` batches; with switching cost ``c`` a task served by a
   different node than at its previous service, or resumed after a step without service, loses the
   first ``c`` of them (its first service ever is not a switch). Fractional batches accumulate exactly.
   The task reports the mean of its curve over the newly trained batches.
3. A task whose reported loss is at most its target completes and frees its slot.
4. A task still active when ``t + 1`` reaches its deadline fails and frees its slot.
5. ``t`` advances; tasks arriving at the new ``t`` (only while ``t < T_arrive``) take the lowest free
   slot, or are rejected when every slot is full.
6. An environment terminates when the arrival window is over and no task is active, and is truncated at
   ``max_cycles``. Finished environments are frozen: later steps leave them unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from core_env.config import EnvConfig
from core_env.workload import Workload


class InvalidActionError(ValueError):
    """An action outside the action space (or an invalid slot choice with ``strict=True``).

    Attributes:
        env: batch index of the offending environment.
        node: index of the offending node.
        value: the offending action.
    """

    def __init__(self, message: str, env: int, node: int, value: object) -> None:
        super().__init__(message)
        self.env, self.node, self.value = env, node, value


@dataclasses.dataclass
class StepOutcome:
    """What one batched step did (B environments, N nodes, K slots)."""

    completed: np.ndarray  # (B,) int64 tasks completed this step
    failed: np.ndarray  # (B,) int64 tasks that missed their deadline this step
    rejected: np.ndarray  # (B,) int64 arrivals rejected this step (all slots full)
    conflicts: np.ndarray  # (B, N) bool node lost its choice to a lower-index node
    invalid: np.ndarray  # (B, N) bool node chose an empty slot
    served: np.ndarray  # (B, K) bool slot was served this step
    reported: np.ndarray  # (B, K) float64 loss reported by each served slot (0 where not served)
    terminated: np.ndarray  # (B,) bool
    truncated: np.ndarray  # (B,) bool


STATS = ("arrived", "completed", "failed", "rejected", "switches", "busy_node_steps", "wasted_node_steps", "conflicts", "invalid_actions")


class Simulator:
    """Batched simulator state. Arrays are public for read-only use by views, features and agents.

    Slot arrays have shape (B, K); ``task[b, k]`` is the workload index of the task in slot ``k``
    (-1 when empty). Node arrays have shape (B, N).
    """

    def __init__(self, config: EnvConfig, batch_size: int = 1) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.config = config
        self.B, self.N, self.K = int(batch_size), config.n_nodes, config.n_slots
        self.speeds = config.speeds
        self._earlier = np.tril(np.ones((self.N, self.N), dtype=bool), -1)  # [i, j]: node j is before node i
        self.workloads: list[Workload] = []

    # ------------------------------------------------------------------ reset
    def reset(self, workloads: Sequence[Workload]) -> None:
        """Start B episodes, one per workload (all drawn on one curve bank)."""
        if len(workloads) != self.B:
            raise ValueError(f"reset needs {self.B} workloads, got {len(workloads)}")
        bank = workloads[0].bank
        if any(w.bank is not bank for w in workloads):
            raise ValueError("all workloads of one batch must share one CurveBank")
        B, K, N = self.B, self.K, self.N
        self.bank = bank
        self.workloads = list(workloads)
        m = max(1, max(len(w) for w in workloads))
        self.n_tasks = np.array([len(w) for w in workloads], dtype=np.int64)
        pad = {"arrival": np.iinfo(np.int64).max, "deadline": 0, "target": 1.0, "batches_per_step": 1.0, "curve": 0, "demand": 0.0}
        self._wl = {}
        for name, fill in pad.items():
            arr = np.full((B, m), fill, dtype=np.int64 if name in ("arrival", "deadline", "curve") else np.float64)
            for b, w in enumerate(workloads):
                arr[b, : len(w)] = getattr(w, name)
            self._wl[name] = arr
        self.arrival_steps = np.array([w.arrival_steps for w in workloads], dtype=np.int64)
        window = max((int(w.window.max()) for w in workloads if len(w)), default=1)
        self.max_history = max(1, window)  # a task is served at most once per step of its window

        self.t = np.zeros(B, np.int64)
        self.done = np.zeros(B, bool)
        self.terminated = np.zeros(B, bool)
        self.truncated = np.zeros(B, bool)
        self.next_task = np.zeros(B, np.int64)
        self.task = np.full((B, K), -1, np.int64)
        self.active = np.zeros((B, K), bool)
        self.arrival = np.zeros((B, K), np.int64)
        self.deadline = np.zeros((B, K), np.int64)
        self.target = np.ones((B, K))
        self.batches_per_step = np.ones((B, K))
        self.curve = np.zeros((B, K), np.int64)
        self.demand = np.zeros((B, K))  # hidden: nominal demand from the task's start (oracles only)
        self.progress = np.zeros((B, K))
        self.steps = np.zeros((B, K), np.int64)
        self.last_loss = np.zeros((B, K))
        self.first_loss = np.zeros((B, K))
        self.last_node = np.full((B, K), -1, np.int64)
        self.served_last = np.zeros((B, K), bool)
        self.history = np.zeros((B, K, self.max_history))
        self.node_slot = np.full((B, N), -1, np.int64)
        self.stats = {name: np.zeros(B, np.int64) for name in STATS}
        self._admit_arrivals()
        self._update_done()

    # ------------------------------------------------------------------ step
    def check_actions(self, actions: np.ndarray) -> np.ndarray:
        """Validate a (B, N) integer action array; raises :class:`InvalidActionError` naming the culprit."""
        actions = np.asarray(actions)
        if actions.shape != (self.B, self.N):
            raise ValueError(f"actions must have shape (B, N) = {(self.B, self.N)}, got {actions.shape}")
        if actions.dtype.kind not in "iu":
            raise TypeError(f"actions must be integers, got dtype {actions.dtype}")
        bad = (actions < 0) | (actions > self.K)
        if bad.any():
            b, n = map(int, np.argwhere(bad)[0])
            raise InvalidActionError(f"action {actions[b, n]} of node {n} (env {b}) is outside [0, {self.K}]", b, n, actions[b, n])
        return actions.astype(np.int64, copy=False)

    def step(self, actions: np.ndarray) -> StepOutcome:
        """Advance every live environment by one step. ``actions``: (B, N) ints in [0, K]."""
        actions = self.check_actions(actions)
        B, K = self.B, self.K
        live = ~self.done
        chosen = actions - 1
        picked = np.take_along_axis(self.active, np.clip(chosen, 0, K - 1), axis=1)
        invalid = (chosen >= 0) & ~picked & live[:, None]
        if self.config.strict and invalid.any():
            b, n = map(int, np.argwhere(invalid)[0])
            raise InvalidActionError(f"node {n} (env {b}) chose slot {chosen[b, n]}, which holds no active task", b, n, int(actions[b, n]))
        slot = np.where(picked & live[:, None], chosen, -1)
        if self.N > 1:
            same = (slot[:, :, None] == slot[:, None, :]) & (slot[:, None, :] >= 0)
            conflicts = (same & self._earlier).any(axis=2)
            slot = np.where(conflicts, -1, slot)
        else:
            conflicts = np.zeros_like(invalid)

        served = np.zeros((B, K), bool)
        reported = np.zeros((B, K))
        completed = np.zeros(B, np.int64)
        eb, en = np.nonzero(slot >= 0)
        if eb.size:
            ek = slot[eb, en]
            served[eb, ek] = True
            completed = self._train(eb, en, ek, reported)
        self.served_last = served & self.active  # completed tasks left their slot
        self.node_slot = np.where(live[:, None], slot, self.node_slot)

        expired = self.active & (self.t[:, None] + 1 >= self.deadline) & live[:, None]
        failed = expired.sum(axis=1)
        if failed.any():
            self.stats["wasted_node_steps"] += (self.steps * expired).sum(axis=1)
            self._free(expired)
        self.t += live
        rejected_before = self.stats["rejected"].copy()
        self._admit_arrivals()
        self.stats["completed"] += completed
        self.stats["failed"] += failed
        self.stats["conflicts"] += conflicts.sum(axis=1)
        self.stats["invalid_actions"] += invalid.sum(axis=1)
        self._update_done()
        return StepOutcome(completed, failed, self.stats["rejected"] - rejected_before, conflicts, invalid, served,
                           reported, self.terminated.copy(), self.truncated.copy())

    def _train(self, eb: np.ndarray, en: np.ndarray, ek: np.ndarray, reported: np.ndarray) -> np.ndarray:
        """Serve slots (eb, ek) with nodes en; record reports; complete tasks that reach their target."""
        steps = self.steps[eb, ek]
        switched = (steps > 0) & ((self.last_node[eb, ek] != en) | ~self.served_last[eb, ek])
        self.stats["switches"] += np.bincount(eb[switched], minlength=self.B)
        self.stats["busy_node_steps"] += np.bincount(eb, minlength=self.B)
        batches = self.batches_per_step[eb, ek] * self.speeds[en]
        if self.config.switch_cost > 0:
            batches = np.where(switched, batches * (1.0 - self.config.switch_cost), batches)
        x0 = self.progress[eb, ek]
        x1 = x0 + batches
        loss = self.bank.interval_mean(self.curve[eb, ek], x0, x1)
        self.progress[eb, ek] = x1
        self.history[eb, ek, np.minimum(steps, self.max_history - 1)] = loss
        self.steps[eb, ek] = steps + 1
        self.first_loss[eb, ek] = np.where(steps == 0, loss, self.first_loss[eb, ek])
        self.last_loss[eb, ek] = loss
        reported[eb, ek] = loss
        self.last_node[eb, ek] = en
        done = loss <= self.target[eb, ek]
        completed = np.bincount(eb[done], minlength=self.B).astype(np.int64)
        if done.any():
            finished = np.zeros((self.B, self.K), bool)
            finished[eb[done], ek[done]] = True
            self._free(finished)
        return completed

    def _free(self, slots: np.ndarray) -> None:
        self.active &= ~slots
        self.served_last &= ~slots
        self.task[slots] = -1

    def _admit_arrivals(self) -> None:
        """Insert tasks whose arrival step is the current ``t`` into the lowest free slots."""
        rows = np.arange(self.B)
        while True:
            nxt = np.minimum(self.next_task, self._wl["arrival"].shape[1] - 1)
            due = (self.next_task < self.n_tasks) & (self._wl["arrival"][rows, nxt] <= self.t) & ~self.done
            if not due.any():
                return
            b = np.flatnonzero(due)
            i = self.next_task[b]
            self.next_task[b] += 1
            self.stats["arrived"][b] += 1
            free = ~self.active[b]
            has_room = free.any(axis=1)
            self.stats["rejected"][b[~has_room]] += 1
            b, i, k = b[has_room], i[has_room], free[has_room].argmax(axis=1)
            if b.size == 0:
                continue
            self.task[b, k] = i
            self.active[b, k] = True
            for name in ("arrival", "deadline", "target", "batches_per_step", "curve", "demand"):
                getattr(self, name)[b, k] = self._wl[name][b, i]
            self.progress[b, k] = 0.0
            self.steps[b, k] = 0
            self.last_loss[b, k] = 0.0
            self.first_loss[b, k] = 0.0
            self.last_node[b, k] = -1
            self.served_last[b, k] = False

    def _update_done(self) -> None:
        window_over = (self.t >= self.arrival_steps) & (self.next_task >= self.n_tasks)
        self.terminated |= window_over & ~self.active.any(axis=1)
        self.truncated |= (self.t >= self.config.max_cycles) & ~self.terminated
        self.done = self.terminated | self.truncated

    # ------------------------------------------------------------------ read-only views
    def reported_history(self, b: int, k: int) -> np.ndarray:
        """Every loss the task in slot ``k`` of env ``b`` has reported, oldest first (copy)."""
        n = min(int(self.steps[b, k]), self.max_history) if self.active[b, k] else 0
        return self.history[b, k, :n].copy()

    def remaining_demand(self) -> np.ndarray:
        """(B, K) hidden nominal node-steps each active task still needs (inf if never; 0 for empty slots).

        Nominal: speed 1 and no switching cost from the task's current progress. While a task has only
        had nominal service its progress lies on the nominal grid and the answer is its demand minus
        the node-steps it received; otherwise the curve is scanned. For oracles and upper bounds only.
        """
        on_grid = np.isclose(self.progress, self.steps * self.batches_per_step, rtol=1e-12, atol=1e-9)
        out = np.where(self.active, np.maximum(self.demand - self.steps, 0.0), 0.0)
        for b, k in np.argwhere(self.active & ~on_grid):
            out[b, k] = self.bank.demand(int(self.curve[b, k]), float(self.target[b, k]), float(self.batches_per_step[b, k]), float(self.progress[b, k]))
        return out

    def episode_statistics(self) -> dict[str, np.ndarray]:
        """Running episode statistics per environment, (B,) arrays (see docs/env.md)."""
        stats = dict(self.stats)
        arrived = stats["arrived"]
        stats["completion_rate"] = np.where(arrived > 0, stats["completed"] / np.maximum(arrived, 1), 0.0)
        stats["active"] = self.active.sum(axis=1)
        stats["node_utilization"] = stats["busy_node_steps"] / (self.N * np.maximum(self.t, 1))
        stats["t"] = self.t.copy()
        return stats
