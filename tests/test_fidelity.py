"""The fidelity benchmark (benchmarks/fidelity.py) and the live calibration (core_env.live.calibration)."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest

from core_env.config import EnvConfig
from core_env.live.calibration import calibrate, calibrated, switched


def _service(t, node, task, trained, family="a"):
    return {"t": t, "env": 0, "node": node, "task": task, "trained": trained, "family": family}


def test_switched_follows_the_rules_definition():
    episode = [_service(0, 0, 1, 10), _service(1, 0, 1, 10), _service(2, 1, 1, 10),  # moved to node 1
               _service(4, 1, 1, 10),  # paused a step: switched though on the same node
               _service(4, 0, 2, 10)]  # a first service: never switched
    assert switched(episode) == [False, False, True, True, False]


def test_calibration_recovers_rates_speeds_and_the_switching_cost():
    # family a trains 10 per slice at speed 1, b 20; node 1 is half as fast; a switched service loses 40%
    episode, task = [], 0
    for family, rate in (("a", 10), ("b", 20)):
        for node, speed in ((0, 1.0), (1, 0.5)):  # one task per (family, node): nothing switches
            episode += [_service(0, node, task, rate * speed, family), _service(1, node, task, rate * speed, family)]
            task += 1
    plain = calibrate([episode], n_nodes=2)
    assert plain.switched == 0 and plain.switch_cost == 0.0 and plain.services == 8
    assert plain.rates == pytest.approx({"a": 7.5, "b": 15.0})  # the mean over both nodes
    assert plain.speeds == pytest.approx((4 / 3, 2 / 3))
    spun = episode + [dict(_service(2, 0, 0, 5000, "a"), finished=True)]  # a run that ended mid-slice: not throughput
    assert calibrate([spun], n_nodes=2) == plain
    paused = episode + [_service(3, 0, 0, 0.6 * 7.5 * 4 / 3, "a")]  # task 0 back after a pause: 60% of its modelled batches
    fitted = calibrate([paused], n_nodes=2)
    assert fitted.switched == 1 and fitted.switch_cost == pytest.approx(0.4) and fitted.rates == plain.rates
    with pytest.raises(ValueError, match=r"node\(s\) \[2\] served no unswitched task"):
        calibrate([episode], n_nodes=3)
    with pytest.raises(ValueError, match="no unswitched live service"):
        calibrate([[]], n_nodes=2)


def test_calibrated_sets_each_tasks_rate_and_the_configs_service_model():
    from core_env.curves import CurveBank
    from core_env.workload import Workload

    bank = CurveBank("two", [np.linspace(2.0, 0.1, 100), np.linspace(3.0, 0.2, 50)], ["a", "b"])
    workload = Workload(bank, np.array([0, 1]), np.array([20, 21]), np.array([1.0, 1.0]), np.array([5.0, 5.0]), np.array([0, 1]),
                        np.array([bank.demand(0, 1.0, 5.0), bank.demand(1, 1.0, 5.0)]), 2)
    fit = calibrate([[_service(0, 0, 0, 10, "a"), _service(0, 1, 1, 2, "b")]], n_nodes=2)
    changed, config = calibrated(workload, ["a", "b"], fit, EnvConfig(n_nodes=2, n_slots=2))
    assert changed.batches_per_step.tolist() == [10.0, 2.0] and changed.demand[0] < workload.demand[0] < changed.demand[1]
    assert config.switch_cost == fit.switch_cost and tuple(config.node_speeds) == fit.speeds


def test_calibration_keeps_episodes_apart_and_never_guesses_a_rate():
    from core_env.curves import CurveBank
    from core_env.workload import Workload

    first = [dict(_service(0, 0, 0, 10), episode=0), dict(_service(1, 0, 0, 10), episode=0)]
    second = [dict(_service(5, 1, 0, 10), episode=1)]  # task 0 of the next episode: its first service, not a switch
    assert switched(first + second) == [False, False, False]
    bank = CurveBank("two", [np.linspace(2.0, 0.1, 100), np.linspace(3.0, 0.2, 50)], ["a", "b"])
    workload = Workload(bank, np.array([0, 1]), np.array([20, 21]), np.array([1.0, 1.0]), np.array([5.0, 5.0]), np.array([0, 1]),
                        np.array([bank.demand(0, 1.0, 5.0), bank.demand(1, 1.0, 5.0)]), 2)
    with pytest.raises(ValueError, match=r"measured no rate for family\(ies\) \['b'\]"):
        calibrated(workload, ["a", "b"], calibrate([first + second], n_nodes=2), EnvConfig(n_nodes=2, n_slots=2))


def test_the_fidelity_benchmark_runs_end_to_end_and_resumes(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from benchmarks import fidelity

    monkeypatch.setattr(fidelity, "FAMILIES", ("mlp_wine", "mlp_breast_cancer"))
    monkeypatch.setattr(fidelity, "RUNS_PER_FAMILY", 2)
    monkeypatch.setattr(fidelity, "RUN_STEPS", 240)
    monkeypatch.setattr(fidelity, "PROFILE_SECONDS", 0.1)
    result = fidelity.run(["edf", "fifo"], episodes=2, out=tmp_path)
    saved = json.loads((tmp_path / "fidelity" / "fidelity.json").read_text())
    assert saved["rows"] == result["rows"] and [r["row"] for r in saved["rows"]] == ["edf", "fifo"]
    for row in saved["rows"]:
        assert 0.0 <= row["live"] <= 1.0 and row["live_ci"][0] <= row["live"] <= row["live_ci"][1]
        assert row["within_target"] == (abs(row["live"] - row["calibrated"]) * 100 <= fidelity.TARGET_POINTS)
        assert row["live"] == pytest.approx(np.mean(saved["per_episode"][row["row"]]["live"]))
        assert set(saved["per_episode"][row["row"]]) == {"live", "uncalibrated", "calibrated_means", "calibrated", "trace"}
        assert row["trace_equal"] == 2 and row["trace_left"] == 0  # each service's live batches replayed: the live episode exactly
        assert saved["per_episode"][row["row"]]["trace"] == saved["per_episode"][row["row"]]["live"]
    assert set(saved["rank_tau"]) == {"uncalibrated", "calibrated_means", "calibrated"} and saved["spread_draws"] == fidelity.SPREAD_DRAWS
    assert set(saved["calibration"]["spread"]) == {"first", "plain", "switched"}
    assert len(saved["calibration"]["speeds"]) == 2 and 0.0 <= saved["calibration"]["switch_cost"] < 1.0
    assert saved["slice_s"] == pytest.approx(np.median([fidelity.nominal_rate(f) / saved["profile_batches_per_s"][f] for f in fidelity.FAMILIES]))
    assert saved["nominal_rate"] == {f: 240 / fidelity.RECIPE.typical_run_steps for f in fidelity.FAMILIES} and saved["config"]["n_slots"] == 4
    assert (tmp_path / "fidelity" / "fidelity.png").stat().st_size > 0
    assert "| edf |" in fidelity.table(saved) and "trace replay = live" in fidelity.table(saved)
    cells = sorted((tmp_path / "fidelity" / "cells").glob("*.json.gz"))
    assert len(cells) == 4
    order = [json.loads(gzip.decompress(c.read_bytes()))["episode"] for c in sorted(cells, key=lambda c: c.stat().st_mtime_ns)]
    assert order == [0, 0, 1, 1]  # episode by episode, every row in turn: a drifting machine slows every row alike
    stamps = [c.stat().st_mtime_ns for c in cells]
    again = fidelity.run(["edf", "fifo"], episodes=2, out=tmp_path)  # resumed: every live cell read back, none replayed
    assert [c.stat().st_mtime_ns for c in cells] == stamps
    assert [r["live"] for r in again["rows"]] == [r["live"] for r in saved["rows"]]


def test_measured_shows_each_rows_throughput_relative_to_its_familys_mean():
    from benchmarks.fidelity import measured

    def service(trained, family, moved=False, finished=False):
        return {"trained": trained, "family": family, "moved": moved, "finished": finished, "move_s": 0.01, "load_s": 0.0}

    cells = [{"row": "slow", "records": [service(90, "a"), service(45, "b"), service(500, "a", finished=True)]},
             {"row": "fast", "records": [service(110, "a"), service(55, "b"), service(10, "a", moved=True)]}]
    result = measured(cells, slice_s=0.1)
    assert result["row_throughput"] == pytest.approx({"slow": 0.9, "fast": 1.1})  # moved and finished services left out
    assert result["moves"] == 1 and result["move_share_of_slice"] == pytest.approx(0.1)


def test_the_verdict_names_the_rows_within_the_target_and_compares_the_rankings():
    from benchmarks.fidelity import verdict

    def row(name, live, calibrated, ci):
        return {"row": name, "live": live, "calibrated": calibrated, "within_target": abs(live - calibrated) * 100 <= 3,
                "live_minus_calibrated": {"ci_low": live - calibrated - ci, "ci_high": live - calibrated + ci}}

    text = verdict({"rows": [row("a", 0.50, 0.51, 0.02), row("b", 0.40, 0.45, 0.06)]})
    assert "within 3 points of live for 1 of 2 rows (a)" in text and "2.0–6.0 points, not all wider" in text
    assert "**Ranking** the same live (a > b) and calibrated (a > b)" in text
    swapped = verdict({"rows": [row("a", 0.50, 0.40, 0.05), row("b", 0.45, 0.46, 0.05)]})
    assert "**Ranking** not the same live (a > b) and calibrated (b > a)" in swapped and "wider than the target" in swapped


def test_resuming_with_another_slice_or_backend_exits_2(tmp_path, capsys):
    from benchmarks import fidelity

    (tmp_path / "fidelity").mkdir()
    (tmp_path / "fidelity" / "settings.json").write_text(json.dumps({"slice_s": 0.3, "backend": "process", "profile_batches_per_s": {}}))
    for argv, message in ((["--slice", "0.5"], "slice_s=0.3, not 0.5"), (["--backend", "ray"], "backend='process', not 'ray'"),
                          (["--nodes", "4"], "n_nodes=2, not 4"), (["--families", "mlp_wine"], "families=['mlp_wine', 'mlp_breast_cancer'")):
        with pytest.raises(SystemExit) as stop:
            fidelity.main([*argv, "--out", str(tmp_path)])
        assert stop.value.code == 2 and message in capsys.readouterr().err
    assert fidelity.resumed_settings(tmp_path / "fidelity", "process", None)["slice_s"] == 0.3


@pytest.mark.parametrize("argv, message", [
    (["--episodes", "1"], "--episodes must be >= 2"),
    (["--slice", "0"], r"--slice must be seconds in \(0, 60\)"),
    (["--address", "1.2.3.4:6379"], "--address needs --backend ray"),
    (["--rows", "not-a-row"], "--rows: unknown agent row 'not-a-row'"),
    (["--families", "mlp_wine", "mlp_nope"], r"--families: unknown live task family\(ies\) \['mlp_nope'\]"),
    (["--nodes", "0"], "--nodes must be >= 1, got 0"),
])
def test_bad_fidelity_arguments_exit_2(argv, message, capsys):
    from benchmarks import fidelity

    with pytest.raises(SystemExit) as exit_info:
        fidelity.main(argv)
    assert exit_info.value.code == 2 and re.search(message, capsys.readouterr().err)
