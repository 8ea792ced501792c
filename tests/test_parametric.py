"""POW4 and MMF4 fitted per history: they recover an exact curve of their own form and follow the protocol."""

from __future__ import annotations

import numpy as np
import pytest

from mara_agents.predictors import PREDICTORS
from mara_agents.predictors.parametric import ParametricCurve, log_curve

TRUE = {"pow4": np.log([0.1, 2.0, 3.0, 0.7]), "mmf4": np.log([2.0, 0.1, 20.0, 1.5])}


@pytest.mark.parametrize("model", ["pow4", "mmf4"])
def test_a_long_history_of_the_models_own_form_is_extrapolated(model):
    predictor = PREDICTORS[model]()
    curve = np.exp(log_curve(model, TRUE[model][None], np.arange(1, 61.0)[None]))[0]
    fit = predictor.fit([curve])
    mean, sd = predictor.forecast(fit)
    truth = log_curve(model, TRUE[model][None], (60 + np.arange(1, 11.0))[None])[0]
    np.testing.assert_allclose(mean[0, :10], truth, atol=0.02)
    assert np.all(sd >= 0)


@pytest.mark.parametrize("model", ["pow4", "mmf4"])
def test_summaries_follow_the_predictor_protocol(model):
    rng = np.random.default_rng(0)
    histories = [np.exp(rng.normal(0, 0.05, n)) * (1 + np.arange(n)) ** -0.4 for n in (1, 2, 5, 20, 60)]
    s = PREDICTORS[model]().predict(histories, np.full(5, 0.3), np.full(5, 50))
    assert s.median.shape == (5,) and np.all(s.median >= 1)
    assert np.all((s.p_within_budget >= 0) & (s.p_within_budget <= 1))
    finite = np.where(np.isinf(s.quantiles), 1e9, s.quantiles)
    assert np.all(np.diff(finite, axis=1) >= 0)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="unknown curve model"):
        ParametricCurve("pow9")
    with pytest.raises(ValueError, match="iterations"):
        ParametricCurve("pow4", iterations=0)
    with pytest.raises(ValueError, match="unknown curve model"):
        log_curve("exp2", np.zeros((1, 4)), np.ones((1, 3)))
