"""Workloads: the only source of randomness in the environment.

A :class:`Workload` is one episode's task list: arrival step, deadline, target loss, batches per
node-step and hidden curve of every task, plus each task's hidden nominal demand. This module holds the
type and the seeded draw (:func:`draw_workload`). Which workload an episode gets is decided in one place,
:mod:`core_env.generators`: a seeded draw, the constructed stress scenario (:class:`core_env.generators.Stress`),
one you built, or an episode of an evaluation suite (:mod:`core_env.suites`: the committed ones and suites of
your own, their files and checksums). The stored offline optima of the committed suites are read by
:mod:`core_env.ceilings`.

Timing convention: a task with arrival step ``a`` is visible (in a slot, servable) from the start of
step ``a``; with deadline ``d`` it may be served in steps ``a, ..., d - 1`` and fails at the end of step
``d - 1`` if its reported loss has not reached the target. Its window is ``d - a`` node-steps, and it is
independently feasible iff its nominal demand is at most its window.

Arrivals (v1): in each step of the arrival window each node's users submit a task with probability
``intensity`` (:func:`draw_arrivals`), so the load means the same pressure at any N. Each task is then
drawn by the v1 recipe (:mod:`core_env.recipe`): target, compute rate and deadline from family-level
knowledge only; the hidden demand emerges from curve × target × rate and is sometimes infinite.

The suite, ceiling and stress names that used to live here (``load_suite``, ``suite_ceilings``,
``stress_workload``, ...) are still importable from this module (:data:`MOVED`); new code imports them
from their modules.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import TYPE_CHECKING, Any

import numpy as np

from core_env.curves import CurveBank
from core_env.recipe import DEFAULT_RECIPE, FamilyReference, TaskRecipe, draw_tasks

if TYPE_CHECKING:  # the names re-exported by __getattr__ (MOVED), visible to type checkers and the API reference
    from core_env.ceilings import (CEILINGS_PATH, SLOT_CEILINGS_PATH, SLOT_MANIFEST_NAME, SLOT_SCHEDULES_PATH, read_ceilings, read_slot_ceilings,
                                   suite_ceiling_rates, suite_ceilings, suite_slot_ceiling_rates, suite_slot_ceilings)
    from core_env.generators import stress_workload
    from core_env.suites import (SUITE_DIR, SUITE_EPISODES, SUITE_MANIFEST, SUITE_NODES, SUITE_ROOTS, SUITE_SEED, SUITE_TASK_SETS, generate_suite,
                                 load_suite, load_suite_file, suite_cells, suite_file_meta, suite_meta, suite_path, suite_rng, suite_sha256,
                                 write_suite)

#: Largest batches per node-step a workload may hold: times the largest node speed (1e3) and any episode
#: length, progress stays a finite float64 (the simulator continues past 2^62 batches on the plateau).
MAX_BATCHES_PER_STEP = 1e18


@dataclasses.dataclass(frozen=True, eq=False)
class Workload:
    """One episode's tasks, sorted by arrival step (all arrays have shape (M,)).

    Attributes:
        bank: the curves the tasks train on.
        arrival: int64 arrival steps, non-decreasing, in [0, arrival_steps).
        deadline: int64 deadline steps, > arrival.
        target: float64 target losses (> 0).
        batches_per_step: float64 batches one node-step of speed 1 trains (> 0).
        curve: int64 indices into ``bank``.
        demand: float64 hidden nominal demand in node-steps (inf if the target is never reached).
        arrival_steps: T_arrive the workload was drawn for.
    """

    bank: CurveBank
    arrival: np.ndarray
    deadline: np.ndarray
    target: np.ndarray
    batches_per_step: np.ndarray
    curve: np.ndarray
    demand: np.ndarray
    arrival_steps: int

    def __post_init__(self) -> None:
        steps = self.arrival_steps
        if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ValueError(f"workload arrival_steps must be an int >= 1, got {steps!r}")
        object.__setattr__(self, "arrival_steps", int(steps))
        n = np.asarray(self.arrival).shape
        casts = {"arrival": np.int64, "deadline": np.int64, "curve": np.int64, "target": np.float64,
                 "batches_per_step": np.float64, "demand": np.float64}
        for name, dtype in casts.items():
            value = np.array(getattr(self, name), dtype=dtype)
            if value.ndim != 1 or value.shape != n:
                raise ValueError(f"workload field {name!r} must have shape {n}, got {value.shape}")
            value.setflags(write=False)
            object.__setattr__(self, name, value)
        if n[0] == 0:
            return
        if np.any(np.diff(self.arrival) < 0):
            raise ValueError("workload arrivals must be sorted by arrival step")
        if self.arrival[0] < 0 or self.arrival[-1] >= self.arrival_steps:
            raise ValueError(f"workload arrivals must lie in [0, {self.arrival_steps})")
        if np.any(self.deadline <= self.arrival):
            raise ValueError("every deadline must be later than its task's arrival")
        if not (np.all(np.isfinite(self.target)) and np.all(self.target > 0)):
            raise ValueError("targets must be finite and > 0")
        if not (np.all(np.isfinite(self.batches_per_step)) and np.all(self.batches_per_step > 0)
                and np.all(self.batches_per_step <= MAX_BATCHES_PER_STEP)):
            raise ValueError(f"batches_per_step must be finite, > 0 and <= {MAX_BATCHES_PER_STEP:g}")
        if np.any(self.curve < 0) or np.any(self.curve >= len(self.bank)):
            raise ValueError(f"curve indices must lie in [0, {len(self.bank)})")

    def __len__(self) -> int:
        return int(self.arrival.size)

    @property
    def window(self) -> np.ndarray:
        """Node-steps each task can receive before its deadline, (M,)."""
        return self.deadline - self.arrival

    @property
    def independently_feasible(self) -> np.ndarray:
        """(M,) bool: the task can finish before its deadline if served every step from arrival."""
        return self.demand <= self.window

    def feasibility_bound(self) -> float:
        """Independent-feasibility relaxation of the completion rate: the share of tasks that fit their window alone (ignores contention; the ceiling is the MILP, :mod:`mara_agents.bounds`)."""
        return float(self.independently_feasible.mean()) if len(self) else 0.0


@functools.lru_cache(maxsize=8)
def _reference_of(bank: CurveBank, recipe: TaskRecipe) -> FamilyReference:
    return FamilyReference(bank, recipe)


def draw_arrivals(intensity: float, n_nodes: int, arrival_steps: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted arrival steps: in each step, each of the ``n_nodes`` nodes' users submits a task with
    probability ``intensity`` (so Binomial(N, intensity) tasks per step; the same pressure at any N)."""
    counts = np.count_nonzero(rng.random((arrival_steps, n_nodes)) < intensity, axis=1)
    return np.repeat(np.arange(arrival_steps, dtype=np.int64), counts)


def draw_workload(bank: CurveBank, intensity: float, arrival_steps: int, rng: np.random.Generator,
                  recipe: TaskRecipe = DEFAULT_RECIPE, n_nodes: int = 4, reference: CurveBank | None = None,
                  horizon: int | None = None) -> Workload:
    """A workload of ``arrival_steps`` steps: :func:`draw_arrivals` at ``intensity`` per node, each task
    drawn from ``bank`` by ``recipe`` (:mod:`core_env.recipe`) against the families of ``reference``
    (the runs the submitters know; default: ``bank`` itself). With ``horizon`` (an episode's
    ``max_cycles``), arrivals are drawn only for the steps an episode can play, ``min(arrival_steps,
    horizon)``: a config whose arrival window outlasts its episodes costs what it can play, not more
    (the draw is unchanged whenever ``arrival_steps <= horizon``, as in every default config)."""
    steps = arrival_steps if horizon is None else min(arrival_steps, int(horizon))
    arrival = draw_arrivals(intensity, n_nodes, steps, rng)
    tasks = draw_tasks(bank, _reference_of(reference if reference is not None else bank, recipe), arrival.size, rng)
    return Workload(bank, arrival, arrival + tasks["window"], tasks["target"], tasks["batches_per_step"],
                    tasks["curve"], tasks["demand"], arrival_steps)


#: Where each name that moved out of this module lives now: ``from core_env.workload import NAME`` keeps working
#: for them (imported on first use, so that those modules may import this one).
MOVED = {
    **dict.fromkeys(("SUITE_DIR", "SUITE_EPISODES", "SUITE_MANIFEST", "SUITE_NODES", "SUITE_ROOTS", "SUITE_SEED", "SUITE_TASK_SETS", "generate_suite",
                     "load_suite", "load_suite_file", "suite_cells", "suite_file_meta", "suite_meta", "suite_path", "suite_rng", "suite_sha256",
                     "write_suite"), "core_env.suites"),
    **dict.fromkeys(("CEILINGS_PATH", "SLOT_CEILINGS_PATH", "SLOT_MANIFEST_NAME", "SLOT_SCHEDULES_PATH", "read_ceilings", "read_slot_ceilings",
                     "suite_ceiling_rates", "suite_ceilings", "suite_slot_ceiling_rates", "suite_slot_ceilings"), "core_env.ceilings"),
    "stress_workload": "core_env.generators",
}


def __getattr__(name: str) -> Any:
    if name in MOVED:
        return getattr(importlib.import_module(MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
