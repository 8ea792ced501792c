"""Admission: which tasks an allocator commits to. Separate from ordering, so any order can use any rule.

* :func:`predicted_feasible` (ElasticFlow's drop rule): a task stays admitted while its predicted demand
  fits its budget on one node (tasks with fewer than ``min_reports`` reports are given the benefit of the
  doubt).
* :func:`admit_schedulable` (LARA's allocation): go through the candidates in a given order (EDF) and
  admit each one that keeps the admitted set schedulable on N nodes with at most one node per task per
  step (:func:`schedulable`).
"""

from __future__ import annotations

import numpy as np

from mara_agents.allocators.base import Estimates


def predicted_feasible(estimates: Estimates, min_reports: int = 1, admit_pct: int | None = None) -> np.ndarray:
    """(B, K) bool active tasks that are predicted to fit their budget or have < ``min_reports`` reports.

    Predicted to fit: the median demand fits the budget (default), or, with ``admit_pct``, the predicted
    probability that the demand fits is at least ``admit_pct`` / 100 (a stricter rule above 50 trades
    false admits for false rejects)."""
    fits = estimates.feasible if admit_pct is None else estimates.p_within_budget >= admit_pct / 100.0
    return estimates.active & ((estimates.steps < min_reports) | fits)


def schedulable(demand: np.ndarray, budget: np.ndarray, admitted: np.ndarray, n_nodes: int | np.ndarray) -> np.ndarray:
    """(B,) whether the admitted tasks can all finish: demands (node-steps, ceiled) by their budgets (steps)
    on N nodes, one node per task per step, all tasks available now.

    The exact test (a flow/cut argument over nested windows [0, D_k)): every task fits its own window,
    R_k <= D_k, and for every horizon h the work that must be done before h, Σ_k max(0, R_k − max(0, D_k − h)),
    is at most N·h. The left side minus N·h is piecewise linear in h with breakpoints at D_k and D_k − R_k,
    so those horizons suffice. ``n_nodes``: an int, or (B,) nodes per environment.
    """
    demand = np.where(admitted, np.ceil(demand), 0.0)
    budget = np.where(admitted, budget, 0)
    fits = np.all(demand <= budget, axis=1)
    horizons = np.maximum(np.concatenate([budget, budget - np.minimum(demand, budget)], axis=1), 1)  # (B, 2K)
    with np.errstate(invalid="ignore"):
        must = np.maximum(demand[:, :, None] - np.maximum(budget[:, :, None] - horizons[:, None, :], 0), 0)  # (B, K, 2K)
    must = np.where(admitted[:, :, None], must, 0.0)
    capacity = np.asarray(n_nodes).reshape(-1, 1) * horizons
    return fits & np.all(must.sum(axis=1) <= capacity, axis=1)


def admit_schedulable(estimates: Estimates, candidates: np.ndarray, order: np.ndarray, capacity: int | np.ndarray | None = None) -> np.ndarray:
    """(B, K) bool: the candidates admitted one by one in ``order`` (lower first) while the set stays
    schedulable on ``capacity`` nodes (default N; or (B,) per environment) — a candidate that would break
    it is skipped, later ones are still tried."""
    capacity = estimates.n_nodes if capacity is None else capacity
    demand = np.where(estimates.active, estimates.demand, 0.0)
    return admit_in_order(demand, estimates.budget, candidates, np.lexsort((order, ~candidates), axis=1), capacity)


def admit_in_order(demand: np.ndarray, budget: np.ndarray, candidates: np.ndarray, ranking: np.ndarray,
                   capacity: int | np.ndarray) -> np.ndarray:
    """(B, K) bool: the ``candidates`` admitted one by one in the slot order ``ranking`` ((B, K), candidates
    first) while the set stays schedulable (:func:`schedulable`) on ``capacity`` nodes (an int or (B,))."""
    B, K = candidates.shape
    admitted = np.zeros((B, K), bool)
    rows = np.arange(B)
    for r in range(K):
        slot = ranking[:, r]
        live = candidates[rows, slot]
        if not live.any():
            break
        trial = admitted.copy()
        trial[rows[live], slot[live]] = True
        ok = live & schedulable(demand, budget, trial, capacity)
        admitted[rows[ok], slot[ok]] = True
    return admitted
