"""Allocators that decide on the whole predicted distribution of each task's remaining demand.

Both read :attr:`Estimates.cdf`, ``F(b) = P(demand ≤ b)`` for every ``b`` up to the task's budget (its
steps to deadline), from any predictor (PFN natively, FM from its samples, WLS / DKF from their Gaussian,
the oracle as a step).

* :class:`IndexAllocator` (``index``): the truncated Gittins index of a job of unknown size that must be
  done within ``u`` = its budget,

      G = max over 1 ≤ b ≤ u of  F(b) / E[min(D, b)],   E[min(D, b)] = Σ_{j<b} (1 − F(j)),

  the largest expected number of completions per node-step of service a task offers (serve it for ``b``
  more steps, then give up). With ``deadline_pct=P`` tasks are admitted in order of G while the admitted
  set stays schedulable with each task's P-th posterior percentile as its demand (the exact test of
  :func:`~mara_agents.allocators.admission.schedulable`) and the admitted tasks are served earliest
  deadline first; with ``deadline_pct=0`` the tasks of largest G are served (the plain index rule).
* :class:`CompletionPlanner` (``plan``): each step, ``samples`` joint draws of every task's demand from its
  posterior (inverse CDF; stratified uniforms fixed per slot for the episode: common random numbers). In
  each draw the plan admits tasks shortest sampled demand first while the admitted set stays schedulable,
  and serves the N admitted tasks due first (:func:`plan_votes`). The tasks served now by the most draws
  are served (ties by deadline).

Both: tasks with fewer than ``explore`` reports have no curve to read and are served first (least served,
then earliest deadline); nodes left over go to the rest by G, so a task that cannot finish (G = 0) is never
served while one that can waits.

Thresholds (``deadline_pct``, ``explore``, ``samples``) are chosen on the train workloads
(``python -m benchmarks.tuning --rows ...``; docs/results/tuning/), never on evaluation roots.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mara_agents.allocators.admission import admit_in_order, admit_schedulable
from mara_agents.allocators.base import Estimates, PredictiveAllocator
from mara_agents.heuristics.base import serve_in_order
from mara_agents.predictors.posterior import cdf_quantile, sample_demands, truncated_index
from mara_agents.protocols import Predictor

#: Tiers of :func:`serve_in_order`: exploring tasks, admitted tasks, the rest.
EXPLORING, ADMITTED, REST = range(3)


def _check_int(name: str, value: int, least: int, most: int | None = None) -> int:
    """``value`` as an int in [least, most], or a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least or (most is not None and value > most):
        raise ValueError(f"{name} must be an int " + (f"in [{least}, {most}]" if most is not None else f">= {least}") + f", got {value!r}")
    return int(value)


class _PosteriorAllocator(PredictiveAllocator):
    """Explore, admit on the posterior (:meth:`admit`), serve the admitted by deadline, the rest by index."""

    def __init__(self, predictor: Predictor, explore: int = 1) -> None:
        super().__init__(predictor)
        self.explore = _check_int("explore", explore, 0)

    def admit(self, estimates: Estimates, candidates: np.ndarray, index: np.ndarray, capacity: np.ndarray) -> np.ndarray:
        """(B, K) bool admitted among ``candidates`` on ``capacity`` (B,) nodes."""
        raise NotImplementedError

    def admitted_key(self, estimates: Estimates, index: np.ndarray) -> np.ndarray:
        """(B, K) the order of the admitted tasks (lower first): earliest deadline."""
        return estimates.budget.astype(np.float64)

    def decide(self, estimates: Estimates) -> np.ndarray:
        active, n_nodes = estimates.active, estimates.n_nodes
        exploring = active & (estimates.steps < self.explore)
        explored = active & ~exploring
        index = np.where(explored, truncated_index(estimates.cdf, estimates.budget), 0.0)
        spare = np.maximum(n_nodes - exploring.sum(axis=1), 0)
        admitted = self.admit(estimates, explored & (index > 0), index, spare)
        tier = np.where(exploring, EXPLORING, np.where(admitted, ADMITTED, REST))
        key = np.where(exploring, estimates.steps * 1e4 + estimates.budget, np.where(admitted, self.admitted_key(estimates, index), -index))
        return serve_in_order(key.astype(np.float64), active, n_nodes, tier=tier)


class IndexAllocator(_PosteriorAllocator):
    """Admission by the truncated Gittins index under a quantile schedulability test (module docstring).

    Args:
        predictor: any Predictor.
        deadline_pct: the posterior quantile (percent, 1–99) used as each task's demand in the
            schedulability test that admission keeps; 0 turns the test off: every task with G > 0 is
            served in order of G (the plain index rule, blind to deadlines beyond its budget).
        explore: reports a task gets before its posterior is read (served first until then).
    """

    def __init__(self, predictor: Predictor, deadline_pct: int = 50, explore: int = 1) -> None:
        super().__init__(predictor, explore)
        self.deadline_pct = _check_int("deadline_pct", deadline_pct, 0, 99)

    def admit(self, estimates: Estimates, candidates: np.ndarray, index: np.ndarray, capacity: np.ndarray) -> np.ndarray:
        if not self.deadline_pct:
            return candidates
        demand = cdf_quantile(estimates.cdf, estimates.budget, self.deadline_pct / 100.0)
        quantiled = dataclasses.replace(estimates, demand=np.where(estimates.active, demand, 0.0))
        return admit_schedulable(quantiled, candidates & np.isfinite(demand), -index, capacity=capacity)

    def admitted_key(self, estimates: Estimates, index: np.ndarray) -> np.ndarray:
        """Earliest deadline first, or the largest index first when the schedulability test is off."""
        return super().admitted_key(estimates, index) if self.deadline_pct else -index


def plan_votes(demand: np.ndarray, budget: np.ndarray, candidates: np.ndarray, n_nodes: np.ndarray) -> np.ndarray:
    """(B, K) share of the S draws whose plan serves each task now.

    For each draw (``demand`` (B, K, S) node-steps, inf when it cannot finish), the plan admits the
    candidates shortest sampled demand first (ties by deadline) while the admitted set stays schedulable on
    ``n_nodes`` (B,) nodes (:func:`~mara_agents.allocators.admission.admit_in_order`), and serves its ``n_nodes`` admitted tasks due first now
    (earliest deadline first, as clairvoyant serves known demands).
    """
    B, K, S = demand.shape
    flat = np.moveaxis(demand, 2, 1).reshape(B * S, K)  # row b * S + s
    budgets = np.repeat(budget, S, axis=0).astype(np.float64)
    nodes = np.repeat(np.asarray(n_nodes).reshape(B), S)
    live = np.repeat(candidates, S, axis=0) & np.isfinite(flat) & (flat <= budgets)
    ranking = np.lexsort((budgets, np.where(live, flat, np.inf), ~live), axis=1)
    admitted = admit_in_order(np.where(live, flat, 0.0), budgets, live, ranking, nodes)
    rows = np.arange(B * S)
    order = np.lexsort((np.where(admitted, budgets, np.inf), ~admitted), axis=1)
    served = np.zeros((B * S, K), bool)
    for r in range(min(K, int(nodes.max(initial=0)))):
        slot = order[:, r]
        take = admitted[rows, slot] & (r < nodes)
        served[rows[take], slot[take]] = True
    return served.reshape(B, S, K).mean(axis=1)


class CompletionPlanner(_PosteriorAllocator):
    """Serve what the plans of posterior draws serve now (module docstring).

    Args:
        predictor: any Predictor.
        samples: draws of every task's demand per step (common random numbers: fixed uniforms per draw).
        explore: reports a task gets before its posterior is read (served first until then).
        seed: seeds the draws' uniforms.
    """

    def __init__(self, predictor: Predictor, samples: int = 32, explore: int = 1, seed: int = 0) -> None:
        super().__init__(predictor, explore)
        self.samples = _check_int("samples", samples, 1)
        self.seed = _check_int("seed", seed, 0)
        self.reset(0, 0, 0)

    def reset(self, batch_size: int, n_nodes: int, n_slots: int) -> None:
        super().reset(batch_size, n_nodes, n_slots)
        self._rng = np.random.default_rng(self.seed)
        self._uniforms = None

    def admit(self, estimates: Estimates, candidates: np.ndarray, index: np.ndarray, capacity: np.ndarray) -> np.ndarray:
        B, K = candidates.shape
        if self._uniforms is None or self._uniforms.shape[:2] != (B, K):
            # stratified levels per draw, shuffled per slot: the draws span every part of each posterior
            levels = (np.arange(self.samples) + 0.5) / self.samples
            self._uniforms = self._rng.permuted(np.broadcast_to(levels, (B, K, self.samples)), axis=2)
        demand = sample_demands(estimates.cdf, estimates.budget, self._uniforms)
        self._votes = plan_votes(demand, estimates.budget, candidates, capacity)
        return candidates & (self._votes > 0)

    def admitted_key(self, estimates: Estimates, index: np.ndarray) -> np.ndarray:
        """The tasks most draws serve now first, ties by deadline."""
        return -self._votes + 1e-6 * estimates.budget
