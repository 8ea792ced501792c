"""The K-slot ceiling: the offline optimum of an episode under the env's own slot rules (HiGHS, then CP-SAT).

:func:`mara_agents.bounds.milp_ceiling` drops the slot limit, so it is only an upper bound where the K
slots fill. :func:`slot_ceiling` keeps them, with the rules of :mod:`core_env.sim`: a task arriving
while every slot is full is rejected (arrivals at one step are admitted in task order); an admitted
task holds its slot until it completes or its deadline passes; each node serves one task per step.
Unit-speed nodes and no switching cost (the committed suites' setting): a task then completes exactly
at its ``n*``-th node-step of service, whatever the order, so a schedule is a choice of which tasks
each step serves. Node speeds and switching costs are not covered (a task's progress would depend on
which node served it and in what order).

The search, in three phases within ``time_limit``: (1) starts from the rules of
:mod:`mara_agents.slot_hints` and a given schedule (below); (2) the whole problem as the time-indexed
MILP of :mod:`mara_agents.slot_milp`, solved by HiGHS from the best start for 90 % of the time left (on
the id/train episodes it proves the K-slot optimum in ~1–2 minutes, where CP-SAT's search stalled
below the slot-relaxed bound); (3) if that proof is missing, CP-SAT on the model below: neighbourhoods
of the best schedule, then the whole model for its proven bound. The bound reported is the smaller of
the two solvers' proven bounds and the slot-relaxed optimum.

CP-SAT's model (Google OR-Tools, the optional ``ceilings`` extra with highspy; a provably exact search:
the status says whether optimality was proven). For every task ``i`` a boolean ``adm_i`` (admitted); for each task
``j`` that can finish (``n*_j`` ≤ window) a boolean ``z_j`` (completes) and booleans ``x_{j,τ}`` (served
at step τ, a_j ≤ τ < d_j), and at each later arrival step ``t`` of its window where it could already be
done a boolean ``w_{j,t}`` = [it received its ``n*_j`` node-steps before t]:

* ``Σ_τ x_{j,τ} = n*_j z_j`` (no service beyond completion), ``z_j ⇒ adm_j``; ``Σ_j x_{j,τ} ≤ N`` per step;
* ``n*_j w_{j,t} ≤ Σ_{τ<t} x_{j,τ} ≤ n*_j − 1 + w_{j,t}`` (w is exact);
* at task ``i``'s arrival, the tasks before it in task order that still hold a slot, ``h_j = adm_j −
  w_{j,a_i}`` (w = 0 where not defined) for ``a_j ≤ a_i < d_j``: ``Σ h_j + adm_i ≤ K`` (capacity) and
  ``adm_i = 0 ⇒ Σ h_j ≥ K`` (rejected only when every slot is full);
* maximise ``Σ z_j``, at most ``upper_bound`` (the slot-relaxed optimum, a valid cap).

The search starts from the best of a given schedule and two rules of :mod:`mara_agents.slot_hints`:
:func:`greedy_schedule` (EDF among the tasks that can still finish, the ``clairvoyant`` rule) and
:func:`parked_schedule` (EDF over a slot-relaxed optimum's tasks, each one's last service parked until
a chosen arrival needs its slot, so that slots stay full when tasks it does not choose arrive), from up to
four optimal task sets (ties broken differently, while a tenth of the time limit lasts). Parking starts the
search 5–15 completions above the greedy rule on id/train and ~65 above it at load x2. Every candidate schedule is played
through the simulator by :func:`replay`: the stored value is the best one the env achieves, never one a model
claims. Where the time limit stops the search before a proof, the result is an interval: ``completed``
(achieved) ≤ the K-slot optimum ≤ ``bound`` (the smaller of HiGHS's and CP-SAT's proven bounds, capped by ``upper_bound``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from core_env.extras import needs
from core_env.workload import Workload
from mara_agents.bounds import MILP_TIME_LIMIT, Ceiling, milp_chosen
from mara_agents.slot_hints import check, greedy_schedule, needed, parked_schedule
from mara_agents.slot_milp import slot_milp

__all__ = ["INTERVAL", "OPTIMAL", "SlotCeiling", "greedy_schedule", "parked_schedule", "replay", "slot_ceiling"]

#: Seconds CP-SAT may search one episode by default.
SLOT_TIME_LIMIT = 20.0
#: Share of the time limit the parking rule's slot-relaxed optima may take (at least one is solved).
PARKING_SHARE = 0.1
#: Share of the time then left that the MILP of :mod:`mara_agents.slot_milp` may take (CP-SAT gets the rest).
MILP_SHARE = 0.9
#: Steps a neighbourhood frees (in turn, one size per round of windows sliding by half their size).
WINDOWS = (60, 90, 40)
#: Seconds CP-SAT may spend on one neighbourhood (most are solved to optimality well within it).
WINDOW_SECONDS = 2.0
#: ``SlotCeiling.status`` when optimality is proven (``completed`` equals the bound).
OPTIMAL = "optimal"
#: ``SlotCeiling.status`` when the time limit stopped the search first: an interval, not an optimum.
INTERVAL = "interval"


@dataclasses.dataclass(frozen=True)
class SlotCeiling(Ceiling):
    """The K-slot optimum of one workload, or an interval around it: :class:`~mara_agents.bounds.Ceiling`'s
    fields (``completed``: the replayed value of the best schedule; ``bound``: a proven upper bound;
    ``status``: :data:`OPTIMAL` or :data:`INTERVAL`), ``schedule``, (S, 2) int64 rows (step, task): the
    services of the best schedule, at most N per step, none after a task's completion, and ``greedy`` and
    ``parked``, the replayed values of :func:`greedy_schedule` and :func:`parked_schedule` (two of the
    search's starts)."""

    schedule: np.ndarray
    greedy: int
    parked: int
    milp_seconds: float = 0.0


def _served(schedule: np.ndarray) -> dict[int, set[int]]:
    served: dict[int, set[int]] = {}
    for step, task in np.asarray(schedule, np.int64).reshape(-1, 2):
        served.setdefault(int(task), set()).add(int(step))
    return served


def _useful(workload: Workload, schedule: np.ndarray) -> np.ndarray:
    """``schedule`` without the services of tasks it does not complete (they change no completion: an
    unfinished task holds its slot to its deadline either way) and none after a task's ``n*``-th."""
    need, rows = needed(workload), np.asarray(schedule, np.int64).reshape(-1, 2)
    rows = rows[np.lexsort((rows[:, 0], rows[:, 1]))]
    keep = np.zeros(len(rows), bool)
    for task in np.unique(rows[:, 1]):
        at = np.flatnonzero(rows[:, 1] == task)
        if at.size >= need[task]:
            keep[at[: need[task]]] = True
    kept = rows[keep]
    return kept[np.lexsort((kept[:, 1], kept[:, 0]))]


class _Model:
    """The CP-SAT model of the module docstring."""

    def __init__(self, workload: Workload, n_nodes: int, n_slots: int, upper_bound: float | None) -> None:
        with needs(__name__):
            from ortools.sat.python import cp_model

        arrival, deadline, need = workload.arrival.astype(np.int64), workload.deadline.astype(np.int64), needed(workload)
        self.model = model = cp_model.CpModel()
        m = len(workload)
        adm = [model.new_bool_var(f"adm{i}") for i in range(m)]
        self.can = [int(j) for j in np.flatnonzero(need <= deadline - arrival)]
        self.first = {j: int(arrival[j]) for j in self.can}
        self.z = {j: model.new_bool_var(f"z{j}") for j in self.can}
        self.x = {j: [model.new_bool_var(f"x{j}_{t}") for t in range(arrival[j], deadline[j])] for j in self.can}
        per_step: dict[int, list] = {}
        for j in self.can:
            model.add(sum(self.x[j]) == int(need[j]) * self.z[j])
            model.add_implication(self.z[j], adm[j])
            for offset, served in enumerate(self.x[j]):
                per_step.setdefault(int(arrival[j]) + offset, []).append(served)
        for served in per_step.values():
            if len(served) > n_nodes:
                model.add(sum(served) <= n_nodes)
        arrivals = np.unique(arrival)
        done: dict[tuple[int, int], object] = {}
        for j in self.can:
            a, d, k = int(arrival[j]), int(deadline[j]), int(need[j])
            for t in arrivals[(arrivals > a) & (arrivals < d) & (arrivals - a >= k)]:
                w = done[(j, int(t))] = model.new_bool_var(f"w{j}_{t}")
                before = sum(self.x[j][: int(t) - a])
                model.add(before >= k * w)
                model.add(before <= k - 1 + w)
        for i in range(m):
            a = int(arrival[i])
            holders = [j for j in range(i) if deadline[j] > a]
            if not holders:
                model.add(adm[i] == 1)
                continue
            held = sum(adm[j] for j in holders) - sum(done[(j, a)] for j in holders if (j, a) in done)
            model.add(held + adm[i] <= n_slots)
            model.add(held >= n_slots).only_enforce_if(~adm[i])
        objective = sum(self.z.values())
        if upper_bound is not None and self.z:
            model.add(objective <= int(np.floor(upper_bound + 1e-9)))
        model.maximize(objective)

    def hint(self, schedule: np.ndarray) -> None:
        served = _served(schedule)
        for j in self.can:
            steps = served.get(j, set())
            for offset, variable in enumerate(self.x[j]):
                self.model.add_hint(variable, (self.first[j] + offset) in steps)

    def neighbourhood(self, schedule: np.ndarray, low: int, high: int):
        """A copy of the model with every service outside steps [low, high) fixed to ``schedule``'s."""
        copy = self.model.clone()
        served = _served(schedule)
        for j in self.can:
            steps = served.get(j, set())
            for offset, variable in enumerate(self.x[j]):
                step = self.first[j] + offset
                if not low <= step < high:
                    value = int(step in steps)
                    domain = copy.proto.variables[variable.index].domain
                    domain[0] = domain[1] = value
        return copy

    def schedule(self, solver) -> np.ndarray:
        out = [(self.first[j] + offset, j) for j in self.can for offset, v in enumerate(self.x[j]) if solver.boolean_value(v)]
        return np.array(sorted(out), dtype=np.int64).reshape(-1, 2)


def slot_ceiling(workload: Workload, n_nodes: int, n_slots: int, time_limit: float = SLOT_TIME_LIMIT, *,
                 upper_bound: float | None = None, hint: np.ndarray | None = None, workers: int = 2, seed: int = 0,
                 parking: bool = True) -> SlotCeiling:
    """The K-slot offline optimum of ``workload`` on ``n_nodes`` unit-speed nodes and ``n_slots`` slots, or
    the interval [best replayed schedule, proven bound] where ``time_limit`` seconds do not prove it.

    ``upper_bound`` caps the objective (pass the slot-relaxed optimum's bound, or a smaller one already proven); ``hint`` is a schedule to
    start from (e.g. the one stored by an earlier, shorter search); ``workers`` CP-SAT search workers
    (with one worker, and a seed, the search is deterministic). ``parking=False`` (with a ``hint``) skips the
    parking rule's starts, whose slot-relaxed optima take a tenth of the time and more (an earlier search
    that started from them left its best in the hint); ``parked`` is then the hint's value.

    Raises:
        ValueError: a node or slot count that is not an int >= 1, or a time limit that is not > 0.
        ImportError: OR-Tools is not installed (``pip install 'core-learning[ceilings]'``).
        RuntimeError: the model's schedule achieves fewer completions in the simulator than the model
            counts (a modelling error; the tests guard against it).
    """
    check(workload, n_nodes, n_slots)
    if not (isinstance(time_limit, (int, float)) and np.isfinite(time_limit) and time_limit > 0):
        raise ValueError(f"time_limit must be a finite number of seconds > 0, got {time_limit!r}")
    m = len(workload)
    if m == 0:
        return SlotCeiling(0, 0.0, 0, 0.0, 0.0, OPTIMAL, np.zeros((0, 2), np.int64), 0, 0, 0.0)
    with needs(__name__):
        from ortools.sat.python import cp_model
    start = time.perf_counter()
    stop = start + float(time_limit)
    if not parking and hint is None:
        raise ValueError("parking=False needs a hint (the schedule an earlier search started from the parking rule)")
    parked_starts = [parked_schedule(workload, n_nodes, n_slots, chosen)
                     for chosen in _chosen_sets(workload, n_nodes, start + time_limit * PARKING_SHARE)] if parking else []
    given = [np.asarray(hint, np.int64).reshape(-1, 2)] if hint is not None else []
    useful = [_useful(workload, s) for s in (greedy_schedule(workload, n_nodes, n_slots), *parked_starts, *given)]
    values = [replay(workload, s, n_nodes, n_slots)["completed"] for s in useful]
    greedy, parked = values[0], max(values[1:1 + len(parked_starts)] if parking else values[-1:])
    best_value, best = max(zip(values, useful), key=lambda item: item[0])  # the first of equals: greedy before parking before the hint
    cap = int(np.floor(upper_bound + 1e-9)) if upper_bound is not None else int(np.sum(needed(workload) <= workload.window))
    # 1. the whole problem as a MILP (HiGHS), most of the time left: on id/train it proves the optimum
    exact = slot_milp(workload, n_nodes, n_slots, max((stop - time.perf_counter()) * MILP_SHARE, 1.0), upper_bound,
                      start=best)
    if exact.schedule is not None:
        schedule = _useful(workload, exact.schedule)
        achieved = _replayed(workload, schedule, n_nodes, n_slots)
        if achieved > best_value:
            best_value, best = achieved, schedule
    bound = min(float(cap), exact.bound)
    if best_value >= np.floor(bound + 1e-9):
        return SlotCeiling(int(best_value), float(bound), m, (bound - best_value) / max(bound, 1.0), time.perf_counter() - start,
                           OPTIMAL, best, greedy, parked, exact.seconds)
    model = _Model(workload, n_nodes, n_slots, upper_bound)

    def solve(neighbourhood: tuple[int, int] | None, seconds: float) -> tuple[int, Any]:
        nonlocal best, best_value
        model.model.clear_hints()
        model.hint(best)
        problem = model.model if neighbourhood is None else model.neighbourhood(best, *neighbourhood)
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = float(seconds)
        solver.parameters.num_workers = int(workers)
        solver.parameters.random_seed = int(seed)
        status = solver.solve(problem)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            schedule = model.schedule(solver)
            claimed = int(round(solver.objective_value))
            achieved = replay(workload, schedule, n_nodes, n_slots)["completed"]
            if achieved < claimed:
                raise RuntimeError(f"CP-SAT claims {claimed} completions but its schedule achieves {achieved} in the env: a modelling error")
            if achieved > best_value:
                best_value, best = achieved, schedule
        return status, solver

    # 2. CP-SAT neighbourhoods (every service outside a window of steps fixed to the best schedule's), each solved
    #    to optimality in a few seconds, sliding over the episode with window sizes in turn, until the cap
    #    is reached, the time is spent, or a round of every size improves nothing
    horizon, stale, rounds = int(workload.deadline.max()) + 1, 0, 0
    while best_value < cap and stale < len(WINDOWS) and time.perf_counter() < stop:
        size, before = WINDOWS[rounds % len(WINDOWS)], best_value
        for low in range(-((rounds * size // 3) % (size // 2)), horizon, size // 2):
            left = stop - time.perf_counter()
            if best_value >= cap or left <= 0:
                break
            solve((low, low + size), min(WINDOW_SECONDS, left))
        stale, rounds = (stale + 1 if best_value == before else 0), rounds + 1
    # 3. CP-SAT's whole model from the best schedule for the time left: its proven bound (or optimality)
    left = stop - time.perf_counter()
    if best_value < cap and left > 0:
        status, solver = solve(None, left)
        if status == cp_model.OPTIMAL:
            bound = float(best_value)
        elif status == cp_model.FEASIBLE:
            bound = min(bound, float(solver.best_objective_bound))
    bound = max(bound, float(best_value))
    proven = best_value >= np.floor(bound + 1e-9)
    return SlotCeiling(int(best_value), float(bound), m, (bound - best_value) / max(bound, 1.0), time.perf_counter() - start,
                       OPTIMAL if proven else INTERVAL, best, greedy, parked, exact.seconds)


def _chosen_sets(workload: Workload, n_nodes: int, until: float) -> list[np.ndarray]:
    """Task sets of slot-relaxed optima for the parking rule, until the clock reads ``until`` (at least
    one): the solver's own, then ties broken towards later arrivals, shorter needs and shorter windows
    (which of the optimal sets parks best varies by episode: on id/train root 0 episode 0 the rule
    completes 175, 176, 175 and 179 from these four)."""
    need = needed(workload).astype(float)
    preferences = (None, workload.arrival.astype(float), -need, -(workload.deadline - workload.arrival).astype(float))
    sets = []
    for prefer in preferences:
        left = until - time.perf_counter()
        if sets and left <= 0:
            break
        try:
            chosen = milp_chosen(workload, n_nodes, max(min(MILP_TIME_LIMIT, left), 1.0), prefer)
        except RuntimeError:  # no solution within the time left: fewer starts
            if not sets:
                raise
            continue
        if not sets or len(chosen) >= len(sets[0]):  # a tie-break stopped early may return a worse set: left out
            sets.append(chosen)
    return sets


def _replayed(workload: Workload, schedule: np.ndarray, n_nodes: int, n_slots: int) -> int:
    """The completions the simulator replays ``schedule`` to, -1 when it refuses it (a rounded solution can serve
    a task whose slot the replay did not give it)."""
    try:
        return replay(workload, schedule, n_nodes, n_slots)["completed"]
    except ValueError:
        return -1


def replay(workload: Workload, schedule: np.ndarray, n_nodes: int, n_slots: int) -> dict[str, int]:
    """Play ``schedule`` ((step, task) rows) through the simulator at unit speeds; returns its episode
    statistics (``completed``, ``rejected``, ``arrived``, ...).

    Raises:
        ValueError: the schedule serves a task that does not hold a slot at that step, or more than
            ``n_nodes`` tasks in one step.
    """
    from core_env.config import EnvConfig
    from core_env.sim import Simulator

    check(workload, n_nodes, n_slots)
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
