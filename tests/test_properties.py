"""Invariants over random configurations and random (often invalid or conflicting) actions."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core_env import discrete_core_v1
from core_env.curves import CurveBank
from core_env.gym_env import DiscreteCoREEnv

PROPERTY_SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def configs(draw):
    n = draw(st.integers(1, 5))
    config = {
        "n_nodes": n,
        "n_slots": draw(st.integers(1, 6)),
        "arrival_steps": draw(st.integers(5, 40)),
        "load": draw(st.floats(0.05, 1.0)),
        "task_set": draw(st.sampled_from(["id", "rl_ood", "vit_ood"])),
        "switch_cost": draw(st.sampled_from([0.0, 0.25, 0.9])),
        "history": draw(st.integers(1, 4)),
        "max_cycles": draw(st.integers(20, 150)),
        "reward": draw(st.sampled_from(["shaped", "sparse"])),
    }
    if draw(st.booleans()):
        config["node_speeds"] = draw(st.lists(st.floats(0.1, 4.0), min_size=n, max_size=n))
    return config


def random_actions(rng: np.random.Generator, n: int, k: int, mask: np.ndarray, p_valid: float) -> np.ndarray:
    """Mostly valid choices (often colliding), sometimes empty slots, always in the action space."""
    valid = np.flatnonzero(mask)
    return np.array([rng.choice(valid) if rng.random() < p_valid else rng.integers(0, k + 1) for _ in range(n)])


@PROPERTY_SETTINGS
@given(config=configs(), seed=st.integers(0, 2**16), policy_seed=st.integers(0, 2**16), p_valid=st.floats(0, 1))
def test_parallel_env_invariants_hold_at_every_step(config, seed, policy_seed, p_valid):
    env = discrete_core_v1.parallel_env(**config)
    sim = env.episode.sim
    n, k = config["n_nodes"], config["n_slots"]
    rng = np.random.default_rng(policy_seed)
    obs, infos = env.reset(seed=seed)
    in_slots = set(int(i) for i in sim.task[0] if i >= 0)
    gone = set(range(infos["node_0"]["arrived"])) - in_slots  # tasks that left or were rejected
    while True:
        _check_observations(env, obs, k)
        stats = infos["node_0"]
        assert stats["completed"] + stats["failed"] + stats["rejected"] + stats["active"] == stats["arrived"]
        assert stats["active"] == len(in_slots)
        if not env.agents:
            break
        actions = random_actions(rng, n, k, obs["node_0"]["action_mask"], p_valid)
        before = sim.task[0].copy()
        obs, rewards, terms, truncs, infos = env.step({f"node_{i}": int(a) for i, a in enumerate(actions)})
        assert all(np.isfinite(r) for r in rewards.values())

        node_slot = sim.node_slot[0]
        served_slots = node_slot[node_slot >= 0]
        assert len(set(served_slots.tolist())) == served_slots.size  # no task on two nodes
        served_tasks = before[served_slots]
        assert np.all(served_tasks >= 0)  # only occupied slots are served
        assert not set(served_tasks.tolist()) & gone  # never served after it left
        for i in range(n):  # an idle outcome is a choice of idle, an invalid choice or a lost conflict
            if node_slot[i] < 0 and actions[i] > 0:
                assert infos[f"node_{i}"]["invalid_action"] + infos[f"node_{i}"]["conflict"] == 1
            elif node_slot[i] >= 0:
                assert actions[i] == node_slot[i] + 1

        now = set(int(i) for i in sim.task[0] if i >= 0)
        assert not now & gone  # no resurrection
        gone |= in_slots - now
        gone |= set(range(stats["arrived"], infos["node_0"]["arrived"])) - now  # rejected arrivals
        in_slots = now


def _check_observations(env, obs, k: int) -> None:
    state = env.state()
    assert np.all(np.isfinite(state)) and env.state_space.contains(state)
    for agent, o in obs.items():
        assert np.all(np.isfinite(o["observation"]))
        assert env.observation_space(agent).contains(o)
        mask = o["action_mask"]
        assert mask[0] == 1
        assert mask[1:].tolist() == [int(env.slot_task(j) >= 0) for j in range(k)]


@PROPERTY_SETTINGS
@given(config=configs(), seed=st.integers(0, 2**16))
def test_gym_observations_stay_finite_and_inside_the_space(config, seed):
    env = DiscreteCoREEnv(**config)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    done = False
    while not done:
        assert env.observation_space.contains(obs) and np.all(np.isfinite(obs["observation"]))
        assert env.action_masks().tolist() == obs["action_mask"].astype(bool).reshape(-1).tolist()
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        assert np.isfinite(reward)
        done = terminated or truncated
    assert env.observation_space.contains(obs)


@st.composite
def curve_and_interval(draw):
    curve = draw(st.lists(st.floats(1e-3, 1e3), min_size=1, max_size=30))
    x0 = draw(st.floats(0, 2 * len(curve)))
    width = draw(st.floats(1e-3, 2 * len(curve)))
    return np.array(curve), x0, x0 + width


@settings(max_examples=200, deadline=None)
@given(case=curve_and_interval())
def test_interval_mean_lies_between_the_losses_it_averages(case):
    curve, x0, x1 = case
    bank = CurveBank("p", [curve], ["f"])
    mean = float(bank.interval_mean(np.array([0]), np.array([x0]), np.array([x1]))[0])
    covered = list(curve[int(np.floor(x0)) : int(np.ceil(x1))])
    if x1 > curve.size:
        covered.append(bank.plateau[0])
    # the mean is a difference of prefix integrals divided by the width: rounding scales with their size
    prefix_scale = (float(np.sum(curve)) + bank.plateau[0] * x1) / (x1 - x0)
    tolerance = 1e-9 * max(covered) + 1e-13 * prefix_scale
    assert min(covered) - tolerance <= mean <= max(covered) + tolerance


@settings(max_examples=100, deadline=None)
@given(case=curve_and_interval(), split=st.floats(0, 1))
def test_interval_integrals_add_up(case, split):
    curve, x0, x1 = case
    bank = CurveBank("p", [curve], ["f"])
    xm = x0 + split * (x1 - x0)
    c = np.array([0])
    whole = bank.integral(c, np.array([x1])) - bank.integral(c, np.array([x0]))
    parts = (bank.integral(c, np.array([xm])) - bank.integral(c, np.array([x0]))) + (
        bank.integral(c, np.array([x1])) - bank.integral(c, np.array([xm])))
    np.testing.assert_allclose(parts, whole, rtol=1e-9, atol=1e-9)
