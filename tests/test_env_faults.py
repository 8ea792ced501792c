"""Faults found by fuzzing, each pinned by a test: extreme node speeds (NaN losses, an IndexError in the
middle of a step), steps that raise half-way, the shaped return of truncated episodes, and AEC actions
that were only checked when the parallel step finally ran."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from conftest import FLAT, LINEAR, act, parallel_on, tiny_bank, tiny_workload, trajectory_digest

import core_env
from core_env import discrete_core_v1
from core_env.gym_env import DiscreteCoREEnv

NEVER = 0.5  # a target below every reported loss of LINEAR and FLAT
SLOWEST, FASTEST = 1e-3, 1e3  # the documented node speed range (core_env.config.EnvConfig)
ALMOST_ALL = 1.0 - 2.0**-53  # the largest valid switch_cost: a switch keeps 1.1e-16 of a step's batches


def finite(observations, rewards=None) -> bool:
    arrays = [o["observation"] for o in observations.values()] + [np.array(list((rewards or {}).values()), float)]
    return all(np.isfinite(a).all() for a in arrays)


# ---------------------------------------------------------------- node speeds


@pytest.mark.parametrize("speeds, match", [
    ((1.0, 1e-17), r"node_speeds must each be in \[0.001, 1000.0\], got \(1.0, 1e-17\)"),
    ((1.0, 1e16), r"node_speeds must each be in \[0.001, 1000.0\], got \(1.0, 1e\+16\)"),
    ((9.99e-4, 1.0), r"node_speeds must each be in \[0.001, 1000.0\]"),
    ((1.0, 1000.5), r"node_speeds must each be in \[0.001, 1000.0\]"),
])
@pytest.mark.parametrize("make", [discrete_core_v1.parallel_env, discrete_core_v1.env, DiscreteCoREEnv,
                                  lambda **kw: gym.make(core_env.GYM_ID, **kw)],
                         ids=["parallel", "aec", "gym", "gym.make"])
def test_node_speeds_outside_the_documented_range_raise_in_every_view(make, speeds, match):
    with pytest.raises(ValueError, match=match):
        make(n_nodes=2, node_speeds=speeds)


def test_node_speeds_at_the_range_ends_are_accepted():
    env = discrete_core_v1.parallel_env(n_nodes=2, node_speeds=(SLOWEST, FASTEST))
    assert env.config.node_speeds == (SLOWEST, FASTEST)


@pytest.mark.parametrize("task_set", ["id", "rl_ood", "vit_ood"])
def test_extreme_speeds_and_switch_cost_never_give_nan_or_inf(task_set):
    """Speeds at both range ends and a switch keeping ~1e-16 of the batches: progress too small to move a
    position (x1 == x0) once gave 0/0 losses, hence NaN observations and rewards."""
    env = discrete_core_v1.parallel_env(n_nodes=3, n_slots=4, arrival_steps=60, task_set=task_set, load=0.3,
                                        node_speeds=(SLOWEST, FASTEST, 1.0), switch_cost=ALMOST_ALL)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=1)
    steps = 0
    while env.agents:
        actions = {a: int(rng.choice(np.flatnonzero(obs[a]["action_mask"]))) for a in env.agents}
        obs, rewards, _, _, infos = env.step(actions)
        assert finite(obs, rewards), f"non-finite observation or reward at step {steps}"
        steps += 1
    assert infos["node_0"]["switches"] > 0 and infos["node_0"]["arrived"] > 0


def test_a_step_too_small_to_move_the_position_reports_the_loss_there():
    # LINEAR, one batch per step: node 0 trains batches [0, 3), then node 1 takes over (a switch) and trains
    # 1e-3 · 1.1e-16 batches, which 3.0 + that rounds back to 3.0: the loss of batch 3 (10 - 3), not 0/0
    env, _, _ = parallel_on(tiny_workload([(0, 20, NEVER, 1.0)]), node_speeds=(1.0, SLOWEST), switch_cost=ALMOST_ALL)
    for _ in range(3):
        act(env, 1, 0)
    obs, rewards, _, _, _ = act(env, 0, 1)
    assert env.episode.sim.progress[0, 0] == 3.0
    assert env.reported_history(0).tolist() == [10.0, 9.0, 8.0, 7.0]
    assert finite(obs, rewards)


def test_positions_far_past_the_curve_end_stay_on_the_plateau():
    # 1e17 batches per step pass 2**63 batches (where an int64 batch index overflows) after 93 steps
    env, _, _ = parallel_on(tiny_workload([(0, 200, NEVER, 1e17, 1)], bank=tiny_bank(LINEAR, FLAT)), n_nodes=1, n_slots=1)
    for _ in range(120):
        obs, rewards, _, _, _ = act(env, 1)
        assert finite(obs, rewards)
    assert env.episode.sim.progress[0, 0] > 2.0**63
    assert env.reported_history(0) == pytest.approx(np.ones(120), rel=1e-12)  # FLAT and its plateau: 1.0


# ---------------------------------------------------------------- all-or-nothing steps


def test_a_step_that_raises_after_valid_choices_changes_nothing():
    """The compiled step checks every action before its first write: a strict-invalid choice by the last
    node, after valid choices of the others (a switch for both tasks), leaves no trace."""
    env = discrete_core_v1.parallel_env(n_nodes=3, n_slots=4, arrival_steps=30, switch_cost=0.2, strict=True)
    obs, _ = env.reset(seed=3)
    for _ in range(5):  # some history first: switches, reports, a served slot
        mask = obs["node_0"]["action_mask"]
        obs, *_ = env.step({"node_0": int(mask[1]), "node_1": 0, "node_2": 2 * int(mask[2])})
    sim = env.episode.sim
    assert sim.steps.sum() > 0
    empty = int(np.flatnonzero(obs["node_0"]["action_mask"] == 0)[0])
    before = (trajectory_digest(obs), sim.statistics_of(0), trajectory_digest(env.state()),
              trajectory_digest([sim.history, sim.node_slot, sim.progress, sim.steps, sim.served_last]))
    with pytest.raises(ValueError, match="node_2"):
        env.step({"node_0": int(np.flatnonzero(obs["node_0"]["action_mask"])[-1]), "node_1": 0, "node_2": empty})
    after = (trajectory_digest(env._observations()), sim.statistics_of(0), trajectory_digest(env.state()),
             trajectory_digest([sim.history, sim.node_slot, sim.progress, sim.steps, sim.served_last]))
    assert after == before
    reference = discrete_core_v1.parallel_env(n_nodes=3, n_slots=4, arrival_steps=30, switch_cost=0.2, strict=True)
    ref_obs, _ = reference.reset(seed=3)
    for _ in range(5):
        mask = ref_obs["node_0"]["action_mask"]
        ref_obs, *_ = reference.step({"node_0": int(mask[1]), "node_1": 0, "node_2": 2 * int(mask[2])})
    step = {"node_0": int(np.flatnonzero(obs["node_0"]["action_mask"])[-1]), "node_1": 0, "node_2": 0}
    assert trajectory_digest(env.step(step)) == trajectory_digest(reference.step(step))


# ---------------------------------------------------------------- AEC actions


AEC_CONFIG = {"n_nodes": 3, "n_slots": 4, "arrival_steps": 30}


def aec_round(env, actions) -> None:
    """One AEC round: each live agent in turn steps with ``actions[agent]``."""
    for agent in list(env.agents):
        assert env.agent_selection == agent
        env.step(actions[agent])


def aec_digest(env) -> str:
    """Everything an AEC user can see after a step: observations, rewards, flags and infos of every agent."""
    return trajectory_digest([env.agent_selection, env.agents, env.rewards, env.terminations, env.truncations,
                              env.infos, {a: env.observe(a) for a in env.agents}])


@pytest.mark.parametrize("make", [discrete_core_v1.env, discrete_core_v1.raw_env], ids=["env", "raw_env"])
@pytest.mark.parametrize("bad, exc, match", [
    (17, ValueError, r"action 17 for node_1 is outside the action space \[0, 4\]"),
    (-1, ValueError, r"action -1 for node_1 is outside"),
    (None, TypeError, r"action for node_1 must be an integer in \[0, 4\], got None"),
    (1.0, TypeError, r"action for node_1 must be an integer.*float"),
    (True, TypeError, r"action for node_1 must be an integer.*bool"),
    ("1", TypeError, r"action for node_1 must be an integer.*str"),
])
def test_a_bad_aec_action_raises_at_its_own_step_and_the_episode_goes_on(make, bad, exc, match):
    env, reference = make(**AEC_CONFIG), make(**AEC_CONFIG)
    env.reset(seed=3)
    reference.reset(seed=3)
    env.step(1)  # node_0
    with pytest.raises(exc, match=match):
        env.step(bad)  # node_1's turn: rejected at once, not three turns later on node_2
    assert env.agent_selection == "node_1"  # nothing stored: node_1 steps again
    env.step(0)
    env.step(2)  # node_2 ends the round: the parallel step runs with (1, 0, 2)
    aec_round(reference, {"node_0": 1, "node_1": 0, "node_2": 2})
    assert aec_digest(env) == aec_digest(reference)
    for _ in range(5):  # and the episode continues normally
        for e in (env, reference):
            aec_round(e, {"node_0": 1, "node_1": 2, "node_2": 0})
        assert aec_digest(env) == aec_digest(reference)


def test_strict_aec_rejects_a_masked_choice_at_its_own_step():
    env = discrete_core_v1.env(**AEC_CONFIG, strict=True)
    env.reset(seed=3)
    mask = env.observe("node_0")["action_mask"]
    empty = int(np.flatnonzero(mask == 0)[0])
    with pytest.raises(ValueError, match=f"node_0: action {empty} chose slot {empty - 1}, which holds no active task"):
        env.step(empty)
    aec_round(env, {"node_0": 0, "node_1": 1, "node_2": 0})  # the round completes
    assert env.agent_selection == "node_0" and len(env.agents) == 3


def test_terminated_aec_agents_take_none_dead_steps():
    env = discrete_core_v1.env(n_nodes=2, n_slots=2, max_cycles=3)
    env.reset(seed=0)
    for _ in range(3):
        aec_round(env, {"node_0": 0, "node_1": 0})
    assert all(env.truncations.values()) and env.agents == ["node_0", "node_1"]
    with pytest.raises(ValueError, match=r"node_0 is terminated or truncated: its action must be None"):
        env.step(0)
    env.step(None)  # PettingZoo's dead step
    env.step(None)
    assert env.agents == []
