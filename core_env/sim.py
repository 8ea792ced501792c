"""The simulator: B environments' state as a struct of arrays, and the one caller of the compiled engine.

The rules of a step are described and implemented once, in :mod:`core_env.rules` (docs/env.md, "A
step"); :mod:`core_env.dynamics` runs them over the B environments. This module owns the arrays they work
on, the checks and errors around them, and the statistics read from them (:func:`fill_statistics`, the one
builder behind every view's statistics and infos).

A step is all or nothing: every check that can fail (actions, ``strict`` choices, a task source's
reports) runs before the first write, so a step that raises leaves the state (statistics, ``t``, slots,
histories) as it was.

One step goes down and back once. :meth:`Simulator.advance` (what :class:`core_env.batch.EnvBatch` calls)
checks the actions and makes one compiled call, :func:`step_and_fill`: :func:`core_env.dynamics.step_arrays`
applies the rules to every live environment and pays the team rewards, then the caller's buffers, if it
passed any, are filled from the new state (observations by :mod:`core_env.features`, statistics by
:func:`fill_statistics`); the call returns an error code, raised here as an :class:`InvalidActionError`
naming the culprit. With a task source the step is two compiled halves around the source's reports
(:mod:`core_env.task_source`). Nothing below this module calls back up.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core_env import dynamics, features
from core_env.config import EnvConfig
from core_env.jit import compiled, unowned
from core_env.state import (EMPTY_FLOATS, EMPTY_INTS, INFO_ROWS, NEVER, OUTCOME, STATS, Arrays, EnvFlag, EnvRow, NodeFlag, Outcome, ParamFloat, ParamInt,
                            SlotFlag, SlotFloat, SlotInt, completion_rate, empty_row, node_utilization)
from core_env.task_source import TaskSource, reports_of
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
    node; ``invalid`` (B, N) bool node chose an empty slot; ``switched`` (B, N) bool node's service was a
    switch; ``served`` (B, K) bool slot was served this step; ``reported`` (B, K) float64 loss reported by
    each served slot (0 where not served); ``terminated``, ``truncated`` (B,) bool. The arrays are views of
    one copy per dtype (the end of each arena of :data:`core_env.state.ARRAYS`), made at the step.
    """

    __slots__ = ("_counts", "_flags", "_reported", "_ends", "_shape")

    def __init__(self, counts: np.ndarray, flags: np.ndarray, reported: np.ndarray, ends: np.ndarray, shape: tuple[int, int, int]) -> None:
        self._counts, self._flags, self._reported, self._ends, self._shape = counts, flags, reported, ends, shape

    def _node_plane(self, plane: NodeFlag) -> np.ndarray:
        B, N, _ = self._shape
        return self._flags[plane * B * N : (plane + 1) * B * N].reshape(B, N)

    completed = property(lambda self: self._counts[Outcome.COMPLETED * self._shape[0] : (Outcome.COMPLETED + 1) * self._shape[0]])
    failed = property(lambda self: self._counts[Outcome.FAILED * self._shape[0] : (Outcome.FAILED + 1) * self._shape[0]])
    rejected = property(lambda self: self._counts[Outcome.REJECTED * self._shape[0] : (Outcome.REJECTED + 1) * self._shape[0]])
    conflicts = property(lambda self: self._node_plane(NodeFlag.CONFLICT))
    invalid = property(lambda self: self._node_plane(NodeFlag.INVALID))
    switched = property(lambda self: self._node_plane(NodeFlag.SWITCHED))
    served = property(lambda self: self._flags[len(NodeFlag) * self._shape[0] * self._shape[1] :].reshape(self._shape[0], self._shape[2]))
    reported = property(lambda self: self._reported[: self._shape[0] * self._shape[2]].reshape(self._shape[0], self._shape[2]))
    terminated = property(lambda self: self._ends[EnvFlag.TERMINATED - 1])
    truncated = property(lambda self: self._ends[EnvFlag.TRUNCATED - 1])


_INT64 = np.dtype(np.int64)
_DTYPES = {"i": np.int64, "f": np.float64, "b": np.bool_}
_EMPTY_INT, _EMPTY_FLOAT = empty_row(SlotInt, EMPTY_INTS), empty_row(SlotFloat, EMPTY_FLOATS)

#: Rows of the statistics builder's ``rates`` (:func:`fill_statistics`).
RATES = ("completion_rate", "node_utilization", "potential")


@unowned
def fill_statistics(env, potential, nodes, first, counts, rates, flags):
    """The one statistics builder: for the C environments ``first`` .. ``first + C - 1`` (C the columns of
    the outputs; none when C = 0), ``counts`` (INFO_ROWS, C) int64 the first rows of the env table (the
    statistics, ``t``, …, ``n_active``), ``rates`` (3, C) float64 the completion rate (completed per task
    arrived, 0 before an arrival), the node utilization (busy node-steps per node-step, t counted from 1)
    and Φ(s) (:data:`RATES`), ``flags`` (2, C, N) int64 the last step's conflict and invalid-action flags
    (zeros after a reset). Named by :func:`statistics_dict`."""
    N, C = flags.shape[2], counts.shape[1]
    for r in range(counts.shape[0]):  # row by row: each a contiguous copy
        for c in range(C):
            counts[r, c] = env[r, first + c]
    for c in range(C):
        b = first + c
        rates[0, c] = completion_rate(env[EnvRow.COMPLETED, b], env[EnvRow.ARRIVED, b])
        rates[1, c] = node_utilization(env[EnvRow.BUSY_NODE_STEPS, b], N, env[EnvRow.T, b])
        rates[2, c] = potential[b]
        for n in range(N):
            flags[0, c, n] = nodes[NodeFlag.CONFLICT, b, n]
            flags[1, c, n] = nodes[NodeFlag.INVALID, b, n]


@unowned
def observe_arrays(a, H, compact, rows, shared, mask):
    """Every environment's observation from the state's arrays ``a``, with :mod:`core_env.features`:
    per-node (``rows`` (B, N, D) observations; ``shared`` is not read) or ``compact`` (``rows`` (B, N, 3)
    node features, ``shared`` (B, 3 + K·F)); ``mask`` (B, N, K + 1). Nothing when ``rows`` holds no
    environment."""
    if compact:
        features.fill_compact(a, H, rows, shared, mask)
    else:
        features.fill_observations(a, H, rows, mask)


@compiled
def step_and_fill(actions, s, H, compact, rows, shared, mask, counts, rates, flags):
    """One step of every live environment (:func:`core_env.dynamics.step_arrays`: the rules and the team
    rewards), then, from the new state, the observations (:func:`observe_arrays`) and the statistics
    (:func:`fill_statistics`) into the buffers given (empty buffers: nothing). Returns (code, flat node
    index) of the action check; on an error nothing is written."""
    a = dynamics.arrays_of(s)
    code, where = dynamics.step_arrays(actions, a)
    if code == dynamics.OK:
        observe_arrays(a, H, compact, rows, shared, mask)
        fill_statistics(a.env, a.potential, a.nodes, 0, counts, rates, flags)
    return code, where


@compiled
def observe_state(s, H, compact, rows, shared, mask):
    """:func:`observe_arrays` of the state as it stands (after a reset, or a step that did not observe)."""
    observe_arrays(dynamics.arrays_of(s), H, compact, rows, shared, mask)


@compiled
def statistics_of_state(s, first, counts, rates, flags):
    """:func:`fill_statistics` of the state as it stands."""
    fill_statistics(s.env, s.potential, s.nodes, first, counts, rates, flags)


def statistics_dict(counts, rates) -> dict:
    """The statistics by their info names, in the order of :data:`core_env.state.EPISODE_KEYS`, then
    ``potential``: from :func:`fill_statistics`' ``counts`` and ``rates`` ((C,) arrays, their rows), or
    from one environment's column of each as lists (plain Python numbers)."""
    return {"arrived": counts[_ARRIVED], "completed": counts[_COMPLETED], "failed": counts[_FAILED], "rejected": counts[_REJECTED],
            "completion_rate": rates[0], "active": counts[_N_ACTIVE], "node_utilization": rates[1], "busy_node_steps": counts[_BUSY],
            "wasted_node_steps": counts[_WASTED], "switches": counts[_SWITCHES], "conflicts": counts[_CONFLICTS],
            "invalid_actions": counts[_INVALID], "t": counts[_T], "potential": rates[2]}


(_ARRIVED, _COMPLETED, _FAILED, _REJECTED, _SWITCHES, _BUSY, _WASTED, _CONFLICTS, _INVALID, _T, _N_ACTIVE) = (
    int(row) for row in (EnvRow.ARRIVED, EnvRow.COMPLETED, EnvRow.FAILED, EnvRow.REJECTED, EnvRow.SWITCHES, EnvRow.BUSY_NODE_STEPS,
                         EnvRow.WASTED_NODE_STEPS, EnvRow.CONFLICTS, EnvRow.INVALID_ACTIONS, EnvRow.T, EnvRow.N_ACTIVE))
#: A per-task row before its task is written (the row after the last task is a sentinel that never arrives).
_TASK_ROW = empty_row(SlotInt, {SlotInt.ARRIVAL: NEVER, SlotInt.LENGTH: 1, SlotInt.LAST_NODE: -1})


def _window(workload: Workload) -> int:
    """The longest deadline window of a workload (1 when it has no task)."""
    return int(workload.window.max()) if len(workload) else 1


class _View:
    """A named read-only-for-users view of the state's arrays, declared on :class:`Simulator` and made
    once per allocation (kept in the instance's ``__dict__`` until the arrays are laid out again)."""

    def __init__(self, make, doc: str) -> None:
        self.make, self.__doc__ = make, doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, sim: Simulator | None, owner: type | None = None):
        if sim is None:
            return self
        view = sim.__dict__[self.name] = self.make(sim)
        return view


def _slot_int(field: SlotInt, doc: str) -> _View:
    return _View(lambda sim: sim.arrays.ints[:, field].reshape(sim.B, sim.K), f"(B, K) {doc}")


def _slot_float(field: SlotFloat, doc: str) -> _View:
    return _View(lambda sim: sim.arrays.floats[:, field].reshape(sim.B, sim.K), f"(B, K) {doc}")


def _env_row(row: EnvRow, doc: str) -> _View:
    return _View(lambda sim: sim.arrays.env[row], f"(B,) {doc}")


class Simulator:
    """Batched simulator state (struct of arrays), stepped by the compiled rules of :mod:`core_env.rules`.

    The arrays (:data:`core_env.state.ARRAYS`, as the named tuple ``arrays``) are public for read-only use
    by views, observers and agents; the named views below read them. Slot fields are (B, K): ``task``
    (workload index, -1 when empty), ``arrival``, ``deadline``, ``curve``, ``steps`` (node-steps received),
    ``last_node``; ``target``, ``batches_per_step``, ``demand`` (hidden nominal demand from the task's
    start: oracles only), ``progress`` (batches trained), ``last_loss``, ``first_loss``, ``log_target`` (log
    of the target floored at LOSS_FLOOR), ``phi`` (the shaped reward's log-progress φ, :mod:`core_env.reward`).
    ``has_report[b, k]``: active and has reported a loss; ``served_last``: served in the last step.
    ``history[b, k, j]`` is the loss the slot's task reported at its (j + 1)-th service; ``recent[b, k, j]``
    is the log (floored at LOSS_FLOOR) of its (j + 1)-th latest report, for the configured H (the
    observation's loss history; only the first ``steps`` entries count). ``node_slot`` (B, N): the slot each
    node served last step (-1 idle). ``action_choices`` (B, K + 1) says which actions choose a task (column
    0, idle, is always True); ``active`` is its view without column 0. Per environment: ``t``, ``done``,
    ``terminated``, ``truncated``, ``next_task``, ``n_active``, ``n_tasks``, ``arrival_steps`` and ``stats``
    (name -> (B,) counts).

    It is the one caller of :mod:`core_env.dynamics` (module docstring): views and task sources go through
    :meth:`advance`, :meth:`observe`, :meth:`statistics` and :meth:`curve_reports`, which fill the
    caller's buffers; the simulator keeps no observation of its own.
    """

    task = _slot_int(SlotInt.TASK, "workload index of each slot's task, -1 when empty")
    arrival = _slot_int(SlotInt.ARRIVAL, "arrival step")
    deadline = _slot_int(SlotInt.DEADLINE, "deadline step")
    curve = _slot_int(SlotInt.CURVE, "learning curve's index in the bank")
    steps = _slot_int(SlotInt.STEPS, "node-steps received")
    last_node = _slot_int(SlotInt.LAST_NODE, "node that served it last, -1 before")
    target = _slot_float(SlotFloat.TARGET, "target loss")
    batches_per_step = _slot_float(SlotFloat.BATCHES_PER_STEP, "batches one node-step trains at speed 1")
    demand = _slot_float(SlotFloat.DEMAND, "hidden nominal demand from the task's start (oracles only)")
    progress = _slot_float(SlotFloat.PROGRESS, "batches trained")
    last_loss = _slot_float(SlotFloat.LAST_LOSS, "latest reported loss")
    first_loss = _slot_float(SlotFloat.FIRST_LOSS, "first reported loss")
    log_target = _slot_float(SlotFloat.LOG_TARGET, "log of the target floored at LOSS_FLOOR")
    phi = _slot_float(SlotFloat.PHI, "log-progress φ of the latest report")
    t = _env_row(EnvRow.T, "step counter")
    next_task = _env_row(EnvRow.NEXT_TASK, "workload index of the next task to arrive")
    n_active = _env_row(EnvRow.N_ACTIVE, "slots holding a task")
    n_tasks = _env_row(EnvRow.N_TASKS, "tasks in the episode's workload")
    arrival_steps = _env_row(EnvRow.ARRIVAL_STEPS, "the arrival window")
    done = _View(lambda sim: sim.arrays.flags[EnvFlag.DONE], "(B,) the episode has ended")
    terminated = _View(lambda sim: sim.arrays.flags[EnvFlag.TERMINATED], "(B,) it ended with nothing left to do")
    truncated = _View(lambda sim: sim.arrays.flags[EnvFlag.TRUNCATED], "(B,) it was cut at max_cycles")
    served_last = _View(lambda sim: sim.arrays.slot_flags[SlotFlag.SERVED_LAST], "(B, K) served in the last step")
    has_report = _View(lambda sim: sim.arrays.slot_flags[SlotFlag.HAS_REPORT], "(B, K) active and has reported a loss")
    history = _View(lambda sim: sim.arrays.history, "(B, K, W) every loss each slot's task reported")
    recent = _View(lambda sim: sim.arrays.recent, "(B, K, H) its last H log losses, most recent first")
    node_slot = _View(lambda sim: sim.arrays.node_slot, "(B, N) slot each node served last step, -1 idle")
    action_choices = _View(lambda sim: sim.arrays.choices, "(B, K + 1) actions that choose a task")
    active = _View(lambda sim: sim.arrays.choices[:, 1:], "(B, K) slot holds a task")
    potential = _View(lambda sim: sim.arrays.potential, "(B,) Φ of the state (0 with reward='sparse')")
    reward = _View(lambda sim: sim.arrays.reward, "(B,) the last step's team reward")
    stats = _View(lambda sim: {name: sim.arrays.env[row] for row, name in enumerate(STATS)}, "statistic name -> (B,) counts")

    def __init__(self, config: EnvConfig, batch_size: int = 1) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.config = config
        self.B, self.N, self.K = int(batch_size), config.n_nodes, config.n_slots
        self._action_shape = (self.B, self.N)
        self._shape = (self.B, self.N, self.K)
        self.workloads: list[Workload] = []
        #: (B,) episodes started in each env so far (a task source tells a reset by it, even with the same workload).
        self.episodes_started = np.zeros(self.B, np.int64)

    @property
    def engine_state(self) -> dynamics.State:
        """The state's arrays as the one :class:`core_env.dynamics.State` the compiled engine takes, for
        compiled readers of the whole state (:mod:`core_env.features`); read-only: they must not write to
        it (only this module's steps and resets do). Made again when the arrays grow."""
        return self._state

    @property
    def speeds(self) -> np.ndarray:
        """(N,) node speeds."""
        return self.arrays.speeds if "arrays" in self.__dict__ else np.asarray(self.config.speeds, np.float64)

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
        laid out in three arenas (:data:`core_env.state.ARRAYS`)."""
        B, K, N = self.B, self.K, self.N
        self._task_stride = m = max(1, max_tasks) + 1  # per env: its tasks, then a sentinel that never arrives
        self.max_history = W = max(1, max_window)  # a task is served at most once per step of its window
        shapes = {"ints": (B * K, len(SlotInt)), "env": (len(EnvRow), B), "node_slot": (B, N), "task_ints": (B * m, len(SlotInt)),
                  "params_i": (len(ParamInt),), "chosen": (B, N), "counts": (len(Outcome), B), "floats": (B * K, len(SlotFloat)),
                  "task_floats": (B * m, len(SlotFloat)), "history": (B, K, W), "recent": (B, K, self.config.history), "speeds": (N,),
                  "potential": (B,), "params_f": (len(ParamFloat),), "reward": (B,), "batches": (B, N), "reported": (B, K),
                  "slot_flags": (len(SlotFlag), B, K), "choices": (B, K + 1), "flags": (len(EnvFlag), B), "nodes": (len(NodeFlag), B, N),
                  "served": (B, K)}
        layout = dynamics.array_layout(shapes)
        sizes: dict[str, int] = {}
        for arena, offset, shape in layout.values():
            sizes[arena] = max(sizes.get(arena, 0), offset + int(np.prod(shape)))
        self._arenas = {arena: np.zeros(size, _DTYPES[arena]) for arena, size in sizes.items()}
        self._i64, self._f64, self._b8 = self._arenas["i"], self._arenas["f"], self._arenas["b"]
        views = {name: self._arenas[arena][offset : offset + int(np.prod(shape))].reshape(shape) for name, (arena, offset, shape) in layout.items()}
        # the step's outcome: the rest of each arena from its first outcome array on, copied out at once
        self._outcome_from = {layout[name][0]: layout[name][1] for name in OUTCOME}
        for name in [name for name, value in vars(type(self)).items() if isinstance(value, _View)]:
            self.__dict__.pop(name, None)  # the named views are made again over the new arrays
        self.arrays = Arrays(**views, cum=self.bank.cum, slope=self.bank.slope)
        self._state = dynamics.State(*self.arrays)
        self.arrays.speeds[:] = self.config.speeds
        self._write_params()

    def _write_params(self) -> None:
        config, a = self._config, self.arrays
        a.params_i[ParamInt.STRICT], a.params_i[ParamInt.MAX_CYCLES], a.params_i[ParamInt.SHAPED] = int(config.strict), config.max_cycles, int(config.reward == "shaped")
        a.params_f[ParamFloat.SWITCH_COST], a.params_f[ParamFloat.KAPPA] = config.switch_cost, config.kappa

    @property
    def config(self) -> EnvConfig:
        return self._config

    @config.setter
    def config(self, value: EnvConfig) -> None:
        """A new configuration of the same shape (e.g. another ``max_cycles``) takes effect at the next step."""
        self._config = value
        if "arrays" in self.__dict__:
            self._write_params()

    def _grow(self, max_tasks: int, max_window: int) -> None:
        """Re-allocate for larger workloads, keeping every environment's state."""
        kept = ("recent", "potential", "env", "flags", "choices", "ints", "floats", "slot_flags", "node_slot")
        old, m = self.arrays, self._task_stride
        self._allocate(int(max_tasks * 1.5) + 1, max(max_window, int(self.max_history * 1.5)))
        for name in kept:
            getattr(self.arrays, name)[...] = getattr(old, name)
        self.arrays.history[:, :, : old.history.shape[2]] = old.history
        s = self._task_stride
        for b in range(self.B):
            self.arrays.task_ints[b * s : b * s + m] = old.task_ints[b * m : (b + 1) * m]
            self.arrays.task_floats[b * s : b * s + m] = old.task_floats[b * m : (b + 1) * m]
        self.arrays.env[EnvRow.TASK_BASE] = np.arange(self.B) * s

    def _start(self, b: int, workload: Workload) -> None:
        """Load ``workload`` into environment b's rows and admit its tasks of t = 0."""
        self.episodes_started[b] += 1
        K, m, bank, a = self.K, self._task_stride, self.bank, self.arrays
        rows = slice(b * m, (b + 1) * m)
        ints, floats = a.task_ints[rows], a.task_floats[rows]
        ints[:] = _TASK_ROW
        ints[:, SlotInt.TASK] = np.arange(m)
        floats[:] = _EMPTY_FLOAT
        n = len(workload)
        curve = np.asarray(workload.curve, np.int64)
        for column, values in ((SlotInt.ARRIVAL, workload.arrival), (SlotInt.DEADLINE, workload.deadline), (SlotInt.EXPIRY, workload.deadline),
                               (SlotInt.CURVE, curve), (SlotInt.CUM_START, bank.cum_start[curve]), (SlotInt.LENGTH, bank.lengths[curve])):
            ints[:n, column] = values
        for column, values in ((SlotFloat.TARGET, workload.target), (SlotFloat.BATCHES_PER_STEP, workload.batches_per_step),
                               (SlotFloat.DEMAND, workload.demand)):
            floats[:n, column] = values
        slots = slice(b * K, (b + 1) * K)
        a.ints[slots] = _EMPTY_INT
        a.floats[slots] = _EMPTY_FLOAT
        a.slot_flags[:, b] = False
        a.choices[b] = False
        a.choices[b, 0] = True
        a.history[b] = 0.0
        a.recent[b] = 0.0
        a.node_slot[b] = -1
        a.env[:, b] = 0
        a.flags[:, b] = False
        a.env[EnvRow.N_TASKS, b] = n
        a.env[EnvRow.ARRIVAL_STEPS, b] = workload.arrival_steps
        a.potential[b] = 0.0  # no task has reported at the start
        a.reward[b] = 0.0  # and env b's entries of the last outcome read as "nothing happened"
        a.counts[:, b] = 0
        a.nodes[:, b] = False
        a.served[b] = False
        a.reported[b] = 0.0
        a.chosen[b] = -1
        a.batches[b] = 0.0
        a.env[EnvRow.NEXT_EXPIRY, b] = NEVER
        a.env[EnvRow.TASK_BASE, b] = b * m
        dynamics.reset_env(b, self._state)

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

    def step(self, actions: np.ndarray, source: TaskSource | None = None) -> StepOutcome:
        """Advance every live environment by one step (:meth:`advance`); returns what the step did."""
        self.advance(actions, source)
        return self.outcome()

    def advance(self, actions: np.ndarray, source: TaskSource | None = None, fill: tuple | None = None) -> None:
        """Advance every live environment by one step. ``actions``: (B, N) ints in [0, K].

        ``source``: what served tasks report (:class:`core_env.task_source.TaskSource`); None, the curve
        bank inside the compiled step. With a source the step runs in two compiled halves around
        ``source.report`` (the same rules); if the source raises or returns bad losses, the state is left
        as it was before the step.

        ``fill``: buffers the step fills from the new state, in the same compiled call (module docstring):
        ``(H, compact, rows, shared, mask, counts, rates, flags)``, the arguments of :meth:`observe` then
        of :meth:`statistics_into`; a buffer that holds no environment is left alone.
        """
        if not (type(actions) is np.ndarray and actions.dtype is _INT64 and actions.shape == self._action_shape and actions.flags.c_contiguous):
            actions = self.check_actions(actions)  # as the compiled step takes them: a C-contiguous (B, N) int64 array
        if source is not None:
            self._step_with(actions, source)
            if fill is not None:
                self.observe(*fill[:5])
                self.statistics_into(*fill[5:])
            return
        code, where = dynamics.step(actions, self._state) if fill is None else step_and_fill(actions, self._state, *fill)
        if code:  # dynamics.OK is 0
            self.raise_for((code, where), actions)

    def _step_with(self, actions: np.ndarray, source: TaskSource) -> None:
        """The step in two compiled halves around ``source``'s reports (:mod:`core_env.task_source`)."""
        tails = {arena: self._arenas[arena][start:].copy() for arena, start in self._outcome_from.items()}
        self.raise_for(dynamics.start_step(actions, self._state), actions)
        try:
            reported, trained = reports_of(source, self)
        except BaseException:
            for arena, start in self._outcome_from.items():  # nothing but the last outcome was written: put it back
                self._arenas[arena][start:] = tails[arena]
            raise
        self.arrays.reported[...] = reported
        if trained is not None:
            self.arrays.batches[...] = trained
        dynamics.end_step(self._state)

    def curve_reports(self) -> None:
        """Between the halves of a step with a task source: every served task's report from the curve
        bank into ``arrays.reported`` (:class:`core_env.task_source.CurveSource`), for the batches in
        ``arrays.batches``."""
        dynamics.curve_reports(self._state)

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

    def outcome(self) -> StepOutcome:
        """What the last step did (fresh arrays; zeros before the first step)."""
        fr = self._outcome_from
        return StepOutcome(self._i64[fr["i"] :].copy(), self._b8[fr["b"] :].copy(), self._f64[fr["f"] :].copy(), self.arrays.flags[1:].copy(), self._shape)

    # ------------------------------------------------------------------ observations and statistics
    def observe(self, H: int, compact: bool, rows: np.ndarray, shared: np.ndarray, mask: np.ndarray) -> None:
        """Every environment's observation as the state stands (:func:`observe_arrays`: per-node ``rows``
        (B, N, D) (``shared``, any 2-d array, is not read), or ``compact`` ``rows`` (B, N, 3) and
        ``shared`` (B, 3 + K·F); ``mask`` (B, N, K + 1)), for the loss history H."""
        observe_state(self._state, H, compact, rows, shared, mask)

    def statistics_into(self, counts: np.ndarray, rates: np.ndarray, flags: np.ndarray, first: int = 0) -> None:
        """:func:`fill_statistics` of environments ``first`` .. ``first + C - 1`` as the state stands."""
        statistics_of_state(self._state, first, counts, rates, flags)

    def statistics(self, first: int = 0, count: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fresh ``counts`` (INFO_ROWS, C), ``rates`` (3, C) and ``flags`` (2, C, N) of environments
        ``first`` .. ``first + C - 1`` (C = ``count``, default every environment from ``first``):
        :func:`fill_statistics`, named by :func:`statistics_dict`."""
        count = self.B - first if count is None else count
        counts, rates, flags = np.empty((INFO_ROWS, count), np.int64), np.empty((len(RATES), count)), np.empty((2, count, self.N), np.int64)
        statistics_of_state(self._state, first, counts, rates, flags)
        return counts, rates, flags

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
        """Running episode statistics per environment, (B,) arrays (see docs/env.md), keyed in the order of
        :data:`core_env.state.EPISODE_KEYS` (fresh: rows of one array per dtype)."""
        out = statistics_dict(*self.statistics()[:2])
        del out["potential"]
        return out

    def statistics_of(self, b: int) -> dict[str, int | float]:
        """:meth:`episode_statistics` of environment ``b`` as plain Python numbers (the same values), keyed
        in the order of :data:`core_env.state.EPISODE_KEYS`."""
        counts, rates, _ = self.statistics(b, 1)
        out = statistics_dict(counts.ravel().tolist(), rates.ravel().tolist())
        del out["potential"]
        return out
