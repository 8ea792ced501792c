"""The curve-free prior of a task's demand: what its declared target and deadline window say before any report.

A task that has reported no loss has no curve to read, and every curve reader censors it (P(demand ≤ b) = 0
for every b). :class:`DemandPrior` gives it a distribution instead: the demands of the ``neighbours`` train
tasks nearest to it in (log target, log deadline window), standardized, as an empirical distribution. A task
with ``r`` reports that is still running needs more than ``r`` node-steps in all, so its remaining demand is
read from the neighbours among the train tasks with demand > r, shifted by r (``D − r | D > r``).

It is fitted on the task set's seeded *train* workloads
(:func:`mara_agents.decision_points.train_workloads`: train curves, seeds disjoint from every evaluation
suite), never on evaluation roots, and reads no loss value: it is the same information as the ``probe:
prior`` leak probe (:class:`mara_agents.predictors.probes.PriorProbe`), as a distribution.

:class:`UnreportedPrior` wraps any curve-reading predictor so that tasks with no report get the prior's
distribution and every other task the predictor's; the posterior allocators build it with the option
``prior=1`` (``index:pfn,prior=1``; :func:`mara_agents.allocators.make_allocator`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from mara_agents.protocols import HORIZON, QUANTILE_LEVELS, DemandSummary, Predictor

#: Train tasks whose demands form one task's prior.
NEIGHBOURS = 64


class DemandPrior(Predictor):
    """The empirical demand distribution of the nearest train tasks in (log target, log deadline window).

    Args:
        targets, windows, demands: (T,) the train tasks' target losses, deadline windows (node-steps) and
            demands (node-steps to the target; ``inf`` for a task that never reaches it).
        neighbours: train tasks per prior (at most T).
        horizon, levels: as for every :class:`~mara_agents.protocols.Predictor`.
    """

    name = "prior"
    uses_window = True

    def __init__(self, targets: np.ndarray, windows: np.ndarray, demands: np.ndarray, neighbours: int = NEIGHBOURS,
                 horizon: int = HORIZON, levels: Sequence[float] = QUANTILE_LEVELS) -> None:
        super().__init__(horizon, levels)
        targets, windows, demands = (np.asarray(a, dtype=np.float64) for a in (targets, windows, demands))
        if not targets.ndim == 1 or not targets.shape == windows.shape == demands.shape:
            raise ValueError(f"a demand prior needs (T,) targets, windows and demands of one length, got {targets.shape}, "
                             f"{windows.shape}, {demands.shape}")
        if not (np.all(np.isfinite(targets) & (targets > 0)) and np.all(np.isfinite(windows) & (windows >= 1))
                and np.all(demands >= 1)):
            raise ValueError("a demand prior needs positive finite targets, windows >= 1 and demands >= 1 (inf allowed)")
        if isinstance(neighbours, bool) or not isinstance(neighbours, (int, np.integer)) or not 1 <= neighbours <= targets.size:
            raise ValueError(f"neighbours must be an int in [1, {targets.size}] (the train tasks), got {neighbours!r}")
        self.neighbours = int(neighbours)
        self._features = np.column_stack([np.log(targets), np.log(windows)])
        self._centre, self._scale = self._features.mean(axis=0), np.maximum(self._features.std(axis=0), 1e-9)
        self._features = (self._features - self._centre) / self._scale
        self._demands = np.ceil(demands)

    @classmethod
    def fit(cls, workloads: Sequence, neighbours: int = NEIGHBOURS, horizon: int = HORIZON) -> DemandPrior:
        """The prior of the tasks of ``workloads`` (:class:`core_env.workload.Workload`; train ones only)."""
        if not workloads or not sum(len(w) for w in workloads):
            raise ValueError("a demand prior needs train workloads with tasks")
        return cls(np.concatenate([w.target for w in workloads]), np.concatenate([w.window for w in workloads]),
                   np.concatenate([w.demand for w in workloads]), neighbours, horizon)

    def _predict(self, histories, targets, budgets, oracle):  # pragma: no cover - predict() routes to _predict_windowed
        raise NotImplementedError("DemandPrior.predict needs windows")

    def _predict_windowed(self, histories: list[np.ndarray], targets: np.ndarray, budgets: np.ndarray,
                          windows: np.ndarray) -> DemandSummary:
        return DemandSummary.from_cdf(self.cdf_of(np.array([h.size for h in histories], np.int64), targets, windows), budgets, self.levels)

    def cdf_of(self, reports: np.ndarray, targets: np.ndarray, windows: np.ndarray) -> np.ndarray:
        """(M, horizon + 1) P(remaining demand ≤ b) of tasks with ``reports`` losses reported so far."""
        query = (np.column_stack([np.log(targets), np.log(windows)]) - self._centre) / self._scale
        grid = np.arange(self.horizon + 1)
        out = np.zeros((len(query), grid.size))
        for r in np.unique(reports):
            rows = np.flatnonzero(reports == r)
            alive = np.flatnonzero(self._demands > r)  # train tasks still running after r node-steps
            if alive.size == 0:
                continue  # no train task ran that long: nothing is known, the demand stays censored
            distance = ((query[rows, None, :] - self._features[None, alive, :]) ** 2).sum(axis=2)
            k = min(self.neighbours, alive.size)
            nearest = np.argpartition(distance, k - 1, axis=1)[:, :k]
            remaining = self._demands[alive][nearest] - r  # (rows, k)
            out[rows] = (remaining[:, :, None] <= grid).mean(axis=1)
        return out


class UnreportedPrior(Predictor):
    """``predictor`` for tasks with reports, ``prior`` (a :class:`DemandPrior`) for tasks with none.

    Args:
        predictor: any Predictor that is not an oracle.
        prior: the curve-free prior; its horizon and levels must be the predictor's.
    """

    uses_window = True

    def __init__(self, predictor: Predictor, prior: DemandPrior) -> None:
        if not isinstance(predictor, Predictor) or not isinstance(prior, DemandPrior):
            raise TypeError(f"UnreportedPrior needs a Predictor and a DemandPrior, got {type(predictor).__name__}, {type(prior).__name__}")
        if predictor.needs_oracle:
            raise ValueError("an oracle predictor knows every demand: it needs no prior")
        if prior.horizon != predictor.horizon or not np.array_equal(prior.levels, predictor.levels):
            raise ValueError(f"the prior's horizon and levels ({prior.horizon}, {prior.levels.tolist()}) must be the predictor's "
                             f"({predictor.horizon}, {predictor.levels.tolist()})")
        super().__init__(predictor.horizon, predictor.levels)
        self.predictor, self.prior = predictor, prior
        self.name = f"{predictor.name}+prior"

    def _predict(self, histories, targets, budgets, oracle):  # pragma: no cover - predict() routes to _predict_windowed
        raise NotImplementedError("UnreportedPrior.predict needs windows")

    def _predict_windowed(self, histories: list[np.ndarray], targets: np.ndarray, budgets: np.ndarray,
                          windows: np.ndarray) -> DemandSummary:
        empty = np.array([h.size == 0 for h in histories], bool)
        parts = []
        for rows, source in ((np.flatnonzero(~empty), self.predictor), (np.flatnonzero(empty), self.prior)):
            if rows.size:
                parts.append((rows, source.predict([histories[i] for i in rows], targets[rows], budgets[rows],
                                                   windows=windows[rows] if source.uses_window else None)))
        if len(parts) == 1:
            return parts[0][1]
        m = len(histories)
        median, quantiles = np.empty(m), np.empty((m, self.levels.size))
        p = np.empty(budgets.shape)
        for rows, summary in parts:
            median[rows], quantiles[rows], p[rows] = summary.median, summary.quantiles, summary.p_within_budget
        return DemandSummary(self.levels, median, quantiles, p)


@functools.lru_cache(maxsize=None)
def fitted_prior(task_set: str, horizon: int = HORIZON) -> DemandPrior:
    """The prior of ``task_set`` (a built-in name or a bank file), fitted on its train workloads; a fixed
    constructed scenario (``stress``) uses the ``id`` fit."""
    from core_env.generators import is_fixed_scenario
    from mara_agents.decision_points import train_workloads

    return DemandPrior.fit(train_workloads("id" if is_fixed_scenario(task_set) else task_set), horizon=horizon)


def with_prior(predictor: Predictor, task_set: str | None) -> UnreportedPrior:
    """``predictor`` with the fitted prior of ``task_set`` for its unreported tasks (ValueError without a task set)."""
    if not isinstance(task_set, str) or not task_set:
        raise ValueError(f"the prior for unreported tasks is fitted per task set: pass task_set (a built-in name or a bank file), got {task_set!r}")
    return UnreportedPrior(predictor, fitted_prior(task_set, predictor.horizon))


__all__ = ["DemandPrior", "NEIGHBOURS", "UnreportedPrior", "fitted_prior", "with_prior"]
