"""Better K-slot schedules by searching over the chosen task set (a local search around the parking rule).

:func:`mara_agents.slot_hints.parked_schedule` turns a chosen task set into a playable schedule: EDF over the
chosen tasks, each one's last service parked until a chosen arrival needs its slot, unchosen tasks never served.
Started from a slot-relaxed optimum's tasks it loses completions wherever that set does not fit the slots; at
load x2 the window search (:mod:`mara_agents.slot_windows`) then climbs 10–15 completions above it and stops
well under the LP bound. This module searches the set itself: a move drops a chosen task the rule failed to
complete, adds an unchosen one that can finish within its window, does both, or *rushes* a chosen task (or stops
rushing it): rushed tasks are served before the other chosen tasks more than one service short, so they reach
their parked last service sooner. The parking rule frees a slot for a chosen arrival only from a parked task, and
on the optimal schedules of the proven x1.5 episodes the optimal set loses ~10 completions under the plain rule,
nearly all chosen arrivals that found every slot held by chosen tasks still several services short (the optimum
had finished short tasks just before they came). A move is kept when the rule completes at least as many tasks
(equal moves walk the plateau). The rule is compiled (numba) and, with nothing rushed, equals
:func:`parked_schedule` step for step (a test checks it), so one move costs about a hundred microseconds.

The best set's schedule is replayed by the simulator (:func:`mara_agents.slot_ceiling.replay`) before its
value counts, like every schedule the ceilings keep; the search improves the lower end of an interval only.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from core_env.jit import compiled
from core_env.workload import Workload
from mara_agents.slot_ceiling import _replayed
from mara_agents.slot_hints import check, needed

__all__ = ["SlotSets", "parked_play", "slot_sets"]


@dataclasses.dataclass(frozen=True)
class SlotSets:
    """The search's answer: ``schedule`` (the best replayed (step, task) rows, the start if nothing beat it),
    ``completed`` (its replayed completions), ``moves`` (sets tried), ``improved`` (completions gained over the
    start), ``seconds``."""

    schedule: np.ndarray
    completed: int
    moves: int
    improved: int
    seconds: float


@compiled
def _sorted_by(tasks, count, deadline):
    """Insertion sort of ``tasks[:count]`` by (``deadline[task]``, task), in place (at most K entries)."""
    for a in range(1, count):
        j = tasks[a]
        b = a - 1
        while b >= 0 and (deadline[tasks[b]] > deadline[j] or (deadline[tasks[b]] == deadline[j] and tasks[b] > j)):
            tasks[b + 1] = tasks[b]
            b -= 1
        tasks[b + 1] = j


@compiled
def _parked(order, arrival, deadline, need, chosen, urgency, n_nodes, n_slots, out, remaining):
    """The parking rule on ``chosen`` (bool per task); writes (step, task) rows to ``out`` (when it has rows) and each
    task's services still missing at the end to ``remaining``, and returns (rows written, tasks completed).
    ``order``: tasks by arrival, ties in task order."""
    n = order.size
    remaining[:] = need
    slots = np.full(n_slots, -1, np.int64)
    parked = np.empty(n_slots, np.int64)
    busy = np.empty(n_slots, np.int64)
    serve = np.empty(n_nodes, np.int64)
    horizon = 0
    for j in range(n):
        horizon = max(horizon, deadline[j] + 1)
    rows = 0
    completed = 0
    nxt = 0
    for t in range(horizon):
        for s in range(n_slots):
            j = slots[s]
            if j >= 0 and (deadline[j] <= t or remaining[j] <= 0):
                slots[s] = -1
        while nxt < n and arrival[order[nxt]] < t:
            nxt += 1
        while nxt < n and arrival[order[nxt]] == t:
            for s in range(n_slots):
                if slots[s] < 0:
                    slots[s] = order[nxt]
                    break
            nxt += 1
        n_parked = 0
        n_busy = 0
        for s in range(n_slots):
            j = slots[s]
            if j >= 0 and chosen[j] and remaining[j] <= deadline[j] - t:
                if remaining[j] == 1:
                    parked[n_parked] = j
                    n_parked += 1
                else:
                    busy[n_busy] = j
                    n_busy += 1
        _sorted_by(parked, n_parked, deadline)
        _sorted_by(busy, n_busy, urgency)
        n_serve = 0
        for k in range(n_parked):
            j = parked[k]
            if n_serve < n_nodes and deadline[j] - t <= k // n_nodes + 1:
                serve[n_serve] = j
                n_serve += 1
        wanted = 0  # 1 + the position, among the next step's arrivals, of the last chosen one
        position = 0
        m = nxt
        while m < n and arrival[order[m]] == t + 1:
            position += 1
            if chosen[order[m]]:
                wanted = position
            m += 1
        freeing = 0
        for s in range(n_slots):
            j = slots[s]
            if j < 0 or deadline[j] <= t + 1:
                freeing += 1
        for k in range(n_serve):
            if deadline[serve[k]] > t + 1:
                freeing += 1
        for k in range(n_parked):
            if wanted <= freeing or n_serve >= n_nodes:
                break
            j = parked[k]
            already = False
            for q in range(n_serve):
                if serve[q] == j:
                    already = True
            if not already:
                serve[n_serve] = j
                n_serve += 1
                freeing += 1
        for k in range(n_busy):
            if n_serve >= n_nodes:
                break
            serve[n_serve] = busy[k]
            n_serve += 1
        for k in range(n_serve):
            j = serve[k]
            if out.shape[0] > 0:
                out[rows, 0] = t
                out[rows, 1] = j
            rows += 1
            remaining[j] -= 1
            if remaining[j] == 0:
                completed += 1
    return rows, completed


def _inputs(workload: Workload):
    order = np.argsort(workload.arrival, kind="stable").astype(np.int64)
    return order, workload.arrival.astype(np.int64), workload.deadline.astype(np.int64), needed(workload)


#: Subtracted from a rushed task's deadline in the rule's order of tasks more than one service short: rushed tasks first.
RUSH = 2**40


def parked_play(workload: Workload, n_nodes: int, n_slots: int, chosen: np.ndarray,
                rushed: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """The compiled parking rule on a chosen set (bool per task): its (step, task) rows and the tasks it completes.
    ``rushed`` (bool per task, default none) are served before the other chosen tasks more than one service short
    (EDF among each), so they reach their parked last service sooner."""
    check(workload, n_nodes, n_slots)
    chosen = np.asarray(chosen, dtype=bool)
    rushed = np.zeros(len(workload), bool) if rushed is None else np.asarray(rushed, dtype=bool)
    for name, value in (("chosen", chosen), ("rushed", rushed)):
        if value.shape != (len(workload),):
            raise ValueError(f"{name} must be one bool per task ({len(workload)}), got shape {value.shape}")
    order, arrival, deadline, need = _inputs(workload)
    args = (order, arrival, deadline, need, chosen, deadline - RUSH * rushed, int(n_nodes), int(n_slots))
    remaining = np.empty(len(workload), np.int64)
    rows, _ = _parked(*args, np.zeros((0, 2), np.int64), remaining)
    out = np.zeros((rows, 2), np.int64)
    _, completed = _parked(*args, out, remaining)
    return out, int(completed)


def slot_sets(workload: Workload, n_nodes: int, n_slots: int, start: np.ndarray, time_limit: float,
              seed: int = 0, rush: bool = True) -> SlotSets:
    """Improve the playable schedule ``start`` for about ``time_limit`` seconds (module docstring); the search
    starts from the set of tasks ``start`` completes, none rushed (``rush=False``: the rush move is not tried).

    Raises:
        ValueError: node or slot counts :func:`check` refuses, ``time_limit`` not a finite number > 0, or a
            ``start`` the simulator cannot play.
    """
    check(workload, n_nodes, n_slots)
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not 0 < time_limit < np.inf:
        raise ValueError(f"time_limit must be a finite number of seconds > 0, got {time_limit!r}")
    began = time.perf_counter()
    best = np.asarray(start, np.int64).reshape(-1, 2)
    completed = _replayed(workload, best, n_nodes, n_slots)
    if completed < 0:
        raise ValueError("start is not a schedule the simulator can play (replay it for the reason)")
    order, arrival, deadline, need = _inputs(workload)
    can = np.flatnonzero(need <= deadline - arrival)
    if can.size == 0:
        return SlotSets(best, completed, 0, 0, time.perf_counter() - began)
    served = np.bincount(best[:, 1], minlength=len(workload)) if len(best) else np.zeros(len(workload), np.int64)
    chosen, rushed = served == need, np.zeros(len(workload), bool)
    no_rows, remaining = np.zeros((0, 2), np.int64), np.empty(len(workload), np.int64)
    nodes, slots = int(n_nodes), int(n_slots)

    def play(chosen, rushed):
        return _parked(order, arrival, deadline, need, chosen, deadline - RUSH * rushed, nodes, slots, no_rows, remaining)[1]

    value = play(chosen, rushed)
    failed = np.flatnonzero(chosen & (remaining > 0))
    best_sets, best_value = (chosen.copy(), rushed.copy()), value
    rng = np.random.default_rng(seed)
    moves, kinds = 0, 4 if rush else 3
    while moves == 0 or time.perf_counter() - began < time_limit:  # one round of moves at least (the rule compiles first)
        for _ in range(200):
            moves += 1
            trial, trial_rushed = chosen.copy(), rushed
            kind = rng.integers(kinds)
            if kind == 3:  # rush a chosen task, or stop rushing it
                picked = np.flatnonzero(trial)
                trial_rushed = rushed.copy()
                trial_rushed[picked[rng.integers(picked.size)]] ^= True
            if kind in (0, 2):  # drop: a chosen task the rule failed to complete if there is one, else any chosen task
                pool = failed if failed.size and kind == 0 else np.flatnonzero(trial)
                if pool.size:
                    trial[pool[rng.integers(pool.size)]] = False
            if kind in (1, 2):
                trial[can[rng.integers(can.size)]] = True
            got = play(trial, trial_rushed)
            if got >= value:
                chosen, rushed, value = trial, trial_rushed, got
                failed = np.flatnonzero(chosen & (remaining > 0))
                if value > best_value:
                    best_sets, best_value = (chosen.copy(), rushed.copy()), value
    start_value = completed
    if best_value > completed:
        candidate, _ = parked_play(workload, n_nodes, n_slots, *best_sets)
        got = _replayed(workload, candidate, n_nodes, n_slots)
        if got > completed:
            best, completed = candidate, got
    return SlotSets(best, completed, moves, completed - start_value, time.perf_counter() - began)
