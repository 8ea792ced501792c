"""The prediction benchmark (Table 1): decision points, metrics, the episode bootstrap, probes and outputs.

Tiny configurations only (one task set, one root and episode, a few hundred points, few resamples).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks import decision_points as dp
from benchmarks import prediction
from benchmarks.docs_blocks import RESULTS
from benchmarks.agents import make_agent
from core_env import features
from core_env.config import EnvConfig
from core_env.curves import bank_for
from core_env.sim import Simulator
from core_env.workload import load_suite
from mara_agents.allocators.observed import ObservedTasks

FAST_ROWS = tuple(r for r in prediction.ROWS if r != "fm")  # the torch model is exercised by the CLI test
TINY = dict(task_sets=("id",), roots=1, episodes=1, max_points=150, resamples=30, train_episodes=1, timing_runs=1, progress=False)


@pytest.fixture(scope="module")
def tiny_result():
    return prediction.evaluate(rows=FAST_ROWS, **TINY)


@pytest.fixture(scope="module")
def edf_points():
    workload = load_suite("id", "train", 0, 0)
    return workload, dp.collect("edf", [workload], EnvConfig(task_set="id"), [("id", 0, 0)])


# ------------------------------------------------------------------ decision points


def test_decision_points_are_every_task_step_with_a_report_and_match_a_direct_replay(edf_points):
    workload, points = edf_points
    assert len(points) > 500 and points.reports.min() >= 1
    chosen = {int(np.argmax(points.reports)), int(np.flatnonzero(points.reports == 1)[0]), int(np.flatnonzero(points.reports == 7)[0]),
              int(np.flatnonzero(np.isinf(points.truth))[0])}
    index = {(int(t), int(s)): i for i, (t, s) in enumerate(zip(points.task, points.step))}
    assert len(index) == len(points)  # one point per (task, step)
    config = EnvConfig(task_set="id")
    sim = Simulator(config, 1)
    sim.reset([workload])
    agent, observed = make_agent("edf"), ObservedTasks()
    agent.reset(1, sim.N, sim.K)
    seen = 0
    while not sim.done.all():
        observation, mask = features.observations(sim, config.history)
        observed.update(observation, sim.K)
        demand = sim.remaining_demand()
        for slot in np.flatnonzero(sim.active[0] & (sim.steps[0] > 0)):
            i = index[(int(sim.task[0, slot]), int(sim.t[0]))]  # every such (task, step) is a point
            seen += 1
            assert points.reports[i] == sim.steps[0, slot]
            assert points.window[i] == sim.deadline[0, slot] - sim.t[0] == observed.budget[0, slot]
            assert points.target[i] == sim.target[0, slot]
            assert points.truth[i] == demand[0, slot]  # the hidden truth is remaining_demand()
            if i in chosen:
                history = points.history(i)
                np.testing.assert_array_equal(history, sim.reported_history(0, slot))
                # ... which is what a scheduler reconstructs from its observations (float32 log losses)
                np.testing.assert_allclose(history, observed.history[0, slot, : points.reports[i]], rtol=1e-5)
        sim.step(agent.act(observation, mask))
    assert seen == len(points)


def test_report_buckets_have_the_stated_boundaries():
    k = np.array([1, 2, 3, 5, 6, 10, 11, 20, 21, 1000])
    np.testing.assert_array_equal(dp.bucket_of(k), [0, 0, 1, 1, 2, 2, 3, 3, 4, 4])
    assert dp.BUCKET_LABELS == ("1–2", "3–5", "6–10", "11–20", "> 20")
    for bad in ([0], [-1], [1.5]):
        with pytest.raises(ValueError, match="report counts"):
            dp.bucket_of(np.array(bad))


def test_subsample_is_seeded_capped_and_keeps_histories(edf_points):
    _, points = edf_points
    a = points.subsample(100, np.random.default_rng(3))
    b = points.subsample(100, np.random.default_rng(3))
    assert len(a) == 100 and np.array_equal(a.step, b.step) and np.array_equal(a.task, b.task)
    assert points.subsample(None, np.random.default_rng(0)) is points
    full = {(t, s): h for t, s, h in zip(points.task.tolist(), points.step.tolist(), points.histories())}
    for t, s, h in zip(a.task.tolist(), a.step.tolist(), a.histories()):
        np.testing.assert_array_equal(h, full[(t, s)])


# ------------------------------------------------------------------ metrics


def test_auc_brier_ece_and_reliability_match_hand_computed_values():
    assert prediction.auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == pytest.approx(0.75)
    # ties count 1/2: positives {0.5, 0.9} against negatives {0.5, 0.5} -> (0.5 + 0.5 + 1 + 1) / 4
    assert prediction.auc(np.array([0.5, 0.5, 0.5, 0.9]), np.array([0, 1, 0, 1])) == pytest.approx(0.75)
    assert prediction.auc(np.array([0.9, 0.1]), np.array([0, 1])) == 0.0
    assert math.isnan(prediction.auc(np.array([0.2, 0.3]), np.array([1, 1])))
    assert prediction.brier(np.array([0.1, 0.9, 0.8]), np.array([0, 1, 0])) == pytest.approx((0.01 + 0.01 + 0.64) / 3)
    assert prediction.ece(np.array([0.1, 0.9, 0.8]), np.array([0, 1, 0])) == pytest.approx((0.1 + 0.1 + 0.8) / 3)
    p, y = np.array([0.25, 0.25, 0.75, 0.75, 1.0]), np.array([0, 1, 1, 1, 1])
    assert prediction.ece(p, y) == pytest.approx((2 * 0.25 + 2 * 0.25 + 0.0) / 5)
    curve = prediction.reliability(p, y)
    assert curve["count"] == [0, 0, 2, 0, 0, 0, 0, 2, 0, 1]  # 1.0 falls in the last bin
    assert curve["mean_p"][2] == pytest.approx(0.25) and curve["rate"][2] == pytest.approx(0.5) and curve["rate"][0] is None
    np.testing.assert_array_equal(prediction.capped_error(np.array([5.0, np.inf, 200.0, np.inf]), np.array([7.0, 100.0, np.inf, np.inf])),
                                  [2.0, 20.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="probabilities"):
        prediction.brier(np.array([1.2]), np.array([1]))
    with pytest.raises(ValueError, match="shape"):
        prediction.auc(np.array([0.1, 0.2]), np.array([1]))


def test_auc_agrees_with_sklearn_where_available():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(1)
    scores, labels = np.round(rng.random(300), 1), rng.random(300) < 0.4  # many ties
    assert prediction.auc(scores, labels) == pytest.approx(metrics.roc_auc_score(labels, scores))


def _replicated(weights: np.ndarray, episode: np.ndarray, *arrays: np.ndarray) -> list[np.ndarray]:
    """The arrays with every point of episode e repeated weights[e] times (a resample written out)."""
    index = np.concatenate([np.flatnonzero(episode == e) for e, w in enumerate(weights) for _ in range(int(w))])
    return [a[index] for a in arrays]


def test_bootstrap_resamples_whole_episodes():
    rng = np.random.default_rng(7)
    weights = prediction.episode_weights(5, 200, rng)
    assert weights.shape == (201, 5) and np.all(weights[0] == 1)
    assert np.all(weights.sum(axis=1) == 5) and np.all(weights == np.round(weights))
    assert np.any(weights[1:] == 0) and np.any(weights[1:] >= 2)  # episodes are left out and repeated
    episode = np.repeat(np.arange(5), [30, 10, 25, 5, 40])
    truth = np.where(rng.random(episode.size) < 0.2, np.inf, rng.integers(1, 150, episode.size).astype(float))
    window = rng.integers(1, 120, episode.size)
    median = np.where(rng.random(episode.size) < 0.1, np.inf, rng.integers(1, 150, episode.size).astype(float))
    p = np.round(rng.random(episode.size), 2)
    stats = prediction.cell_statistics(median, p, truth, window, episode, weights)
    feasible = truth <= window
    assert stats["mae"][0] == pytest.approx(prediction.capped_error(median, truth).mean())
    assert stats["auc"][0] == pytest.approx(prediction.auc(p, feasible))
    for r in (1, 2, 50):
        m, q, t, w = _replicated(weights[r], episode, median, p, truth, window)
        assert stats["mae"][r] == pytest.approx(prediction.capped_error(m, t).mean())
        assert stats["brier"][r] == pytest.approx(prediction.brier(q, t <= w))
        assert stats["ece"][r] == pytest.approx(prediction.ece(q, t <= w))
        assert stats["auc"][r] == pytest.approx(prediction.auc(q, t <= w))
        within = t < prediction.CAP
        assert stats["mae_within_cap"][r] == pytest.approx(prediction.capped_error(m[within], t[within]).mean())
        assert stats["mae_beyond_cap"][r] == pytest.approx(prediction.capped_error(m[~within], t[~within]).mean())
        assert stats["points"][r] == m.size


# ------------------------------------------------------------------ the benchmark


def test_oracle_is_exact_and_metrics_are_in_range(tiny_result):
    cells = tiny_result["cells"]
    oracle = [c for c in cells if c["predictor"] == "oracle"]
    assert oracle and all(c["mae"] == 0.0 and c["brier"] == 0.0 and c["ece"] == 0.0 for c in oracle)
    assert all(c["auc"] == 1.0 for c in oracle if 0 < c["feasible_share"] < 1)
    for c in cells:
        assert 0 <= c["mae"] <= prediction.CAP and 0 <= c["brier"] <= 1 and 0 <= c["censored"] <= 1
        assert c["auc"] is None or 0 <= c["auc"] <= 1
    pooled = [c for c in cells if c["policy"] == prediction.ALL and c["bucket"] == prediction.ALL]
    assert {c["predictor"] for c in pooled} == set(FAST_ROWS)
    assert all(c["points"] == 300 for c in pooled)  # 150 per policy
    for c in pooled:  # paired differences to the best probe of the same cell
        best = {m: min if lower else max for m, lower in prediction.COMPARED.items()}
        probes = [p for p in pooled if p["predictor"] in dp.PROBE_ROWS]
        for metric, pick in best.items():
            entry = c["vs_best_probe"][metric]
            chosen = pick(probes, key=lambda p: p[metric])
            assert entry["probe"] == chosen["predictor"] and entry["diff"] == pytest.approx(c[metric] - chosen[metric])


def test_counts_state_existing_and_scored_points(tiny_result):
    counts = tiny_result["counts"]["id"]
    for policy in prediction.POLICIES:
        c = counts[policy]
        assert c["points"] > c["scored"] == 150
        assert sum(b["points"] for b in c["by_bucket"].values()) == c["points"]
        assert sum(b["scored"] for b in c["by_bucket"].values()) == c["scored"]
    text = prediction.table(tiny_result)
    assert "at most 150 points per task set and policy" in text and "capped MAE (cap 120)" in text


def test_probes_see_no_curve_values():
    probes = dp.fit_probes([dp.collect("edf", dp.train_workloads("id", 1), EnvConfig(task_set="id"))])
    rng = np.random.default_rng(0)
    lengths = [1, 2, 4, 9, 30]
    windows = np.array([3, 10, 20, 50, 90])
    a = [rng.random(n) + 0.1 for n in lengths]
    b = [rng.random(n) * 5 + 2.0 for n in lengths]
    deadline_windows = windows + np.array(lengths)
    for name, probe in probes.items():
        first = probe.predict(a, np.full(5, 0.5), windows, windows=deadline_windows)
        second = probe.predict(b, np.full(5, 0.5), windows, windows=deadline_windows)  # other loss values, the same target
        np.testing.assert_array_equal(first.median, second.median)
        np.testing.assert_array_equal(first.p_within_budget, second.p_within_budget)
        assert np.all(first.median >= 1) and np.all((first.p_within_budget >= 0) & (first.p_within_budget <= 1))
        if name != "probe: prior":  # only the prior reads the declared target
            third = probe.predict(b, np.full(5, 3.0), windows, windows=deadline_windows)
            np.testing.assert_array_equal(first.p_within_budget, third.p_within_budget)
    window_probe = probes["probe: window-only"]
    assert window_probe.predict(a, np.full(5, 0.5), windows).median == pytest.approx(np.maximum(window_probe.factor * windows, 1))
    prior = probes["probe: prior"]
    assert prior.uses_window and prior.parameters()["inputs"] == ["log target", "log deadline window", "remaining window", "reports k"]
    with pytest.raises(ValueError, match="deadline window"):
        prior.predict(a, np.full(5, 0.5), windows)


def test_probes_are_fitted_on_train_workloads_not_on_the_evaluation_suite(tiny_result, monkeypatch):
    workloads = dp.train_workloads("id", 1)
    assert workloads[0].bank is bank_for("id", "train") and workloads[0].bank is not load_suite("id", "train", 0, 0).bank
    refit, _ = dp.train_probes("id", prediction.POLICIES, episodes=1)
    assert {name: p.parameters() for name, p in refit.items()} == tiny_result["probes"]["id"]
    # Replace the evaluation suite: the scored points change, the fitted probes do not.
    other = load_suite("id", "train", 3, 2)
    monkeypatch.setattr(prediction.SuiteEpisode, "workload", lambda self, rng=None: other)
    replaced = prediction.evaluate(rows=("oracle", *dp.PROBE_ROWS), **TINY)
    assert replaced["probes"] == tiny_result["probes"]
    assert replaced["counts"]["id"]["edf"]["points"] != tiny_result["counts"]["id"]["edf"]["points"]


def test_bad_options_raise_clear_errors():
    with pytest.raises(ValueError, match="task sets"):
        prediction.evaluate(task_sets=())
    with pytest.raises(ValueError, match="unknown task_set 'nope'.*bank file"):
        prediction.evaluate(task_sets=("nope",))
    with pytest.raises(ValueError, match="rows"):
        prediction.evaluate(rows=("fm", "crystal ball"))
    with pytest.raises(ValueError, match="max_points"):
        prediction.evaluate(max_points=0)
    with pytest.raises(ValueError, match="roots"):
        prediction.evaluate(roots=11)
    with pytest.raises(ValueError, match="budget"):
        dp.ConstantProbe(3.0, 0.5).predict([np.ones(2)], np.ones(1), np.ones((1, 2)))


# ------------------------------------------------------------------ outputs


def test_cli_writes_every_file_under_out_and_nothing_elsewhere(tmp_path, monkeypatch, capsys):
    default = tmp_path / "default-results"
    monkeypatch.setattr(prediction, "RESULTS_DIR", default)
    monkeypatch.setattr("benchmarks.RESULTS_DIR", default)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert prediction.main(["--quick", "--task-sets", "id", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["prediction.csv", "prediction.json", "prediction.md", "prediction.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and not default.exists()
    result = json.loads((out / "prediction.json").read_text())
    assert result["command"] == f"python -m benchmarks prediction --quick --task-sets id --out {out}"
    assert result["cap"] == 120 and result["seed"] == 0 and result["max_points"] == 300 and "fm" in result["rows"]
    assert {c["predictor"] for c in result["cells"]} == set(prediction.ROWS)
    assert (out / "prediction.md").read_text() == prediction.table(result)
    assert (out / "prediction.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "capped MAE" in capsys.readouterr().out


def test_a_failing_run_leaves_the_previous_json_intact(tiny_result, tmp_path, monkeypatch):
    previous = '{"previous": true}\n'
    (tmp_path / "prediction.json").write_text(previous)
    monkeypatch.setattr(prediction, "evaluate", lambda **kwargs: json.loads(json.dumps(tiny_result)))

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(prediction, "save_figure", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        prediction.main(["--out", str(tmp_path)])
    assert (tmp_path / "prediction.json").read_text() == previous
    monkeypatch.setattr(prediction, "evaluate", lambda **kwargs: {**tiny_result, "cells": [{**tiny_result["cells"][0], "mae": math.nan}]})
    with pytest.raises(ValueError):
        prediction.main(["--out", str(tmp_path)])
    assert (tmp_path / "prediction.json").read_text() == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prediction.json"]  # no temporary file left behind


def test_false_admits_and_rejects_are_the_admission_rules_two_errors():
    # windows 10; medians: 4 (admit), 10 (admit: fits exactly), 10.5 (reject: rounded up), inf (reject)
    median, window = np.array([4.0, 10.0, 10.5, np.inf]), np.full(4, 10)
    truth = np.array([20.0, 3.0, 8.0, np.inf])  # infeasible, feasible, feasible, infeasible
    stats = prediction.cell_statistics(median, np.full(4, 0.5), truth, window, np.zeros(4, np.int64), np.ones((1, 1)))
    assert stats["false_admit"][0] == pytest.approx(1 / 4) and stats["false_reject"][0] == pytest.approx(1 / 4)


def test_targets_table_compares_with_the_best_curve_free_row_and_marks_misses():
    def cell(task_set, predictor, brier, ece, auc):
        return dict(task_set=task_set, policy=prediction.ALL, bucket=prediction.ALL, predictor=predictor, brier=brier, ece=ece, auc=auc)

    result = {"task_sets": ["id", "rl_ood"], "cells": [
        cell("id", "pfn", 0.10, 0.20, 0.95), cell("id", "probe: window-only", 0.20, 0.01, 0.7),
        cell("rl_ood", "pfn", 0.151, 0.04, 0.91), cell("rl_ood", "probe: window-only", 0.30, 0.01, 0.7),
        cell("rl_ood", "probe: prior", 0.20, 0.02, 0.8),  # the best curve-free row: 0.151 / 0.20 = 0.755 > 0.75
        cell("rl_ood", "fm", 0.10, 0.06, 0.89)]}
    lines = prediction.targets_table(result).splitlines()[2:]
    assert lines[0] == "| id | pfn | 0.100 | 0.200 (probe: window-only) | 0.500 | 0.200 | 0.950 (met) |"  # ECE target: held-out sets only
    assert lines[1] == "| rl_ood | pfn | 0.151 | 0.200 (probe: prior) | 0.755 (MISSED) | 0.040 (met) | 0.910 (met) |"
    assert lines[2] == "| rl_ood | fm | 0.100 | 0.200 (probe: prior) | 0.500 (met) | 0.060 (MISSED) | 0.890 (MISSED) |"
    assert len(lines) == 3  # no fm cell on id: no row


def test_targets_table_on_one_policy_reads_that_policys_cells_and_probes():
    def cell(policy, predictor, brier, ece, auc):
        return dict(task_set="rl_ood", policy=policy, bucket=prediction.ALL, predictor=predictor, brier=brier, ece=ece, auc=auc)

    result = {"task_sets": ["rl_ood"], "policies": ["edf", "edf-admission:oracle"], "cells": [
        cell(prediction.ALL, "pfn", 0.15, 0.06, 0.86), cell(prediction.ALL, "probe: prior", 0.19, 0.1, 0.75),
        cell("edf", "pfn", 0.16, 0.04, 0.86), cell("edf", "probe: prior", 0.25, 0.2, 0.7),  # 0.16 / 0.25 = 0.64
        cell("edf-admission:oracle", "pfn", 0.14, 0.09, 0.85), cell("edf-admission:oracle", "probe: prior", 0.12, 0.0, 0.8)]}
    pooled, edf, oracle = (prediction.targets_table(result, rows=("pfn",), policy=p).splitlines()[2]
                           for p in (prediction.ALL, "edf", "edf-admission:oracle"))
    assert pooled == "| rl_ood | pfn | 0.150 | 0.190 (probe: prior) | 0.789 (MISSED) | 0.060 (MISSED) | 0.860 (MISSED) |"
    assert edf == "| rl_ood | pfn | 0.160 | 0.250 (probe: prior) | 0.640 (met) | 0.040 (met) | 0.860 (MISSED) |"
    assert oracle == "| rl_ood | pfn | 0.140 | 0.120 (probe: prior) | 1.167 (MISSED) | 0.090 (MISSED) | 0.850 (MISSED) |"
    with pytest.raises(ValueError, match="policy must be one of"):
        prediction.targets_table(result, policy="fifo")


def test_the_report_reads_the_targets_on_the_unselected_policys_points_too():
    result = json.loads((RESULTS / "prediction.json").read_text())
    text = prediction.table(result)
    head = f"**The same targets on the points of `{prediction.UNSELECTED_POLICY}` alone**"
    assert head in text and prediction.targets_table(result, policy=prediction.UNSELECTED_POLICY) in text.split(head)[1]
