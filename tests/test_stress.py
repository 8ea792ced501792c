"""The stress scenario's known answers (docs/env.md, Workloads and seeds: the stress scenario): FIFO = EDF = 0%, clairvoyant = bound = 65%."""

from __future__ import annotations

import pytest

from benchmarks.rollout import run_agent, run_parallel_episode
from core_env import discrete_core_v1
from core_env.config import EnvConfig
from core_env.generators import stress_workload
from mara_agents.bounds import independent_feasibility_bound, independent_feasibility_bounds
from mara_agents.heuristics import HEURISTICS

EXPECTED = {"fifo": (0, 20), "edf": (0, 20), "clairvoyant": (13, 20)}  # (completed, arrived)


def test_independent_feasibility_bound_is_65_percent():
    assert independent_feasibility_bound(stress_workload()) == 0.65
    assert independent_feasibility_bounds([stress_workload(), stress_workload()]).tolist() == [0.65, 0.65]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_batched_runner_reaches_the_known_completion(name):
    workload = stress_workload()
    stats = run_agent(HEURISTICS[name](), [workload, workload], EnvConfig(task_set="stress"))
    completed, arrived = EXPECTED[name]
    assert stats["completed"].tolist() == [completed] * 2
    assert stats["arrived"].tolist() == [arrived] * 2
    assert stats["completion_rate"].tolist() == [completed / arrived] * 2
    assert not stats["truncated"].any()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pettingzoo_view_reaches_the_known_completion(name):
    final = run_parallel_episode(discrete_core_v1.parallel_env(task_set="stress"), HEURISTICS[name]())
    completed, arrived = EXPECTED[name]
    assert (final["completed"], final["arrived"]) == (completed, arrived)
    assert final["completion_rate"] == completed / arrived


def test_clairvoyant_reaches_the_bound_exactly():
    stats = run_agent(HEURISTICS["clairvoyant"](), [stress_workload()], EnvConfig(task_set="stress"))
    assert stats["completion_rate"][0] == independent_feasibility_bound(stress_workload()) == 0.65
