"""Decision points of fixed-policy rollouts, and the leak probes fitted on them.

A *decision point* is a (task, step) pair at which a scheduler actually decides about a task that has
reported at least one loss: at the start of step t, before the policy acts, every active slot whose
task has k >= 1 reports. At each point we record what a scheduler has observed (the task's full
reported-loss history so far, its target, the remaining window ``deadline − t`` and k) and the hidden
truth, the nominal remaining demand of :meth:`core_env.sim.Simulator.remaining_demand` (``inf`` when
the task never reaches its target). The remaining window is the budget a predictor is given: the
node-steps one node can still give the task. The label *feasible* says the task finishes within its
remaining window if served every step from now on (truth <= window).

Histories are rebuilt from the losses each step reports (:class:`core_env.sim.StepOutcome`), the way
an allocator accumulates them from its observations (:mod:`mara_agents.allocators.observed`), so a
point's history is exactly the task's first k reports, what a scheduler had seen at that step.

Leak probes see no curve value. They implement :class:`mara_agents.protocols.Predictor`, so they can
only use what the interface hands over, and they are fitted only on decision points of seeded *train*
workloads (:func:`train_workloads`: the train curve bank, ``reference`` = the train bank, seeds
disjoint from the evaluation suites):

* :class:`WindowProbe` (``probe: window-only``): median = max(c · window, 1) with c fitted for the
  capped MAE on a grid; p_within_budget = the train feasible rate in the window's decile bin;
* :class:`ReportsProbe` (``probe: reports-only``): median and feasible rate per bucket of k;
* :class:`ConstantProbe` (``probe: constant``): one median and one feasible rate per task set;
* :class:`PriorProbe` (``probe: prior``): the curve-free prior, boosted trees on log target, log deadline
  window, remaining window and k (what the submitter declared and the clock shows).

A probe that comes close to a curve-aware predictor means that the decision points give the demand
away through the window or the report count; it does not mean the probe is a good predictor.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from benchmarks.agents import make_agent
from core_env.config import LOADS, EnvConfig
from core_env.curves import bank_for
from core_env.extras import needs
from core_env.vector import DiscreteCoREVectorEnv
from core_env.generators import Drawn
from core_env.recipe import DEFAULT_RECIPE
from core_env.workload import Workload
from mara_agents.protocols import REMAINING_DEMAND, DemandSummary, Predictor
from mara_agents.rollout import play

#: Cap of the capped MAE and of the probes' medians, in node-steps (the FM horizon).
CAP = 120
#: Buckets of reports observed: (label, lowest k, highest k), in order.
BUCKETS: tuple[tuple[str, int, float], ...] = (("1–2", 1, 2), ("3–5", 3, 5), ("6–10", 6, 10), ("11–20", 11, 20), ("> 20", 21, np.inf))
BUCKET_LABELS = tuple(label for label, _, _ in BUCKETS)
#: Seed of the probes' train workloads; their entropy lists differ from the suites' (5 entries) in length.
PROBE_SEED = 20270117
#: Train workloads per task set (one batch per policy) the probes are fitted on.
TRAIN_EPISODES = 12
#: The policies whose decision points the probes are fitted on (and Table 1 is scored on).
PROBE_POLICIES = ("edf", "edf-admission:oracle")
#: Grid of window factors c tried by the window-only probe.
FACTORS = np.round(np.arange(0.02, 3.0001, 0.02), 2)
#: Probes never censor: their budgets (the remaining window) are used as given.
PROBE_HORIZON = 1_000_000


def bucket_of(reports: np.ndarray) -> np.ndarray:
    """(M,) index into :data:`BUCKETS` of each report count k (k >= 1)."""
    reports = np.asarray(reports)
    if reports.size and (reports.dtype.kind not in "iu" or reports.min() < 1):
        raise ValueError("report counts must be integers >= 1 (a decision point has at least one report)")
    return np.searchsorted(np.array([hi for _, _, hi in BUCKETS[:-1]]), reports, side="left")


@dataclasses.dataclass(frozen=True, eq=False)
class DecisionPoints:
    """P decision points of one policy on E episodes (see the module docstring); arrays are (P,).

    Attributes:
        policy: the benchmark row that scheduled the rollout (:func:`benchmarks.agents.make_agent`).
        episodes: E episode ids, e.g. ``("id", root, episode)``; ``episode`` indexes them.
        episode, task: the point's episode and the task's index in that episode's workload.
        step: the step t at whose start the point is taken.
        reports: k, the losses the task has reported (node-steps received), >= 1.
        window: remaining window ``deadline − t`` (node-steps one node can still give the task).
        target: the task's target loss.
        truth: hidden nominal remaining demand (``inf``: never reaches the target).
        start: offset of the task's reports in ``losses``; the history is ``losses[start : start + reports]``.
        losses: every report of every task of the rollout, grouped by task, oldest first.
        deadline_window: the task's deadline window ``deadline − arrival`` (declared at submission; what
            predictors with ``uses_window`` read).
    """

    policy: str
    episodes: tuple
    episode: np.ndarray
    task: np.ndarray
    step: np.ndarray
    reports: np.ndarray
    window: np.ndarray
    target: np.ndarray
    truth: np.ndarray
    start: np.ndarray
    losses: np.ndarray
    deadline_window: np.ndarray

    def __len__(self) -> int:
        return int(self.reports.size)

    def history(self, i: int) -> np.ndarray:
        """The reported losses of point ``i`` (a view), oldest first."""
        return self.losses[self.start[i] : self.start[i] + self.reports[i]]

    def histories(self) -> list[np.ndarray]:
        """Every point's history, in order."""
        return [self.losses[s : s + k] for s, k in zip(self.start.tolist(), self.reports.tolist())]

    @property
    def feasible(self) -> np.ndarray:
        """(P,) bool: the task finishes within its remaining window if served every step."""
        return self.truth <= self.window

    @property
    def bucket(self) -> np.ndarray:
        return bucket_of(self.reports)

    def subset(self, index: np.ndarray) -> DecisionPoints:
        """The points at ``index`` (the losses are shared, not copied)."""
        index = np.asarray(index, dtype=np.int64)
        fields = {f: getattr(self, f)[index] for f in ("episode", "task", "step", "reports", "window", "target", "truth", "start", "deadline_window")}
        return DecisionPoints(self.policy, self.episodes, losses=self.losses, **fields)

    def subsample(self, max_points: int | None, rng: np.random.Generator) -> DecisionPoints:
        """At most ``max_points`` points drawn without replacement (kept in their order); all when None."""
        if max_points is None or len(self) <= max_points:
            return self
        if max_points < 1:
            raise ValueError(f"max_points must be >= 1 or None, got {max_points}")
        return self.subset(np.sort(rng.choice(len(self), size=max_points, replace=False)))


def collect(policy: str, workloads: Sequence[Workload], config: EnvConfig, episodes: Sequence | None = None) -> DecisionPoints:
    """Roll ``policy`` out on ``workloads`` (one batch, to the end) and record every decision point.

    The loop is :func:`mara_agents.rollout.play` on the vector env, as in :func:`benchmarks.rollout.run_agent`
    (the same observations, oracle and steps), with the points read from the batch's (read-only) simulator
    arrays before each action and the reports from each step's outcome (a batch observer).
    """
    if not workloads:
        raise ValueError("collect needs at least one workload")
    episodes = tuple(episodes) if episodes is not None else tuple(range(len(workloads)))
    if len(episodes) != len(workloads):
        raise ValueError(f"got {len(episodes)} episode ids for {len(workloads)} workloads")
    agent = make_agent(policy)
    envs = DiscreteCoREVectorEnv(len(workloads), autoreset_mode="disabled", config=config)
    sim = envs.batch.sim  # read-only: the points' hidden truth
    points: dict[str, list[np.ndarray]] = {name: [] for name in ("episode", "task", "step", "reports", "window", "target", "truth", "deadline_window")}
    reported: dict[str, list[np.ndarray]] = {"episode": [], "task": [], "loss": []}
    slot_task: list[np.ndarray] = []  # the task in each slot when the last actions were chosen

    def act(observation: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
        demand = envs.remaining_demand()
        b, k = np.nonzero(sim.has_report & ~sim.done[:, None])
        for name, value in (("episode", b), ("task", sim.task[b, k]), ("step", sim.t[b]), ("reports", sim.steps[b, k]),
                            ("window", sim.deadline[b, k] - sim.t[b]), ("target", sim.target[b, k]), ("truth", demand[b, k]),
                            ("deadline_window", sim.deadline[b, k] - sim.arrival[b, k])):
            points[name].append(np.array(value))
        slot_task[:] = [sim.task.copy()]
        return agent.act(observation, action_mask, {REMAINING_DEMAND: demand} if agent.needs_oracle else None)

    class Reports:  # an observer of the batch: what every step reported
        def on_reset(self, batch, envs) -> None:
            pass

        def on_step(self, batch, outcome) -> None:
            b, k = np.nonzero(outcome.served)
            reported["episode"].append(b)
            reported["task"].append(slot_task[0][b, k])
            reported["loss"].append(outcome.reported[b, k])

    envs.batch.observers.append(Reports())
    agent.reset(len(workloads), envs.batch.N, envs.batch.K)
    play(envs, act, workloads)
    cat = {name: np.concatenate(values) for name, values in points.items()}
    rep = {name: np.concatenate(values) for name, values in reported.items()}
    stride = max(len(w) for w in workloads) + 1
    key = rep["episode"] * stride + rep["task"]
    order = np.argsort(key, kind="stable")  # grouped by task, in time order within a task
    sorted_key = key[order]
    point_key = cat["episode"] * stride + cat["task"]
    start = np.searchsorted(sorted_key, point_key, side="left")
    received = np.searchsorted(sorted_key, point_key, side="right") - start
    if np.any(received < cat["reports"]):
        raise RuntimeError("a decision point has more reports than its task reported (the rollout record is inconsistent)")
    return DecisionPoints(policy, episodes, cat["episode"].astype(np.int64), cat["task"].astype(np.int64), cat["step"].astype(np.int64),
                          cat["reports"].astype(np.int64), cat["window"].astype(np.int64), cat["target"].astype(np.float64),
                          cat["truth"].astype(np.float64), start.astype(np.int64), rep["loss"][order].astype(np.float64),
                          cat["deadline_window"].astype(np.int64))


def train_workloads(task_set: str, episodes: int = TRAIN_EPISODES, n_nodes: int = 4, arrival_steps: int = 500) -> list[Workload]:
    """Seeded workloads on the task set's *train* curves at the training load, the probes' fitting data.

    Drawn by :func:`core_env.workload.draw_workload` with ``reference`` = the train bank; the seeds
    (``[PROBE_SEED, crc32(task_set), e]``) are disjoint from the evaluation suites', whose curves come
    from the eval bank anyway.
    """
    if episodes < 1:
        raise ValueError(f"the probes need at least one train episode, got {episodes}")
    bank = bank_for(task_set, "train")
    drawn = Drawn(bank, LOADS["train"], arrival_steps, DEFAULT_RECIPE, n_nodes, reference=bank)
    return [drawn.workload(np.random.default_rng([PROBE_SEED, zlib.crc32(task_set.encode()), e])) for e in range(episodes)]


# --------------------------------------------------------------------------------------------------
# Leak probes


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
                 names: Sequence[str] = PROBE_ROWS) -> tuple[dict[str, Predictor], int]:
    """Probes of ``task_set`` fitted on the decision points of ``policies`` on its train workloads; also the point count."""
    workloads = train_workloads(task_set, episodes, n_nodes)
    config = EnvConfig(task_set=task_set, n_nodes=n_nodes)
    points = [collect(policy, workloads, config, [(task_set, "train-fit", e) for e in range(episodes)]) for policy in policies]
    return fit_probes(points, names), sum(len(p) for p in points)
