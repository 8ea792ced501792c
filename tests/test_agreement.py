"""Per-step agreement of a played agent with a shadow agent (the teacher-agreement diagnostics column)."""

from __future__ import annotations

import numpy as np

from benchmarks.rollout import _served, run_agent
from core_env.config import EnvConfig
from core_env.generators import generator_for
from mara_agents.heuristics import EDF, FIFO, RandomAgent


def _workloads(config: EnvConfig, count: int = 3):
    return [generator_for(config).workload(np.random.default_rng(seed)) for seed in range(count)]


def test_an_agent_agrees_with_itself_and_playing_is_unchanged_by_a_shadow():
    config = EnvConfig(n_nodes=2, n_slots=6, arrival_steps=40)
    workloads = _workloads(config)
    alone = run_agent(EDF(), workloads, config)
    watched = run_agent(EDF(), workloads, config, shadow=EDF())
    assert np.array_equal(alone["completion_rate"], watched["completion_rate"])
    assert np.all(watched["same_tasks_served"] == 1.0) and np.all(watched["served_also_by_shadow"] == 1.0)


def test_different_agents_disagree_and_the_shares_are_consistent():
    config = EnvConfig(n_nodes=2, n_slots=6, arrival_steps=40)
    stats = run_agent(RandomAgent(seed=1), _workloads(config), config, shadow=FIFO())
    same, overlap = stats["same_tasks_served"], stats["served_also_by_shadow"]
    assert np.all((0 <= same) & (same < 1)) and np.all((0 <= overlap) & (overlap < 1))


def test_served_sets_count_conflicts_once_and_ignore_idle():
    served = _served(np.array([[0, 2, 2], [1, 3, 0]]), K=3)
    assert served.tolist() == [[False, True, False], [True, False, True]]
