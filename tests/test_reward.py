"""Team rewards: sparse = completions per step; shaped = sparse + potential difference, whose undiscounted
return equals the number of completions exactly when the episode terminates, and the completions plus the
final potential (the ``potential`` info) when ``max_cycles`` truncates it (docs/env.md, Rewards)."""

from __future__ import annotations

import math

import pytest
from conftest import act, parallel_on, run_gym, run_parallel, tiny_bank, tiny_workload

from core_env import discrete_core_v1
from core_env.gym_env import DiscreteCoREEnv

SHORT = {"n_nodes": 3, "n_slots": 6, "arrival_steps": 60}
VARIANTS = {"plain": {}, "switch_and_speeds": {"switch_cost": 0.3, "node_speeds": (0.5, 1.0, 2.0)}}


def _parallel_returns(config, seed):
    """(rewards, infos, terminated, truncated) of a masked-random parallel episode (node_0's view)."""
    steps = run_parallel(discrete_core_v1.parallel_env(**config), seed=seed, policy_seed=seed)[1:]
    for step in steps:
        assert len(set(step[1].values())) == 1  # a team reward: identical for every node
    last = steps[-1]
    return [s[1]["node_0"] for s in steps], [s[4]["node_0"] for s in steps], all(last[2].values()), any(last[3].values())


def _gym_returns(config, seed):
    steps = run_gym(DiscreteCoREEnv(**config), seed=seed, policy_seed=seed)[1:]
    return [s[1] for s in steps], [s[4] for s in steps], steps[-1][2], steps[-1][3]


@pytest.mark.parametrize("view", [_parallel_returns, _gym_returns], ids=["parallel", "gym"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("task_set", ["id", "rl_ood", "vit_ood"])
def test_shaped_return_equals_the_number_of_completions(view, variant, task_set):
    config = {**SHORT, **VARIANTS[variant], "task_set": task_set, "reward": "shaped", "load": 0.3}
    shaped_steps = 0
    for seed in (1, 2, 3):
        rewards, infos, terminated, truncated = view(config, seed)
        assert terminated and not truncated
        assert infos[-1]["completed"] > 0
        assert abs(math.fsum(rewards) - infos[-1]["completed"]) < 1e-9
        assert infos[-1]["potential"] == 0.0  # no task is left: Φ(s_T) = 0
        shaped_steps += sum(r != round(r) for r in rewards)
    assert shaped_steps > 0  # the shaping term is really there


@pytest.mark.parametrize("view", [_parallel_returns, _gym_returns], ids=["parallel", "gym"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_truncated_shaped_return_is_the_completions_plus_the_final_potential(view, variant):
    # max_cycles inside the arrival window: every episode is cut with tasks in progress
    config = {**SHORT, **VARIANTS[variant], "reward": "shaped", "load": 0.3, "max_cycles": 40}
    held = 0
    for seed in (1, 2, 3, 4):
        rewards, infos, terminated, truncated = view(config, seed)
        assert truncated and not terminated and len(rewards) == 40
        final = infos[-1]
        assert abs(math.fsum(rewards) - (final["completed"] + final["potential"])) < 1e-9
        held += final["potential"] > 0
    assert held > 0  # the potential left at truncation is really there (else this is the terminated case)


@pytest.mark.parametrize("reward", ["shaped", "sparse"])
def test_potential_info_is_the_return_so_far_minus_the_completions_at_every_step(reward):
    trajectory = run_parallel(discrete_core_v1.parallel_env(**SHORT, reward=reward, load=0.3), seed=5, policy_seed=5)
    infos = [trajectory[0][1]] + [step[4] for step in trajectory[1:]]
    rewards = [0.0] + [step[1]["node_0"] for step in trajectory[1:]]
    assert all(info["potential"] == 0.0 for info in infos[0].values())  # Φ(s_0) = 0: nothing has reported
    for t, step_infos in enumerate(infos):
        assert len({info["potential"] for info in step_infos.values()}) == 1  # a team value, like the reward
        info = step_infos["node_0"]
        assert abs(math.fsum(rewards[: t + 1]) - (info["completed"] + info["potential"])) < 1e-9
    potentials = [step_infos["node_0"]["potential"] for step_infos in infos]
    assert (max(potentials) > 0) == (reward == "shaped")  # 0 throughout without shaping


def test_shaped_return_equals_completions_on_the_stress_scenario():
    rewards, infos, terminated, _ = _parallel_returns({"task_set": "stress", "n_slots": 8}, seed=0)
    assert terminated and abs(math.fsum(rewards) - infos[-1]["completed"]) < 1e-9


@pytest.mark.parametrize("view", [_parallel_returns, _gym_returns], ids=["parallel", "gym"])
def test_sparse_reward_is_the_number_of_completions_each_step(view):
    rewards, infos, _, _ = view({**SHORT, "reward": "sparse", "load": 0.4}, seed=3)
    completed = [0] + [info["completed"] for info in infos]
    assert rewards == [float(now - before) for before, now in zip(completed, completed[1:])]
    assert completed[-1] > 0


def test_shaped_reward_is_the_kappa_weighted_log_progress_difference():
    # LINEAR with one batch per step reports 10, 9, 8, ...; target 5; then the task fails at its deadline
    kappa = 0.7
    env, _, _ = parallel_on(tiny_workload([(0, 3, 5.0, 1.0)]), kappa=kappa)
    rewards = [act(env, 1, 0)[1]["node_0"] for _ in range(3)]
    phi = [0.0, math.log(10 / 9) / math.log(10 / 5)]
    assert rewards[0] == pytest.approx(0.0, abs=1e-12)  # first report: l = l0, no progress
    assert rewards[1] == pytest.approx(kappa * (phi[1] - phi[0]), abs=1e-12)
    # third step: progress to 8, then the task fails and gives all of its potential back
    assert rewards[2] == pytest.approx(-kappa * phi[1], abs=1e-12)
    assert math.fsum(rewards) == pytest.approx(0.0, abs=1e-12)


def test_completing_task_is_refunded_to_exactly_one():
    env, _, _ = parallel_on(tiny_workload([(0, 9, 8.0, 1.0)]), kappa=0.5)
    rewards = [act(env, 1, 0)[1]["node_0"] for _ in range(3)]
    assert math.fsum(rewards) == pytest.approx(1.0, abs=1e-12)
    assert rewards[2] > 0.5  # +1 minus the potential the task had accumulated


def test_potential_is_capped_when_the_loss_rebounds_above_the_first_report():
    rising = [5.0, 6.0, 7.0, 8.0]  # the loss only rises: progress is clipped to 0, never negative
    env, _, _ = parallel_on(tiny_workload([(0, 9, 1.0, 1.0)], bank=tiny_bank(rising)))
    rewards = [act(env, 1, 0)[1]["node_0"] for _ in range(3)]
    assert rewards == [0.0, 0.0, 0.0]
