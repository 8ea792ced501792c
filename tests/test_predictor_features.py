"""PredictorFeatures: predictor outputs appended to observations (PettingZoo, Gymnasium, batched)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from conftest import FLAT, LINEAR, act, masked_random_actions, parallel_masks, tiny_bank, tiny_workload
from pettingzoo.test import parallel_api_test

from core_env import discrete_core_v1, features
from core_env.config import EnvConfig
from core_env.gym_env import DiscreteCoREEnv
from core_env.sim import Simulator
from core_env.generators import generator_for
from core_env.wrappers import MaskToInfo
from mara_agents.predictors import DKF, PREDICTORS, WLS, LastSlope, OraclePredictor
from mara_agents.predictors.features import (
    PREDICTOR_FEATURE_NAMES,
    GymPredictorFeatures,
    PredictorFeatures,
    SlotPredictions,
    predictor_observations,
    summary_features,
)
from mara_agents.protocols import REMAINING_DEMAND

F = len(PREDICTOR_FEATURE_NAMES)


def direct_features(sim: Simulator, b: int, predictor, cap: float | None = None) -> np.ndarray:
    """(K, 3) the features of env ``b`` from direct predictor calls on the simulator's full histories."""
    out = np.zeros((sim.K, F))
    slots = np.flatnonzero(sim.active[b])
    if slots.size:
        histories = [sim.reported_history(b, k) for k in slots]
        budgets = sim.deadline[b, slots] - sim.t[b]
        oracle = {REMAINING_DEMAND: sim.remaining_demand()[b, slots]} if predictor.needs_oracle else None
        summary = predictor.predict(histories, sim.target[b, slots], budgets, oracle)
        out[slots] = summary_features(summary, predictor.horizon if cap is None else cap)
    return out


def appended(observation: np.ndarray, n_slots: int) -> np.ndarray:
    """The (K, 3) predictor features at the end of one node's observation."""
    return observation[-n_slots * F:].reshape(n_slots, F)


@pytest.mark.parametrize("name", sorted(PREDICTORS))
def test_wrapper_passes_parallel_api_test(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # parallel_api_test's reset option {"options": 1}
        parallel_api_test(PredictorFeatures(discrete_core_v1.parallel_env(), PREDICTORS[name]()), num_cycles=200)


@pytest.mark.parametrize("name", ["wls", "dkf", "oracle", "last_slope"])
def test_features_equal_direct_predictor_calls_on_the_full_histories(name):
    env = PredictorFeatures(discrete_core_v1.parallel_env(n_nodes=3, n_slots=6), PREDICTORS[name]())
    sim = env.unwrapped.episode.sim
    rng = np.random.default_rng(1)
    observations, _ = env.reset(seed=3)
    checked = 0
    for _ in range(60):
        expected = direct_features(sim, 0, PREDICTORS[name]())
        for agent in env.possible_agents:
            np.testing.assert_array_equal(appended(observations[agent]["observation"], sim.K), expected.astype(np.float32))
        checked += np.count_nonzero(sim.active[0])
        if not env.agents:
            break
        observations, *_ = act(env, *masked_random_actions(rng, parallel_masks(observations)))
    assert checked > 50


def test_only_tasks_whose_history_changed_are_predicted_again():
    # three tasks (slots 0, 1, 2) at t = 0 and a fourth at t = 2; one node
    workload = tiny_workload([(0, 30, 0.5, 1.0), (0, 30, 0.5, 1.0), (0, 30, 0.5, 1.0, 1), (2, 30, 0.5, 1.0)], arrival_steps=3)
    env = PredictorFeatures(discrete_core_v1.parallel_env(n_nodes=1, n_slots=4), WLS())
    env.reset(options={"workload": workload})
    predictions = env.predictions
    assert predictions.recomputed == 3  # every new task once
    before = predictions.recomputed
    act(env, 1)  # slot 0 reports a loss
    assert predictions.recomputed - before == 1
    before = predictions.recomputed
    observations, *_ = act(env, 0)  # idle: no history changes; the fourth task arrives at t = 2
    assert predictions.recomputed - before == 1
    sim = env.unwrapped.episode.sim
    np.testing.assert_array_equal(appended(observations["node_0"]["observation"], 4), direct_features(sim, 0, WLS()).astype(np.float32))
    before = predictions.recomputed
    env.state()  # reading the state again predicts nothing
    act(env, 3)
    assert predictions.recomputed - before == 1


def test_a_new_episode_forgets_the_previous_predictions():
    workload = tiny_workload([(0, 30, 0.5, 1.0), (0, 30, 0.5, 1.0, 1)], arrival_steps=1)
    env = PredictorFeatures(discrete_core_v1.parallel_env(n_nodes=1, n_slots=2), WLS())
    env.reset(options={"workload": workload})
    act(env, 1)
    before = env.predictions.recomputed
    env.reset(options={"workload": workload})  # same task ids in the same slots with the same history lengths
    assert env.predictions.recomputed - before == 2


def test_censored_predictions_become_capped_finite_features():
    workload = tiny_workload([(0, 40, 0.5, 1.0, 1)], arrival_steps=1)  # FLAT never reaches 0.5
    env = PredictorFeatures(discrete_core_v1.parallel_env(n_nodes=1, n_slots=2), LastSlope(), cap=300)
    env.reset(options={"workload": workload})
    for _ in range(4):
        observations, *_ = act(env, 1)
    row = appended(observations["node_0"]["observation"], 2)
    np.testing.assert_array_equal(row, np.float32([[3.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))  # cap / 100; empty slot: zeros
    assert env.observation_space("node_0")["observation"].contains(observations["node_0"]["observation"])


@pytest.mark.parametrize("name", ["wls", "dkf"])
def test_features_are_finite_and_inside_the_space_on_every_step(name):
    env = PredictorFeatures(discrete_core_v1.parallel_env(n_slots=8), PREDICTORS[name]())
    rng = np.random.default_rng(2)
    observations, _ = env.reset(seed=5)
    space, state_space = env.observation_space("node_0"), env.state_space
    for _ in range(80):
        for agent, observation in observations.items():
            assert space.contains(observation), agent
        assert state_space.contains(env.state())
        if not env.agents:
            break
        observations, *_ = act(env, *masked_random_actions(rng, parallel_masks(observations)))


def test_the_observation_and_state_grow_by_three_features_per_slot():
    base = discrete_core_v1.parallel_env(n_slots=5)
    env = PredictorFeatures(discrete_core_v1.parallel_env(n_slots=5), WLS())
    assert env.observation_space("node_1")["observation"].shape == (base.observation_space("node_1")["observation"].shape[0] + 15,)
    assert env.state_space.shape == (base.state_space.shape[0] + 15,)
    observations, _ = env.reset(seed=0)
    base_observations, _ = base.reset(seed=0)
    D = base_observations["node_1"]["observation"].size
    np.testing.assert_array_equal(observations["node_1"]["observation"][:D], base_observations["node_1"]["observation"])
    np.testing.assert_array_equal(env.state()[:-15], base.state())
    np.testing.assert_array_equal(env.state()[-15:], observations["node_1"]["observation"][D:])


def test_observation_reshaping_wrappers_go_outside():
    env = MaskToInfo(PredictorFeatures(discrete_core_v1.parallel_env(), WLS()))
    observations, infos = env.reset(seed=0)
    assert observations["node_0"].shape == env.observation_space("node_0").shape
    with pytest.raises(TypeError, match="observation-reshaping wrappers last"):
        PredictorFeatures(MaskToInfo(discrete_core_v1.parallel_env()), WLS()).observation_space("node_0")


def test_gymnasium_wrapper_matches_the_pettingzoo_features():
    gym_env = GymPredictorFeatures(DiscreteCoREEnv(n_slots=6), DKF())
    pz_env = PredictorFeatures(discrete_core_v1.parallel_env(n_slots=6), DKF())
    rng = np.random.default_rng(4)
    workload = generator_for(gym_env.unwrapped.config).workload(np.random.default_rng(0))
    observation, _ = gym_env.reset(options={"workload": workload})
    pz_observations, _ = pz_env.reset(options={"workload": workload})
    for _ in range(40):
        assert gym_env.observation_space.contains(observation)
        for i, agent in enumerate(pz_env.possible_agents):
            np.testing.assert_array_equal(observation["observation"][i], pz_observations[agent]["observation"])
        np.testing.assert_array_equal(gym_env.state(), pz_env.state())
        assert gym_env.action_masks().shape == (4 * 7,)
        actions = masked_random_actions(rng, observation["action_mask"])
        observation, *_ = gym_env.step(actions)
        pz_observations, *_ = act(pz_env, *actions.tolist())


def test_gymnasium_wrapper_works_through_gym_make():
    env = GymPredictorFeatures(gym.make("core_env/DiscreteCoRE-v1", n_slots=4), WLS())
    observation, _ = env.reset(seed=0)
    assert observation["observation"].shape == env.observation_space["observation"].shape == (4, features.obs_dim(4, 8) + 12)


def test_batched_simulator_features_equal_direct_predictor_calls():
    config = EnvConfig(n_slots=6)
    workloads = [generator_for(config).workload(np.random.default_rng(seed)) for seed in range(3)]
    sim = Simulator(config, len(workloads))
    sim.reset(workloads)
    predictions = SlotPredictions(OraclePredictor())
    rng = np.random.default_rng(0)
    for _ in range(30):
        observation, mask = predictor_observations(sim, predictions)
        base, base_mask = features.observations(sim, config.history)
        np.testing.assert_array_equal(mask, base_mask)
        np.testing.assert_array_equal(observation[..., : base.shape[2]], base)
        for b in range(sim.B):
            expected = direct_features(sim, b, OraclePredictor()).astype(np.float32)
            for n in range(sim.N):
                np.testing.assert_array_equal(appended(observation[b, n], sim.K), expected)
        sim.step(np.stack([masked_random_actions(rng, m) for m in mask]))


def test_slot_predictions_reject_bad_arguments():
    with pytest.raises(TypeError, match="Predictor"):
        SlotPredictions(object())
    with pytest.raises(ValueError, match="cap"):
        SlotPredictions(WLS(), cap=float("inf"))


def test_summary_features_cap_and_scale_the_demand():
    workload = tiny_workload([(0, 20, 1.5, 1.0), (0, 20, 0.5, 1.0, 1)], arrival_steps=1, bank=tiny_bank(LINEAR, FLAT))
    env = PredictorFeatures(discrete_core_v1.parallel_env(n_nodes=2, n_slots=2), OraclePredictor(), cap=50)
    observations, _ = env.reset(options={"workload": workload})
    # LINEAR's reports 10, 9, … reach 1.5 at the 10th; FLAT never reaches 0.5 (censored: the cap, 50); budgets: 20
    np.testing.assert_array_equal(appended(observations["node_0"]["observation"], 2), np.float32([[0.1, 0.0, 1.0], [0.5, 0.0, 0.0]]))


@pytest.mark.parametrize("name", ["wls", "oracle"])
def test_linked_groups_predict_in_one_call_with_the_same_features(name):
    from core_env.vector import DiscreteCoREVectorEnv
    from mara_agents import rollout
    from benchmarks.perf import masked_random
    from mara_agents.predictors.features import predict_together, predictor_observation

    config = EnvConfig(n_nodes=2, n_slots=4, arrival_steps=30)
    workloads = [generator_for(config).workload(np.random.default_rng(s)) for s in range(6)]

    def groups(linked: bool):
        predictor = PREDICTORS[name]()
        calls = []
        predict = predictor.predict
        predictor.predict = lambda *args, **kwargs: calls.append(len(args[0])) or predict(*args, **kwargs)
        envs = [DiscreteCoREVectorEnv(3, "disabled", config=config) for _ in range(2)]
        for env in envs:
            SlotPredictions(predictor).attach(env.batch)
        if linked:
            predict_together([env.batch for env in envs])
        return envs, calls

    seen = {}
    for linked in (True, False):
        envs, calls = groups(linked)
        rng = np.random.default_rng(0)
        trace = []
        rollout.play(envs, lambda obs, mask: (trace.append(obs.copy()), masked_random(mask, rng))[1], workloads,
                     observe=predictor_observation)
        seen[linked] = (trace, calls)
    (linked_trace, linked_calls), (plain_trace, plain_calls) = seen[True], seen[False]
    assert len(linked_trace) == len(plain_trace) and all(np.array_equal(a, b) for a, b in zip(linked_trace, plain_trace))
    assert sum(linked_calls) == sum(plain_calls) > 0  # the same tasks predicted ...
    assert len(linked_calls) < len(plain_calls) and len(linked_calls) <= len(linked_trace)  # ... in one call per step
    with pytest.raises(ValueError, match="share one predictor"):
        other = DiscreteCoREVectorEnv(1, "disabled", config=config)
        SlotPredictions(WLS()).attach(other.batch)
        predict_together([groups(False)[0][0].batch, other.batch])
