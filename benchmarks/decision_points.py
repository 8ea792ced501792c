"""Decision points of benchmark rows' rollouts, and the leak probes fitted on them (Table 1,
:mod:`benchmarks.prediction`).

The machinery is in ``mara_agents``, below the agents that use it: the decision points and their rollout
in :mod:`mara_agents.decision_points`, the probes and their fit in :mod:`mara_agents.predictors.probes`
(the ``prior-edf`` row, :mod:`mara_agents.heuristics.prior_edf`, is fitted there without this package).
This module names their policies by benchmark row: :func:`collect` and :func:`train_probes` build a
policy with :func:`benchmarks.agents.make_agent`, which knows every row (for the heuristic and allocator
rows it is the same agent as :func:`mara_agents.decision_points.policy_agent`); the rest is re-exported.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.agents import make_agent
from core_env.config import EnvConfig
from core_env.workload import Workload
from mara_agents import decision_points as points
from mara_agents.decision_points import (BUCKET_LABELS, BUCKETS, PROBE_POLICIES, PROBE_SEED, TRAIN_EPISODES, DecisionPoints, bucket_of,
                                         train_workloads)
from mara_agents.predictors import probes
from mara_agents.predictors.probes import (CAP, FACTORS, PROBE_HORIZON, PROBE_ROWS, ConstantProbe, PriorProbe, ReportsProbe, WindowProbe,
                                           fit_probes)
from mara_agents.protocols import Predictor

__all__ = ["BUCKET_LABELS", "BUCKETS", "CAP", "FACTORS", "PROBE_HORIZON", "PROBE_POLICIES", "PROBE_ROWS", "PROBE_SEED", "TRAIN_EPISODES",
           "ConstantProbe", "DecisionPoints", "PriorProbe", "ReportsProbe", "WindowProbe", "bucket_of", "collect", "fit_probes", "train_probes",
           "train_workloads"]


def collect(policy: str, workloads: Sequence[Workload], config: EnvConfig, episodes: Sequence | None = None) -> DecisionPoints:
    """The decision points of the benchmark row ``policy`` on ``workloads``
    (:func:`mara_agents.decision_points.collect` with :func:`benchmarks.agents.make_agent`)."""
    return points.collect(policy, workloads, config, episodes, make_agent)


def train_probes(task_set: str, policies: Sequence[str] = PROBE_POLICIES, episodes: int = TRAIN_EPISODES, n_nodes: int = 4,
                 names: Sequence[str] = PROBE_ROWS) -> tuple[dict[str, Predictor], int]:
    """Probes of ``task_set`` fitted on the decision points of the benchmark rows ``policies`` on its train
    workloads (:func:`mara_agents.predictors.probes.train_probes` with :func:`benchmarks.agents.make_agent`);
    also the point count."""
    return probes.train_probes(task_set, policies, episodes, n_nodes, names, make_agent)
