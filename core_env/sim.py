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
before the first write, so a step that raises leaves the state (statistics, ``t``, slots, histories)
as it was.

The rules are implemented once, as compiled loops, in :mod:`core_env.dynamics`; this module owns the
arrays they work on and the checks and errors around them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core_env import dynamics
from core_env.config import EnvConfig
from core_env.dynamics import FLOAT_FIELDS, INT_FIELDS, NEVER, STATS
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


class StepOutcome:
    """What one batched step did (B environments, N nodes, K slots): a snapshot, read-only arrays.

    ``completed``, ``failed``, ``rejected`` (B,) int64 tasks completed, failed at their deadline and
    rejected (all slots full) this step; ``conflicts`` (B, N) bool node lost its choice to a lower-index
    node; ``invalid`` (B, N) bool node chose an empty slot; ``served`` (B, K) bool slot was served this
    step; ``reported`` (B, K) float64 loss reported by each served slot (0 where not served);
    ``terminated``, ``truncated`` (B,) bool. The arrays are views of one copy per dtype, made at the step.
    """

    __slots__ = ("_counts", "_flags", "_reported", "_ends", "_shape")

    def __init__(self, counts: np.ndarray, flags: np.ndarray, reported: np.ndarray, ends: np.ndarray, shape: tuple[int, int, int]) -> None:
        self._counts, self._flags, self._reported, self._ends, self._shape = counts, flags, reported, ends, shape

    completed = property(lambda self: self._counts[: self._shape[0]])
    failed = property(lambda self: self._counts[self._shape[0] : 2 * self._shape[0]])
    rejected = property(lambda self: self._counts[2 * self._shape[0] :])
    conflicts = property(lambda self: self._flags[: self._shape[0] * self._shape[1]].reshape(self._shape[:2]))
    invalid = property(lambda self: self._flags[self._shape[0] * self._shape[1] : 2 * self._shape[0] * self._shape[1]].reshape(self._shape[:2]))
    served = property(lambda self: self._flags[2 * self._shape[0] * self._shape[1] :].reshape(self._shape[0], self._shape[2]))
    reported = property(lambda self: self._reported.reshape(self._shape[0], self._shape[2]))
    terminated = property(lambda self: self._ends[0])
    truncated = property(lambda self: self._ends[1])


_INT64 = np.dtype(np.int64)
_STATS_AND_CLOCK = dynamics.N_ACTIVE + 1  # the rows of _env that statistics_of reads: STATS, t, …, n_active
#: What an empty slot holds (the slots at reset, in the order of INT_FIELDS and FLOAT_FIELDS).
_EMPTY_INT = (-1, 0, 0, 0, 0, 1, NEVER, 0, -1)
_EMPTY_FLOAT = (1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def _window(workload: Workload) -> int:
    """The longest deadline window of a workload (1 when it has no task)."""
    return int(workload.window.max()) if len(workload) else 1


class Simulator:
    """Batched simulator state (struct of arrays), stepped by the compiled rules of :mod:`core_env.dynamics`.

    Arrays are public for read-only use by views, observers and agents. Slot fields (INT_FIELDS and
    FLOAT_FIELDS of :mod:`core_env.dynamics`) are (B, K) attributes: ``task`` (workload index, -1 when
    empty), ``arrival``, ``deadline``, ``curve``, ``steps`` (node-steps received), ``last_node``;
    ``target``, ``batches_per_step``, ``demand`` (hidden nominal demand from the task's start: oracles
    only), ``progress`` (batches trained), ``last_loss``, ``first_loss``, ``log_target`` (log of the target floored
at LOSS_FLOOR), ``phi`` (the shaped reward's log-progress φ, :mod:`core_env.reward`); ``flat[name]`` is the (B·K,)
    view of field ``name``. They are the columns of one (B·K, ·) table per dtype, so that admitting a
    task is one row copy from a per-task table. ``has_report[b, k]``: active and has reported a loss;
    ``served_last``: served in the last step. ``history[b, k, j]`` is the loss the slot's task reported
at its (j + 1)-th service; ``recent[b, k, j]`` is the log (floored at LOSS_FLOOR) of its (j + 1)-th latest
report, for the configured H (the observation's loss history; only the first ``steps`` entries count). Node arrays are (B, N): ``node_slot`` (the slot each node
    served last step, -1 idle). ``action_choices`` (B, K + 1) says which actions choose a task (column
    0, idle, is always True); ``active`` is its view without column 0. Per environment: ``t``, ``done``,
    ``terminated``, ``truncated``, ``next_task``, ``n_active`` and ``stats`` (name -> (B,) counts).

    The simulator imports no observation or reward code: views read its arrays after each step.
    """

    def __init__(self, config: EnvConfig, batch_size: int = 1) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.config = config
        self.B, self.N, self.K = int(batch_size), config.n_nodes, config.n_slots
        self.speeds = np.ascontiguousarray(config.speeds, dtype=np.float64)
        self._action_shape = (self.B, self.N)
        self._shape = (self.B, self.N, self.K)
        self.workloads: list[Workload] = []

    # ------------------------------------------------------------------ reset
    def reset(self, workloads: Sequence[Workload]) -> None:
        """Start B episodes, one per workload (all drawn on one curve bank)."""
        if len(workloads) != self.B:
            raise ValueError(f"reset needs {self.B} workloads, got {len(workloads)}")
        bank = workloads[0].bank
        if any(w.bank is not bank for w in workloads):
            raise ValueError("all workloads of one batch must share one CurveBank")
        self.bank = bank
        self.workloads = list(workloads)
        self._allocate(max(len(w) for w in workloads), max(_window(w) for w in workloads))
        for b, w in enumerate(workloads):
            self._start(b, w)

    def reset_envs(self, envs: Sequence[int], workloads: Sequence[Workload]) -> None:
        """Start new episodes in environments ``envs`` only (the others go on untouched); the workloads
        must be on the batch's curve bank."""
        if len(envs) != len(workloads):
            raise ValueError(f"reset_envs needs one workload per environment, got {len(envs)} and {len(workloads)}")
        if not self.workloads:
            raise RuntimeError("call reset() with B workloads before reset_envs()")
        for w in workloads:
            if w.bank is not self.bank:
                raise ValueError("all workloads of one batch must share one CurveBank")
        for b, w in zip(envs, workloads):
            if not 0 <= b < self.B:
                raise ValueError(f"environment index {b} is outside [0, {self.B})")
            self.workloads[b] = w
        tasks, window = max(len(w) for w in workloads), max(_window(w) for w in workloads)
        if tasks + 1 > self._task_stride or window > self.max_history:  # grow (with headroom) and re-lay out
            self._grow(max(tasks, self._task_stride), max(window, self.max_history))
        for b, w in zip(envs, workloads):
            self._start(int(b), w)

    def _allocate(self, max_tasks: int, max_window: int) -> None:
        """Arrays for B environments of up to ``max_tasks`` tasks whose windows are at most ``max_window``,
        laid out in three arenas (:data:`core_env.dynamics.STATE`)."""
        B, K, N = self.B, self.K, self.N
        self._task_stride = m = max(1, max_tasks) + 1  # per env: its tasks, then a sentinel that never arrives
        self.max_history = H = max(1, max_window)  # a task is served at most once per step of its window
        self._outcome_from: dict[str, int] = {}
        shapes = {"_ints": (B * K, len(INT_FIELDS)), "_env": (len(STATS) + len(dynamics.ENV_FIELDS), B), "node_slot": (B, N),
                  "_task_ints": (B * m, len(INT_FIELDS)), "_params_i": (3,), "_counts": (3, B), "_floats": (B * K, len(FLOAT_FIELDS)),
                  "_task_floats": (B * m, len(FLOAT_FIELDS)), "history": (B, K, H), "recent": (B, K, self.config.history), "speeds": (N,),
                  "horizon": (B,), "potential": (B,), "_params_f": (2,), "reward": (B,), "_reported": (B, K), "_slot_flags": (2, B, K),
                  "action_choices": (B, K + 1), "_flags": (3, B), "_nodes": (2, B, N), "_served": (B, K)}
        dtypes = {"i": np.int64, "f": np.float64, "b": np.bool_}
        sizes = {arena: sum(int(np.prod(shapes[name])) for name, a in dynamics.STATE if a == arena) for arena in dtypes}
        self._arenas = {arena: np.zeros(size, dtypes[arena]) for arena, size in sizes.items()}
        self._i64, self._f64, self._b8 = self._arenas["i"], self._arenas["f"], self._arenas["b"]
        used = dict.fromkeys(dtypes, 0)
        for name, arena in dynamics.STATE:
            size = int(np.prod(shapes[name]))
            setattr(self, name, self._arenas[arena][used[arena] : used[arena] + size].reshape(shapes[name]))
            if name in ("_counts", "_reported", "_nodes"):  # the step's outcome: the rest of each arena, copied out at once
                self._outcome_from[arena] = used[arena]
            used[arena] += size
        self._state = dynamics.State(*(getattr(self, name) for name, _ in dynamics.STATE), self.bank.cum, self.bank.slope)
        self.speeds[:] = self.config.speeds
        self._write_params()
        self.n_tasks = np.zeros(B, np.int64)
        self.arrival_steps = np.zeros(B, np.int64)
        for name in dynamics.ENV_FIELDS:
            setattr(self, name if name in ("t", "next_task", "n_active") else "_" + name, self._env[getattr(dynamics, name.upper())])
        self.done, self.terminated, self.truncated = self._flags
        self.stats = {name: self._env[i] for i, name in enumerate(STATS)}
        self.active = self.action_choices[:, 1:]  # (B, K) view
        self.flat = {}  # name -> flat (B·K,) view (read-only for users, like the (B, K) arrays)
        for table, names in ((self._ints, INT_FIELDS), (self._floats, FLOAT_FIELDS)):
            for j, name in enumerate(names):
                self.flat[name] = table[:, j]
                setattr(self, name, table[:, j].reshape(B, K))
        self.served_last, self.has_report = self._slot_flags
        self.flat["served_last"] = self.served_last.reshape(-1)
        self.flat["has_report"] = self.has_report.reshape(-1)

    def _write_params(self) -> None:
        config = self._config
        self._params_i[:] = (int(config.strict), config.max_cycles, int(config.reward == "shaped"))
        self._params_f[:] = (config.switch_cost, config.kappa)

    @property
    def config(self) -> EnvConfig:
        return self._config

    @config.setter
    def config(self, value: EnvConfig) -> None:
        """A new configuration of the same shape (e.g. another ``max_cycles``) takes effect at the next step."""
        self._config = value
        if hasattr(self, "_params_i"):
            self._write_params()

    def _grow(self, max_tasks: int, max_window: int) -> None:
        """Re-allocate for larger workloads, keeping every environment's state."""
        kept = ("recent", "n_tasks", "arrival_steps", "horizon", "potential", "_env", "_flags", "action_choices", "_ints", "_floats", "_slot_flags", "node_slot")
        old = {name: getattr(self, name) for name in ("_task_ints", "_task_floats", "_task_stride", "history") + kept}
        self._allocate(int(max_tasks * 1.5) + 1, max(max_window, int(self.max_history * 1.5)))
        for name in kept:
            getattr(self, name)[...] = old[name]
        self.history[:, :, : old["history"].shape[2]] = old["history"]
        m, s = old["_task_stride"], self._task_stride
        for b in range(self.B):
            self._task_ints[b * s : b * s + m] = old["_task_ints"][b * m : (b + 1) * m]
            self._task_floats[b * s : b * s + m] = old["_task_floats"][b * m : (b + 1) * m]
        self._task_base[:] = np.arange(self.B) * s

    def _start(self, b: int, workload: Workload) -> None:
        """Load ``workload`` into environment b's rows and admit its tasks of t = 0."""
        K, m, bank = self.K, self._task_stride, self.bank
        rows = slice(b * m, (b + 1) * m)
        ints, floats = self._task_ints[rows], self._task_floats[rows]
        ints[:] = (0, NEVER, 0, 0, 0, 1, 0, 0, -1)
        ints[:, dynamics.TASK] = np.arange(m)
        floats[:] = _EMPTY_FLOAT
        n = len(workload)
        curve = np.asarray(workload.curve, np.int64)
        for column, values in ((dynamics.ARRIVAL, workload.arrival), (dynamics.DEADLINE, workload.deadline), (dynamics.EXPIRY, workload.deadline),
                               (dynamics.CURVE, curve), (dynamics.CUM_START, bank.cum_start[curve]), (dynamics.LENGTH, bank.lengths[curve])):
            ints[:n, column] = values
        for column, values in ((dynamics.TARGET, workload.target), (dynamics.BATCHES, workload.batches_per_step), (dynamics.DEMAND, workload.demand)):
            floats[:n, column] = values
        slots = slice(b * K, (b + 1) * K)
        self._ints[slots] = _EMPTY_INT
        self._floats[slots] = _EMPTY_FLOAT
        self._slot_flags[:, b] = False
        self.action_choices[b] = False
        self.action_choices[b, 0] = True
        self.history[b] = 0.0
        self.recent[b] = 0.0
        self.node_slot[b] = -1
        self._env[:, b] = 0
        self._flags[:, b] = False
        self.n_tasks[b] = self._n_tasks[b] = n
        self.arrival_steps[b] = self._arrival_steps[b] = workload.arrival_steps
        self.horizon[b] = float(workload.arrival_steps)
        self.potential[b] = 0.0  # no task has reported at the start
        self.reward[b] = 0.0  # and env b's entries of the last outcome read as "nothing happened"
        self._counts[:, b] = 0
        self._nodes[:, b] = False
        self._served[b] = False
        self._reported[b] = 0.0
        self._next_expiry[b] = NEVER
        self._task_base[b] = b * m
        dynamics.reset_state(b, self._state)

    # ------------------------------------------------------------------ step
    def check_actions(self, actions: np.ndarray) -> np.ndarray:
        """Validate a (B, N) integer action array; raises :class:`InvalidActionError` naming the culprit."""
        actions = np.asarray(actions)
        if actions.shape != (self.B, self.N):
            raise ValueError(f"actions must have shape (B, N) = {(self.B, self.N)}, got {actions.shape}")
        if actions.dtype.kind not in "iu":
            raise TypeError(f"actions must be integers, got dtype {actions.dtype}")
        if actions.dtype.kind == "u" and actions.size and int(actions.max()) > self.K:
            b, n = map(int, np.argwhere(actions > self.K)[0])
            raise InvalidActionError(f"action {actions[b, n]} of node {n} (env {b}) is outside [0, {self.K}]", b, n, actions[b, n])
        return np.ascontiguousarray(actions, dtype=np.int64)

    def step(self, actions: np.ndarray) -> StepOutcome:
        """Advance every live environment by one step. ``actions``: (B, N) ints in [0, K]."""
        actions = self.prepare(actions)
        self.raise_for(dynamics.step_and_reward(actions, self._state), actions)
        return self.outcome()

    def prepare(self, actions: np.ndarray) -> np.ndarray:
        """``actions`` as the compiled step takes them: a C-contiguous (B, N) int64 array (checked)."""
        if type(actions) is np.ndarray and actions.dtype is _INT64 and actions.shape == self._action_shape and actions.flags.c_contiguous:
            return actions
        return self.check_actions(actions)

    def raise_for(self, result: tuple[int, int], actions: np.ndarray) -> None:
        """Raise the :class:`InvalidActionError` of a compiled step's (code, flat node) result, if any."""
        code, where = result
        if code == dynamics.OK:
            return
        b, n = divmod(int(where), self.N)
        value = actions[b, n]
        if code == dynamics.OUT_OF_RANGE:
            raise InvalidActionError(f"action {value} of node {n} (env {b}) is outside [0, {self.K}]", b, n, value)
        raise InvalidActionError(f"node {n} (env {b}) chose slot {value - 1}, which holds no active task", b, n, int(value))

    def node_flags_of(self, b: int) -> list[int]:
        """Env b's N conflict flags, then its N invalid-action flags, of the last step as ints (no outcome copy)."""
        start, B, N = self._outcome_from["b"], self.B, self.N
        if B == 1:
            return self._b8[start : start + 2 * N].view(np.int8).tolist()
        return self._b8[start : start + 2 * B * N].reshape(2, B, N)[:, b].view(np.int8).ravel().tolist()

    def outcome(self) -> StepOutcome:
        """What the last step did (fresh arrays; zeros before the first step)."""
        fr = self._outcome_from
        return StepOutcome(self._i64[fr["i"] :].copy(), self._b8[fr["b"] :].copy(), self._f64[fr["f"] :].copy(), self._flags[1:].copy(), self._shape)

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
        arrived, completed, failed, rejected, switches, busy, wasted, conflicts, invalid, t, _, _, active = self._env[:_STATS_AND_CLOCK, b].tolist()
        return {"arrived": arrived, "completed": completed, "failed": failed, "rejected": rejected,
                "completion_rate": completed / arrived if arrived > 0 else 0.0, "active": active,
                "node_utilization": busy / (self.N * max(t, 1)), "busy_node_steps": busy, "wasted_node_steps": wasted,
                "switches": switches, "conflicts": conflicts, "invalid_actions": invalid, "t": t}
