"""LaiRA (Wang, Liu, Zhou, AAAI 2026), adapted to discrete nodes (docs/agents.md, learning-aware allocators).

LaiRA works in time slices. At the start of a slice it (1) filters out the tasks a look-ahead predictor
(DKF) says cannot reach their target even with every remaining step, (2) ranks the rest by the ratio of an
optimistic predicted log-loss reduction rate ρ̂ (WLS with a lower confidence bound on the next log loss)
to the rate ρ the task needs to make its deadline, and (3) trains the best task for the whole slice; the
slice length follows a PD controller on the last slices' prediction error (longer slices when
predictions are good: fewer switches). Ours, per environment:

* the top-N ranked feasible tasks get one node each and keep it for the slice (a node whose task left is
  refilled at once with the best unassigned feasible task; the others hold);
* tasks with fewer than ``min_reports`` reports pass the filter and rank first (by deadline): the filter
  and the fit need a few points;
* ρ̂ uses the WLS posterior sd times ``beta`` as the confidence radius (LaiRA's β_n‖X‖_{V⁻¹} up to the
  noise scale, a tunable constant, as LaiRA's own analysis allows);
* the PD gains are negative (rising error shortens slices), which is the stated intent of LaiRA's
  printed formula; slices are clipped to [1, ``max_slice``] steps.
"""

from __future__ import annotations

import numpy as np

from mara_agents.allocators.base import Estimates, PredictiveAllocator
from mara_agents.allocators.ordering import _TIE
from mara_agents.predictors.dkf import DKF
from mara_agents.predictors.wls import WLS
from mara_agents.protocols import Predictor


class LaiRA(PredictiveAllocator):
    """LaiRA's allocator (see the module docstring).

    Args:
        predictor: the look-ahead feasibility filter (DKF in LaiRA; any predictor, the oracle included).
        first_slice: M₁, the slice length of the first three slices (steps).
        gains: (K_p, K_d) of the slice-length PD controller (steps per unit of mean absolute log-loss error).
        max_slice: longest slice (steps).
        beta: width of the WLS confidence bound, in posterior standard deviations.
        min_reports: reports before a task can be filtered out or ranked by its rates.
        serve_rest: nodes no feasible task takes serve filtered-out tasks (best ranked first) instead of idling.
    """

    def __init__(self, predictor: Predictor | None = None, first_slice: int = 2, gains: tuple[float, float] = (-10.0, -2.5),
                 max_slice: int = 16, beta: float = 1.0, min_reports: int = 3, serve_rest: bool = True) -> None:
        super().__init__(DKF() if predictor is None else predictor)
        if not (1 <= first_slice <= max_slice):
            raise ValueError(f"need 1 <= first_slice <= max_slice, got {first_slice} and {max_slice}")
        self.first_slice, self.max_slice = int(first_slice), int(max_slice)
        self.gains, self.beta, self.min_reports = (float(gains[0]), float(gains[1])), float(beta), int(min_reports)
        self.serve_rest = bool(serve_rest)
        self.wls = WLS()

    def reset(self, batch_size: int, n_nodes: int, n_slots: int) -> None:
        super().reset(batch_size, n_nodes, n_slots)
        B, N = batch_size, n_nodes
        self.assigned = np.full((B, N), -1, np.int64)  # task id each node holds (-1: none)
        self.slice_left = np.zeros(B, np.int64)  # steps left in the current slice
        self.slice_length = np.full(B, self.first_slice, np.int64)
        self.slices = np.zeros(B, np.int64)  # slices started
        self.errors = np.full((B, 3), np.nan)  # e_{τ−1}, e_{τ−2}, e_{τ−3}
        self._start = np.full((B, N, 4), np.nan)  # per node at slice start: task id, reports, ln loss, predicted ln loss

    # ------------------------------------------------------------------ ranking
    def _fit(self, estimates: Estimates) -> tuple[np.ndarray, np.ndarray]:
        """(B, K, 2) WLS θ and (B, K, 2, 2) covariance of the active tasks with enough reports."""
        tasks = estimates.tasks
        B, K = tasks.active.shape
        theta, cov = np.zeros((B, K, 2)), np.zeros((B, K, 2, 2))
        b, k = np.nonzero(tasks.active & (tasks.steps >= self.min_reports))
        if b.size:
            fit = self.wls.fit([tasks.history[e, s, :n] for e, s, n in zip(b.tolist(), k.tolist(), tasks.steps[b, k].tolist())])
            theta[b, k], cov[b, k] = fit.theta, fit.cov
        return theta, cov

    def ranking(self, estimates: Estimates, theta: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(B, K) keys (lower first) and (B, K) bool filter-passing tasks."""
        tasks = estimates.tasks
        young = tasks.active & (tasks.steps < self.min_reports)
        passing = young | estimates.feasible
        s = np.maximum(tasks.steps, 1).astype(np.float64)
        ahead = s + self.slice_length[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            log_loss = np.log(np.where(tasks.steps > 0, tasks.last_loss, 1.0))
            need = (log_loss - np.log(tasks.target)) / (np.log(s + tasks.budget) - np.log(s))  # ρ
            x = np.stack([np.log(ahead), np.ones_like(ahead)], axis=-1)
            spread = np.sqrt(np.maximum(np.einsum("bki,bkij,bkj->bk", x, cov, x), 0.0))
            bound = (x * theta).sum(-1) - self.beta * spread  # optimistic next log loss
            rate = (log_loss - bound) / (np.log(ahead) - np.log(s))  # ρ̂
            score = np.nan_to_num(rate / need, nan=0.0, posinf=0.0, neginf=0.0)
        key = np.where(young, -1e9 + _TIE * tasks.budget, -score)
        return key, passing

    # ------------------------------------------------------------------ slices
    def _slice_error(self, b: int, theta: np.ndarray, estimates: Estimates) -> float:
        """Mean |predicted − actual| log-loss drop over the finished slice of env b (nan if no task to judge)."""
        tasks, start = estimates.tasks, self._start[b]
        errors = []
        for task, steps, log_loss, predicted in start:
            slot = np.flatnonzero(tasks.active[b] & (tasks.task[b] == task))
            if np.isnan(task) or slot.size == 0 or tasks.steps[b, slot[0]] <= steps or np.isnan(predicted):
                continue
            k = slot[0]
            now = np.log(tasks.last_loss[b, k])
            predicted_now = theta[b, k, 0] * np.log(tasks.steps[b, k]) + theta[b, k, 1]
            errors.append(abs((log_loss - now) - (predicted - predicted_now)))
        return float(np.mean(errors)) if errors else float("nan")

    def _next_slice(self, b: int, theta: np.ndarray, estimates: Estimates) -> None:
        if self.slices[b] > 0:
            error = self._slice_error(b, theta, estimates)
            self.errors[b] = [error if np.isfinite(error) else self.errors[b, 0], self.errors[b, 0], self.errors[b, 1]]
        self.slices[b] += 1
        e1, e2, e3 = self.errors[b]
        if self.slices[b] >= 4 and np.all(np.isfinite(self.errors[b])):
            kp, kd = self.gains
            length = self.slice_length[b] + kp * (e1 - e2) + kd * (e1 - 2 * e2 + e3)
            self.slice_length[b] = int(np.clip(np.floor(length), 1, self.max_slice))
        else:
            self.slice_length[b] = self.first_slice
        self.slice_left[b] = self.slice_length[b]
        self.assigned[b] = -1

    def decide(self, estimates: Estimates) -> np.ndarray:
        tasks = estimates.tasks
        theta, cov = self._fit(estimates)
        key, passing = self.ranking(estimates, theta, cov)
        B, N = self.assigned.shape
        actions = np.zeros((B, N), np.int64)
        for b in range(B):
            if self.slice_left[b] <= 0:
                self._next_slice(b, theta, estimates)
            slot_of = {int(t): k for k, t in enumerate(tasks.task[b]) if tasks.active[b, k]}
            held = [slot_of.get(int(t), -1) for t in self.assigned[b]]
            free_nodes = [n for n in range(N) if held[n] < 0]
            if free_nodes:
                taken = set(held)
                ranked = [k for k in np.argsort(key[b], kind="stable") if tasks.active[b, k] and k not in taken]
                order = [k for k in ranked if passing[b, k]] + ([k for k in ranked if not passing[b, k]] if self.serve_rest else [])
                for n, k in zip(free_nodes, order):
                    held[n] = int(k)
                    self.assigned[b, n] = tasks.task[b, k]
                    steps = tasks.steps[b, k]
                    if steps >= self.min_reports:
                        predicted = theta[b, k, 0] * np.log(steps) + theta[b, k, 1]
                        self._start[b, n] = (tasks.task[b, k], steps, np.log(tasks.last_loss[b, k]), predicted)
                    else:
                        self._start[b, n] = np.nan
            actions[b] = np.array(held) + 1
            self.slice_left[b] -= 1
        return actions
