"""The posterior of each task's remaining demand as a first-class output, and the allocators that read it:
the truncated Gittins index rule (``index``) and the expected-completions planner (``plan``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from test_allocators import served_slots
from test_heuristics import hand_workload
from test_predictors import _predict, noisy_histories

from core_env import features
from core_env.config import EnvConfig
from core_env.sim import Simulator
from mara_agents.allocators import ALLOCATORS, CompletionPlanner, Estimates, IndexAllocator, make_allocator
from mara_agents.allocators.posterior import plan_votes
from mara_agents.predictors.posterior import cdf_quantile, sample_demands, truncated_index
from mara_agents.predictors import PREDICTORS, WLS, OraclePredictor
from mara_agents.predictors.cache import PredictionCache, SlotTasks
from mara_agents.protocols import REMAINING_DEMAND

H = 256


def step_cdf(demand, width: int = H + 1) -> np.ndarray:
    """(M, width) the CDF of known demands (inf: never)."""
    return (np.arange(width)[None, :] >= np.asarray(demand, dtype=np.float64)[:, None]).astype(np.float64)


# ---------------------------------------------------------------------------------------------- the CDF interface
@pytest.mark.parametrize("name", sorted(PREDICTORS))
def test_every_predictor_gives_a_cdf_on_the_common_grid_consistent_with_its_summary(name):
    histories = noisy_histories(6)
    M, targets = len(histories), np.full(len(histories), 0.2)
    if name == "oracle":
        demand = np.arange(M, dtype=np.float64) * 7 + 1
        predictor = OraclePredictor()
        cdf = predictor.demand_cdf(histories, targets, {REMAINING_DEMAND: demand})
        np.testing.assert_array_equal(cdf, step_cdf(demand))  # the oracle's posterior is a step at the demand
    else:
        predictor = PREDICTORS[name]()
        windows = np.array([len(h) for h in histories], dtype=np.float64) + 60 if predictor.uses_window else None
        cdf = predictor.demand_cdf(histories, targets, windows=windows)
    width = predictor.horizon + 1  # the grid: 0 … the predictor's horizon, in node-steps
    assert cdf.shape == (M, width)
    assert np.all((cdf >= 0) & (cdf <= 1)) and np.all(np.diff(cdf, axis=1) >= 0) and np.all(cdf[:, 0] == 0)
    budgets = np.broadcast_to(np.arange(width), (M, width))
    summary = _predict(name, histories, targets, budgets)
    np.testing.assert_array_equal(cdf, summary.p_within_budget)  # the same numbers as p_within_budget
    np.testing.assert_array_equal(cdf >= 0.5, summary.median[:, None] <= np.arange(width))  # and the median
    single = _predict(name, histories, targets, np.full(M, 40))
    np.testing.assert_array_equal(cdf[:, 40], single.p_within_budget)


def test_the_prediction_cache_holds_each_slots_cdf_up_to_its_budget():
    predictor = WLS()
    histories = noisy_histories(7, m=6)
    B, K, L = 2, 3, 64
    history = np.ones((B, K, L))
    steps = np.zeros((B, K), np.int64)
    for i, h in enumerate(histories):
        history[i // K, i % K, :h.size], steps[i // K, i % K] = h[:L], min(h.size, L)
    active = np.ones((B, K), bool)
    active[1, 2] = False
    budget = np.array([[30, 80, 5], [200, 0, 9]])
    target = np.full((B, K), 0.2)
    tasks = SlotTasks(active, np.arange(B * K).reshape(B, K), steps, history, target, budget, budget + 10)
    cache = PredictionCache(predictor)
    cache.update(tasks)
    for b, k in zip(*np.nonzero(active)):
        truth = predictor.demand_cdf([history[b, k, :steps[b, k]]], [0.2])[0]
        np.testing.assert_array_equal(cache.cdf[b, k, :budget[b, k] + 1], truth[:budget[b, k] + 1])
        assert cache.p_within_budget[b, k] == truth[budget[b, k]]
    assert np.all(cache.cdf[1, 2] == 0)  # an empty slot


# ---------------------------------------------------------------------------------------------- the index
def test_the_truncated_index_of_known_and_uncertain_demands():
    # a sure demand d: 1/d while it fits the budget, 0 when it does not
    assert truncated_index(step_cdf([4.0]), np.array([10]))[0] == pytest.approx(0.25)
    assert truncated_index(step_cdf([4.0]), np.array([3]))[0] == 0.0
    # half the mass at 2, half never: served for b = 2 steps it finishes w.p. 1/2 → 0.5 / 2
    half = 0.5 * step_cdf([2.0])
    assert truncated_index(half, np.array([50]))[0] == pytest.approx(0.25)
    # 2 or 10 w.p. 1/2 each: stopping at 2 gives 0.5 / 2 = 0.25; going on to 10 gives 1 / (2 + 0.5 * 8) = 1/6
    mixed = 0.5 * step_cdf([2.0]) + 0.5 * step_cdf([10.0])
    assert truncated_index(mixed, np.array([50]))[0] == pytest.approx(0.25)
    assert truncated_index(np.zeros((1, H + 1)), np.array([50]))[0] == 0.0  # censored: cannot finish


def test_cdf_quantiles_and_inverse_cdf_draws_stop_at_the_budget():
    mixed = 0.5 * step_cdf([3.0]) + 0.5 * step_cdf([12.0])
    assert cdf_quantile(mixed, np.array([20]), 0.5)[0] == 3 and cdf_quantile(mixed, np.array([20]), 0.75)[0] == 12
    assert cdf_quantile(mixed, np.array([8]), 0.75)[0] == np.inf  # the 75 % quantile lies beyond the budget
    draws = sample_demands(mixed[None], np.array([[20]]), np.array([[[0.2, 0.5, 0.51, 0.99]]]))
    assert draws.tolist() == [[[3.0, 3.0, 12.0, 12.0]]]
    assert sample_demands(mixed[None], np.array([[8]]), np.array([[[0.2, 0.9]]])).tolist() == [[[3.0, np.inf]]]


def _estimates(cdf: np.ndarray, budget, steps, n_nodes: int) -> Estimates:
    budget = np.asarray(budget)[None]
    tasks = SimpleNamespace(active=np.ones(budget.shape, bool), steps=np.asarray(steps)[None], budget=budget)
    median = cdf_quantile(cdf[None], budget, 0.5)
    return Estimates(tasks, median, np.take_along_axis(cdf[None], budget[..., None], axis=2)[..., 0], n_nodes, cdf[None])


@pytest.mark.parametrize("make", [lambda: IndexAllocator(WLS()), lambda: IndexAllocator(WLS(), deadline_pct=0),
                                  lambda: CompletionPlanner(WLS())])
def test_a_sure_short_task_beats_an_uncertain_long_one(make):
    # slot 0: needs 20 or never (1/2 each); slot 1: surely 5; both due in 22 steps, so one node cannot do
    # both: slot 1 is served
    cdf = np.stack([0.5 * step_cdf([20.0])[0], step_cdf([5.0])[0]])
    agent = make()
    agent.reset(1, 1, 2)
    assert agent.decide(_estimates(cdf, [22, 22], [3, 3], 1)).tolist() == [[2]]


@pytest.mark.parametrize("make", [lambda: IndexAllocator(WLS()), lambda: IndexAllocator(WLS(), deadline_pct=0),
                                  lambda: CompletionPlanner(WLS())])
def test_a_task_that_cannot_finish_is_never_served_while_a_finishable_one_waits(make):
    # slots 0 and 1 cannot finish (demand 30 > budget 10; censored), slot 2 can; two nodes
    cdf = np.stack([step_cdf([30.0])[0], np.zeros(H + 1), step_cdf([8.0])[0]])
    agent = make()
    agent.reset(1, 2, 3)
    actions = agent.decide(_estimates(cdf, [10, 40, 10], [3, 3, 3], 2))
    assert 3 in actions[0]  # the finishable task is served...
    assert sorted(actions[0].tolist()).index(3) == 1  # ...and it takes a node before either hopeless one


def test_the_index_rule_keeps_the_admitted_set_schedulable_and_serves_it_by_deadline():
    # one node; slot 0: 6 steps due in 6; slot 1: 3 steps due in 20 (higher index); slot 2: 4 steps due in 8.
    # By index 1 (1/3) then 2 (1/4) are admitted; 0 would break the set (6 + 4 > 8 before step 8) and waits.
    cdf = step_cdf([6.0, 3.0, 4.0])
    agent = IndexAllocator(WLS())
    agent.reset(1, 1, 3)
    assert agent.decide(_estimates(cdf, [6, 20, 8], [3, 3, 3], 1)).tolist() == [[3]]  # slot 2: the earlier deadline
    plain = IndexAllocator(WLS(), deadline_pct=0)
    plain.reset(1, 1, 3)
    assert plain.decide(_estimates(cdf, [6, 20, 8], [3, 3, 3], 1)).tolist() == [[2]]  # index order: slot 1


def test_plan_votes_with_known_demands_admit_shortest_first_and_serve_by_deadline():
    demand = np.array([[[6.0], [3.0], [4.0], [np.inf]]])  # (B, K, S = 1)
    votes = plan_votes(demand, np.array([[6, 20, 8, 50]]), np.ones((1, 4), bool), np.array([1]))
    assert votes.tolist() == [[0.0, 0.0, 1.0, 0.0]]  # {1, 2} admitted (0 would break it), 2 due first
    votes = plan_votes(demand, np.array([[6, 20, 8, 50]]), np.ones((1, 4), bool), np.array([2]))
    assert votes.tolist() == [[1.0, 0.0, 1.0, 0.0]]  # two nodes fit all three: the two earliest deadlines


def test_tasks_without_reports_are_served_first():
    workload = hand_workload([(0, 40, 6), (0, 40, 3)])
    config = EnvConfig(n_nodes=1, n_slots=2)
    for agent in (IndexAllocator(WLS(), explore=2), CompletionPlanner(WLS(), explore=2)):
        served = [s[0] for s in served_slots(agent, workload, config, 4)]
        assert sorted(served) == [0, 0, 1, 1]  # two reports each before any posterior is read


def test_with_the_oracle_both_rules_finish_what_clairvoyant_finishes_on_a_hand_made_episode():
    workload = hand_workload([(0, 10, 4), (0, 12, 5), (0, 9, 20), (1, 30, 6)])
    config = EnvConfig(n_nodes=1, n_slots=4)
    for row in ("index:oracle,explore=0", "plan:oracle,explore=0"):
        served = [s[0] for s in served_slots(make_allocator(row), workload, config, 20)]
        assert 2 not in served  # 20 steps due in 9 can never finish
        assert served.count(0) == 4 and served.count(1) == 5 and served.count(3) == 6


def test_bad_settings_name_the_problem():
    for spec, match in (("index:wls,deadline_pct=100", "deadline_pct"), ("index:wls,deadline_pct=-1", "deadline_pct"),
                        ("index:wls,explore=-1", "explore"), ("plan:wls,samples=0", "samples"), ("plan:wls,seed=-2", "seed"),
                        ("index:wls,horizon=3", "index:wls,horizon=3")):
        with pytest.raises(ValueError, match=match):
            make_allocator(spec)
    assert ALLOCATORS["index"]("wls").deadline_pct == 50 and ALLOCATORS["plan"]("oracle").needs_oracle


def test_the_planner_is_deterministic_for_a_seed():
    config = EnvConfig(arrival_steps=60)
    from core_env.generators import generator_for

    runs = []
    for _ in range(2):
        sim = Simulator(config, 2)
        sim.reset([generator_for(config).workload(np.random.default_rng(5 + i)) for i in range(2)])
        agent = CompletionPlanner(WLS(), samples=8, seed=3)
        agent.reset(2, sim.N, sim.K)
        actions = []
        while not sim.done.all():
            a = agent.act(*features.observations(sim, config.history))
            actions.append(a)
            sim.step(a)
        runs.append(np.stack(actions))
    np.testing.assert_array_equal(*runs)


# ---------------------------------------------------------------------------------------------- the index as a feature
def test_the_index_feature_is_the_truncated_index_of_each_slots_posterior_and_stays_in_the_space():
    import warnings

    from conftest import act, masked_random_actions, parallel_masks
    from pettingzoo.test import parallel_api_test

    from core_env import discrete_core_v1
    from mara_agents.predictors.features import PredictorFeatures

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        parallel_api_test(PredictorFeatures(discrete_core_v1.parallel_env(), WLS(), index=True), num_cycles=100)
    env = PredictorFeatures(discrete_core_v1.parallel_env(n_nodes=3, n_slots=6), WLS(), index=True)
    plain = PredictorFeatures(discrete_core_v1.parallel_env(n_nodes=3, n_slots=6), WLS())
    sim = env.unwrapped.episode.sim
    rng = np.random.default_rng(4)
    observations, _ = env.reset(seed=2)
    plain_observations, _ = plain.reset(seed=2)
    space, seen = env.observation_space("node_0"), 0
    for _ in range(60):
        extra = observations["node_0"]["observation"][-6 * 4:].reshape(6, 4)
        np.testing.assert_array_equal(extra[:, :3], plain_observations["node_0"]["observation"][-6 * 3:].reshape(6, 3))
        for k in np.flatnonzero(sim.active[0]):
            cdf = WLS().demand_cdf([sim.reported_history(0, k)], [sim.target[0, k]])
            expected = truncated_index(cdf, np.array([sim.deadline[0, k] - sim.t[0]]))[0]
            assert extra[k, 3] == pytest.approx(expected, rel=1e-5, abs=1e-7)
            seen += expected > 0
        assert all(space.contains(o) for o in observations.values())
        if not env.agents:
            break
        actions = masked_random_actions(rng, parallel_masks(observations))
        observations, *_ = act(env, *actions)
        plain_observations, *_ = act(plain, *actions)
    assert seen > 10


def test_a_mat_model_on_the_posterior_features_reads_four_per_slot_and_acts():
    import torch

    from benchmarks.rollout import run_agent
    from core_env.generators import generator_for
    from mara_agents.mat.agent import MATAgent
    from mara_agents.mat.model import MATConfig, MATModel

    config = MATConfig(predictor="pfn-post", d_model=16, n_heads=2, history=8)
    plain = MATConfig(predictor="pfn", d_model=16, n_heads=2, history=8)
    assert config.predictor_features == 4 and config.slot_inputs == plain.slot_inputs + 1
    assert config.obs_dim(16) == plain.obs_dim(16) + 16
    torch.manual_seed(0)
    agent = MATAgent(MATModel(config), predictor=WLS())  # any predictor behind the features
    env_config = EnvConfig(arrival_steps=40)
    rates = run_agent(agent, [generator_for(env_config).workload(np.random.default_rng(3))], env_config)["completion_rate"]
    assert rates.shape == (1,) and 0.0 <= rates[0] <= 1.0


# ---------------------------------------------------------------------------------------------- the mixture
def test_a_mixture_is_the_average_of_its_components_posteriors():
    from mara_agents.predictors import DKF, LastSlope
    from mara_agents.predictors.mixture import MixturePredictor

    histories, short = noisy_histories(8), LastSlope(horizon=100)
    targets = np.full(len(histories), 0.2)
    mixture = MixturePredictor([WLS(), short])
    assert mixture.horizon == 256 and not mixture.uses_window
    wls, slope = WLS().demand_cdf(histories, targets), short.demand_cdf(histories, targets)
    slope = np.concatenate([slope, np.repeat(slope[:, -1:], 156, axis=1)], axis=1)  # beyond its horizon: no more mass
    np.testing.assert_allclose(mixture.demand_cdf(histories, targets), (wls + slope) / 2)
    summary = mixture.predict(histories, targets, np.full(len(histories), 30))
    np.testing.assert_array_equal(summary.p_within_budget >= 0.5, summary.median <= 30)
    with pytest.raises(TypeError, match="two or more"):
        MixturePredictor([WLS()])
    with pytest.raises(ValueError, match="oracle"):
        MixturePredictor([WLS(), OraclePredictor()])
    assert MixturePredictor([WLS(), DKF()]).predict([], np.zeros(0), np.zeros(0)).median.shape == (0,)


def test_the_pfn_ensemble_averages_five_verified_pfns_and_refuses_a_member_that_does_not_verify(tmp_path, monkeypatch):
    import shutil

    import mara_agents.predictors.pfn as pfn_module
    from mara_agents.predictors import PFN_ENSEMBLE_MEMBERS
    from mara_agents.predictors.pfn import DEFAULT_CHECKPOINT, PFNPredictor

    ensemble = PREDICTORS["pfn-ens"]()
    assert len(ensemble.components) == 5 and ensemble.uses_window
    histories = noisy_histories(6)
    windows = np.full(len(histories), 60)
    targets = np.full(len(histories), 0.2)
    members = [PFNPredictor.load(DEFAULT_CHECKPOINT)] + [
        PFNPredictor.load(DEFAULT_CHECKPOINT.parent / "pfn_ensemble" / m / "pfn.pt") for m in PFN_ENSEMBLE_MEMBERS]
    cdfs = [m.demand_cdf(histories, targets, windows=windows) for m in members]
    assert not np.allclose(cdfs[0], cdfs[1])  # the members differ, so the average is not any one of them
    np.testing.assert_allclose(ensemble.demand_cdf(histories, targets, windows=windows), np.mean(cdfs, axis=0))
    # a member whose weights no longer match its manifest is refused, naming the file
    copy = tmp_path / "checkpoints"
    shutil.copytree(DEFAULT_CHECKPOINT.parent, copy, ignore=shutil.ignore_patterns("mat", "budget"))
    with open(copy / "pfn_ensemble" / "wide" / "pfn.pt", "ab") as f:
        f.write(b"\0")
    monkeypatch.setattr(pfn_module, "DEFAULT_CHECKPOINT", copy / "pfn.pt")
    with pytest.raises(ValueError, match="checksum mismatch.*wide"):
        PREDICTORS["pfn-ens"]()


# ---------------------------------------------------------------------------------------------- tuning
def test_tuning_scores_posterior_rows_on_train_workloads_and_never_reads_an_evaluation_suite(tmp_path, monkeypatch):
    import json

    import core_env.generators
    import core_env.suites
    from benchmarks import tuning

    def refuse(*args, **kwargs):
        raise AssertionError("tuning read an evaluation suite")

    for module in (core_env.suites, core_env.generators):
        monkeypatch.setattr(module, "load_suite", refuse)
        monkeypatch.setattr(module, "load_suite_file", refuse)
    out = tmp_path / "tuning.json"
    rows = ["index:wls,deadline_pct=0,explore=1", "plan:wls,samples=4,explore=1"]
    assert tuning.main(["--rows", *rows, "--episodes", "2", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert set(saved["scores"]) == set(rows) and saved["chosen"] in rows and saved["workloads"].startswith("train")
    with pytest.raises(SystemExit) as stop:
        tuning.main(["--rows", "index:wls,deadline_pct=101", "--episodes", "1", "--out", str(out)])
    assert stop.value.code == 2
