"""Same workload + same actions ⇒ identical whole episodes, in one process and across processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import masked_random_actions, parallel_trajectory_digest, run_gym, run_parallel, trajectory_digest

from core_env import discrete_core_v1
from core_env.config import make_config
from core_env.features import observations
from core_env.gym_env import DiscreteCoREEnv
from core_env.sim import Simulator
from core_env.workload import load_suite

CONFIG = {"n_nodes": 3, "n_slots": 5, "arrival_steps": 50, "switch_cost": 0.2, "node_speeds": (1.0, 0.5, 2.0)}
SUITE = {"suite": "eval", "task_set": "rl_ood", "load": "x1.5", "root": 2, "episode": 1, "any_nodes": True}  # on 3 nodes, on purpose


def workload_arrays(workload):
    return [workload.arrival, workload.deadline, workload.target, workload.batches_per_step, workload.curve]


@pytest.mark.parametrize("reset", [{"seed": 7}, {"options": SUITE}], ids=["seed", "suite"])
def test_same_workload_and_actions_give_identical_parallel_episodes(reset):
    first = run_parallel(discrete_core_v1.parallel_env(**CONFIG), **reset, policy_seed=11)
    second = run_parallel(discrete_core_v1.parallel_env(**CONFIG), **reset, policy_seed=11)
    assert len(first) > 50
    assert trajectory_digest(first) == trajectory_digest(second)
    if "seed" in reset:
        other_policy = run_parallel(discrete_core_v1.parallel_env(**CONFIG), **reset, policy_seed=12)
        assert trajectory_digest(other_policy) != trajectory_digest(first)  # the digest sees the actions' effect


@pytest.mark.parametrize("reset", [{"seed": 7}, {"options": SUITE}], ids=["seed", "suite"])
def test_same_workload_and_actions_give_identical_gym_episodes(reset):
    first = run_gym(DiscreteCoREEnv(**CONFIG), **reset, policy_seed=3)
    second = run_gym(DiscreteCoREEnv(**CONFIG), **reset, policy_seed=3)
    assert trajectory_digest(first) == trajectory_digest(second)


def test_reset_with_the_same_seed_on_a_used_env_replays_the_episode():
    env = discrete_core_v1.parallel_env(**CONFIG)
    first = trajectory_digest(run_parallel(env, seed=4))
    run_parallel(env, seed=5)
    assert trajectory_digest(run_parallel(env, seed=4)) == first


def test_different_seeds_give_different_workloads():
    env = discrete_core_v1.parallel_env(**CONFIG)
    env.reset(seed=1)
    a = workload_arrays(env.episode.workload)
    env.reset(seed=2)
    b = workload_arrays(env.episode.workload)
    assert any(x.shape != y.shape or not np.array_equal(x, y) for x, y in zip(a, b))


def test_episode_digest_is_identical_in_a_separate_process():
    local = parallel_trajectory_digest(seed=9, policy_seed=1, **CONFIG)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from conftest import parallel_trajectory_digest\n"
        f"print(parallel_trajectory_digest(seed=9, policy_seed=1, **{CONFIG!r}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)], capture_output=True, text=True,
                            timeout=120, env={"PYTHONHASHSEED": "12345", "PATH": ""})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == local


def test_same_seed_gives_the_same_workload_and_observations_in_both_views():
    par = discrete_core_v1.parallel_env(**CONFIG)
    gym_env = DiscreteCoREEnv(**CONFIG)
    par_obs, _ = par.reset(seed=21)
    gym_obs, _ = gym_env.reset(seed=21)
    for x, y in zip(workload_arrays(par.episode.workload), workload_arrays(gym_env.episode.workload)):
        assert np.array_equal(x, y)
    rng = np.random.default_rng(0)
    while par.agents:
        stacked = np.stack([par_obs[a]["observation"] for a in par.possible_agents])
        assert np.array_equal(stacked, gym_obs["observation"])
        actions = masked_random_actions(rng, gym_obs["action_mask"])
        par_obs, rewards, terms, truncs, infos = par.step({f"node_{i}": int(a) for i, a in enumerate(actions)})
        gym_obs, reward, terminated, truncated, info = gym_env.step(actions)
        assert rewards["node_0"] == reward and terms["node_0"] == terminated and truncs["node_0"] == truncated
        assert {k: v for k, v in infos["node_0"].items() if k not in ("conflict", "invalid_action")} == {
            k: v for k, v in info.items() if k not in ("conflict", "invalid_action")}
    assert terminated
    par.reset()  # the next unseeded episode continues the same generator in both views
    gym_env.reset()
    for x, y in zip(workload_arrays(par.episode.workload), workload_arrays(gym_env.episode.workload)):
        assert np.array_equal(x, y)


def test_batched_simulator_matches_single_environments():
    config = make_config(**CONFIG)
    workloads = [load_suite("id", "train", root, 0) for root in range(3)]
    batched = Simulator(config, batch_size=3)
    batched.reset(workloads)
    singles = [Simulator(config, 1) for _ in workloads]
    for sim, workload in zip(singles, workloads):
        sim.reset([workload])
    rng = np.random.default_rng(0)
    for _ in range(200):
        _, masks = observations(batched, config.history)
        actions = np.stack([masked_random_actions(rng, m) for m in masks])
        outcome = batched.step(actions)
        for b, sim in enumerate(singles):
            single = sim.step(actions[b : b + 1])
            for name in ("completed", "failed", "rejected", "conflicts", "invalid", "served", "reported", "terminated"):
                assert np.array_equal(getattr(outcome, name)[b], getattr(single, name)[0]), name
            assert np.array_equal(batched.task[b], sim.task[0]) and np.array_equal(batched.progress[b], sim.progress[0])
            assert np.array_equal(observations(batched, config.history)[0][b], observations(sim, config.history)[0][0])
    assert batched.stats["completed"].sum() > 0
