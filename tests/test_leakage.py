"""The leak audit: the window probe, and the v1 workloads hiding each task's demand."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import act, parallel_on, tiny_workload

from benchmarks import leakage
from mara_agents.heuristics import EDF, HEURISTICS, WindowEDF


def _batch(observations: dict) -> tuple[np.ndarray, np.ndarray]:
    agents = sorted(observations)
    return (np.stack([observations[a]["observation"] for a in agents])[None],
            np.stack([observations[a]["action_mask"] for a in agents])[None])


def test_window_edf_demotes_tasks_whose_window_guess_no_longer_fits():
    # Two tasks that never complete: A (window 30) and B (window 6). After 4 idle steps B has 2 steps
    # left and a guess of 0.5 · 6 − 0 = 3 > 2: demoted, so the probe serves A while EDF serves B.
    workload = tiny_workload([(0, 30, 0.5, 1.0), (0, 6, 0.5, 1.0)])
    env, observations, _ = parallel_on(workload, n_nodes=1, n_slots=2)
    assert WindowEDF(0.5).act(*_batch(observations)).tolist() == [[2]]  # at t = 0 both fit: earliest deadline
    for _ in range(4):
        observations, *_ = act(env, 0)
    observation, mask = _batch(observations)
    assert EDF().act(observation, mask).tolist() == [[2]]
    assert WindowEDF(0.5).act(observation, mask).tolist() == [[1]]
    assert WindowEDF(0.2).act(observation, mask).tolist() == [[2]]  # guess 1.2 <= 2: still admitted


def test_window_edf_is_a_registered_row_and_rejects_bad_factors():
    assert HEURISTICS["window-edf"] is WindowEDF
    with pytest.raises(ValueError, match="factor"):
        WindowEDF(float("nan"))


def test_v1_id_workloads_hide_the_demand_from_the_window(tmp_path):
    assert leakage.main(["--task-sets", "id", "--loads", "train", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "leakage.json").read_text())
    row = result["train_load"]["id"]
    assert set(row) == set(leakage.COLUMNS)
    assert row["window_edf"] - row["edf"] <= leakage.MAX_PROBE_GAIN
    assert row["oracle_admission"] - row["window_edf"] >= leakage.MIN_ORACLE_GAIN
    assert result["criteria"]["hides_demand"] is True
    assert row["edf"] < row["clairvoyant"] <= row["milp"] + 1e-9 <= row["bound"] + 2e-9
    assert result["window_factor"]["id"] in leakage.FACTORS


def test_calibration_puts_edf_well_below_the_milp_ceiling_and_stress_at_the_ceiling(tmp_path):
    from benchmarks import calibration

    rows = calibration.evaluate(["id"], ["train", "x2"])
    train, heavy, stress = rows
    assert (train["load"], heavy["load"], stress["task_set"]) == ("train", "x2", "stress")
    assert 45 <= train["edf"]["mean"] <= 60 and 70 <= train["milp"]["mean"] <= 85  # the paper's regime
    for row in (train, heavy):
        assert (row["edf"]["mean"] < row["clairvoyant"]["mean"] <= row["milp-slots"]["mean"] + 1e-9 <= row["milp"]["mean"] + 2e-9
                <= row["bound"]["mean"] + 3e-9)
    assert stress["milp-slots"] is None  # stored for the committed suites only
    assert "| — |" in calibration.table(rows)
    assert all(heavy[c]["mean"] < train[c]["mean"] for c in ("fifo", "edf", "clairvoyant", "milp"))  # heavier loads lower everyone
    assert stress["fifo"]["mean"] == stress["edf"]["mean"] == 0.0
    assert stress["clairvoyant"]["mean"] == pytest.approx(stress["milp"]["mean"]) == pytest.approx(65.0)


def test_target_edf_serves_the_highest_target_first_with_window_edf_admission():
    from mara_agents.heuristics import TargetEDF

    # A: late deadline, high (easy) target; B: early deadline, low target. EDF serves B, the target probe A.
    workload = tiny_workload([(0, 30, 0.8, 1.0), (0, 6, 0.5, 1.0)])
    env, observations, _ = parallel_on(workload, n_nodes=1, n_slots=2)
    observation, mask = _batch(observations)
    assert EDF().act(observation, mask).tolist() == [[2]]
    assert TargetEDF(0.5).act(observation, mask).tolist() == [[1]]
    # equal targets: the earliest deadline breaks the tie
    env, observations, _ = parallel_on(tiny_workload([(0, 30, 0.5, 1.0), (0, 6, 0.5, 1.0)]), n_nodes=1, n_slots=2)
    assert TargetEDF(0.5).act(*_batch(observations)).tolist() == [[2]]
    assert HEURISTICS["target-edf"] is TargetEDF
