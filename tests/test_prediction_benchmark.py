"""Smoke test of the prediction benchmark (Table 1) in its quick configuration."""

from __future__ import annotations

import math

import pytest

from benchmarks import prediction


@pytest.fixture(scope="module")
def quick_result():
    return prediction.evaluate(max_tasks=12, resamples=50, timing_runs=1, roots=1, episodes=1)


def test_quick_run_has_finite_metrics_for_every_predictor(quick_result):
    cells = quick_result["cells"]
    expected = {(t, f, p) for t in prediction.SUITE_TASK_SETS for f in prediction.FRACTIONS for p in prediction.PREDICTOR_ROWS}
    assert {(c["task_set"], c["fraction"], c["predictor"]) for c in cells} == expected
    for c in cells:
        assert c["tasks"] > 0
        assert math.isfinite(c["mae"]) and 0.0 <= c["mae"] <= prediction.CAP
        assert math.isfinite(c["accuracy"]) and 0.0 <= c["accuracy"] <= 1.0
        assert c["mae_ci"][0] <= c["mae"] + 1e-9 and c["mae"] <= c["mae_ci"][1] + 1e-9
        assert all(math.isfinite(x) for x in (*c["mae_ci"], *c["accuracy_ci"]))
    assert set(quick_result["timing_s_per_1024"]) == set(prediction.PREDICTOR_ROWS)
    assert all(math.isfinite(t) and t > 0 for t in quick_result["timing_s_per_1024"].values())


def test_oracle_is_exact(quick_result):
    for c in quick_result["cells"]:
        if c["predictor"] == "oracle":
            assert c["mae"] == 0.0
            assert c["accuracy"] == 1.0


def test_cli_quick_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(prediction, "write_results", lambda *a, **k: [tmp_path / "prediction_quick.json"])
    assert prediction.main(["--quick"]) == 0
    assert "capped MAE" in capsys.readouterr().out
