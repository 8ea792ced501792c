"""Leak probes: predictors that see no curve value, fitted on decision points of train workloads.

They implement :class:`mara_agents.protocols.Predictor`, so they can only use what the interface hands
over, and they are fitted only on decision points (:mod:`mara_agents.decision_points`) of seeded *train*
workloads (:func:`~mara_agents.decision_points.train_workloads`: the train curve bank, ``reference`` = the
train bank, seeds disjoint from the evaluation suites):

* :class:`WindowProbe` (``probe: window-only``): median = max(c · window, 1) with c fitted for the
  capped MAE on a grid; p_within_budget = the train feasible rate in the window's decile bin;
* :class:`ReportsProbe` (``probe: reports-only``): median and feasible rate per bucket of k;
* :class:`ConstantProbe` (``probe: constant``): one median and one feasible rate per task set;
* :class:`PriorProbe` (``probe: prior``): the curve-free prior, boosted trees on log target, log deadline
  window, remaining window and k (what the submitter declared and the clock shows); the ``prior-edf``
  row admits by it (:mod:`mara_agents.heuristics.prior_edf`).

A probe that comes close to a curve-aware predictor means that the decision points give the demand
away through the window or the report count; it does not mean the probe is a good predictor. Table 1
(:mod:`benchmarks.prediction`) scores them beside the curve-aware predictors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from core_env.extras import needs
from mara_agents.decision_points import BUCKET_LABELS, BUCKETS, PROBE_POLICIES, TRAIN_EPISODES, DecisionPoints, bucket_of, policy_agent, train_points
from mara_agents.protocols import Agent, DemandSummary, Predictor

#: Cap of the capped MAE and of the probes' medians, in node-steps (the FM horizon).
CAP = 120
#: Grid of window factors c tried by the window-only probe.
FACTORS = np.round(np.arange(0.02, 3.0001, 0.02), 2)
#: Probes never censor: their budgets (the remaining window) are used as given.
PROBE_HORIZON = 1_000_000


def _rate(feasible: np.ndarray) -> float:
    """Feasible share with half a pseudo-count on each side (never exactly 0 or 1)."""
    return float((np.count_nonzero(feasible) + 0.5) / (feasible.size + 1.0))


def _capped_median(truth: np.ndarray) -> float:
    """The median of the capped truths (what minimizes the capped MAE), at least 1 node-step."""
    return float(max(np.median(np.minimum(truth, CAP)), 1.0)) if truth.size else float(CAP)


class _Probe(Predictor):
    """A predictor that sees no curve value: its summary is a point mass at :meth:`medians`."""

    def __init__(self) -> None:
        super().__init__(horizon=PROBE_HORIZON)

    def _predict(self, histories: list[np.ndarray], targets: np.ndarray, budgets: np.ndarray,
                 oracle: Mapping[str, np.ndarray] | None) -> DemandSummary:
        if budgets.ndim != 1:
            raise ValueError(f"{type(self).__name__} takes one budget (the remaining window) per task, got budgets of shape {budgets.shape}")
        reports = np.array([h.size for h in histories], dtype=np.int64)
        median, p = self.medians(reports, budgets)
        return DemandSummary(self.levels, median, np.repeat(median[:, None], self.levels.size, axis=1), p)

    def medians(self, reports: np.ndarray, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(M,) medians and (M,) p_within_budget from report counts and remaining windows."""
        raise NotImplementedError

    def parameters(self) -> dict:
        """The fitted constants (JSON-ready)."""
        raise NotImplementedError


class WindowProbe(_Probe):
    """``probe: window-only``: median = max(c · window, 1); p = the train feasible rate of the window's bin."""

    name = "probe: window-only"

    def __init__(self, factor: float, edges: Sequence[float], rates: Sequence[float]) -> None:
        super().__init__()
        self.factor, self.edges, self.rates = float(factor), np.asarray(edges, dtype=np.float64), np.asarray(rates, dtype=np.float64)
        if self.edges.size != self.rates.size + 1 or np.any(np.diff(self.edges) <= 0):
            raise ValueError("a window probe needs increasing bin edges, one more than its rates")

    @classmethod
    def fit(cls, windows: np.ndarray, truth: np.ndarray, bins: int = 10) -> WindowProbe:
        """c minimizing the capped MAE over :data:`FACTORS`; feasible rates in ``bins`` quantile bins of the window."""
        windows, truth = np.asarray(windows, dtype=np.float64), np.asarray(truth, dtype=np.float64)
        if windows.size == 0:
            raise ValueError("cannot fit a window probe on no decision points")
        capped = np.minimum(truth, CAP)
        errors = [np.mean(np.abs(np.minimum(np.maximum(c * windows, 1.0), CAP) - capped)) for c in FACTORS]
        factor = float(FACTORS[int(np.argmin(errors))])
        edges = np.unique(np.quantile(windows, np.linspace(0.0, 1.0, bins + 1)))
        if edges.size < 2:
            edges = np.array([edges[0], edges[0] + 1.0])
        which = np.clip(np.searchsorted(edges, windows, side="right") - 1, 0, edges.size - 2)
        feasible = truth <= windows
        rates = [_rate(feasible[which == j]) for j in range(edges.size - 1)]
        return cls(factor, edges, rates)

    def medians(self, reports: np.ndarray, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        windows = windows.astype(np.float64)
        which = np.clip(np.searchsorted(self.edges, windows, side="right") - 1, 0, self.rates.size - 1)
        return np.maximum(self.factor * windows, 1.0), self.rates[which]

    def parameters(self) -> dict:
        return {"factor": self.factor, "window_edges": self.edges.tolist(), "p_feasible": self.rates.tolist()}


class ReportsProbe(_Probe):
    """``probe: reports-only``: median and feasible rate of the train points in the bucket of k."""

    name = "probe: reports-only"

    def __init__(self, medians: Sequence[float], rates: Sequence[float]) -> None:
        super().__init__()
        self.bucket_medians, self.rates = np.asarray(medians, dtype=np.float64), np.asarray(rates, dtype=np.float64)
        if self.bucket_medians.shape != (len(BUCKETS),) or self.rates.shape != (len(BUCKETS),):
            raise ValueError(f"a reports probe needs one median and one rate per bucket ({len(BUCKETS)})")

    @classmethod
    def fit(cls, reports: np.ndarray, windows: np.ndarray, truth: np.ndarray) -> ReportsProbe:
        if np.asarray(reports).size == 0:
            raise ValueError("cannot fit a reports probe on no decision points")
        bucket = bucket_of(reports)
        feasible = truth <= windows
        everything = (_capped_median(truth), _rate(feasible))  # a bucket without train points falls back to all of them
        medians = [_capped_median(truth[bucket == j]) if np.any(bucket == j) else everything[0] for j in range(len(BUCKETS))]
        rates = [_rate(feasible[bucket == j]) if np.any(bucket == j) else everything[1] for j in range(len(BUCKETS))]
        return cls(medians, rates)

    def medians(self, reports: np.ndarray, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        bucket = bucket_of(np.maximum(reports, 1))
        return self.bucket_medians[bucket].copy(), self.rates[bucket].copy()

    def parameters(self) -> dict:
        return {"buckets": list(BUCKET_LABELS), "median": self.bucket_medians.tolist(), "p_feasible": self.rates.tolist()}


class ConstantProbe(_Probe):
    """``probe: constant``: one median and one feasible rate (the task set's train points)."""

    name = "probe: constant"

    def __init__(self, median: float, rate: float) -> None:
        super().__init__()
        self.median, self.rate = float(median), float(rate)

    @classmethod
    def fit(cls, windows: np.ndarray, truth: np.ndarray) -> ConstantProbe:
        if np.asarray(truth).size == 0:
            raise ValueError("cannot fit a constant probe on no decision points")
        return cls(_capped_median(truth), _rate(truth <= windows))

    def medians(self, reports: np.ndarray, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.full(reports.size, self.median), np.full(reports.size, self.rate)

    def parameters(self) -> dict:
        return {"median": self.median, "p_feasible": self.rate}


class PriorProbe(Predictor):
    """``probe: prior``: the curve-free prior. Boosted trees on what a submitter declared and the clock shows
    (log target, log deadline window, remaining window, reports k), fitted on the task set's train points:
    a classifier of feasibility gives p_within_budget, a regressor of the capped truth for absolute error
    gives the median. It reads no loss value; it is the strongest of the probes because a lower target
    within a family does need more training (legitimate information a curve reader must beat)."""

    name = "probe: prior"
    uses_window = True

    def __init__(self, classifier, regressor) -> None:
        super().__init__(horizon=PROBE_HORIZON)
        self.classifier, self.regressor = classifier, regressor

    @staticmethod
    def inputs(targets: np.ndarray, deadline_windows: np.ndarray, windows: np.ndarray, reports: np.ndarray) -> np.ndarray:
        return np.column_stack([np.log(targets), np.log(deadline_windows), windows, reports]).astype(np.float64)

    @classmethod
    def fit(cls, targets: np.ndarray, deadline_windows: np.ndarray, windows: np.ndarray, reports: np.ndarray, truth: np.ndarray) -> PriorProbe:
        with needs(__name__):
            from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

        if np.asarray(truth).size == 0:
            raise ValueError("cannot fit a prior probe on no decision points")
        x = cls.inputs(targets, deadline_windows, windows, reports)
        feasible = np.asarray(truth) <= windows
        if feasible.all() or not feasible.any():
            raise ValueError("a prior probe needs train points of both labels (feasible and not)")
        classifier = HistGradientBoostingClassifier(max_iter=200, learning_rate=0.1, random_state=0).fit(x, feasible)
        regressor = HistGradientBoostingRegressor(loss="absolute_error", max_iter=200, learning_rate=0.1, random_state=0).fit(x, np.minimum(truth, CAP))
        return cls(classifier, regressor)

    def _predict_windowed(self, histories: list[np.ndarray], targets: np.ndarray, budgets: np.ndarray, windows: np.ndarray) -> DemandSummary:
        if budgets.ndim != 1:
            raise ValueError(f"{type(self).__name__} takes one budget (the remaining window) per task, got budgets of shape {budgets.shape}")
        reports = np.array([h.size for h in histories], dtype=np.float64)
        x = self.inputs(targets, windows, budgets.astype(np.float64), reports)
        p = self.classifier.predict_proba(x)[:, list(self.classifier.classes_).index(True)] if len(x) else np.zeros(0)
        median = np.maximum(self.regressor.predict(x), 1.0) if len(x) else np.zeros(0)
        return DemandSummary(self.levels, median, np.repeat(median[:, None], self.levels.size, axis=1), np.clip(p, 0.0, 1.0))

    def _predict(self, histories, targets, budgets, oracle):  # pragma: no cover - predict() routes to _predict_windowed
        raise NotImplementedError("PriorProbe.predict needs windows")

    def parameters(self) -> dict:
        return {"model": "sklearn HistGradientBoosting (classifier of feasibility, absolute-error regressor of the capped truth)",
                "inputs": ["log target", "log deadline window", "remaining window", "reports k"], "max_iter": 200, "learning_rate": 0.1,
                "classifier_iterations": int(self.classifier.n_iter_), "regressor_iterations": int(self.regressor.n_iter_)}


PROBE_ROWS = (WindowProbe.name, ReportsProbe.name, ConstantProbe.name, PriorProbe.name)


def fit_probes(points: Sequence[DecisionPoints], names: Sequence[str] = PROBE_ROWS) -> dict[str, Predictor]:
    """The probes named in ``names`` (default: all four) fitted on the given (train) decision points, pooled."""
    unknown = sorted(set(names) - set(PROBE_ROWS))
    if unknown:
        raise ValueError(f"unknown probes {unknown}; choose from {list(PROBE_ROWS)}")
    reports = np.concatenate([p.reports for p in points])
    windows = np.concatenate([p.window for p in points]).astype(np.float64)
    truth = np.concatenate([p.truth for p in points])
    fits = {WindowProbe.name: lambda: WindowProbe.fit(windows, truth), ReportsProbe.name: lambda: ReportsProbe.fit(reports, windows, truth),
            ConstantProbe.name: lambda: ConstantProbe.fit(windows, truth),
            PriorProbe.name: lambda: PriorProbe.fit(np.concatenate([p.target for p in points]),
                                                    np.concatenate([p.deadline_window for p in points]).astype(np.float64),
                                                    windows, reports.astype(np.float64), truth)}
    return {name: fits[name]() for name in names}


def train_probes(task_set: str, policies: Sequence[str] = PROBE_POLICIES, episodes: int = TRAIN_EPISODES, n_nodes: int = 4,
                 names: Sequence[str] = PROBE_ROWS, make: Callable[[str], Agent] = policy_agent) -> tuple[dict[str, Predictor], int]:
    """Probes of ``task_set`` fitted on the decision points of ``policies`` (built by ``make``) on its train
    workloads (:func:`~mara_agents.decision_points.train_points`); also the point count."""
    points = train_points(task_set, policies, episodes, n_nodes, make)
    return fit_probes(points, names), sum(len(p) for p in points)
