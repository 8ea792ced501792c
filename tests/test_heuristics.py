"""The heuristic schedulers and the Agent → PettingZoo policy adapter."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import tiny_workload

from benchmarks.rollout import run_agent, run_parallel_episode
from core_env import discrete_core_v1, features
from core_env.config import EnvConfig
from core_env.sim import Simulator
from core_env.curves.stress import stress_bank
from core_env.suites import load_suite
from core_env.workload import Workload
from mara_agents import Agent, PettingZooPolicy
from mara_agents.heuristics import EDF, FIFO, HEURISTICS, Clairvoyant, RandomAgent, serve_in_order
from mara_agents.protocols import REMAINING_DEMAND

BANK = stress_bank()
LEARNER = BANK.curve(0)


def make_agent(name: str) -> Agent:
    return HEURISTICS[name]()


def hand_workload(tasks: list[tuple[int, int, int | None]]) -> Workload:
    """Tasks (arrival, deadline, demand), sorted by arrival, on the stress curves; demand None is a flat
    task that never finishes."""
    rows = []
    for arrival, deadline, demand in tasks:
        if demand is None:
            rows.append((arrival, deadline, 0.5, 1.0, 1))
        else:  # the reported loss at nominal step m is LEARNER[m - 1]: first below target at m = demand
            rows.append((arrival, deadline, 0.5 * (LEARNER[demand - 2] + LEARNER[demand - 1]), 1.0, 0))
    return tiny_workload(rows, arrival_steps=tasks[-1][0] + 1, bank=BANK)


def observe_at(workload: Workload, t: int, config: EnvConfig) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Observation, mask and oracle of a one-environment batch after ``t`` idle steps."""
    sim = Simulator(config, 1)
    sim.reset([workload])
    for _ in range(t):
        sim.step(np.zeros((1, config.n_nodes), np.int64))
    observation, mask = features.observations(sim, config.history)
    return observation, mask, {REMAINING_DEMAND: sim.remaining_demand()}


def rollout_snapshots(config: EnvConfig, batch: int = 6, every: int = 40) -> list[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]:
    """States met by a random scheduler on id evaluation workloads, every ``every`` steps."""
    sim = Simulator(config, batch)
    sim.reset([load_suite("id", "train", r % 5, r // 5) for r in range(batch)])
    agent = RandomAgent(seed=1)
    snapshots = []
    while not sim.done.all():
        observation, mask = features.observations(sim, config.history)
        if sim.t.max() % every == 0:
            snapshots.append((observation, mask, {REMAINING_DEMAND: sim.remaining_demand()}))
        sim.step(agent.act(observation, mask))
    return snapshots


CONFIGS = [EnvConfig(), EnvConfig(n_nodes=6, n_slots=4), EnvConfig(n_nodes=1, n_slots=3)]


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: f"N{c.n_nodes}K{c.n_slots}")
def snapshots(request):
    return request.param, rollout_snapshots(request.param)


@pytest.mark.parametrize("name", sorted(HEURISTICS))
def test_actions_are_masked_distinct_and_batched(name, snapshots):
    config, states = snapshots
    agent = make_agent(name)
    agent.reset(6, config.n_nodes, config.n_slots)
    for observation, mask, oracle in states:
        actions = agent.act(observation, mask, oracle)
        assert actions.shape == (6, config.n_nodes) and actions.dtype == np.int64
        assert np.all(np.take_along_axis(mask, actions[..., None], axis=2) == 1)
        for row in actions:
            busy = row[row > 0]
            assert busy.size == np.unique(busy).size, f"two nodes on one task: {row}"


@pytest.mark.parametrize("name", ["random", "fifo", "edf"])
def test_non_oracle_heuristics_leave_no_node_idle_while_a_task_waits(name, snapshots):
    config, states = snapshots
    agent = make_agent(name)
    for observation, mask, _ in states:
        active = mask[:, 0, 1:].sum(axis=1)
        assert np.array_equal((agent.act(observation, mask) > 0).sum(axis=1), np.minimum(active, config.n_nodes))


@pytest.mark.parametrize("name", ["fifo", "edf", "clairvoyant"])
def test_a_batch_decides_like_each_environment_alone(name, snapshots):
    _, states = snapshots
    agent = make_agent(name)
    for observation, mask, oracle in states:
        together = agent.act(observation, mask, oracle)
        alone = [agent.act(observation[b : b + 1], mask[b : b + 1], {REMAINING_DEMAND: oracle[REMAINING_DEMAND][b : b + 1]})[0] for b in range(len(mask))]
        assert np.array_equal(together, np.stack(alone))


# Slots at t = 3 of this workload: 0 = D (age 0, deadline 10), 1 = B (age 3, deadline 50),
# 2 = C (age 2, deadline 50), 3 empty. A took slot 0 first and failed at its deadline 2.
ORDER_CASE = [(0, 2, 5), (0, 50, 5), (1, 50, 5), (3, 10, 5)]


@pytest.mark.parametrize(("agent", "n_nodes", "expected"), [
    (FIFO(), 2, [2, 3]),
    (FIFO(), 4, [2, 3, 1, 0]),
    (EDF(), 2, [1, 2]),
    (EDF(), 4, [1, 2, 3, 0]),
])
def test_fifo_serves_the_oldest_and_edf_the_earliest_deadlines(agent, n_nodes, expected):
    observation, mask, _ = observe_at(hand_workload(ORDER_CASE), 3, EnvConfig(n_nodes=n_nodes, n_slots=4))
    assert agent.act(observation, mask).tolist() == [expected]


# At t = 0: slot 0 never finishes, slot 1 needs 6 steps within 5, slot 2 needs 3 within 20, slot 3 needs
# exactly its 2 steps to deadline.
ADMISSION_CASE = [(0, 5, None), (0, 5, 6), (0, 20, 3), (0, 2, 2)]


@pytest.mark.parametrize(("n_nodes", "expected"), [(2, [4, 3]), (4, [4, 3, 0, 0])])
def test_clairvoyant_serves_only_tasks_it_can_still_finish_in_deadline_order(n_nodes, expected):
    observation, mask, oracle = observe_at(hand_workload(ADMISSION_CASE), 0, EnvConfig(n_nodes=n_nodes, n_slots=4))
    assert oracle[REMAINING_DEMAND].tolist() == [[np.inf, 6.0, 3.0, 2.0]]
    assert Clairvoyant().act(observation, mask, oracle).tolist() == [expected]
    assert EDF().act(observation, mask).tolist()[0][:2] == [4, 1]


def test_clairvoyant_without_oracle_raises():
    observation, mask, _ = observe_at(hand_workload(ADMISSION_CASE), 0, EnvConfig(n_nodes=2, n_slots=4))
    with pytest.raises(ValueError, match="remaining_demand"):
        Clairvoyant().act(observation, mask)


def test_serve_in_order_ties_go_to_the_lower_slot_and_extra_nodes_idle():
    priority = np.array([[2.0, 1.0, 1.0, 0.0]])
    admitted = np.array([[True, True, True, False]])
    assert serve_in_order(priority, admitted, 5).tolist() == [[2, 3, 1, 0, 0]]


def test_random_agent_is_reproducible_and_leaves_the_global_rng_alone():
    observation, mask, _ = rollout_snapshots(EnvConfig(), batch=2)[3]
    global_state = np.random.get_state()[1].copy()
    first = [RandomAgent(seed=7).act(observation, mask) for _ in range(2)]
    assert np.array_equal(first[0], first[1])
    agent = RandomAgent(seed=7)
    draws = {agent.act(observation, mask).tobytes() for _ in range(20)}
    assert len(draws) > 1
    assert np.array_equal(np.random.get_state()[1], global_state)


def test_policy_adapter_plays_a_full_pettingzoo_episode():
    env = discrete_core_v1.parallel_env()
    policy = PettingZooPolicy(RandomAgent(seed=0))
    observations, infos = env.reset(seed=3)
    steps = 0
    while env.agents:
        actions = policy(observations, infos)
        assert set(actions) == set(env.agents) and all(type(a) is int for a in actions.values())
        observations, _, _, _, infos = env.step(actions)
        steps += 1
    final = infos["node_0"]
    assert steps == final["t"] > 0
    assert final["conflicts"] == final["invalid_actions"] == 0
    assert final["completed"] + final["failed"] + final["rejected"] == final["arrived"] > 0


@pytest.mark.parametrize("name", ["edf", "clairvoyant"])
def test_pettingzoo_view_with_the_adapter_matches_the_batched_runner(name):
    batched = run_agent(make_agent(name), [load_suite("id", "train", 1, 2)], EnvConfig())
    single = run_parallel_episode(discrete_core_v1.parallel_env(), make_agent(name), options={"suite": "eval", "root": 1, "episode": 2})
    for key, value in single.items():
        assert batched[key][0] == pytest.approx(value, rel=1e-12), key


def test_adapter_asks_for_the_oracle_it_needs():
    env = discrete_core_v1.parallel_env()
    observations, infos = env.reset(seed=0)
    with pytest.raises(ValueError, match="remaining_demand"):
        PettingZooPolicy(Clairvoyant())(observations, infos)
