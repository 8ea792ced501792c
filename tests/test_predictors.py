"""Remaining-demand predictors: WLS (LARA), DKF (LaiRA), last slope and the oracle."""

from __future__ import annotations

import numpy as np
import pytest

from core_env.curves import CurveBank
from mara_agents.predictors import DKF, PREDICTORS, WLS, DemandSummary, LastSlope, OraclePredictor
from mara_agents.predictors.dkf import transition
from mara_agents.protocols import REMAINING_DEMAND

LEARNED = {"wls": WLS, "dkf": DKF, "last_slope": LastSlope}


def power_law(a: float, b: float, n: int) -> np.ndarray:
    """The reports a·i^(−b) of node-steps i = 1 … n."""
    return a * np.arange(1, n + 1, dtype=np.float64) ** -b


def true_remaining(curve: np.ndarray, target: float, seen: int) -> float:
    """Nominal node-steps after ``seen`` reports until a report of ``curve`` (one point per node-step)
    reaches ``target``, from the simulator's own curve bank."""
    return CurveBank("closed_form", [curve], ["power_law"]).demand(0, target, 1.0, start=float(seen))


def noisy_histories(seed: int = 0, m: int = 12) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [power_law(rng.uniform(0.5, 3), rng.uniform(0.2, 1.2), n) * np.exp(rng.normal(0, 0.05, n)) for n in rng.integers(0, 40, m)]


# --------------------------------------------------------------------------------------------------
# WLS


def test_wls_recovers_the_parameters_of_an_exact_power_law():
    for a, b in [(2.5, 0.7), (0.3, 0.2), (10.0, 1.5)]:
        fit = WLS().fit([power_law(a, b, 40)])
        np.testing.assert_allclose(fit.theta[0], [-b, np.log(a)], atol=1e-3)


def test_wls_is_certain_about_an_exact_power_law_without_a_noise_prior():
    fit = WLS(noise_weight=0.0).fit([power_law(2.0, 0.5, 30)])
    np.testing.assert_allclose(fit.cov, 0.0, atol=1e-9)


def test_wls_online_updates_keep_six_numbers_and_match_the_batch_fit():
    wls = WLS(discount=0.9)
    history = noisy_histories(1, 1)[0]
    state = wls.state()
    for loss in history:
        state.update(loss)
        assert state.sums.shape == (6,)  # O(1) memory and work per report, whatever the history length
    online, batch = wls.fit_states([state]), wls.fit([history])
    np.testing.assert_allclose(online.theta, batch.theta, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(online.cov, batch.cov, rtol=1e-9, atol=1e-15)
    assert state.steps == history.size


def test_wls_discounting_follows_a_change_of_slope():
    """With γ < 1 old reports fade: after a kink the fit approaches the new power law."""
    n = np.arange(1, 201, dtype=np.float64)
    history = np.where(n <= 100, 2.0 * n**-0.3, 2.0 * 100**-0.3 * (n / 100) ** -1.0)
    recent, everything = WLS(discount=0.9).fit([history]), WLS(discount=1.0).fit([history])
    assert abs(recent.theta[0, 0] + 1.0) < 0.02 < abs(everything.theta[0, 0] + 1.0)


# --------------------------------------------------------------------------------------------------
# DKF


def drifting_power_law(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log losses r_i = θ₁(i)·ln i + θ₂(i) with both parameters drifting linearly in i, and θ₁, θ₂."""
    i = np.arange(1, n + 1, dtype=np.float64)
    theta1, theta2 = -0.8 + 0.002 * i, 0.5 - 0.001 * i
    return theta1 * np.log(i) + theta2, theta1, theta2


def test_dkf_tracks_a_drifting_power_law():
    log_loss, theta1, _ = drifting_power_law(200)
    seen = 150
    dkf, wls = DKF(), WLS(discount=1.0)  # one static power law over the whole history
    fit = dkf.fit([np.exp(log_loss[:seen])])
    assert abs(fit.state[0, 0] - theta1[seen - 1]) < 0.05  # the current slope, not the average one
    ahead = np.array([1, 10, 50])
    dkf_error = np.abs(dkf.forecast(fit)[0][0, ahead - 1] - log_loss[seen + ahead - 1])
    wls_error = np.abs(wls.forecast(wls.fit([np.exp(log_loss[:seen])]))[0][0, ahead - 1] - log_loss[seen + ahead - 1])
    assert np.all(dkf_error < [0.005, 0.01, 0.05])
    assert np.all(dkf_error * 10 < wls_error)  # a static power law cannot follow a drift


def test_dkf_holds_still_on_an_exact_power_law():
    fit = DKF().fit([power_law(2.5, 0.7, 60)])
    np.testing.assert_allclose(fit.state[0, :2], [-0.7, np.log(2.5)], atol=0.01)
    np.testing.assert_allclose(fit.state[0, 2:], 0.0, atol=1e-3)


def test_dkf_transition_is_the_matrix_f_and_its_powers_advance_time():
    dkf, rng = DKF(delta=0.7), np.random.default_rng(0)
    state, cov = rng.normal(size=(3, 6)), rng.normal(size=(3, 6, 6))
    F = transition(0.7)
    np.testing.assert_allclose(dkf._transition(state, 1), state @ F.T, rtol=1e-12)
    np.testing.assert_allclose(dkf._transition(dkf._transition(cov, 1), 2), F @ cov @ F.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.linalg.matrix_power(F, 5), transition(3.5), rtol=1e-12)


def test_dkf_online_updates_match_the_batch_filter():
    dkf = DKF()
    history = noisy_histories(2, 1)[0]
    state = dkf.state()
    for loss in history:
        state.update(loss)
    batch = dkf.fit([history])
    np.testing.assert_allclose(state.state, batch.state[0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(state.cov, batch.cov[0], rtol=1e-9, atol=1e-15)
    summary = dkf.predict_states([state], [0.05], [20])
    np.testing.assert_array_equal(summary.quantiles, dkf.predict([history], [0.05], [20]).quantiles)


def test_dkf_lookahead_extrapolates_to_the_end_of_the_budget():
    history, a, b = power_law(2.0, 0.5, 30), 2.0, 0.5
    budgets = np.array([10, 50, 200])
    loss, feasible = DKF().lookahead([history] * 3, np.full(3, a * 75.0**-b), budgets)
    np.testing.assert_allclose(loss, a * (30.0 + budgets) ** -b, rtol=0.02)
    np.testing.assert_array_equal(feasible, [False, True, True])  # reachable from report 75 = 30 + 45 on


# --------------------------------------------------------------------------------------------------
# Crossings on closed-form curves


@pytest.mark.parametrize("name", ["wls", "dkf"])
@pytest.mark.parametrize("a, b, seen, crossing", [(2.0, 0.5, 20, 58), (1.0, 1.0, 5, 9), (3.0, 0.3, 40, 140), (0.5, 0.8, 2, 3)])
def test_the_median_is_the_exact_crossing_of_a_closed_form_power_law(name, a, b, seen, crossing):
    curve = power_law(a, b, 2000)
    target = a * (crossing - 0.5) ** -b  # first reached by report `crossing`
    truth = true_remaining(curve, target, seen)
    assert truth == crossing - seen
    summary = LEARNED[name]().predict([curve[:seen]], [target], [truth])
    assert summary.median[0] == truth


def test_wls_without_noise_prior_is_a_point_mass_at_the_crossing():
    curve, target = power_law(2.0, 0.5, 500), 2.0 * 57.5**-0.5
    summary = WLS(noise_weight=0.0).predict([curve[:20]], [target], np.array([[37, 38, 39]]))
    np.testing.assert_array_equal(summary.quantiles, [[38.0] * 5])
    np.testing.assert_array_equal(summary.p_within_budget, [[0.0, 1.0, 1.0]])


def test_last_slope_extrapolates_a_straight_log_loss_line():
    history = np.exp(-0.1 * np.arange(1, 11))  # log loss falls by 0.1 per node-step; last report: -1.0
    summary = LastSlope(k=3).predict([history], [np.exp(-2.05)], [5])
    assert summary.median[0] == 11  # -1.0 - 0.1·11 = -2.1 is the first value <= -2.05


def test_last_slope_needs_two_reports_and_a_falling_loss():
    summary = LastSlope().predict([np.ones(0), np.array([1.0]), np.array([1.0, 1.1]), np.array([1.0, 0.5])], [0.1, 0.1, 0.1, 0.7], [9] * 4)
    np.testing.assert_array_equal(summary.median, [np.inf, np.inf, np.inf, 1.0])


# --------------------------------------------------------------------------------------------------
# The summary's contract, for every predictor


def _predict(name: str, histories: list[np.ndarray], targets: np.ndarray, budgets: np.ndarray) -> DemandSummary:
    if name == "oracle":
        demand = np.arange(len(histories), dtype=np.float64) * 7 + 1
        return OraclePredictor().predict(histories, targets, budgets, {REMAINING_DEMAND: demand})
    predictor = PREDICTORS[name]()
    windows = np.array([len(h) for h in histories], dtype=np.float64) + 60 if predictor.uses_window else None
    return predictor.predict(histories, targets, budgets, windows=windows)


@pytest.mark.parametrize("name", sorted(PREDICTORS))
def test_summaries_have_the_documented_shapes_and_ranges(name):
    histories = noisy_histories(3)
    targets, budgets = np.full(len(histories), 0.2), np.arange(len(histories)) * 5
    summary = _predict(name, histories, targets, budgets)
    M, Q = len(histories), summary.levels.size
    assert summary.median.shape == (M,) and summary.quantiles.shape == (M, Q) and summary.p_within_budget.shape == (M,)
    assert not np.isnan(summary.quantiles).any() and np.all(summary.quantiles >= 1)
    assert np.all(summary.quantiles[:, 1:] >= summary.quantiles[:, :-1])
    assert np.all((summary.p_within_budget >= 0) & (summary.p_within_budget <= 1))
    assert np.all(summary.p_within_budget[budgets == 0] == 0)  # no report can happen without a node-step


@pytest.mark.parametrize("name", sorted(PREDICTORS))
def test_p_within_budget_is_a_cdf_consistent_with_the_median(name):
    histories = noisy_histories(4)
    M = len(histories)
    budgets = np.broadcast_to(np.arange(0, 200), (M, 200))
    summary = _predict(name, histories, np.full(M, 0.2), budgets)
    p = summary.p_within_budget
    assert p.shape == (M, 200) and np.all(np.diff(p, axis=1) >= 0)
    np.testing.assert_array_equal(p >= 0.5, summary.median[:, None] <= budgets)
    single = _predict(name, histories, np.full(M, 0.2), budgets[:, 37])
    np.testing.assert_array_equal(single.p_within_budget, p[:, 37])


@pytest.mark.parametrize("name", sorted(LEARNED))
def test_a_task_gets_the_same_prediction_in_any_batch(name):
    histories = noisy_histories(5)
    alone = [LEARNED[name]().predict([h], [0.2], [30]) for h in histories]
    together = LEARNED[name]().predict(histories, np.full(len(histories), 0.2), np.full(len(histories), 30))
    for m, summary in enumerate(alone):
        np.testing.assert_array_equal(summary.quantiles[0], together.quantiles[m])
        np.testing.assert_array_equal(summary.p_within_budget[0], together.p_within_budget[m])


@pytest.mark.parametrize("name", sorted(LEARNED))
def test_a_target_a_flat_curve_never_reaches_is_censored(name):
    summary = LEARNED[name]().predict([np.full(30, 0.5)], [0.1], [10**9])
    assert summary.median[0] == np.inf and summary.p_within_budget[0] < 0.5
    if name != "dkf":  # the filter keeps some belief in a future drift, far ahead
        assert np.all(np.isinf(summary.quantiles)) and summary.p_within_budget[0] < 1e-6


@pytest.mark.parametrize("name", ["wls", "dkf"])
def test_a_crossing_beyond_the_horizon_is_censored_and_budgets_stop_at_the_horizon(name):
    curve = power_law(1.0, 0.5, 20)
    target = 1.0 * 700.5**-0.5  # reached by report 701: 681 node-steps ahead
    short, long = LEARNED[name](horizon=512), LEARNED[name](horizon=1024)
    assert short.predict([curve], [target], [np.inf]).median[0] == np.inf
    assert short.predict([curve], [target], [np.inf]).p_within_budget[0] < 0.5
    assert abs(long.predict([curve], [target], [np.inf]).median[0] - 681) <= (0 if name == "wls" else 5)


def test_the_oracle_is_a_point_mass_at_the_hidden_demand():
    demand = np.array([3.0, 10.0, np.inf, 600.0])
    summary = OraclePredictor().predict([np.ones(2)] * 4, np.full(4, 0.5), [5, 10, 10, 10**6], {REMAINING_DEMAND: demand})
    np.testing.assert_array_equal(summary.median, [3.0, 10.0, np.inf, np.inf])  # 600 > the default horizon, 256
    np.testing.assert_array_equal(summary.quantiles, np.repeat(summary.median[:, None], 5, axis=1))
    np.testing.assert_array_equal(summary.p_within_budget, [1.0, 1.0, 0.0, 0.0])


def test_the_oracle_needs_the_hidden_demand():
    with pytest.raises(ValueError, match="remaining_demand"):
        OraclePredictor().predict([np.ones(2)], [0.5], [5])
    with pytest.raises(ValueError, match="shape"):
        OraclePredictor().predict([np.ones(2)], [0.5], [5], {REMAINING_DEMAND: np.ones(3)})


@pytest.mark.parametrize("histories, targets, budgets, match", [
    ([np.array([1.0, -0.5])], [0.1], [3], "positive and finite"),
    ([np.array([1.0, np.nan])], [0.1], [3], "positive and finite"),
    ([np.ones((2, 2))], [0.1], [3], "1-D"),
    ([np.ones(3)], [0.1, 0.2], [3], "targets must have shape"),
    ([np.ones(3)], [0.0], [3], "targets must be positive"),
    ([np.ones(3)], [0.1], [-1], "non-negative"),
    ([np.ones(3)], [0.1], [[[3]]], "budgets must have shape"),
])
def test_bad_inputs_raise_with_a_message_naming_the_problem(histories, targets, budgets, match):
    with pytest.raises(ValueError, match=match):
        WLS().predict(histories, targets, budgets)


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="horizon"):
        WLS(horizon=0)
    with pytest.raises(ValueError, match="levels"):
        DKF(levels=(0.5, 0.25))
    with pytest.raises(ValueError, match="discount"):
        WLS(discount=0.0)
    with pytest.raises(ValueError, match="k must be"):
        LastSlope(k=0)
    with pytest.raises(ValueError, match="loss must be positive"):
        WLS().state().update(0.0)


def test_an_empty_batch_gives_an_empty_summary():
    summary = WLS().predict([], np.zeros(0), np.zeros(0))
    assert summary.median.shape == (0,) and summary.quantiles.shape == (0, 5)
