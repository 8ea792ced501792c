"""The K-slot offline optimum as a mixed-integer program (HiGHS, through highspy): the env's slot rules, exactly.

:mod:`mara_agents.slot_ceiling` keeps the rules of :mod:`core_env.sim` (a task arriving while every
slot is full is rejected, arrivals at one step admitted in task order; an admitted task holds its slot
until it completes or its deadline passes; one task per node per step; unit-speed nodes, no switching
cost). This module writes them for HiGHS's branch and cut, whose LP bound and cuts prove the optimum on
episodes where CP-SAT's search stalls at the slot-relaxed bound (id/train: every episode tried).

Variables, for every task ``i`` a binary ``adm_i`` (admitted); for each task ``j`` that can finish
(``n*_j`` ≤ window) a binary ``z_j`` (completes), continuous ``x_{j,τ} ∈ [0, 1]`` (served at step τ,
a_j ≤ τ < d_j) and, at each arrival step ``t`` with a_j + n*_j ≤ t < d_j, a binary ``f_{j,t}`` = [it
received its ``n*_j`` node-steps before t] and a continuous ``s_{j,t}`` = Σ_{τ<t} x_{j,τ} (its services
before t):

* ``Σ_τ x_{j,τ} = n*_j z_j``, ``z_j ≤ adm_j``; ``Σ_j x_{j,τ} ≤ N`` per step;
* ``s_{j,t} = s_{j,t'} + Σ_{t' ≤ τ < t} x_{j,τ}`` for consecutive such arrival steps t' < t (each x in one
  row: written as Σ_{τ<t} x_{j,τ} per t, the rows held O(window²) nonzeros per task, and at load x2 HiGHS
  could not finish the root LP in 120 s; cumulative, it proves x1.25 episodes the old rows could not);
* ``n*_j f_{j,t} ≤ s_{j,t} ≤ n*_j − 1 + f_{j,t}`` (f is exact for integral x), f non-decreasing in t;
* at task ``i``'s arrival, the tasks before it that still hold a slot, ``h_i = Σ_j adm_j − Σ_j f_{j,a_i}``
  over j < i with d_j > a_i: ``h_i + adm_i ≤ K`` and ``h_i + K adm_i ≥ K`` (rejected only when full);
* with ``F_j(t1, t2)`` = [task j held a slot at t1 and not at t2] (``adm_j − f_{j,t1}`` when its deadline
  d_j ≤ t2, else ``f_{j,t2} − f_{j,t1}``): for consecutive contested arrivals i1 < i2 (the arrivals with slot
  rows), ``adm_i2 ≤ adm_i1 + Σ_j F_j(a_i1, a_i2)`` over the tasks j < i1 holding a slot at a_i1 (admission order:
  a rejected i1 found every slot held, so a later arrival is admitted only after a whole slot is freed); and for
  each contested arrival i and each task j ≤ i − 1 that can free a slot between the previous arrival and it,
  ``adm_i ≥ F_j(a_{i−1}, a_i)`` (a slot freed since the previous arrival admits it). Both hold on every playable
  schedule and are implied by the rows above for integral variables; they cut the LP relaxation's part-admitted
  arrivals (h_i just under K admits a task by a 1/K fraction): on an x2 episode the LP with them reaches the bound
  that 300 s of branch and cut reached without them;
* completion lag: for each ``f_{j,t}`` and the later steps t_1 < t_2 < … of f_j (then d_j, with f = z_j),
  ``s_{j,t} ≥ n*_j f_{j,t} + Σ_k c_k (f_{j,t_k} − f_{j,t_{k−1}})`` with ``c_k = max(0, n*_j − (t_k − t))``: a task
  that completes before t_k received at most one service per step after t (valid on every playable schedule;
  they cut the slots the LP releases in part while a task is far from done: about one completion more off
  the x2 LP bounds).
* maximise ``Σ z_j``; ``upper_bound`` (the slot-relaxed optimum) caps the reported bound, not the program
  (an objective-cap row slowed HiGHS's proofs on id/train).

Every schedule the env can play is a feasible point (x integral), so HiGHS's dual bound is a valid
upper bound even though x is continuous; the schedule read from x (services with x > ½, at most N per step)
is replayed through the simulator by the caller, so a value is only ever claimed when the env achieves it (a
schedule the simulator refuses is not kept).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from core_env.extras import needs
from core_env.workload import Workload
from mara_agents.slot_hints import check, needed

__all__ = ["PROGRAM", "SlotLp", "SlotMilp", "slot_lp", "slot_milp"]

#: The program's version, stored with each LP bound (``lp_program``): 1, the slot rows; 2, with the admission-order
#: and freed-slot rows; 3, with the completion-lag rows too (module docstring). A bound solved with an older program
#: is solved again by ``python -m benchmarks ceilings --only slot-bounds``.
PROGRAM = 3


@dataclasses.dataclass(frozen=True)
class SlotMilp:
    """HiGHS's answer: ``schedule`` ((S, 2) int64 (step, task) rows of its best solution, None when it
    found none), ``claimed`` (that solution's objective), ``bound`` (its proven upper bound), ``optimal``
    (HiGHS proved optimality), ``seconds``."""

    schedule: np.ndarray | None
    claimed: int
    bound: float
    optimal: bool
    seconds: float


@dataclasses.dataclass(frozen=True)
class SlotLp:
    """The LP relaxation's answer (:func:`slot_lp`): ``bound`` (its optimum rounded down; None when the time limit did
    not reach it), ``seconds``, and where it escapes the slot rule, read from its optimum: ``contested`` (the arrivals
    that may meet a full set of slots: those with slot rows), ``fractional_admissions`` (of those, admitted in part:
    a fraction of a task that holds a fraction of a slot), ``releases`` (the completion indicators f_{j,t}) and
    ``fractional_releases`` (of those, strictly between 0 and 1: a slot released in part while its task is served).
    The four counts are 0 when the bound was not reached."""

    bound: float | None
    seconds: float
    contested: int
    fractional_admissions: int
    releases: int
    fractional_releases: int


#: A relaxed binary strictly inside (FRACTIONAL, 1 - FRACTIONAL) counts as fractional in :class:`SlotLp`.
FRACTIONAL = 1e-6


class _Rows:
    """A sparse constraint matrix built row by row."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []
        self.lower: list[float] = []
        self.upper: list[float] = []

    def add(self, cols, vals, lower: float, upper: float) -> None:
        cols = np.asarray(cols, np.int64)
        self.rows.append(np.full(cols.size, len(self.lower), np.int64))
        self.cols.append(cols)
        self.vals.append(np.broadcast_to(np.asarray(vals, float), cols.shape))
        self.lower.append(lower)
        self.upper.append(upper)

    def matrix(self, n_vars: int):
        with needs(__name__):
            from scipy.sparse import coo_matrix

        return coo_matrix((np.concatenate(self.vals), (np.concatenate(self.rows), np.concatenate(self.cols))),
                          shape=(len(self.lower), n_vars)).tocsr()


class _Program:
    """The module docstring's program for one workload: the variable blocks (``adm``, ``z``, ``x``, ``f``
    and the cumulative services ``s``), the sparse rows, bounds and integrality, and :meth:`values` of a
    playable schedule."""

    def __init__(self, workload: Workload, n_nodes: int, n_slots: int) -> None:
        arrival, deadline, need = workload.arrival.astype(np.int64), workload.deadline.astype(np.int64), needed(workload)
        self.workload, self.n_nodes, self.n_slots, self.need = workload, n_nodes, n_slots, need
        m = len(workload)
        self.can = can = np.flatnonzero(need <= deadline - arrival)
        arrivals = np.unique(arrival)
        self.n_vars = 0
        self.adm = adm = self._block(m)
        self.z = z = dict(zip(can.tolist(), self._block(can.size).tolist()))
        self.x = x = {j: self._block(int(deadline[j] - arrival[j])) for j in can.tolist()}  # x[j][τ - a_j]
        steps = {j: arrivals[(arrivals >= arrival[j] + need[j]) & (arrivals < deadline[j])] for j in can.tolist()}
        self.f = f = {j: dict(zip(steps[j].tolist(), self._block(steps[j].size).tolist())) for j in can.tolist()}
        self.s = s = {j: dict(zip(steps[j].tolist(), self._block(steps[j].size).tolist())) for j in can.tolist()}
        self.rows = rows = _Rows()
        per_step: dict[int, list[np.ndarray]] = {}
        for j in can.tolist():
            a, k = int(arrival[j]), float(need[j])
            rows.add([*x[j], z[j]], [*np.ones(x[j].size), -k], 0.0, 0.0)
            rows.add([z[j], adm[j]], [1.0, -1.0], -np.inf, 0.0)
            for offset, served in enumerate(x[j]):
                per_step.setdefault(a + offset, []).append(served)
            since, previous = a, None
            for t, done in f[j].items():
                # s_{j,t} = s_{j,previous t} + the services between: each x in one row, not in one row per later t
                segment, before = x[j][since - a: t - a], [] if previous is None else [previous]
                rows.add([s[j][t], *before, *segment], [1.0, *-np.ones(len(before)), *-np.ones(segment.size)], 0.0, 0.0)
                rows.add([done, s[j][t]], [k, -1.0], -np.inf, 0.0)
                rows.add([s[j][t], done], [1.0, -1.0], -np.inf, k - 1.0)
                if previous is not None:
                    rows.add([f[j][since], done], [1.0, -1.0], -np.inf, 0.0)
                since, previous = t, s[j][t]
        for served in per_step.values():
            if len(served) > n_nodes:
                rows.add(served, 1.0, -np.inf, float(n_nodes))
        self.lower, self.upper = np.zeros(self.n_vars), np.ones(self.n_vars)
        for j in can.tolist():
            self.upper[list(s[j].values())] = need[j]
        self.contested = []  # the arrivals with slot rows
        for i in range(m):
            a = int(arrival[i])
            holders = [j for j in range(i) if deadline[j] > a]
            if len(holders) < n_slots:  # a slot is free whatever happened: admitted
                self.lower[adm[i]] = 1.0
                continue
            self.contested.append(i)
            done = [f[j][a] for j in holders if j in f and a in f[j]]
            cols = [*adm[holders], *done, adm[i]]
            held = [*np.ones(len(holders)), *-np.ones(len(done))]
            rows.add(cols, [*held, 1.0], -np.inf, float(n_slots))
            rows.add(cols, [*held, float(n_slots)], float(n_slots), np.inf)
        self._admission_rows()
        self._lag_rows()
        self.matrix = rows.matrix(self.n_vars)
        self.integer = np.ones(self.n_vars, bool)
        for served in (*x.values(), *(np.fromiter(c.values(), np.int64, len(c)) for c in s.values())):
            self.integer[served] = False
        self.cost = np.zeros(self.n_vars)
        self.cost[list(z.values())] = 1.0

    def _freed(self, j: int, a1: int, a2: int) -> dict[int, float] | None:
        """Task ``j``'s slot freed in (a1, a2] as {column: coefficient} (1 when j held a slot at a1 and not at a2,
        else 0, on every playable schedule): its deadline passing (adm_j − f_{j,a1}) or its completion
        (f_{j,a2} − f_{j,a1}); None when it cannot free one then."""
        deadline, f = int(self.workload.deadline[j]), self.f.get(j, {})
        before = {f[a1]: -1.0} if a1 in f else {}
        if deadline <= a2:
            return {int(self.adm[j]): 1.0, **before}
        return {f[a2]: 1.0, **before} if a2 in f and a2 != a1 else None

    def _admission_rows(self) -> None:
        """The module docstring's admission-order and freed-slot rows (valid on every playable schedule; they cut
        the part-admitted arrivals off the LP relaxation)."""
        arrival, deadline, adm = self.workload.arrival.astype(np.int64), self.workload.deadline.astype(np.int64), self.adm
        for first, then in zip(self.contested, self.contested[1:]):
            a1, a2 = int(arrival[first]), int(arrival[then])
            row = {int(adm[then]): 1.0, int(adm[first]): -1.0}
            for j in range(first):
                if deadline[j] > a1 and (freed := self._freed(j, a1, a2)) is not None:
                    for col, value in freed.items():
                        row[col] = row.get(col, 0.0) - value
            self.rows.add(list(row), list(row.values()), -np.inf, 0.0)
        for then in self.contested:
            if then == 0:
                continue
            a1, a2 = int(arrival[then - 1]), int(arrival[then])
            for j in range(then):
                if deadline[j] > a1 and (freed := self._freed(j, a1, a2)) is not None:
                    self.rows.add([int(adm[then]), *freed], [1.0, *(-value for value in freed.values())], 0.0, np.inf)

    def _lag_rows(self) -> None:
        """The module docstring's completion-lag rows: a task that completes before a later step t_k got all but
        (t_k − t) of its services before t (valid on every playable schedule; they cut the LP relaxation's slots
        released in part by a task still far from done)."""
        for j, done in self.f.items():
            need, deadline, steps = int(self.need[j]), int(self.workload.deadline[j]), list(done)
            for at, t in enumerate(steps):
                row, previous = {self.s[j][t]: 1.0, done[t]: -float(need)}, done[t]
                for later in (*steps[at + 1:], deadline):  # + c_k (f_{t_k} − f_{t_k−1}) on the right, c_k = n* − (t_k − t)
                    if (lag := need - (later - t)) <= 0:
                        break
                    column = done[later] if later != deadline else self.z[j]
                    row[column] = row.get(column, 0.0) - lag
                    row[previous] = row.get(previous, 0.0) + lag
                    previous = column
                self.rows.add(list(row), list(row.values()), 0.0, np.inf)

    def _block(self, size: int) -> np.ndarray:
        self.n_vars += size
        return np.arange(self.n_vars - size, self.n_vars)

    def values(self, schedule: np.ndarray) -> np.ndarray:
        """The variables of a playable schedule ((step, task) rows): its services, the tasks it completes
        (``n*`` services), when, and which arrivals the slot rules admit."""
        workload, need, schedule = self.workload, self.need, np.asarray(schedule, np.int64).reshape(-1, 2)
        arrival, deadline = workload.arrival.astype(np.int64), workload.deadline.astype(np.int64)
        value, done_at = np.zeros(self.n_vars), np.full(len(workload), np.iinfo(np.int64).max)
        for j in self.z:
            steps = np.sort(schedule[schedule[:, 1] == j, 0])
            if steps.size >= need[j]:
                steps = steps[: need[j]]
                value[self.z[j]], value[self.x[j][steps - arrival[j]]] = 1.0, 1.0
                done_at[j] = steps[-1] + 1
                for t, done in self.f[j].items():
                    value[done] = float(t >= done_at[j])
                    value[self.s[j][t]] = float(np.count_nonzero(steps < t))
        for i in range(len(workload)):
            held = sum(1 for j in range(i) if value[self.adm[j]] and deadline[j] > arrival[i] and done_at[j] > arrival[i])
            value[self.adm[i]] = float(held < self.n_slots)
        return value

    def schedule(self, value: np.ndarray) -> np.ndarray:
        """The (step, task) rows of the services with x > ½ in ``value``, at most ``n_nodes`` per step (those with
        the largest x: x is continuous, so a solution may spread N node-steps over more than N tasks at a step)."""
        arrival = self.workload.arrival.astype(np.int64)
        rows = [(-float(value[self.x[j][s]]), int(arrival[j]) + s, j) for j in self.can.tolist()
                for s in np.flatnonzero(value[self.x[j]] > 0.5).tolist()]
        per_step: dict[int, int] = {}
        kept = []
        for _, step, j in sorted(rows):
            if per_step.get(step, 0) < self.n_nodes:
                per_step[step] = per_step.get(step, 0) + 1
                kept.append((step, j))
        return np.array(sorted(kept), np.int64).reshape(-1, 2)


def _highs_model(program: _Program, highspy, integer: bool):
    """``program`` as a HiGHS model (maximise completions), with its integrality (``integer``) or without
    (the LP relaxation)."""
    lp, matrix = highspy.HighsLp(), program.matrix
    lp.num_col_, lp.num_row_ = program.n_vars, matrix.shape[0]
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = program.cost, program.lower, program.upper
    lp.row_lower_, lp.row_upper_ = np.array(program.rows.lower), np.array(program.rows.upper)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = program.n_vars, matrix.shape[0]
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = matrix.indptr, matrix.indices, matrix.data
    if integer:
        lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous for i in program.integer]
    return lp


def _solver(workload: Workload, n_nodes: int, n_slots: int, time_limit: float, integer: bool, options: tuple = ()):
    """(highspy, the program, a HiGHS solver holding it with ``options`` set, or None when no task can finish),
    after checking the node and slot counts and the time limit."""
    with needs(__name__):
        import highspy
    check(workload, n_nodes, n_slots)
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not 0 < time_limit < np.inf:
        raise ValueError(f"time_limit must be a finite number of seconds > 0, got {time_limit!r}")
    program = _Program(workload, n_nodes, n_slots)
    if program.can.size == 0:
        return highspy, program, None
    return highspy, program, _highs(program, highspy, time_limit, integer, options)


def _highs(program: _Program, highspy, time_limit: float, integer: bool, options: tuple = ()):
    """A HiGHS solver holding ``program`` (quiet, one thread, ``time_limit`` seconds, then ``options``)."""
    solver = highspy.Highs()
    for option, value in (("output_flag", False), ("log_to_console", False), ("time_limit", float(time_limit)), ("threads", 1), *options):
        solver.setOptionValue(option, value)
    solver.passModel(_highs_model(program, highspy, integer))
    return solver


def slot_lp(workload: Workload, n_nodes: int, n_slots: int, time_limit: float) -> SlotLp:
    """The module docstring's program with every binary relaxed to [0, 1], solved by HiGHS's interior point method
    with crossover: its optimum rounded down (the objective counts whole completions) as :class:`SlotLp`'s bound,
    with the counts of where the relaxation escapes the slot rule.

    Every schedule the env can play is a feasible point of the relaxation, so the bound holds for the K-slot
    optimum; where the slots bind it lies below the slot-relaxed optimum (at load x2 HiGHS's branch and cut
    does not finish this root LP in 300 s with dual simplex; the interior point method solves it in ~20 s).

    Raises:
        ValueError: as :func:`slot_milp` for the node and slot counts and the time limit.
        ImportError: highspy is not installed (``pip install 'core-learning[ceilings]'``).
    """
    highspy, program, solver = _solver(workload, n_nodes, n_slots, time_limit, integer=False, options=(("solver", "ipm"), ("run_crossover", "on")))
    if solver is None:  # no task can finish: nothing to relax
        return SlotLp(0.0, 0.0, len(program.contested), 0, 0, 0)
    began = time.perf_counter()
    solver.run()
    seconds = time.perf_counter() - began
    if solver.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return SlotLp(None, seconds, 0, 0, 0, 0)
    value = np.asarray(solver.getSolution().col_value)
    admitted = value[program.adm[program.contested]]
    released = value[np.fromiter((f for done in program.f.values() for f in done.values()), np.int64)]
    return SlotLp(float(np.floor(solver.getInfo().objective_function_value + 1e-6)), seconds, len(program.contested), _fractional(admitted),
                  int(released.size), _fractional(released))


def _fractional(values: np.ndarray) -> int:
    """How many relaxed binaries in ``values`` lie strictly inside (FRACTIONAL, 1 − FRACTIONAL)."""
    return int(np.count_nonzero((values > FRACTIONAL) & (values < 1 - FRACTIONAL)))


def slot_milp(workload: Workload, n_nodes: int, n_slots: int, time_limit: float, upper_bound: float | None = None,
              start: np.ndarray | None = None, seed: int = 0) -> SlotMilp:
    """Solve the module docstring's program for at most ``time_limit`` seconds, from the schedule ``start``
    ((step, task) rows the env can play, e.g. :func:`mara_agents.slot_hints.parked_schedule`'s) when given.

    Raises:
        ValueError: a node or slot count that is not an int >= 1, or a time limit that is not a finite
            number of seconds > 0.
        ImportError: highspy is not installed (``pip install 'core-learning[ceilings]'``).
    """
    highspy, program, solver = _solver(workload, n_nodes, n_slots, time_limit, integer=True, options=(("random_seed", int(seed)),))
    if solver is None:
        return SlotMilp(np.zeros((0, 2), np.int64), 0, 0.0, True, 0.0)
    cap = float(np.floor(upper_bound + 1e-9)) if upper_bound is not None else float(program.can.size)
    solver.setOptionValue("objective_target", cap)
    if start is not None:
        known = highspy.HighsSolution()
        known.col_value = list(program.values(start))
        known.value_valid = True
        solver.setSolution(known)
    began = time.perf_counter()
    solver.run()
    seconds = time.perf_counter() - began
    info = solver.getInfo()
    bound = min(cap, np.floor(info.mip_dual_bound + 1e-6)) if np.isfinite(info.mip_dual_bound) else cap  # integral objective
    if info.primal_solution_status == 0:  # no feasible solution found
        return SlotMilp(None, 0, float(bound), False, seconds)
    claimed = int(round(info.objective_function_value))
    bound = max(float(bound), float(claimed))
    return SlotMilp(program.schedule(np.asarray(solver.getSolution().col_value)), claimed, bound, bool(claimed >= bound), seconds)
