"""Ceilings on the completion rate: the exact offline optimum (a MILP) and a labelled relaxation.

* :func:`milp_ceiling`: the offline optimum number of completions of a workload on ``n_nodes``
  unit-speed nodes, knowing every task's hidden demand, solved as a mixed-integer program with scipy's
  ``milp`` (HiGHS). **The slot limit K is relaxed** (every task is servable from arrival; no task is
  rejected), so the answer is an upper bound for any K and equals the optimum when slots never bind.
  With unit speeds and no switching cost a task's reports depend only on how many node-steps it has
  received, so it completes iff it receives ``n*`` of them inside its window; no schedule of the
  simulator (any agent, any K) completes more. Node speeds > 1 are not covered: the ceiling is for
  unit-speed nodes (the evaluation suites' setting).

  Model: binary ``z_k`` (task k completes), continuous ``x_{k,t} ∈ [0, 1]`` (task k served in step
  t, for ``a_k <= t < d_k``); ``Σ_t x_{k,t} >= n*_k z_k``, ``Σ_k x_{k,t} <= N``, ``x_{k,t} <= z_k``;
  maximise ``Σ z_k``. For fixed ``z`` the constraints on ``x`` are a bipartite transportation problem
  with integer data, whose LP has integral vertices, so continuous ``x`` loses nothing: the optimum is
  the integral one. Tasks with ``n*_k`` above their window (or infinite) are fixed to 0.
* :func:`independent_feasibility_bound`: the share of tasks that could finish alone — a relaxation
  that ignores contention entirely, labelled as such (far above the optimum under load). With node
  speeds, a task is granted the fastest node every step.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from core_env.extras import needs
from core_env.workload import Workload

#: Seconds HiGHS may spend on one episode before its best answer and dual bound are reported.
MILP_TIME_LIMIT = 60.0


@dataclasses.dataclass(frozen=True)
class Ceiling:
    """The offline optimum of one workload.

    Attributes:
        completed: tasks completed by the best schedule found (the optimum when ``gap`` is 0).
        bound: HiGHS's dual bound on completions (>= the optimum; equal to ``completed`` when proven).
        arrived: tasks in the workload (the completion rate's denominator).
        gap: relative MIP gap (bound − completed) / max(bound, 1).
        seconds: solver wall time.
        status: HiGHS status message.
    """

    completed: int
    bound: float
    arrived: int
    gap: float
    seconds: float
    status: str

    @property
    def rate(self) -> float:
        """Optimum completion rate (best found)."""
        return self.completed / self.arrived if self.arrived else 0.0

    @property
    def rate_bound(self) -> float:
        """Upper bound on the completion rate (the dual bound)."""
        return min(self.bound, self.arrived) / self.arrived if self.arrived else 0.0


def milp_ceiling(workload: Workload, n_nodes: int, time_limit: float = MILP_TIME_LIMIT) -> Ceiling:
    """The offline optimum completions of ``workload`` on ``n_nodes`` unit-speed nodes (module docstring)."""
    return _relaxed_milp(workload, n_nodes, time_limit)[0]


def milp_chosen(workload: Workload, n_nodes: int, time_limit: float = MILP_TIME_LIMIT, prefer: np.ndarray | None = None) -> np.ndarray:
    """Indices of the tasks a slot-relaxed optimum (:func:`milp_ceiling`'s best schedule) completes.
    ``prefer`` (one number per task) breaks the ties between optimal task sets: among the sets of the
    largest size, the one with the largest sum of ``prefer`` (its weight is too small to trade a
    completion for it)."""
    return _relaxed_milp(workload, n_nodes, time_limit, prefer)[1]


def _relaxed_milp(workload: Workload, n_nodes: int, time_limit: float, prefer: np.ndarray | None = None) -> tuple[Ceiling, np.ndarray]:
    with needs(__name__):
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_matrix

    if not isinstance(n_nodes, (int, np.integer)) or isinstance(n_nodes, bool) or n_nodes < 1:
        raise ValueError(f"n_nodes must be an int >= 1, got {n_nodes!r}")
    m = len(workload)
    window, need = workload.window, workload.demand  # need: inf for a target the run never reaches
    candidates = np.flatnonzero(need <= window)
    if candidates.size == 0:
        return Ceiling(0, 0.0, m, 0.0, 0.0, "no task fits its window"), candidates
    c = candidates.size
    lengths = window[candidates]
    first_x = c + np.concatenate([[0], np.cumsum(lengths)[:-1]])  # variable index of x_{k, a_k}
    n_x = int(lengths.sum())
    owner = np.repeat(np.arange(c), lengths)  # candidate of each x
    step = workload.arrival[candidates][owner] + (np.arange(n_x) - (first_x - c)[owner])  # t of each x
    t0 = int(step.min())
    steps = int(step.max()) - t0 + 1
    x_index = c + np.arange(n_x)
    rows, cols, vals = [], [], []
    # (1) Σ_t x_{k,t} − n*_k z_k >= 0, one row per candidate
    rows += [owner, np.arange(c)]
    cols += [x_index, np.arange(c)]
    vals += [np.ones(n_x), -need[candidates]]
    # (2) Σ_k x_{k,t} <= N, one row per step
    rows.append(c + (step - t0))
    cols.append(x_index)
    vals.append(np.ones(n_x))
    # (3) x_{k,t} − z_k <= 0, one row per x
    base = c + steps
    rows += [base + np.arange(n_x), base + np.arange(n_x)]
    cols += [x_index, owner]
    vals += [np.ones(n_x), -np.ones(n_x)]
    n_rows = base + n_x
    matrix = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n_rows, c + n_x)).tocsr()
    lower = np.concatenate([np.zeros(c), np.full(steps, -np.inf), np.full(n_x, -np.inf)])
    upper = np.concatenate([np.full(c, np.inf), np.full(steps, float(n_nodes)), np.zeros(n_x)])
    objective = np.concatenate([-np.ones(c), np.zeros(n_x)])
    if prefer is not None:  # a tie-break worth less than one completion in all
        tie = np.asarray(prefer, dtype=float)[candidates]
        tie = tie - tie.min()
        objective[:c] -= 0.5 * tie / (tie.sum() + 1.0)
    integrality = np.concatenate([np.ones(c), np.zeros(n_x)])
    start = time.perf_counter()
    result = milp(objective, constraints=LinearConstraint(matrix, lower, upper), integrality=integrality,
                  bounds=Bounds(0.0, 1.0), options={"time_limit": float(time_limit), "disp": False})
    seconds = time.perf_counter() - start
    if result.x is None:
        raise RuntimeError(f"the MILP found no solution within {time_limit} s: {result.message}")
    chosen = np.round(result.x[:c]) > 0.5
    completed = int(chosen.sum())
    dual = getattr(result, "mip_dual_bound", None)
    bound = float(-dual) if dual is not None and np.isfinite(dual) else float(completed)
    bound = max(bound, float(completed))
    return Ceiling(completed, bound, m, (bound - completed) / max(bound, 1.0), seconds, str(result.message)), candidates[chosen]


def independent_feasibility_bound(workload: Workload, speeds: Sequence[float] | None = None) -> float:
    """Share of the workload's tasks that could finish alone, served every step from arrival on the
    fastest node (a relaxation that ignores contention; rejected arrivals count in the denominator)."""
    if len(workload) == 0:
        return 0.0
    fastest = 1.0 if speeds is None else float(np.max(speeds))
    if fastest == 1.0:
        return workload.feasibility_bound()
    demand = workload.bank.demands(workload.curve, workload.target, workload.batches_per_step * fastest)
    return float(np.mean(demand <= workload.window))


def independent_feasibility_bounds(workloads: Sequence[Workload], speeds: Sequence[float] | None = None) -> np.ndarray:
    """(W,) float64 the relaxation of each workload."""
    return np.array([independent_feasibility_bound(w, speeds) for w in workloads], dtype=np.float64)
