"""The prior-edf admission probe: what it reads, how it demotes, and how it is built per task set."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import decision_points as dp
from benchmarks.agents import make_agent
from core_env.config import EnvConfig
from core_env.observation import parse_observation
from core_env.vector import DiscreteCoREVectorEnv
from core_env.workload import load_suite
from mara_agents.heuristics import prior_edf


class Regressor:
    """A stand-in for the probe's regressor: a fixed function of the inputs (log target, log window, left, k)."""

    def __init__(self, rule) -> None:
        self.rule, self.seen = rule, []

    def predict(self, x: np.ndarray) -> np.ndarray:
        self.seen.append(x.copy())
        return self.rule(x)


class Probe:
    inputs = staticmethod(dp.PriorProbe.inputs)

    def __init__(self, rule) -> None:
        self.regressor = Regressor(rule)


@pytest.fixture(scope="module")
def mid_episode():
    """An observation of the id suite after 40 EDF steps, and the slots every node may choose."""
    envs = DiscreteCoREVectorEnv(1, "disabled", config=EnvConfig())
    obs, _ = envs.reset(options={"workload": load_suite("id", "train", 0, 0)})
    agent = make_agent("edf")
    agent.reset(1, envs.batch.N, envs.batch.K)
    for _ in range(40):
        obs, *_ = envs.step(agent.act(obs["observation"], obs["action_mask"]))
    return obs["observation"], obs["action_mask"][..., 1:].all(axis=1).astype(bool)


def test_prior_edf_demotes_exactly_the_tasks_whose_predicted_demand_exceeds_their_steps_to_deadline(mid_episode):
    observation, active = mid_episode
    assert active.sum() >= 4
    parsed = parse_observation(observation, active.shape[1])
    agent = prior_edf.PriorEDF(Probe(lambda x: np.full(len(x), 30.0)))
    demoted = agent.demoted(observation, active)
    np.testing.assert_array_equal(demoted, active & (parsed.steps_to_deadline < 30))
    x = agent.probe.regressor.seen[-1]  # it reads the declared target, the window, the clock and k: no loss value
    np.testing.assert_allclose(x[:, 0], np.log(parsed.target[active]), rtol=1e-6)
    np.testing.assert_array_equal(x[:, 1], np.log(np.maximum(parsed.age + parsed.steps_to_deadline, 1)[active]))
    np.testing.assert_array_equal(x[:, 2], parsed.steps_to_deadline[active])
    np.testing.assert_array_equal(x[:, 3], parsed.node_steps[active])
    generous = prior_edf.PriorEDF(Probe(lambda x: x[:, 2] - 1))  # a demand below every task's steps to deadline: none demoted
    assert not generous.demoted(observation, active).any()
    assert not agent.demoted(observation, np.zeros_like(active)).any()


def test_the_row_is_fitted_per_task_set_and_refuses_to_guess_one(monkeypatch):
    with pytest.raises(ValueError, match="task_set"):
        make_agent("prior-edf")
    fitted = []
    monkeypatch.setattr(prior_edf, "fitted_probe", lambda task_set: fitted.append(task_set) or Probe(lambda x: np.ones(len(x))))
    assert isinstance(make_agent("prior-edf", task_set="rl_ood"), prior_edf.PriorEDF)
    make_agent("prior-edf", task_set="stress")  # a constructed scenario: the id fit
    assert fitted == ["rl_ood", "id"]


def test_the_fit_is_table_1s_prior_probe_on_train_workloads():
    probes, points = dp.train_probes("id", episodes=1, names=(dp.PriorProbe.name,))
    assert list(probes) == [dp.PriorProbe.name] and points > 0
    with pytest.raises(ValueError, match="unknown probes"):
        dp.fit_probes([], names=("probe: nope",))
    agent = prior_edf.PriorEDF(probes[dp.PriorProbe.name])
    from benchmarks.rollout import run_agent

    rates = run_agent(agent, [load_suite("id", "train", 0, 0)], EnvConfig())["completion_rate"]
    assert 0.0 < float(rates[0]) <= 1.0
