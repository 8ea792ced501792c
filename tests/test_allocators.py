"""The learning-aware allocators: observed histories, admission, ordering, hand-made scenarios, validity."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import masked_random_actions
from test_heuristics import hand_workload

from benchmarks.rollout import run_agent, run_parallel_episode
from core_env import discrete_core_v1, features
from core_env.config import EnvConfig
from core_env.sim import Simulator
from core_env.generators import generator_for
from mara_agents.allocators import ALLOCATORS, LARA, LLF, EDFAdmission, LaiRA, ObservedTasks
from mara_agents.allocators.admission import schedulable
from mara_agents.heuristics import EDF, LAS, RandomAgent
from mara_agents.predictors import WLS, OraclePredictor
from mara_agents.protocols import REMAINING_DEMAND

CONFIG = EnvConfig()


def train_workloads(count: int, seed: int = 0) -> list:
    return [generator_for(CONFIG).workload(np.random.default_rng(seed + i)) for i in range(count)]


def served_slots(agent, workload, config: EnvConfig, steps: int) -> list[list[int]]:
    """The slots (action − 1, −1 idle) each node serves over the first ``steps`` steps of one episode."""
    sim = Simulator(config, 1)
    sim.reset([workload])
    agent.reset(1, config.n_nodes, config.n_slots)
    out = []
    for _ in range(steps):
        observation, mask = features.observations(sim, config.history)
        oracle = {REMAINING_DEMAND: sim.remaining_demand()} if agent.needs_oracle else None
        actions = agent.act(observation, mask, oracle)
        out.append((actions[0] - 1).tolist())
        sim.step(actions)
    return out


# ---------------------------------------------------------------------------------------------- observed tasks
def test_observed_tasks_rebuild_every_history_the_simulator_holds():
    sim = Simulator(CONFIG, 3)
    sim.reset(train_workloads(3))
    agent, observed = RandomAgent(seed=0), ObservedTasks()
    ids: dict[tuple[int, int], int] = {}
    while not sim.done.all():
        observation, mask = features.observations(sim, CONFIG.history)
        observed.update(observation, sim.K)
        assert np.array_equal(observed.active, sim.active)
        assert np.array_equal(observed.steps, np.where(sim.active, sim.steps, 0))
        for b, k in zip(*np.nonzero(sim.active)):
            truth = sim.reported_history(b, k)
            np.testing.assert_allclose(observed.history[b, k, :truth.size], truth, rtol=1e-5)
            # one observed id per simulator task
            assert ids.setdefault((int(b), int(sim.task[b, k])), int(observed.task[b, k])) == observed.task[b, k]
        np.testing.assert_array_equal(observed.budget[sim.active], (sim.deadline - sim.t[:, None])[sim.active])
        sim.step(agent.act(observation, mask))
    assert len(set(ids.values())) == len(ids)


def test_observed_tasks_refuse_skipped_observations():
    sim = Simulator(CONFIG, 1)
    sim.reset(train_workloads(1))
    observed, agent = ObservedTasks(), EDF()
    observation, mask = features.observations(sim, CONFIG.history)
    observed.update(observation, sim.K)
    for _ in range(CONFIG.history + 3):  # the same task served more steps than the observed history holds
        observation, mask = features.observations(sim, CONFIG.history)
        sim.step(agent.act(observation, mask))
    with pytest.raises(ValueError, match="skipped"):
        observed.update(features.observations(sim, CONFIG.history)[0], sim.K)


# ---------------------------------------------------------------------------------------------- admission
def test_schedulable_is_the_exact_test_for_one_node_per_task():
    demand = np.array([[3.0, 3.0, 0.0]])
    budget = np.array([[4, 4, 9]])
    both, first = np.array([[True, True, False]]), np.array([[True, False, False]])
    assert not schedulable(demand, budget, both, 1)[0]  # 6 node-steps in 4 steps on one node
    assert schedulable(demand, budget, both, 2)[0]
    assert schedulable(demand, budget, first, 1)[0]
    # each fits alone and the total fits N·D, but one node per task per step: 5 steps of work in 4 steps
    assert not schedulable(np.array([[5.0, 1.0]]), np.array([[4, 4]]), np.array([[True, True]]), 2)[0]
    # a tight task and a loose one: the loose one can wait
    assert schedulable(np.array([[2.0, 3.0]]), np.array([[2, 5]]), np.array([[True, True]]), 1)[0]
    assert not schedulable(np.array([[np.inf]]), np.array([[9]]), np.array([[True]]), 4)[0]


def test_admission_rejects_a_task_that_cannot_finish():
    # slot 0: due first but needs 30 node-steps in 10; slot 1: needs 5 in 40
    workload = hand_workload([(0, 10, 30), (0, 40, 5)])
    config = EnvConfig(n_nodes=1, n_slots=2)
    served = served_slots(EDFAdmission(OraclePredictor(), min_reports=0, demote=False), workload, config, 6)
    assert served == [[1]] * 5 + [[-1]]  # task 1 until done (5 steps), then idle: task 0 is never served
    assert served_slots(EDF(), workload, config, 3) == [[0]] * 3


def test_admit_pct_admits_on_the_predicted_probability_of_fitting():
    from types import SimpleNamespace

    from mara_agents.allocators import Estimates, make_allocator
    from mara_agents.allocators.admission import predicted_feasible

    # four active tasks, all with 3 reports: medians fit for the first two; P(fit) 0.9, 0.55, 0.45, 0.2
    tasks = SimpleNamespace(active=np.ones((1, 4), bool), steps=np.full((1, 4), 3), budget=np.full((1, 4), 10))
    estimates = Estimates(tasks, np.array([[4.0, 9.0, 11.0, np.inf]]), np.array([[0.9, 0.55, 0.45, 0.2]]), 1)
    assert predicted_feasible(estimates, 1).tolist() == [[True, True, False, False]]  # the median rule
    assert predicted_feasible(estimates, 1, admit_pct=60).tolist() == [[True, False, False, False]]
    assert predicted_feasible(estimates, 1, admit_pct=20).tolist() == [[True, True, True, True]]
    assert predicted_feasible(estimates, 4, admit_pct=60).tolist() == [[True] * 4]  # warm-up: too few reports
    assert make_allocator("edf-admission:pfn,min_reports=1,admit_pct=70") is not None
    for bad in ("admit_pct=0", "admit_pct=101"):
        with pytest.raises(ValueError, match="admit_pct must be an int percentage"):
            make_allocator(f"edf-admission:wls,{bad}")


# ---------------------------------------------------------------------------------------------- orderings
def test_llf_serves_the_least_laxity_first():
    # slot 0: due at 10, needs 8 (laxity 2); slot 1: due at 6, needs 2 (laxity 4): EDF would take slot 1
    workload = hand_workload([(0, 10, 8), (0, 6, 2)])
    config = EnvConfig(n_nodes=1, n_slots=2)
    assert served_slots(LLF(OraclePredictor()), workload, config, 2) == [[0], [0]]
    assert served_slots(EDF(), workload, config, 1) == [[1]]


def test_lara_drops_a_task_its_estimate_says_cannot_finish():
    # slot 0 is flat (never reaches its target) and due first; slot 1 learns and is feasible
    workload = hand_workload([(0, 30, None), (0, 60, 10)])
    config = EnvConfig(n_nodes=1, n_slots=2)
    served = [s[0] for s in served_slots(LARA(WLS(), explore_steps=3, serve_rest=False), workload, config, 25)]
    assert served[:6].count(0) == 3 and served[:6].count(1) == 3  # both explored: 3 reports each
    assert served[6:13] == [1] * 7 and set(served[13:]) == {-1}  # then only the feasible task, to its end


def test_laira_holds_its_assignment_for_the_slice():
    # both young at t = 0: slot 0 (earlier deadline) wins the first 4-step slice; once it has reports the
    # young slot 1 ranks first, but slot 0 keeps the node until the slice ends
    workload = hand_workload([(0, 40, 30), (0, 50, 30)])
    config = EnvConfig(n_nodes=1, n_slots=2)
    agent = LaiRA(OraclePredictor(), first_slice=4, min_reports=1, gains=(0.0, 0.0))
    served = [s[0] for s in served_slots(agent, workload, config, 5)]
    assert served == [0, 0, 0, 0, 1]


def test_las_serves_the_least_served_task():
    workload = hand_workload([(0, 40, 30), (0, 50, 30), (1, 50, 30)])
    config = EnvConfig(n_nodes=1, n_slots=3)
    # least served first; ties go to the older task (slot 2 arrives a step later)
    assert [s[0] for s in served_slots(LAS(), workload, config, 5)] == [0, 1, 2, 0, 1]


# ---------------------------------------------------------------------------------------------- validity
AGENT_FACTORIES = {f"{name}:{predictor}": (lambda n=name, p=predictor: ALLOCATORS[n](p))
                   for name in ("lara", "laira", "edf-admission", "llf", "slaq", "index", "plan") for predictor in ("wls", "oracle")}
AGENT_FACTORIES["las"] = LAS


@pytest.mark.parametrize("name", sorted(AGENT_FACTORIES))
def test_every_allocator_emits_masked_valid_conflict_free_actions(name):
    """Over the states met when the env is driven half by the allocator and half at random."""
    config = EnvConfig(arrival_steps=150)
    agent, rng = AGENT_FACTORIES[name](), np.random.default_rng(1)
    sim = Simulator(config, 4)
    sim.reset([generator_for(config).workload(np.random.default_rng(100 + i)) for i in range(4)])
    agent.reset(sim.B, sim.N, sim.K)
    checked = 0
    while not sim.done.all():
        observation, mask = features.observations(sim, config.history)
        oracle = {REMAINING_DEMAND: sim.remaining_demand()} if agent.needs_oracle else None
        actions = agent.act(observation, mask, oracle)
        assert actions.shape == (sim.B, sim.N) and actions.dtype == np.int64
        assert np.all(np.take_along_axis(mask, actions[..., None], axis=2) == 1)
        for row in actions[~sim.done]:
            chosen = row[row > 0]
            assert chosen.size == np.unique(chosen).size
        checked += 1
        if rng.random() < 0.5:
            actions = np.stack([masked_random_actions(rng, m) for m in mask])
        sim.step(actions)
    assert checked > 150


def test_allocator_in_pettingzoo_matches_the_batched_runner():
    workload = train_workloads(1, seed=7)[0]
    agent = ALLOCATORS["lara"]()
    batched = run_agent(agent, [workload], CONFIG)
    single = run_parallel_episode(discrete_core_v1.parallel_env(), agent, seed=0, options={"workload": workload})
    assert single["completed"] == batched["completed"][0] and single["completion_rate"] == pytest.approx(batched["completion_rate"][0])


def test_oracle_allocators_ask_for_the_oracle_and_bad_arguments_raise():
    agent = ALLOCATORS["lara"]("oracle")
    assert agent.needs_oracle and not ALLOCATORS["lara"]().needs_oracle
    sim = Simulator(CONFIG, 1)
    sim.reset(train_workloads(1))
    agent.reset(1, sim.N, sim.K)
    with pytest.raises(ValueError, match="oracle"):
        agent.act(*features.observations(sim, CONFIG.history))
    with pytest.raises(ValueError, match="unknown predictor"):
        ALLOCATORS["llf"]("nope")
    with pytest.raises(ValueError, match="explore_steps"):
        LARA(WLS(), explore_steps=-1)
    with pytest.raises(ValueError, match="first_slice"):
        LaiRA(first_slice=0)
    with pytest.raises(TypeError, match="Predictor"):
        LLF("wls")


def test_allocator_specs_name_predictor_and_integer_options():
    from mara_agents.allocators import make_allocator
    from mara_agents.predictors import DKF

    lara = make_allocator("lara:dkf,explore_steps=2")
    assert isinstance(lara, LARA) and isinstance(lara.predictor, DKF) and lara.explore_steps == 2
    assert make_allocator("lara").explore_steps == 3
    for spec, message in [("nope", "unknown allocator"), ("lara,explore_steps=two", "KEY=INT"), ("lara,bogus=1", "bogus"),
                          ("lara:nope", "unknown predictor")]:
        with pytest.raises(ValueError, match=message):
            make_allocator(spec)
