"""The dynamics: B environments stepped together as a struct of arrays. No RL API here.

One step (docs/env.md, "A step"), for every live environment:

1. Each node's action is 0 (idle) or ``k`` (the task in slot ``k - 1``). A choice of an empty slot is
   invalid and treated as idle (or raises with ``strict=True``). If several nodes choose one task, the
   lowest-index node serves it and the others idle (conflicts).
2. A served task trains ``batches_per_step × speed`` batches; with switching cost ``c`` a task served by a
   different node than at its previous service, or resumed after a step without service, loses the
   first ``c`` of them (its first service ever is not a switch). Fractional batches accumulate exactly.
   The task reports the mean of its curve over the newly trained batches (the loss at its position when
   the batches are too few to move the position in float64).
3. A task whose reported loss is at most its target completes and frees its slot.
4. A task still active when ``t + 1`` reaches its deadline fails and frees its slot.
5. ``t`` advances; tasks arriving at the new ``t`` (only while ``t < T_arrive``) take the lowest free
   slot, or are rejected when every slot is full.
6. An environment terminates when the arrival window is over and no task is active, and is truncated at
   ``max_cycles``. Finished environments are frozen: later steps leave them unchanged.

A step is all or nothing: every check that can fail (actions, ``strict`` choices, curve lookups) runs
before the first write, so a step that raises leaves the state (statistics, ``t``, slots, histories,
features) as it was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from core_env import features
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


_NEVER = np.iinfo(np.int64).max
#: Batch positions from here on are integrated on the plateau by the simulator itself (the bank's int64
#: batch index of a position overflows at 2**63).
_FAR_POSITION = 2.0**62
# 0-d array operands: cheaper in a ufunc call than Python scalars (and the same result types here).
_ZERO, _ONE = np.array(0), np.array(1)
_INT64 = np.dtype(np.int64)
#: Per-slot fields, stored as the columns of one (B·K, ·) array per dtype, so that admitting a task is
#: one row copy from a per-task table holding the task's fields and the values a fresh slot starts from.
#: Each field is an attribute of the simulator, a (B, K) view (and in ``flat``, a (B·K,) view):
#: ``task`` (workload index), ``arrival``, ``deadline``, ``curve``, ``steps`` (node-steps received),
#: ``last_node``; ``target``, ``batches_per_step``, ``demand`` (hidden nominal demand from the task's
#: start: oracles only), ``progress`` (batches trained), ``last_loss``, ``first_loss``; private:
#: ``_cum_start`` and ``_length`` (the slot's curve in the bank), ``_expiry`` (the deadline of an active
#: slot, _NEVER for an empty one), ``_integral`` (bank.integral of the curve at ``progress``).
_INT_FIELDS = ("task", "arrival", "deadline", "curve", "_cum_start", "_length", "_expiry", "steps", "last_node")
_FLOAT_FIELDS = ("target", "batches_per_step", "demand", "progress", "_integral", "last_loss", "first_loss")
_EMPTY_INT = (-1, 0, 0, 0, 0, 1, _NEVER, 0, -1)  # the slots at reset
_EMPTY_FLOAT = (1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0)

STATS = ("arrived", "completed", "failed", "rejected", "switches", "busy_node_steps", "wasted_node_steps", "conflicts", "invalid_actions")
_ARRIVED, _COMPLETED, _FAILED, _REJECTED, _SWITCHES, _BUSY, _WASTED, _CONFLICTS, _INVALID = range(len(STATS))


class Simulator:
    """Batched simulator state. Arrays are public for read-only use by views, features and agents.

    Slot arrays have shape (B, K) (the fields listed above _INT_FIELDS); ``task[b, k]`` is the workload
    index of the task in slot ``k`` (-1 when empty) and ``has_report[b, k]`` whether it is active and has
    reported a loss; ``flat[name]`` is the (B·K,) view of slot field ``name``. Node arrays have shape
    (B, N). ``action_choices`` (B, K + 1) says which actions choose a task (column 0, idle, is always
    True); ``active`` is its view without column 0. ``slot_features`` is the observation's slot table
    (:class:`core_env.features.SlotFeatureTable`), kept up to date as slots are admitted, served and
    freed, so that observations cost no pass over the full loss histories.

    Implementation: the dynamics address slots by flat index ``b * K + k`` and nodes by ``b * N + n``,
    with one cheap 1-D gather or scatter per field; work that a step does not need (arrivals, expiries,
    completions, conflicts, finished environments) is skipped after a cheap check.
    """

    def __init__(self, config: EnvConfig, batch_size: int = 1) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.config = config
        B, N, K = self.B, self.N, self.K = int(batch_size), config.n_nodes, config.n_slots
        self.speeds = config.speeds
        self._earlier = np.tril(np.ones((N, N), dtype=bool), -1)  # [i, j]: node j is before node i
        self._unit_speed = bool(np.all(self.speeds == 1.0))
        self._speed_of_node = np.tile(self.speeds, B)  # flat node index -> its speed
        self._k_max = np.array(K, np.uint64)
        self._action_shape = (B, N)
        self._choice_base = np.arange(B)[:, None] * (K + 1)  # (B, 1) row starts in the flat action_choices
        self._env_of_node = np.repeat(np.arange(B), N)  # flat node index -> b
        self._node_of = np.tile(np.arange(N), B)  # flat node index -> n
        self._slot_base_of_node = self._env_of_node * K  # flat node index -> b * K
        self._env_of_slot = np.repeat(np.arange(B), K)  # flat slot index -> b
        self._choice_of_slot = np.arange(B * K) + self._env_of_slot + 1  # flat slot index -> flat action_choices index
        self.workloads: list[Workload] = []
        self.slot_features: features.SlotFeatureTable | None = None

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
        # Task fields padded to m + 1 columns: column n_tasks[b] of env b is a sentinel (never arrives).
        pad = {"arrival": _NEVER, "deadline": 0, "target": 1.0, "batches_per_step": 1.0, "curve": 0, "demand": 0.0}
        self._wl = {}
        for name, fill in pad.items():
            arr = np.full((B, m + 1), fill, dtype=np.int64 if name in ("arrival", "deadline", "curve") else np.float64)
            for b, w in enumerate(workloads):
                arr[b, : len(w)] = getattr(w, name)
            self._wl[name] = arr
        self._wl_flat = {name: arr.reshape(-1) for name, arr in self._wl.items()}
        self._task_base = np.arange(B) * (m + 1)  # (B,) row starts of the flat task fields
        wl = self._wl_flat
        curve = wl["curve"]
        self._task_ints = np.stack([np.tile(np.arange(m + 1), B), wl["arrival"], wl["deadline"], curve, bank.cum_start[curve],
                                    bank.lengths[curve], wl["deadline"], np.zeros_like(curve), np.full_like(curve, -1)], axis=1)
        zero = np.zeros(curve.size)
        self._task_floats = np.stack([wl["target"], wl["batches_per_step"], wl["demand"], zero, zero, zero, zero], axis=1)
        self.arrival_steps = np.array([w.arrival_steps for w in workloads], dtype=np.int64)
        self.horizon = self.arrival_steps.astype(np.float64)
        window = max((int(w.window.max()) for w in workloads if len(w)), default=1)
        self.max_history = max(1, window)  # a task is served at most once per step of its window
        # ... so no task's position passes its window × batches_per_step × the fastest speed
        reach = max((float((w.window * w.batches_per_step).max()) for w in workloads if len(w)), default=0.0)
        self._may_go_far = reach * float(self.speeds.max()) >= _FAR_POSITION

        self.t = np.zeros(B, np.int64)
        self.done = np.zeros(B, bool)
        self.terminated = np.zeros(B, bool)
        self.truncated = np.zeros(B, bool)
        self._any_done = False
        self._steps_taken = 0  # steps since reset: an upper bound on every t
        self._end_check_from = int(self.arrival_steps.min())  # no environment can end before this t
        self.next_task = np.zeros(B, np.int64)
        self._next_arrival = self._wl["arrival"][:, 0].copy()  # arrival step of each env's next task
        self.action_choices = np.zeros((B, K + 1), bool)  # [b, a]: action a is a valid choice in env b
        self.action_choices[:, 0] = True
        self._choices_flat = self.action_choices.reshape(-1)
        self.active = self.action_choices[:, 1:]  # (B, K) view
        self.n_active = np.zeros(B, np.int64)  # active slots per environment
        self._ints = np.empty((B * K, len(_INT_FIELDS)), np.int64)
        self._ints[:] = _EMPTY_INT
        self._floats = np.empty((B * K, len(_FLOAT_FIELDS)))
        self._floats[:] = _EMPTY_FLOAT
        self._f = self.flat = {}  # name -> flat (B·K,) view (read-only for users, like the (B, K) arrays)
        for table, names in ((self._ints, _INT_FIELDS), (self._floats, _FLOAT_FIELDS)):
            for j, name in enumerate(names):
                self._f[name] = table[:, j]
                setattr(self, name, table[:, j].reshape(B, K))
        self.served_last = np.zeros((B, K), bool)
        self.has_report = np.zeros((B, K), bool)  # active & (steps > 0)
        self._f["served_last"] = self.served_last.reshape(-1)
        self._f["has_report"] = self.has_report.reshape(-1)
        self.history = np.zeros((B, K, self.max_history))
        self.node_slot = np.full((B, N), -1, np.int64)
        self._next_expiry = np.full(B, _NEVER)  # per environment, the earliest deadline of an active slot
        self._next_event = np.zeros(B, np.int64)  # at most min(_next_arrival, _next_expiry)
        self._flat_history = self.history.reshape(-1)
        self._history_row = np.arange(B * K) * self.max_history  # flat slot index -> start of its history
        self._stats = np.zeros((len(STATS), B), np.int64)
        self.stats = {name: self._stats[i] for i, name in enumerate(STATS)}
        self.slot_features = features.SlotFeatureTable(self, self.config.history)
        self._admit_arrivals()
        self._next_event = np.minimum(self._next_arrival, self._next_expiry)
        self._update_done()

    # ------------------------------------------------------------------ step
    def check_actions(self, actions: np.ndarray) -> np.ndarray:
        """Validate a (B, N) integer action array; raises :class:`InvalidActionError` naming the culprit."""
        actions = np.asarray(actions)
        if actions.shape != (self.B, self.N):
            raise ValueError(f"actions must have shape (B, N) = {(self.B, self.N)}, got {actions.shape}")
        if actions.dtype.kind not in "iu":
            raise TypeError(f"actions must be integers, got dtype {actions.dtype}")
        checked = actions.astype(np.int64, copy=False)
        if np.count_nonzero(checked.view(np.uint64) > self._k_max):  # negative values wrap to huge ones
            bad = (actions < 0) | (actions > self.K)
            b, n = map(int, np.argwhere(bad)[0])
            raise InvalidActionError(f"action {actions[b, n]} of node {n} (env {b}) is outside [0, {self.K}]", b, n, actions[b, n])
        return checked

    def step(self, actions: np.ndarray) -> StepOutcome:
        """Advance every live environment by one step. ``actions``: (B, N) ints in [0, K]."""
        if not (type(actions) is np.ndarray and actions.dtype is _INT64 and actions.shape == self._action_shape
                and not np.count_nonzero(actions.view(np.uint64) > self._k_max)):  # else: convert, or raise
            actions = self.check_actions(actions)
        B, K = self.B, self.K
        any_done = self._any_done
        valid = self._choices_flat[self._choice_base + actions if B > 1 else actions]  # (B, N); idle is always valid
        invalid = ~valid
        if any_done:
            live = ~self.done[:, None]
            invalid &= live
            valid &= live
        n_invalid = np.count_nonzero(invalid)
        if self.config.strict and n_invalid:
            b, n = map(int, np.argwhere(invalid)[0])
            raise InvalidActionError(f"node {n} (env {b}) chose slot {actions[b, n] - 1}, which holds no active task", b, n, int(actions[b, n]))
        slot = actions - _ONE  # (B, N) the slot each node serves, -1 when idle
        if n_invalid or any_done:
            slot[~valid] = -1
        chosen = (slot >= _ZERO).reshape(-1).nonzero()[0]  # flat indices of the nodes that choose a task
        k = slot.reshape(-1)[chosen]
        fi = k + self._slot_base_of_node[chosen] if B > 1 else k  # flat indices of their slots
        n_conflicts = 0
        if self.N > 1 and fi.size > 1 and np.count_nonzero(np.bincount(fi)) < fi.size:  # a slot chosen twice
            conflicts = slot[:, :, None] == slot[:, None, :]
            conflicts &= self._earlier
            conflicts = conflicts.any(axis=2)  # an earlier node chose the same slot ...
            conflicts &= slot >= _ZERO  # ... a real one, not idle
            n_conflicts = np.count_nonzero(conflicts)
            slot[conflicts] = -1
            chosen = (slot >= _ZERO).reshape(-1).nonzero()[0]
            k = slot.reshape(-1)[chosen]
            fi = k + self._slot_base_of_node[chosen] if B > 1 else k
        else:
            conflicts = np.zeros((B, self.N), bool)

        served = np.zeros((B, K), bool)
        reported = np.zeros((B, K))
        completed = failed = rejected = None
        if chosen.size:
            completed = self._train(chosen, k, fi, served, reported)
        np.logical_and(served, self.active, out=self.served_last)  # completed tasks left their slot
        self.node_slot = slot if not any_done else np.where(live, slot, self.node_slot)

        if any_done:
            self.t += live[:, 0]
            self.slot_features.tick(live[:, 0])
        else:
            self.t += _ONE
            self.slot_features.tick()
        self._steps_taken += 1
        if np.count_nonzero(self._next_event <= self.t):  # an arrival, or a deadline at the old t + 1
            expired = self._expiry <= self.t[:, None]
            if any_done:
                expired &= live
            if np.count_nonzero(expired):
                failed = expired.sum(axis=1)
                self._stats[_WASTED] += (self.steps * expired).sum(axis=1)
                self._stats[_FAILED] += failed
                self._free(expired.reshape(-1).nonzero()[0])
            rejected = self._admit_arrivals()
            self._next_event = np.minimum(self._next_arrival, self._next_expiry)
        if completed is None or failed is None or rejected is None:
            zeros = np.zeros((3, B), np.int64)
            completed = zeros[0] if completed is None else completed
            failed = zeros[1] if failed is None else failed
            rejected = zeros[2] if rejected is None else rejected
        if n_conflicts:
            self._count_rows(_CONFLICTS, conflicts, n_conflicts)
        if n_invalid:
            self._count_rows(_INVALID, invalid, n_invalid)
        if self._steps_taken >= self._end_check_from or self._steps_taken >= self.config.max_cycles:
            self._update_done()
        return StepOutcome(completed, failed, rejected, conflicts, invalid, served, reported, self.terminated.copy(), self.truncated.copy())

    def _count(self, row: int, envs: np.ndarray) -> None:
        """Add to statistic ``row`` one per entry of ``envs`` (environment indices)."""
        if self.B == 1:
            self._stats[row, 0] += envs.size
        else:
            self._stats[row] += np.bincount(envs, minlength=self.B)

    def _count_rows(self, row: int, mask: np.ndarray, total: int) -> None:
        """Add to statistic ``row`` the True entries of each row of the (B, ·) ``mask`` (``total`` in all)."""
        if self.B == 1:
            self._stats[row, 0] += total
        else:
            self._stats[row] += mask.sum(axis=1)

    def _train(self, chosen: np.ndarray, k: np.ndarray, fi: np.ndarray, served: np.ndarray, reported: np.ndarray) -> np.ndarray | None:
        """Nodes at flat indices ``chosen`` serve slots ``k`` (flat ``fi``, all distinct); free completed tasks.

        Returns the (B,) completions, or None when no task completed.
        """
        f = self._f
        steps = f["steps"][fi]
        had_report = steps > _ZERO
        # A task with reports is switched unless this very node served it last step (then it was served
        # last step, by this node, and is the same task: a new task in the slot has no reports).
        switched = had_report & (self.node_slot.reshape(-1)[chosen] != k)
        batches = f["batches_per_step"][fi]
        if not self._unit_speed:
            batches = batches * self._speed_of_node[chosen]
        if self.config.switch_cost > 0:
            batches = np.where(switched, batches * (1.0 - self.config.switch_cost), batches)
        x0 = f["progress"][fi]
        x1 = x0 + batches
        integral, loss = self._interval_means(fi, x0, x1)
        # Everything that can fail is above (it only reads state): from here on the step writes, so a
        # step that raises leaves no trace.
        if self.B == 1:
            self._stats[_BUSY, 0] += chosen.size
            self._stats[_SWITCHES, 0] += np.count_nonzero(switched)
        else:
            eb = self._env_of_node[chosen]
            self._stats[_BUSY] += np.bincount(eb, minlength=self.B)
            if np.count_nonzero(switched):
                self._stats[_SWITCHES] += np.bincount(eb[switched], minlength=self.B)
        f["progress"][fi] = x1
        f["_integral"][fi] = integral
        self._flat_history[self._history_row[fi] + steps] = loss
        steps = steps + _ONE
        f["steps"][fi] = steps
        if np.count_nonzero(had_report) < had_report.size:
            first = ~had_report
            f["first_loss"][fi[first]] = loss[first]
            f["has_report"][fi[first]] = True
        f["last_loss"][fi] = loss
        f["last_node"][fi] = self._node_of[chosen]
        reported.reshape(-1)[fi] = loss
        served.reshape(-1)[fi] = True
        self.slot_features.served(fi, steps, loss)
        done = loss <= f["target"][fi]
        if not np.count_nonzero(done):
            return None
        self._free(fi[done])
        completed = np.bincount(self._env_of_node[chosen[done]], minlength=self.B).astype(np.int64, copy=False)
        self._stats[_COMPLETED] += completed
        return completed

    def _interval_means(self, fi: np.ndarray, x0: np.ndarray, x1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The curve integrals at ``x1`` and the mean losses over ``[x0, x1)`` of the slots at flat indices
        ``fi`` (reads state only).

        Two guards, for positions the plain formula cannot take: past :data:`_FAR_POSITION` batches (far
        past every curve's end, where the bank's int64 batch index would overflow) the integral is
        continued on the plateau here; and a step too small to move the position (``x1 == x0`` in
        float64, e.g. a switch that keeps 1e-16 of the batches) reports the loss at ``x0``, the limit of
        the interval mean, instead of 0/0.
        """
        f = self._f
        start, length = f["_cum_start"][fi], f["_length"][fi]
        if self._may_go_far and np.count_nonzero(x1 >= _FAR_POSITION):
            end = np.minimum(x1, length)  # float64: the curve's end, or x1 before it
            integral = self.bank.integral_at(start, length, end) + (x1 - end) * self.bank.slope[start + length]
        else:
            integral = self.bank.integral_at(start, length, x1)
        width = x1 - x0  # >= 0: batches are > 0, but may vanish next to a large x0
        if np.count_nonzero(width) == width.size:
            return integral, (integral - f["_integral"][fi]) / width  # the mean of the curve over [x0, x1)
        stuck = width == 0.0
        width[stuck] = 1.0
        loss = (integral - f["_integral"][fi]) / width
        at = start[stuck] + np.minimum(x0[stuck], length[stuck]).astype(np.int64)  # the batch x0 lies in
        loss[stuck] = self.bank.slope[at]
        return integral, loss

    def _free(self, fi: np.ndarray) -> None:
        """Empty the slots at flat indices ``fi``."""
        self._choices_flat[self._choice_of_slot[fi]] = False
        f = self._f
        f["served_last"][fi] = False
        f["has_report"][fi] = False
        f["task"][fi] = -1
        f["_expiry"][fi] = _NEVER
        if self.B == 1:
            self.n_active[0] -= fi.size
        else:
            self.n_active -= np.bincount(self._env_of_slot[fi], minlength=self.B)
        self._next_expiry = self._expiry.min(axis=1)
        self.slot_features.freed(fi)

    def _admit_arrivals(self) -> np.ndarray:
        """Insert tasks whose arrival step is the current ``t`` into the lowest free slots; (B,) rejections."""
        rejected = np.zeros(self.B, np.int64)
        w = self._wl_flat
        while True:
            due = self._next_arrival <= self.t
            if self._any_done:
                due &= ~self.done
            if not np.count_nonzero(due):
                return rejected
            b = due.nonzero()[0]
            i = self.next_task[b]
            ti = self._task_base[b] + i  # flat task indices
            self.next_task[b] = i + _ONE
            self._next_arrival[b] = w["arrival"][ti + _ONE]
            self._count(_ARRIVED, b)
            has_room = self.n_active[b] < self.K
            if np.count_nonzero(has_room) < has_room.size:
                rejected[b[~has_room]] += 1
                self._stats[_REJECTED, b[~has_room]] += 1
                b, ti = b[has_room], ti[has_room]
                if b.size == 0:
                    continue
            fi = b * self.K + self.active[b].argmin(axis=1)  # the lowest free slot
            self._choices_flat[self._choice_of_slot[fi]] = True
            self._ints[fi] = self._task_ints[ti]
            self._floats[fi] = self._task_floats[ti]
            self._f["served_last"][fi] = False
            self._next_expiry[b] = np.minimum(self._next_expiry[b], w["deadline"][ti])
            self.n_active[b] += 1
            self.slot_features.admitted(fi, ti)

    def _update_done(self) -> None:
        """Mark terminated and truncated environments (step skips this while every t is below every
        arrival window and the cycle cap: ``_steps_taken`` bounds every t, and then nothing can end)."""
        window_over = (self.t >= self.arrival_steps) & (self.next_task >= self.n_tasks)
        self.terminated |= window_over & (self.n_active == 0)
        self.truncated |= (self.t >= self.config.max_cycles) & ~self.terminated
        self.done = self.terminated | self.truncated
        self._any_done = bool(self.done.any())

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
        scan = self.active & ~on_grid
        if scan.any():
            out[scan] = self.bank.demands(self.curve[scan], self.target[scan], self.batches_per_step[scan], self.progress[scan])
        return out

    def episode_statistics(self) -> dict[str, np.ndarray]:
        """Running episode statistics per environment, (B,) arrays (see docs/env.md)."""
        stats = dict(self.stats)
        arrived = stats["arrived"]
        stats["completion_rate"] = np.where(arrived > 0, stats["completed"] / np.maximum(arrived, 1), 0.0)
        stats["active"] = self.n_active.copy()
        stats["node_utilization"] = stats["busy_node_steps"] / (self.N * np.maximum(self.t, 1))
        stats["t"] = self.t.copy()
        return stats

    def statistics_of(self, b: int) -> dict[str, int | float]:
        """:meth:`episode_statistics` of environment ``b`` as plain Python numbers (the same values), keyed
        in the order of :data:`core_env.episode.EPISODE_KEYS`."""
        arrived, completed, failed, rejected, switches, busy, wasted, conflicts, invalid = self._stats[:, b].tolist()
        t = int(self.t[b])
        return {"arrived": arrived, "completed": completed, "failed": failed, "rejected": rejected,
                "completion_rate": completed / arrived if arrived > 0 else 0.0, "active": int(self.n_active[b]),
                "node_utilization": busy / (self.N * max(t, 1)), "busy_node_steps": busy, "wasted_node_steps": wasted,
                "switches": switches, "conflicts": conflicts, "invalid_actions": invalid, "t": t}
