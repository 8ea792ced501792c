"""The curve-free prior for tasks with no report (issue 48, item 1): a distribution from the declared target
and deadline window, conditioned on the reports so far, and the ``prior=1`` option of the posterior allocators."""

from __future__ import annotations

import numpy as np
import pytest

from mara_agents.allocators import make_allocator
from mara_agents.predictors import WLS
from mara_agents.predictors.demand_prior import DemandPrior, UnreportedPrior, fitted_prior, with_prior


def _prior(neighbours: int = 3) -> DemandPrior:
    # two clusters: small targets / short windows need 5, 10, 20 node-steps; large ones 50, 60, never
    targets = np.array([0.1, 0.1, 0.1, 1.0, 1.0, 1.0])
    windows = np.array([20, 20, 20, 200, 200, 200])
    demands = np.array([5, 10, 20, 50, 60, np.inf])
    return DemandPrior(targets, windows, demands, neighbours=neighbours)


def test_the_prior_of_an_unreported_task_is_the_demand_distribution_of_its_nearest_train_tasks():
    cdf = _prior().cdf_of(np.array([0, 0]), np.array([0.1, 1.0]), np.array([20.0, 200.0]))
    assert cdf.shape == (2, 257)
    assert np.all(np.diff(cdf, axis=1) >= 0) and cdf.min() >= 0 and cdf.max() <= 1
    np.testing.assert_allclose(cdf[0, [4, 5, 10, 19, 20, 256]], [0, 1 / 3, 2 / 3, 2 / 3, 1, 1])
    np.testing.assert_allclose(cdf[1, [49, 50, 60, 256]], [0, 1 / 3, 2 / 3, 2 / 3])  # a third never finishes: censored


def test_reports_condition_the_prior_on_the_demand_exceeding_them():
    # after 7 reports without reaching the target, demand 5 is ruled out: the remaining demand is 3 or 13
    cdf = _prior(neighbours=2).cdf_of(np.array([7]), np.array([0.1]), np.array([20.0]))
    np.testing.assert_allclose(cdf[0, [2, 3, 12, 13]], [0, 0.5, 0.5, 1.0])


def test_the_summary_agrees_with_the_cdf_and_bad_inputs_name_the_problem():
    prior = _prior()
    summary = prior.predict([np.zeros(0)], np.array([0.1]), np.array([12]), windows=np.array([20.0]))
    assert summary.median[0] == 10 and summary.p_within_budget[0] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="windows"):
        prior.predict([np.zeros(0)], np.array([0.1]), np.array([12]))
    with pytest.raises(ValueError, match="neighbours"):
        DemandPrior(np.ones(2), np.ones(2), np.ones(2), neighbours=3)
    with pytest.raises(ValueError, match="demands"):
        DemandPrior(np.ones(2), np.ones(2), np.zeros(2))


def test_unreported_tasks_read_the_prior_and_the_others_the_predictor():
    wls, prior = WLS(), _prior()
    both = UnreportedPrior(wls, prior)
    reported = np.array([1.0, 0.8, 0.65, 0.55, 0.5])
    histories, targets, budgets, windows = [np.zeros(0), reported], np.array([0.1, 0.3]), np.array([15, 40]), np.array([20.0, 80.0])
    summary = both.predict(histories, targets, budgets, windows=windows)
    alone = wls.predict([reported], targets[1:], budgets[1:])
    from_prior = prior.predict([np.zeros(0)], targets[:1], budgets[:1], windows=windows[:1])
    assert summary.median[1] == alone.median[0] and summary.p_within_budget[1] == alone.p_within_budget[0]
    assert summary.median[0] == from_prior.median[0] and summary.p_within_budget[0] == from_prior.p_within_budget[0] > 0
    # without the prior every curve reader censors an unreported task
    assert wls.predict([np.zeros(0)], targets[:1], budgets[:1]).median[0] == np.inf


def test_the_prior_option_of_the_allocators():
    assert isinstance(make_allocator("index:wls,explore=0,prior=1", task_set="id").predictor, UnreportedPrior)
    assert not isinstance(make_allocator("index:wls,explore=0,prior=0", task_set="id").predictor, UnreportedPrior)
    with pytest.raises(ValueError, match="task_set"):
        make_allocator("index:wls,prior=1")
    with pytest.raises(ValueError, match="prior must be 0 or 1"):
        make_allocator("plan:wls,prior=2", task_set="id")
    with pytest.raises(ValueError, match="posterior allocators"):
        make_allocator("lara:wls,prior=1", task_set="id")
    with pytest.raises(ValueError, match="oracle"):
        with_prior(__import__("mara_agents.predictors", fromlist=["OraclePredictor"]).OraclePredictor(), "id")


def test_the_fitted_prior_reads_the_train_workloads_only():
    from core_env.suites import load_suite
    from mara_agents.decision_points import train_workloads

    prior, train = fitted_prior("id"), train_workloads("id")
    np.testing.assert_array_equal(prior._demands, np.ceil(np.concatenate([w.demand for w in train])))
    evaluation = load_suite("id", "train", 0, 0)
    assert not np.array_equal(np.sort(prior._demands[: len(evaluation)]), np.sort(np.ceil(evaluation.demand)))
