"""The fidelity benchmark (benchmarks/fidelity.py) and the live calibration (core_env.live.calibration)."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest

from conftest import small_fidelity
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
    fidelity = small_fidelity(monkeypatch)
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
    (["--episodes", "1"], r"episodes \(--episodes\) must be an int in \[2, 1,000\]"),
    (["--slice", "0"], r"--slice must be seconds in \(0, 60\)"),
    (["--address", "1.2.3.4:6379"], "--address needs --backend ray"),
    (["--rows", "not-a-row"], "--rows: unknown agent row 'not-a-row'"),
    (["--families", "mlp_wine", "mlp_nope"], r"--families: unknown live task family\(ies\) \['mlp_nope'\]"),
    (["--nodes", "0"], r"n_nodes \(--nodes\) must be an int in \[1, \d+\] .*got 0"),
])
def test_bad_fidelity_arguments_exit_2(argv, message, capsys):
    from benchmarks import fidelity

    with pytest.raises(SystemExit) as exit_info:
        fidelity.main(argv)
    assert exit_info.value.code == 2 and re.search(message, capsys.readouterr().err)


# --------------------------------------------------------------------------------------------------
# Issue 49's fault campaign: stored live cells and settings are verified, counts bounded


@pytest.fixture
def one_cell(tmp_path, monkeypatch, capsys):
    """``live_cell`` on a hand-made workload with the live play replaced by a counter; returns
    (play, path): ``play()`` plays or reads the cell and returns (cell, times played so far, printed text)."""
    from conftest import tiny_workload

    from benchmarks import fidelity
    from core_env.live import TaskSpec

    played = []

    def fake(row, workload, slice_s, nodes, runs, config):
        played.append(row)
        return {"completion_rate": 0.4, "wall_s": 1.5, "records": [{"t": 0, "trained": 3}], "steps": [{"t": 0}]}

    monkeypatch.setattr(fidelity, "play_cell", fake)
    workload = tiny_workload([(0, 5, 0.5, 1.0)], arrival_steps=2)
    settings = {"slice_s": 0.2, "backend": "process", "n_nodes": 2}

    def play(**changed):
        cell = fidelity.live_cell("edf", 3, workload, {**settings, **changed}, None, tmp_path, [TaskSpec("mlp_wine", 0)], None)
        return cell, len(played), capsys.readouterr().out

    return play, fidelity.cell_path(tmp_path, "edf", 3)


def _regzip(path, edit):
    cell = json.loads(gzip.decompress(path.read_bytes()))
    edit(cell)
    path.write_bytes(gzip.compress(json.dumps(cell).encode(), mtime=0))


def _out_of_range(cell):
    from benchmarks.cells import checksum

    cell["completion_rate"] = 1.5
    cell["checksum"] = checksum(cell)


@pytest.mark.faults
def test_a_stored_live_cell_carries_its_key_and_checksum_and_is_read_back(one_cell):
    from benchmarks.cells import checksum

    play, path = one_cell
    first, played, _ = play()
    stored = json.loads(gzip.decompress(path.read_bytes()))
    assert played == 1 and stored["checksum"] == checksum(stored) and stored["commit"]
    assert {k: stored["key"][k] for k in ("row", "episode", "slice_s", "backend", "n_nodes")} == {
        "row": "edf", "episode": 3, "slice_s": 0.2, "backend": "process", "n_nodes": 2}
    again, played, printed = play()
    assert played == 1 and again == first and printed == ""  # verified: read back, nothing said


@pytest.mark.faults
@pytest.mark.parametrize("damage, reason", [
    (lambda p: _regzip(p, lambda c: c.update(completion_rate=1.0)), "fails its checksum"),  # edited and re-gzipped
    (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "is unreadable (EOFError"),  # truncated
    (lambda p: p.write_bytes(p.read_bytes()[:20] + bytes([p.read_bytes()[20] ^ 0x10]) + p.read_bytes()[21:]), "is unreadable"),  # a bit
    (lambda p: _regzip(p, lambda c: c.pop("checksum")), "has no checksum"),  # a cell of an earlier format
    (lambda p: _regzip(p, _out_of_range), "has completion_rate 1.5, not in [0, 1]"),  # edited, its checksum recomputed
])
def test_a_damaged_live_cell_is_played_again_and_says_so(one_cell, damage, reason):
    play, path = one_cell
    play()
    damage(path)
    cell, played, printed = play()
    assert played == 2 and cell["completion_rate"] == 0.4
    assert f"fidelity: the cell {path} {reason}" in printed and printed.endswith(": playing it again\n")
    assert play()[1] == 2  # the replayed cell verifies


@pytest.mark.faults
def test_a_live_cell_of_another_slice_or_backend_is_played_again(one_cell):
    play, _ = one_cell
    play()
    _, played, printed = play(slice_s=0.3)
    assert played == 2 and "was played as another cell (slice_s differ)" in printed
    _, played, printed = play(slice_s=0.3, backend="ray")
    assert played == 3 and "(backend differ)" in printed


def _main_error(fidelity, capsys, *argv):
    with pytest.raises(SystemExit) as stop:
        fidelity.main(["--rows", "edf", *argv])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    return err.strip().splitlines()[-1]  # argparse: the usage, then one line "...: error: ..."


@pytest.mark.faults
@pytest.mark.parametrize("text, problem", [
    (None, "settings.json is missing, but 1 cell(s)"),
    ("{", "settings.json: not readable JSON (JSONDecodeError"),
    ("[]", "settings.json: not a JSON object (a list)"),
    ('{"slice_s": "0.3", "backend": "process", "profile_batches_per_s": {}}', "slice_s = '0.3' is not seconds"),
    ('{"slice_s": 0.3, "backend": "process"}', "profile_batches_per_s = None is not an object"),
    ('{"slice_s": 0.3, "backend": "process", "profile_batches_per_s": {}, "n_nodes": 2.5}', "n_nodes = 2.5 is not an int"),
    ('{"slice_s": 0.3, "backend": "process", "profile_batches_per_s": {}, "families": "mlp_wine"}', "families = 'mlp_wine' is not a list"),
])
def test_missing_or_malformed_settings_exit_2_naming_the_file(tmp_path, capsys, text, problem):
    from benchmarks import fidelity

    (tmp_path / "fidelity" / "cells").mkdir(parents=True)
    (tmp_path / "fidelity" / "cells" / "edf__0.json.gz").write_bytes(b"")
    if text is not None:
        (tmp_path / "fidelity" / "settings.json").write_text(text)
    line = _main_error(fidelity, capsys, "--out", str(tmp_path))
    assert str(tmp_path / "fidelity" / "settings.json") in line and problem in line
    with pytest.raises(ValueError, match=re.escape(problem)):  # and the library refuses it before any profile
        fidelity.run(["edf"], 2, tmp_path)


@pytest.mark.faults
@pytest.mark.parametrize("flag, episodes, nodes, message", [
    ("--episodes", 10**12, 2, r"episodes \(--episodes\) must be an int in \[2, 1,000\] .*got 1000000000000"),
    ("--nodes", 20, 10**6, r"n_nodes \(--nodes\) must be an int in \[1, \d+\] .*got 1000000"),
])
def test_counts_beyond_their_documented_bounds_exit_2(flag, episodes, nodes, message, capsys):
    from benchmarks import fidelity

    assert re.search(message, _main_error(fidelity, capsys, flag, str(max(episodes, nodes))))
    with pytest.raises(ValueError, match=message):  # the library too, before anything is drawn or started
        fidelity.run(["edf"], episodes, ".", n_nodes=nodes)


@pytest.mark.faults
def test_out_pointing_at_a_file_exits_2_naming_it(tmp_path, capsys):
    from benchmarks import fidelity

    (tmp_path / "a-file").write_text("")
    assert _main_error(fidelity, capsys, "--out", str(tmp_path / "a-file")).endswith(f"--out: {tmp_path / 'a-file'} is not a directory")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "fidelity").write_text("")
    assert _main_error(fidelity, capsys, "--out", str(tmp_path / "out")).endswith(f"--out: {tmp_path / 'out' / 'fidelity'} is not a directory")


@pytest.mark.faults
def test_nodes_are_bounded_by_what_the_backends_pool_can_hold(monkeypatch, tmp_path):
    from benchmarks import fidelity
    from core_env.live import workers

    monkeypatch.setattr(workers.os, "cpu_count", lambda: 2)
    most = workers.max_nodes("process")
    assert most < fidelity.MAX_NODES
    fidelity.check_run(2, most, tmp_path, "process")
    with pytest.raises(ValueError, match=rf"n_nodes \(--nodes\) must be an int in \[1, {most}\] \(each node is a process worker\), got {most + 1}"):
        fidelity.check_run(2, most + 1, tmp_path, "process")  # refused before the bank is recorded, not in make_nodes
    fidelity.check_run(2, most + 1, tmp_path, "ray")  # a Ray cluster's actors are not this machine's processes
