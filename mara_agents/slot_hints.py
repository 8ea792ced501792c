"""Feasible K-slot schedules built by rules, the starting points of the K-slot search (:mod:`mara_agents.slot_ceiling`).

Both play the env's slot rules (an arrival takes the lowest free slot, arrivals at one step in task order;
a task leaves its slot when it completes or its deadline passes) at unit speeds and return (S, 2) int64
rows (step, task), at most N per step; either is replayed by :func:`mara_agents.slot_ceiling.replay`
before its value counts.

* :func:`greedy_schedule`: the ``clairvoyant`` row's rule, EDF among the admitted tasks that can still
  finish. It completes a task as soon as it can, which frees its slot at once, and a free slot takes the
  next arrival whether or not that task can ever finish: a hopeless task then holds the slot to its
  deadline while good arrivals behind it are turned away.
* :func:`parked_schedule`: EDF over a chosen task set (the slot-relaxed optimum's), but a chosen task one
  service short of its target is *parked*: its last service waits until a chosen arrival needs the slot
  at the next step, or until its deadline leaves no later step for it. Slots then stay full when only
  unchosen tasks arrive (they are rejected), and free when chosen ones do. On id/train root 0 episodes
  0 and 1 it completes 175 and 162 tasks where the greedy rule completes 166 and 147 (the slot-relaxed
  optimum: 182 and 166).
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from core_env.workload import Workload


def check(workload: Workload, n_nodes: int, n_slots: int) -> None:
    """Raise ValueError/TypeError for node or slot counts that are not ints >= 1, or a non-Workload."""
    for name, value in (("n_nodes", n_nodes), ("n_slots", n_slots)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a core_env.workload.Workload, got {type(workload).__name__}")


def needed(workload: Workload) -> np.ndarray:
    """Node-steps each task needs (int64; 2**62 where it never finishes)."""
    demand = workload.demand
    return np.where(np.isfinite(demand), np.ceil(demand), 2.0**62).astype(np.int64)


def _arrivals(workload: Workload) -> dict[int, list[int]]:
    """Tasks arriving at each step, in task order (the order the env admits them in)."""
    out: dict[int, list[int]] = {}
    for task in np.argsort(workload.arrival, kind="stable"):
        out.setdefault(int(workload.arrival[task]), []).append(int(task))
    return out


def _play(workload: Workload, n_slots: int, choose) -> np.ndarray:
    """Step through the slot rules; ``choose(t, held, remaining, arrivals)`` returns the tasks served at t."""
    deadline, remaining = workload.deadline.astype(np.int64), needed(workload)
    arrivals = _arrivals(workload)
    slots = [-1] * n_slots
    out: list[tuple[int, int]] = []
    for t in range(int(deadline.max()) + 1 if len(workload) else 0):
        slots = [j if j >= 0 and deadline[j] > t and remaining[j] > 0 else -1 for j in slots]
        for task in arrivals.get(t, ()):
            if -1 in slots:
                slots[slots.index(-1)] = task
        for j in choose(t, slots, remaining, arrivals):
            out.append((t, j))
            remaining[j] -= 1
    return np.array(out, dtype=np.int64).reshape(-1, 2)


def greedy_schedule(workload: Workload, n_nodes: int, n_slots: int) -> np.ndarray:
    """The ``clairvoyant`` rule under the env's slot rules: EDF (ties by slot) among the admitted tasks
    that can still finish (remaining need ≤ steps to deadline). A feasible K-slot schedule, the search's
    first start, so the K-slot ceiling never falls below the clairvoyant row."""
    check(workload, n_nodes, n_slots)
    deadline = workload.deadline.astype(np.int64)

    def choose(t, slots, remaining, arrivals):
        live = sorted((deadline[j], k, j) for k, j in enumerate(slots) if j >= 0 and remaining[j] <= deadline[j] - t)
        return [j for _, _, j in live[:n_nodes]]

    return _play(workload, n_slots, choose)


def parked_schedule(workload: Workload, n_nodes: int, n_slots: int, chosen: Collection[int]) -> np.ndarray:
    """EDF over the ``chosen`` tasks with their last service parked (module docstring). Each step serves,
    in turn: parked tasks whose deadline leaves no later step for them (the k-th by deadline, from 0, must
    go when its deadline is at most k // N + 1 steps away); parked tasks whose slots the chosen arrivals of
    the next step need (enough free slots that the last chosen arrival there, after the unchosen ones
    before it in task order, is admitted; earliest deadline first); then EDF over the chosen tasks more
    than one service short. Unchosen tasks are never served."""
    check(workload, n_nodes, n_slots)
    deadline = workload.deadline.astype(np.int64)
    chosen = {int(j) for j in chosen}

    def choose(t, slots, remaining, arrivals):
        live = [j for j in slots if j in chosen and remaining[j] <= deadline[j] - t]
        parked = sorted((j for j in live if remaining[j] == 1), key=lambda j: (deadline[j], j))
        serve = [j for k, j in enumerate(parked) if deadline[j] - t <= k // n_nodes + 1][:n_nodes]
        coming = arrivals.get(t + 1, ())
        wanted = max((p + 1 for p, task in enumerate(coming) if task in chosen), default=0)
        freeing = sum(1 for j in slots if j < 0 or deadline[j] <= t + 1) + sum(1 for j in serve if deadline[j] > t + 1)
        for j in parked:
            if wanted <= freeing or len(serve) >= n_nodes:
                break
            if j not in serve:
                serve.append(j)
                freeing += 1
        busy = sorted((j for j in live if remaining[j] > 1), key=lambda j: (deadline[j], j))
        return serve + busy[: n_nodes - len(serve)]

    return _play(workload, n_slots, choose)
