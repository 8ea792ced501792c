"""Better K-slot schedules by re-solving one time window at a time (a large-neighbourhood search).

At heavy load HiGHS's branch and cut on the whole exact program (:mod:`mara_agents.slot_milp`) rarely improves
the parking start in minutes: the program is large and its LP bound sits near the slot-relaxed optimum. A
window is small: every service outside the steps [t0, t0 + W) is fixed to the incumbent schedule's, and HiGHS
re-solves the services inside it (completions, admissions and slot holdings follow from the program's rows)
from the incumbent, for a few seconds. A schedule is kept only when the simulator replays it to more
completions (:func:`mara_agents.slot_ceiling.replay`; a candidate the simulator refuses is dropped), so a value
is never claimed that the env does not reach. Windows slide by W / 2 over the episode; a pass that improves nothing doubles W (larger
neighbourhoods), until the time limit. The search improves the lower end of an interval only; the bound
comes from :mod:`mara_agents.slot_milp`.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from core_env.workload import Workload
from mara_agents.slot_ceiling import _replayed, replay
from mara_agents.slot_milp import _highs, _Program, _solver

__all__ = ["SlotWindows", "slot_windows"]


@dataclasses.dataclass(frozen=True)
class SlotWindows:
    """The search's answer: ``schedule`` (the best replayed (step, task) rows, the start if nothing beat it),
    ``completed`` (its replayed completions), ``windows`` (windows solved), ``improved`` (windows that improved
    the incumbent), ``seconds``."""

    schedule: np.ndarray
    completed: int
    windows: int
    improved: int
    seconds: float


def _window_columns(program: _Program, t0: int, t1: int) -> np.ndarray:
    """The service columns x_{j,τ} with τ outside [t0, t1)."""
    arrival = program.workload.arrival.astype(np.int64)
    outside = []
    for j, cols in program.x.items():
        steps = arrival[j] + np.arange(cols.size)
        outside.append(cols[(steps < t0) | (steps >= t1)])
    return np.concatenate(outside) if outside else np.zeros(0, np.int64)


def slot_windows(workload: Workload, n_nodes: int, n_slots: int, start: np.ndarray, time_limit: float, window: int = 40,
                 window_seconds: float = 20.0, seed: int = 0) -> SlotWindows:
    """Improve the playable schedule ``start`` for at most about ``time_limit`` seconds (module docstring).

    Raises:
        ValueError: node or slot counts or a time limit as :func:`mara_agents.slot_milp.slot_milp` refuses them, a
            window that is not an int >= 2, ``window_seconds`` not a finite number > 0, or a ``start`` the
            simulator cannot play (:func:`replay`'s message).
        ImportError: highspy is not installed (``pip install 'core-learning[ceilings]'``).
    """
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 2:
        raise ValueError(f"window must be an int >= 2 steps, got {window!r}")
    if isinstance(window_seconds, bool) or not isinstance(window_seconds, (int, float)) or not 0 < window_seconds < np.inf:
        raise ValueError(f"window_seconds must be a finite number of seconds > 0, got {window_seconds!r}")
    began = time.perf_counter()
    best = np.asarray(start, np.int64).reshape(-1, 2)
    completed = replay(workload, best, n_nodes, n_slots)["completed"]
    highspy, program, _ = _solver(workload, n_nodes, n_slots, time_limit, integer=True)
    if program.can.size == 0:
        return SlotWindows(best, completed, 0, 0, time.perf_counter() - began)
    horizon, width, t0 = int(workload.deadline.max()), int(window), 0
    windows = improved = 0
    improved_this_pass = False
    while (left := time_limit - (time.perf_counter() - began)) > 0:
        solver = _highs(program, highspy, min(window_seconds, left), True, (("random_seed", int(seed)),))
        incumbent = program.values(best)
        fixed = _window_columns(program, t0, t0 + width)
        solver.changeColsBounds(fixed.size, fixed.astype(np.int32), incumbent[fixed], incumbent[fixed])
        known = highspy.HighsSolution()
        known.col_value, known.value_valid = list(incumbent), True
        solver.setSolution(known)
        solver.run()
        windows += 1
        if solver.getInfo().primal_solution_status != 0:
            candidate = program.schedule(np.asarray(solver.getSolution().col_value))
            value = _replayed(workload, candidate, n_nodes, n_slots)
            if value > completed:
                best, completed, improved, improved_this_pass = candidate, value, improved + 1, True
        t0 += max(1, width // 2)
        if t0 >= horizon:  # a pass ends: larger windows when it improved nothing
            if not improved_this_pass:
                if width >= horizon:
                    break
                width = min(2 * width, horizon)
            t0, improved_this_pass = 0, False
    return SlotWindows(best, completed, windows, improved, time.perf_counter() - began)
