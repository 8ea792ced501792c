"""The K-slot ceiling: the offline optimum of an episode under the env's own slot rules, as a MILP.

:func:`mara_agents.bounds.milp_ceiling` drops the slot limit, so it is only an upper bound where the K
slots fill. :func:`slot_ceiling` keeps them, with the rules of :mod:`core_env.sim`: a task arriving
while every slot is full is rejected (arrivals at one step are admitted in task order); an admitted
task holds its slot until it completes or its deadline passes; each node serves one task per step.
Unit-speed nodes and no switching cost (the committed suites' setting): a task then completes exactly
at its ``n*``-th node-step of service, whatever the order, so a schedule is a choice of which tasks
each step serves. Node speeds and switching costs are not covered (a task's progress would depend on
which node served it and in what order), and :func:`slot_ceiling` refuses them.

Model (scipy's ``milp``, HiGHS). For every task ``i``: binary ``adm_i`` (admitted). For each task ``j``
that can finish (``n*_j`` ≤ window): binary ``z_j`` (completes), continuous ``x_{j,τ}`` ∈ [0, 1] (served
at step τ, a_j ≤ τ < d_j) and, at each later arrival step ``t`` of its window where it could already be
done (t − a_j ≥ n*_j), binary ``w_{j,t}`` = [it received n*_j node-steps before t]:

* ``Σ_{τ<t} x_{j,τ} ≥ n*_j w_{j,t}`` and ``Σ_{τ<t} x_{j,τ} ≤ n*_j − 1 + (t − a_j) w_{j,t}`` (w is exact);
* ``Σ_τ x_{j,τ} ≥ n*_j z_j``, ``z_j ≤ adm_j``, ``x_{j,τ} ≤ adm_j``; ``Σ_j x_{j,τ} ≤ N`` per step;
* at task ``i``'s arrival, the tasks before it in task order that still hold a slot, ``h_j = adm_j −
  w_{j,a_i}`` (w = 0 where not defined, i.e. not yet done) for ``a_j ≤ a_i < d_j``, satisfy
  ``Σ h_j + adm_i ≤ K`` (capacity) and ``Σ h_j ≥ K (1 − adm_i)`` (rejected only when every slot is full);
* maximise ``Σ z_j``.

For fixed binaries the constraints on ``x`` form a network flow (steps → tasks, with bounds on each
task's cumulative service between breakpoints) with integer data, so continuous ``x`` loses nothing; the
schedule is read from a second solve with the binaries fixed and ``x`` integral. :func:`replay` plays a
schedule through the simulator, so a stored value is one the env achieves, not one the model claims.

Status (issue 28, in progress): exact against an exhaustive search through the simulator on small
episodes (tests/test_slot_ceiling.py); on a committed suite episode (N = 4, K = 16, ~230 tasks) HiGHS does
not yet close the gap within minutes, because the LP relaxation of "rejected only when every slot is
full" is weak. The suites' ``milp`` row is still the slot-relaxed MILP, an upper bound.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from core_env.workload import Workload
from mara_agents.bounds import MILP_TIME_LIMIT, Ceiling


@dataclasses.dataclass(frozen=True)
class SlotCeiling(Ceiling):
    """The K-slot optimum of one workload: :class:`~mara_agents.bounds.Ceiling`'s fields (best completions
    found, HiGHS's dual bound, arrivals, MIP gap, seconds of both solves, status of the main solve) and
    ``schedule``, (S, 2) int64 rows (step, task): the services of the best schedule, at most N per step,
    none after a task's completion."""

    schedule: np.ndarray


def _check(workload: Workload, n_nodes: int, n_slots: int) -> None:
    for name, value in (("n_nodes", n_nodes), ("n_slots", n_slots)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a core_env.workload.Workload, got {type(workload).__name__}")


class _Model:
    """Variable indices and constraint rows of the slot MILP (see the module docstring)."""

    def __init__(self, workload: Workload, n_nodes: int, n_slots: int) -> None:
        arrival, deadline = workload.arrival.astype(np.int64), workload.deadline.astype(np.int64)
        need = workload.demand
        self.m = m = len(workload)
        self.can = np.flatnonzero(need <= deadline - arrival)
        self.need = {int(j): int(need[j]) for j in self.can}
        n = 0
        self.adm = np.arange(m)
        n += m
        self.z = {int(j): n + i for i, j in enumerate(self.can)}
        n += self.can.size
        self.x: dict[int, tuple[int, int, int]] = {}  # task -> (first variable index, first step, window length)
        for j in self.can:
            self.x[int(j)] = (n, int(arrival[j]), int(deadline[j] - arrival[j]))
            n += int(deadline[j] - arrival[j])
        self.n_x_end = n
        self.w: dict[tuple[int, int], int] = {}
        arrivals = np.unique(arrival)
        for j in self.can:
            a, d, k = int(arrival[j]), int(deadline[j]), self.need[int(j)]
            for t in arrivals[(arrivals > a) & (arrivals < d) & (arrivals - a >= k)]:
                self.w[(int(j), int(t))] = n
                n += 1
        self.n = n
        self.rows: list[tuple[list[int], list[float], float, float]] = []
        self._build(arrival, deadline, n_nodes, n_slots)

    def _row(self, cols: list[int], vals: list[float], low: float, high: float) -> None:
        self.rows.append((cols, vals, low, high))

    def _build(self, arrival: np.ndarray, deadline: np.ndarray, n_nodes: int, n_slots: int) -> None:
        inf = np.inf
        per_step: dict[int, list[int]] = {}
        for j, (first, a, length) in self.x.items():
            k = self.need[j]
            cols = list(range(first, first + length))
            for offset, col in enumerate(cols):
                per_step.setdefault(a + offset, []).append(col)
                self._row([col, int(self.adm[j])], [1.0, -1.0], -inf, 0.0)  # x <= adm
            self._row(cols + [self.z[j]], [1.0] * length + [-float(k)], 0.0, inf)  # Σx >= n* z
            self._row([self.z[j], int(self.adm[j])], [1.0, -1.0], -inf, 0.0)  # z <= adm
        for (j, t), col in self.w.items():
            first, a, _ = self.x[j]
            before = list(range(first, first + (t - a)))
            k = self.need[j]
            self._row(before + [col], [1.0] * len(before) + [-float(k)], 0.0, inf)  # Σ_{τ<t} x >= n* w
            self._row(before + [col], [1.0] * len(before) + [-float(t - a)], -inf, float(k - 1))  # Σ_{τ<t} x <= n*-1 + (t-a) w
        for cols in per_step.values():
            self._row(cols, [1.0] * len(cols), -inf, float(n_nodes))
        for i in range(self.m):
            a = int(arrival[i])
            holders = [j for j in range(i) if deadline[j] > a]  # arrived before i (task order), deadline not passed
            cols, vals, done = [], [], []
            for j in holders:
                cols.append(int(self.adm[j]))
                vals.append(1.0)
                if (j, a) in self.w:
                    done.append(self.w[(j, a)])
            cols += done
            vals += [-1.0] * len(done)
            self._row(cols + [int(self.adm[i])], vals + [1.0], -inf, float(n_slots))  # capacity
            if holders:
                self._row(cols + [int(self.adm[i])], vals + [float(n_slots)], float(n_slots), inf)  # forced admission
            else:
                self._row([int(self.adm[i])], [1.0], 1.0, inf)  # nothing holds a slot: admitted

    def solve(self, time_limit: float, fixed: np.ndarray | None = None) -> Any:
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_matrix

        r, c, v, low, high = [], [], [], [], []
        for index, (cols, vals, lo, hi) in enumerate(self.rows):
            r += [index] * len(cols)
            c += cols
            v += vals
            low.append(lo)
            high.append(hi)
        matrix = coo_matrix((v, (r, c)), shape=(len(self.rows), self.n)).tocsr()
        objective = np.zeros(self.n)
        objective[list(self.z.values())] = -1.0
        binary = np.ones(self.n)
        binary[self.m + len(self.z): self.n_x_end] = 0.0  # x: continuous
        lower, upper = np.zeros(self.n), np.ones(self.n)
        if fixed is not None:  # the binaries fixed to a solution; x integral
            is_binary = binary.astype(bool)
            lower[is_binary] = upper[is_binary] = np.round(fixed[is_binary])
            binary[:] = 1.0
        return milp(objective, constraints=LinearConstraint(matrix, low, high), integrality=binary,
                    bounds=Bounds(lower, upper), options={"time_limit": float(time_limit), "disp": False})

    def schedule(self, solution: np.ndarray) -> np.ndarray:
        """(step, task) services of an integral solution, none after the task's n*-th."""
        out = []
        for j, (first, a, length) in self.x.items():
            served = np.flatnonzero(np.round(solution[first:first + length]) > 0)[: self.need[j]]
            out += [(a + int(s), j) for s in served]
        return np.array(sorted(out), dtype=np.int64).reshape(-1, 2)


def slot_ceiling(workload: Workload, n_nodes: int, n_slots: int, time_limit: float = MILP_TIME_LIMIT) -> SlotCeiling:
    """The K-slot offline optimum of ``workload`` on ``n_nodes`` unit-speed nodes and ``n_slots`` slots.

    Raises:
        ValueError: a node or slot count that is not an int >= 1.
        RuntimeError: HiGHS found no feasible schedule within ``time_limit`` (never the case in practice:
            serving nothing is feasible), or the schedule achieves fewer completions in the simulator than
            the model counts (a modelling error; the tests guard against it).
    """
    _check(workload, n_nodes, n_slots)
    m = len(workload)
    if m == 0:
        return SlotCeiling(0, 0.0, 0, 0.0, 0.0, "no tasks", np.zeros((0, 2), np.int64))
    start = time.perf_counter()
    model = _Model(workload, n_nodes, n_slots)
    result = model.solve(time_limit)
    if result.x is None:
        raise RuntimeError(f"the slot MILP found no schedule within {time_limit} s: {result.message}")
    integral = model.solve(time_limit, fixed=result.x)
    if integral.x is None:
        raise RuntimeError(f"no integral schedule for the slot MILP's chosen tasks: {integral.message}")
    seconds = time.perf_counter() - start
    schedule = model.schedule(integral.x)
    # the value is what the env achieves with the schedule (a time-limited incumbent's z can undercount it, never overcount)
    claimed = int(np.round(result.x[list(model.z.values())]).sum()) if model.z else 0
    completed = replay(workload, schedule, n_nodes, n_slots)["completed"]
    if completed < claimed:
        raise RuntimeError(f"the slot MILP claims {claimed} completions but its schedule achieves {completed} in the env: a modelling error")
    dual = getattr(result, "mip_dual_bound", None)
    bound = max(float(-dual) if dual is not None and np.isfinite(dual) else float(completed), float(completed))
    return SlotCeiling(completed, bound, m, (bound - completed) / max(bound, 1.0), seconds, str(result.message), schedule)


def replay(workload: Workload, schedule: np.ndarray, n_nodes: int, n_slots: int) -> dict[str, int]:
    """Play ``schedule`` ((step, task) rows) through the simulator at unit speeds; returns its episode
    statistics (``completed``, ``rejected``, ``arrived``, ...).

    Raises:
        ValueError: the schedule serves a task that does not hold a slot at that step, or more than
            ``n_nodes`` tasks in one step.
    """
    from core_env.config import EnvConfig
    from core_env.sim import Simulator

    _check(workload, n_nodes, n_slots)
    config = EnvConfig(n_nodes=n_nodes, n_slots=n_slots, arrival_steps=workload.arrival_steps,
                       max_cycles=max(int(workload.deadline.max()) + 1, workload.arrival_steps) if len(workload) else workload.arrival_steps)
    sim = Simulator(config)
    sim.reset([workload])
    by_step: dict[int, list[int]] = {}
    for step, task in np.asarray(schedule, dtype=np.int64).reshape(-1, 2):
        by_step.setdefault(int(step), []).append(int(task))
    while not sim.done[0]:
        t = int(sim.t[0])
        tasks = by_step.get(t, [])
        if len(tasks) > n_nodes:
            raise ValueError(f"the schedule serves {len(tasks)} tasks at step {t}, more than {n_nodes} nodes")
        actions = np.zeros((1, n_nodes), np.int64)
        for node, task in enumerate(tasks):
            slots = np.flatnonzero(sim.active[0] & (sim.task[0] == task))
            if slots.size != 1:
                raise ValueError(f"the schedule serves task {task} at step {t}, but it holds no slot then")
            actions[0, node] = slots[0] + 1
        sim.step(actions)
    return {k: int(v) for k, v in sim.statistics_of(0).items() if isinstance(v, (int, np.integer))}
