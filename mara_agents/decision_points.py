"""Decision points of fixed-policy rollouts: the data the leak probes (:mod:`mara_agents.predictors.probes`)
are fitted on, and the scored points of the prediction benchmark (:mod:`benchmarks.decision_points`).

A *decision point* is a (task, step) pair at which a scheduler actually decides about a task that has
reported at least one loss: at the start of step t, before the policy acts, every active slot whose
task has k >= 1 reports. At each point we record what a scheduler has observed (the task's full
reported-loss history so far, its target, the remaining window ``deadline − t`` and k) and the hidden
truth, the nominal remaining demand of :meth:`core_env.sim.Simulator.remaining_demand` (``inf`` when
the task never reaches its target). The remaining window is the budget a predictor is given: the
node-steps one node can still give the task. The label *feasible* says the task finishes within its
remaining window if served every step from now on (truth <= window).

Histories are rebuilt from the losses each step reports (:class:`core_env.sim.StepOutcome`), the way
an allocator accumulates them from its observations (:mod:`mara_agents.observed`), so a
point's history is exactly the task's first k reports, what a scheduler had seen at that step.

The probes are fitted only on decision points of seeded *train* workloads (:func:`train_workloads`: the
train curve bank, ``reference`` = the train bank, seeds disjoint from the evaluation suites) of the
:data:`PROBE_POLICIES`, which :func:`policy_agent` builds from this package alone (so a row fitted on them,
:mod:`mara_agents.heuristics.prior_edf`, needs nothing from ``benchmarks``).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Sequence

import numpy as np

from core_env.config import LOADS, EnvConfig
from core_env.curves import bank_for
from core_env.generators import Drawn
from core_env.recipe import DEFAULT_RECIPE
from core_env.vector import DiscreteCoREVectorEnv
from core_env.workload import Workload
from mara_agents.protocols import REMAINING_DEMAND, Agent
from mara_agents.rollout import play

#: Buckets of reports observed: (label, lowest k, highest k), in order.
BUCKETS: tuple[tuple[str, int, float], ...] = (("1–2", 1, 2), ("3–5", 3, 5), ("6–10", 6, 10), ("11–20", 11, 20), ("> 20", 21, np.inf))
BUCKET_LABELS = tuple(label for label, _, _ in BUCKETS)
#: Seed of the probes' train workloads; their entropy lists differ from the suites' (5 entries) in length.
PROBE_SEED = 20270117
#: Train workloads per task set (one batch per policy) the probes are fitted on.
TRAIN_EPISODES = 12
#: The policies whose decision points the probes are fitted on (and Table 1 is scored on).
PROBE_POLICIES = ("edf", "edf-admission:oracle")


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
        policy: the name of the policy that scheduled the rollout (the agent ``make(policy)`` of :func:`collect`).
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


def policy_agent(policy: str) -> Agent:
    """A heuristic (:data:`mara_agents.heuristics.HEURISTICS`, default arguments) or an allocator row
    (``ALLOCATOR[:PREDICTOR][,key=int...]``, :func:`mara_agents.allocators.make_allocator`): the agent the
    benchmark row of that name is (:func:`benchmarks.agents.make_agent`), built from this package alone."""
    from mara_agents.allocators import make_allocator
    from mara_agents.heuristics import HEURISTICS

    return HEURISTICS[policy]() if policy in HEURISTICS else make_allocator(policy)


def collect(policy: str, workloads: Sequence[Workload], config: EnvConfig, episodes: Sequence | None = None,
            make: Callable[[str], Agent] = policy_agent) -> DecisionPoints:
    """Roll the agent ``make(policy)`` out on ``workloads`` (one batch, to the end) and record every decision point.

    The loop is :func:`mara_agents.rollout.play` on the vector env, as in :func:`benchmarks.rollout.run_agent`
    (the same observations, oracle and steps), with the points read from the batch's (read-only) simulator
    arrays before each action and the reports from each step's outcome (a batch observer). ``make``: how a
    policy name becomes an agent (:func:`policy_agent`; the benchmarks pass :func:`benchmarks.agents.make_agent`,
    which knows every benchmark row).
    """
    if not workloads:
        raise ValueError("collect needs at least one workload")
    episodes = tuple(episodes) if episodes is not None else tuple(range(len(workloads)))
    if len(episodes) != len(workloads):
        raise ValueError(f"got {len(episodes)} episode ids for {len(workloads)} workloads")
    agent = make(policy)
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


def train_points(task_set: str, policies: Sequence[str] = PROBE_POLICIES, episodes: int = TRAIN_EPISODES, n_nodes: int = 4,
                 make: Callable[[str], Agent] = policy_agent) -> list[DecisionPoints]:
    """The decision points of each of ``policies`` (built by ``make``) on the task set's train workloads
    (:func:`train_workloads`, episode ids ``(task_set, "train-fit", e)``): what the probes are fitted on."""
    workloads = train_workloads(task_set, episodes, n_nodes)
    config = EnvConfig(task_set=task_set, n_nodes=n_nodes)
    return [collect(policy, workloads, config, [(task_set, "train-fit", e) for e in range(episodes)], make) for policy in policies]
