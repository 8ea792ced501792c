"""Tests of the PettingZoo parallel wrappers in core_env.wrappers."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from pettingzoo.test import api_test, parallel_api_test
from pettingzoo.utils.conversions import parallel_to_aec

from core_env import discrete_core_v1
from core_env.curves.stress import stress_bank
from core_env.wrappers import EpisodeRecorder, FinalEpisode, FlattenObservation, LongerHistory, MaskToInfo, OracleDemand, RLlibKeys, replay

SMALL = {"arrival_steps": 40}


def small_env(**kwargs):
    return discrete_core_v1.parallel_env(**{**SMALL, **kwargs})


WRAPPED = {
    "flatten": lambda: FlattenObservation(small_env()),
    "mask_to_info": lambda: MaskToInfo(small_env()),
    "rllib_keys": lambda: RLlibKeys(small_env()),
    "longer_history": lambda: LongerHistory(small_env(), 20),
    "oracle_demand": lambda: OracleDemand(small_env()),
    "recorder": lambda: EpisodeRecorder(small_env()),
    "final_episode": lambda: FinalEpisode(small_env()),
    "stack": lambda: MaskToInfo(LongerHistory(OracleDemand(EpisodeRecorder(small_env())), 12)),
}


def mask_of(observation, info) -> np.ndarray:
    if isinstance(observation, dict) and "action_mask" in observation:
        return observation["action_mask"]
    return info["action_mask"]


def arrays_in(observation) -> list[np.ndarray]:
    return list(observation.values()) if isinstance(observation, dict) else [observation]


def masked_random(env, observations, infos, rng) -> dict:
    """Uniform over each agent's allowed actions."""
    return {a: int(rng.choice(np.flatnonzero(mask_of(observations[a], infos[a])))) for a in env.agents}


def play(env, seed: int, policy_seed: int = 0, steps: int | None = None, **reset_kwargs) -> dict[str, list]:
    """A masked-random episode, collected in the trajectory layout that ``replay`` returns."""
    rng = np.random.default_rng(policy_seed)
    observations, infos = env.reset(seed=seed, **reset_kwargs)
    trajectory = {"observations": [observations], "infos": [infos], "rewards": [], "terminations": [], "truncations": []}
    while env.agents and (steps is None or len(trajectory["rewards"]) < steps):
        result = env.step(masked_random(env, observations, infos, rng))
        for key, value in zip(("observations", "rewards", "terminations", "truncations", "infos"), result):
            trajectory[key].append(value)
        observations, infos = result[0], result[4]
    return trajectory


def lockstep(raw, wrapped, seed: int = 3, steps: int = 60):
    """Yields (raw obs, raw infos, wrapped obs, wrapped infos) from reset on, with identical actions."""
    rng = np.random.default_rng(seed)
    raw_result, wrapped_result = raw.reset(seed=seed), wrapped.reset(seed=seed)
    for _ in range(steps):
        yield (*raw_result, *wrapped_result)
        if not raw.agents:
            return
        actions = masked_random(raw, *raw_result, rng)
        raw_step, wrapped_step = raw.step(actions), wrapped.step(actions)
        raw_result, wrapped_result = (raw_step[0], raw_step[4]), (wrapped_step[0], wrapped_step[4])


# ------------------------------------------------------------------ API conformance


@pytest.mark.parametrize("name", WRAPPED)
def test_wrapper_passes_parallel_api_test(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # parallel_api_test's reset option {"options": 1}
        parallel_api_test(WRAPPED[name](), num_cycles=1000)


@pytest.mark.parametrize("name", WRAPPED)
def test_wrapper_passes_aec_api_test_after_conversion(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Dict observation spaces are fine
        api_test(parallel_to_aec(WRAPPED[name]()), num_cycles=200)


@pytest.mark.parametrize("name", WRAPPED)
def test_wrapper_observations_lie_in_their_cached_space_and_are_fresh(name):
    env = WRAPPED[name]()
    trajectory = play(env, seed=1, steps=30)
    for observations in trajectory["observations"]:
        for agent, obs in observations.items():
            space = env.observation_space(agent)
            assert space is env.observation_space(agent)
            assert space.contains(obs)
    first, second = trajectory["observations"][-2:]
    for agent in first:
        for a, b in zip(arrays_in(first[agent]), arrays_in(second[agent])):
            assert not np.shares_memory(a, b)


def test_max_cycles_assignment_reaches_the_unwrapped_env():
    env = MaskToInfo(OracleDemand(small_env()))
    env.max_cycles = 7
    assert env.unwrapped.max_cycles == 7 and env.max_cycles == 7
    assert len(play(env, seed=0)["rewards"]) == 7


def test_accessors_reach_the_unwrapped_env():
    env = FlattenObservation(small_env())
    env.reset(seed=0)
    assert env.slot_task(0) == env.unwrapped.slot_task(0)
    assert env.state().shape == env.state_space.shape


# ------------------------------------------------------------------ observation contents


def test_flatten_observation_is_observation_then_mask_as_float():
    for raw_obs, _, obs, infos in lockstep(small_env(), FlattenObservation(small_env())):
        for agent, flat in obs.items():
            expected = np.concatenate([raw_obs[agent]["observation"], raw_obs[agent]["action_mask"].astype(np.float32)])
            assert flat.dtype == np.float32
            np.testing.assert_array_equal(flat, expected)
            assert infos[agent]["action_mask"].dtype == np.int8
            np.testing.assert_array_equal(infos[agent]["action_mask"], raw_obs[agent]["action_mask"])


def test_flatten_observation_space_bounds_mask_to_unit_interval():
    env = FlattenObservation(small_env(n_slots=5))
    space, inner = env.observation_space("node_0"), env.env.observation_space("node_0")
    d = inner["observation"].shape[0]
    assert space.shape == (d + 6,) and space.dtype == np.float32
    np.testing.assert_array_equal(space.low[d:], 0.0)
    np.testing.assert_array_equal(space.high[d:], 1.0)


def test_mask_to_info_moves_the_int8_mask_into_infos():
    for raw_obs, raw_infos, obs, infos in lockstep(small_env(), MaskToInfo(small_env())):
        for agent in obs:
            np.testing.assert_array_equal(obs[agent], raw_obs[agent]["observation"])
            assert infos[agent]["action_mask"].dtype == np.int8
            np.testing.assert_array_equal(infos[agent]["action_mask"], raw_obs[agent]["action_mask"])
            assert set(infos[agent]) - set(raw_infos[agent]) == {"action_mask"}


def test_rllib_keys_renames_observation_to_observations():
    env = RLlibKeys(small_env())
    assert set(env.observation_space("node_0").spaces) == {"observations", "action_mask"}
    for raw_obs, _, obs, _ in lockstep(small_env(), env):
        for agent in obs:
            assert set(obs[agent]) == {"observations", "action_mask"}
            np.testing.assert_array_equal(obs[agent]["observations"], raw_obs[agent]["observation"])
            np.testing.assert_array_equal(obs[agent]["action_mask"], raw_obs[agent]["action_mask"])


@pytest.mark.parametrize("history", [1, 3, 40])
def test_longer_history_equals_constructing_with_that_history(history):
    built, wrapped = small_env(history=history), LongerHistory(small_env(), history)
    assert wrapped.observation_space("node_0") == built.observation_space("node_0")
    assert wrapped.state_space == built.state_space
    for built_obs, _, obs, _ in lockstep(built, wrapped, steps=80):
        assert data_equivalence(obs, built_obs)
        np.testing.assert_array_equal(wrapped.state(), built.state())


def test_longer_history_needs_the_canonical_dict_observation():
    with pytest.raises(TypeError, match="LongerHistory"):
        LongerHistory(MaskToInfo(small_env()), 16).observation_space("node_0")
    with pytest.raises(ValueError, match="history"):
        LongerHistory(small_env(), 0)


# ------------------------------------------------------------------ oracle demand


def test_remaining_demand_is_not_in_infos_by_default():
    _, infos = small_env().reset(seed=0)
    assert all("remaining_demand" not in info for info in infos.values())


def test_oracle_demand_matches_the_simulator_and_falls_by_one_per_nominal_service():
    env = OracleDemand(discrete_core_v1.parallel_env())
    sim = env.unwrapped.episode.sim
    rng = np.random.default_rng(0)
    observations, infos = env.reset(seed=5)
    served_finite = 0
    for _ in range(200):
        demand = infos["node_0"]["remaining_demand"]
        assert demand.dtype == np.float64 and demand.shape == (sim.K,)
        np.testing.assert_array_equal(demand, sim.remaining_demand()[0])
        assert all(infos[a]["remaining_demand"] is not demand for a in env.agents if a != "node_0")
        tasks = sim.task[0].copy()
        observations, _, _, _, infos = env.step(masked_random(env, observations, infos, rng))
        after = infos["node_0"]["remaining_demand"]
        stayed = (sim.task[0] == tasks) & (tasks >= 0)
        served = stayed & sim.served_last[0]
        np.testing.assert_array_equal(after[served], demand[served] - 1)  # inf - 1 == inf
        np.testing.assert_array_equal(after[stayed & ~served], demand[stayed & ~served])
        served_finite += int(np.isfinite(demand[served]).sum())
        if not env.agents:
            break
    assert served_finite > 0
    assert np.all(after[sim.task[0] < 0] == 0.0)


def test_oracle_demand_keeps_inf_for_tasks_that_never_reach_their_target():
    env = OracleDemand(discrete_core_v1.parallel_env(task_set="stress"))
    _, infos = env.reset(seed=0)
    sim = env.unwrapped.episode.sim
    decoys = sim.active[0] & (sim.curve[0] == 1)  # the stress bank's flat non-learner curve
    assert decoys.any() and np.all(np.isinf(infos["node_0"]["remaining_demand"][decoys]))


# ------------------------------------------------------------------ recording and replay


def assert_replay_identical(env, env_fn=None, seed: int = 0, **reset_kwargs):
    recorded = play(env, seed=seed, policy_seed=seed, **reset_kwargs)
    assert not env.agents, "the episode should have run to its end"
    record = json.loads(json.dumps(env.record, allow_nan=False))
    assert len(record["actions"]) == len(recorded["rewards"])
    assert data_equivalence(replay(record, env_fn=env_fn), recorded)


def test_replay_reproduces_a_whole_masked_random_episode_after_a_json_round_trip():
    assert_replay_identical(EpisodeRecorder(small_env()), seed=11)


def test_replay_through_wrappers_reproduces_their_observations_and_infos():
    stack = lambda: MaskToInfo(LongerHistory(OracleDemand(small_env(n_nodes=3)), 16))  # noqa: E731
    assert_replay_identical(EpisodeRecorder(stack()), env_fn=stack, seed=4)


def test_replay_of_an_evaluation_suite_episode_finds_the_eval_curves():
    env = EpisodeRecorder(discrete_core_v1.parallel_env(task_set="id"))
    assert_replay_identical(env, options={"suite": "eval", "task_set": "rl_ood", "root": np.int64(1), "episode": 2})
    assert env.record["options"]["task_set"] == "rl_ood" and env.record["bank"]["name"] == "rl_ood"


def test_replay_on_a_custom_curve_bank_needs_env_fn():
    env_fn = lambda: discrete_core_v1.parallel_env(task_set=stress_bank(), arrival_steps=30)  # noqa: E731
    env = EpisodeRecorder(env_fn())
    assert_replay_identical(env, env_fn=env_fn, seed=2)
    with pytest.raises(ValueError, match="custom CurveBank"):
        replay(env.record)


def test_record_is_per_episode_and_holds_plain_values():
    env = EpisodeRecorder(small_env())
    play(env, seed=0, steps=5)
    assert len(env.record["actions"]) == 5 and env.record["seed"] == 0
    env.reset()
    assert env.record["actions"] == [] and env.record["seed"] is None
    json.dumps(env.record, allow_nan=False)


def test_a_rejected_step_is_not_recorded():
    env = EpisodeRecorder(small_env())
    env.reset(seed=0)
    with pytest.raises(ValueError, match="node_0"):
        env.step({a: 99 for a in env.agents})
    assert env.record["actions"] == []


def test_replay_rejects_something_that_is_not_a_record():
    with pytest.raises(ValueError, match="format"):
        replay({"actions": []})


def test_observation_spaces_are_boxes_or_dicts_as_documented():
    assert isinstance(FlattenObservation(small_env()).observation_space("node_1"), spaces.Box)
    assert isinstance(MaskToInfo(small_env()).observation_space("node_1"), spaces.Box)
    assert isinstance(RLlibKeys(small_env()).observation_space("node_1"), spaces.Dict)
