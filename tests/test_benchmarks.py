"""Smoke tests of the benchmark suites (no timing assertions)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from pettingzoo.test import parallel_api_test

from benchmarks import quick
from benchmarks.perf import MinimalParallelEnv, masked_random
from core_env import discrete_core_v1


@pytest.fixture(scope="module")
def reduced():
    return quick.evaluate(agents=("edf", "clairvoyant"), roots=2, episodes=1)


def test_quick_summarizes_every_agent_and_the_bound(reduced):
    summary = reduced["summary"]
    assert list(summary) == ["edf", "clairvoyant", quick.SLOTS, quick.MILP, quick.BOUND]
    assert set(summary[quick.SLOTS]) == {"id/train"}  # the K-slot ceiling is stored for the committed suites only
    for row, cells in summary.items():
        assert set(cells) == ({"id/train"} if row == quick.SLOTS else {"id/train", "stress"})
        assert all(0.0 <= cell["mean"] <= 100.0 and cell["sd"] >= 0.0 for cell in cells.values())
    assert summary["clairvoyant"]["stress"]["mean"] == pytest.approx(65.0)
    assert summary["edf"]["stress"]["mean"] == 0.0
    assert summary["edf"]["id/train"]["mean"] > 0.0
    assert summary[quick.MILP]["stress"]["mean"] == pytest.approx(65.0)  # clairvoyant reaches the ceiling on stress
    assert (summary["clairvoyant"]["id/train"]["mean"] <= summary[quick.SLOTS]["id/train"]["mean"] <= summary[quick.MILP]["id/train"]["mean"]
            <= summary[quick.BOUND]["id/train"]["mean"])
    table = quick.table(summary, 2)
    assert "EDF → milp-slots gap closed" in table and f"| {quick.SLOTS} |" in table and "| +100 |" in table


def test_quick_episodes_never_beat_the_feasibility_bound(reduced):
    records = reduced["episodes"]
    assert len(records) == 2 * (2 + 1)
    for record in records:
        assert record["completion_rate"] <= record["feasibility_bound"] + 1e-12
        assert record["completed"] + record["failed"] + record["rejected"] == record["arrived"] > 0


def test_quick_root_summary_is_mean_and_sd_of_root_means():
    rates = np.array([0.5, 0.7, 0.2, 0.4])
    cells = [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert quick.summarize(rates, cells) == pytest.approx({"mean": 45.0, "sd": np.std([60.0, 30.0], ddof=1)})


def test_unknown_suite_exits_nonzero_naming_the_suites():
    run = subprocess.run([sys.executable, "-m", "benchmarks", "nonsense"], capture_output=True, text=True)
    assert run.returncode != 0
    assert "unknown suite 'nonsense'" in run.stderr and "quick" in run.stderr and "perf" in run.stderr


def test_minimal_env_passes_the_pettingzoo_api_test():
    parallel_api_test(MinimalParallelEnv(episode_steps=30), num_cycles=40)


def test_minimal_env_builds_the_same_shapes_and_keys_as_ours():
    ours, minimal = discrete_core_v1.parallel_env(), MinimalParallelEnv()
    (obs_a, info_a), (obs_b, info_b) = ours.reset(seed=0), minimal.reset(seed=0)
    assert list(obs_a) == list(obs_b) and list(info_a) == list(info_b)
    for agent in obs_a:
        assert set(info_a[agent]) == set(info_b[agent])
        for key in ("observation", "action_mask"):
            assert obs_a[agent][key].shape == obs_b[agent][key].shape and obs_a[agent][key].dtype == obs_b[agent][key].dtype


def test_masked_random_picks_only_allowed_actions():
    mask = np.zeros((50, 4, 9), np.int8)
    mask[..., 0] = 1
    mask[:, :, 5] = 1
    actions = masked_random(mask, np.random.default_rng(0))
    assert set(np.unique(actions)) == {0, 5}


def test_agent_rows_build_every_quick_agent_and_refuse_unknown_ones():
    from benchmarks.agents import QUICK_ROWS, make_agent

    from benchmarks.agents import available

    agents = {row: make_agent(row) for row in QUICK_ROWS if not row.startswith("lara-fm") and row != "prior-edf" and available(row)}
    assert agents["lara:oracle"].needs_oracle and not agents["lara"].needs_oracle
    with pytest.raises(ValueError, match="unknown agent row"):
        make_agent("edf:oracle")
    with pytest.raises(ValueError, match="unknown predictor"):
        make_agent("lara:nope")


def test_predictor_times_time_each_predictor_on_the_same_histories_with_one_thread():
    from benchmarks.perf import PREDICT_TARGET_MS, predictor_times

    threads = torch.get_num_threads()
    times = predictor_times(("pfn", "wls"), count=96, rounds=2)
    assert set(times) == {"pfn", "wls"} and all(t["histories"] == 96 and 0 < t["min_ms"] <= t["median_ms"] for t in times.values())
    assert torch.get_num_threads() == threads and PREDICT_TARGET_MS == 50.0


def test_decision_times_cover_a_whole_episode():
    from benchmarks.perf import decision_times

    threads = torch.get_num_threads()
    times = decision_times(("edf", "lara:oracle", "mara-wls"))
    assert set(times) == {"edf", "lara:oracle", "mara-wls"}
    assert all(t["decisions"] > 400 and 0 < t["median_ms"] <= t["mean_ms"] * 10 for t in times.values())
    # A MAT row's time splits into the policy and the predictor features it rebuilds; heuristics have no split.
    assert times["mara-wls"]["features_median_ms"] > 0 and times["mara-wls"]["policy_median_ms"] > 0
    assert "features_median_ms" not in times["edf"]
    assert torch.get_num_threads() == threads  # timed with one torch thread, the caller's setting restored


def test_perf_summary_renders_the_views_targets_and_decision_times():
    from benchmarks.perf import summary

    case = {"view": "EnvBatch.step (no observations)", "B": 256, "env_steps_per_s": 300_000.0}
    scale = {"pettingzoo_n4": {"view": "PettingZoo parallel_env()", "N": 4, "K": 16, "B": 1, "us_per_env_step": 12.5},
             "vector_compact_n4": {"view": "vector env, compact", "N": 4, "K": 16, "B": 16, "us_per_env_step": 2.25}}
    result = {"cases": {"pettingzoo": case}, "scale": scale, "pettingzoo_over_minimal": 0.62, "gymnasium_over_minimal": 0.4,
              "vector_no_obs_over_minimal": 12.0, "vector_obs_over_minimal": 6.5, "vector_compact_over_minimal": 9.0,
              "compile": {"cold_cache_s": 9.5, "warm_cache_s": 0.61}, "reset_seeded_ms": 0.7,
              "memory": {"state_bytes": 20480.0, "per_node_observation_bytes": 4096.0, "compact_observation_bytes": 1024.0},
              "decision_ms": {"edf": {"median_ms": 0.02, "mean_ms": 0.03},
                              "mara": {"median_ms": 1.9, "mean_ms": 2.0, "policy_median_ms": 0.8, "features_median_ms": 1.1}}}
    text = summary(result)
    assert "| EnvBatch.step (no observations) | 256 | 300,000 |" in text
    assert "PettingZoo / API floor = 0.62x (target >= 0.5x): met" in text
    assert "(no observations) / API floor = 12.00x (target >= 10.0x): met" in text
    assert "infos) / API floor = 6.50x (target >= 8.0x): MISSED" in text
    assert "| 4 | 16 | 12.5 | 2.2 |" in text and "9.5 s with an empty numba cache" in text and "state 20.0 KiB" in text
    assert "| mara | 1.90 | 2.00 | 0.80 / 1.10 |" in text and "| edf | 0.02 | 0.03 |  |" in text


def test_the_tianshou_row_runs_on_an_evaluation_episode():
    pytest.importorskip("tianshou", reason="Tianshou is in the 'agents' extra")
    from benchmarks.agents import make_agent
    from benchmarks.rollout import run_agent
    from core_env.config import EnvConfig
    from core_env.workload import load_suite

    stats = run_agent(make_agent("ppo-tianshou"), [load_suite("id", "train", 0, 0)], EnvConfig())
    assert stats["invalid_actions"][0] == 0 and stats["conflicts"][0] == 0 and 0 < stats["completion_rate"][0] < 1


def test_a_suite_run_from_another_directory_writes_results_there_and_nothing_in_the_package(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import benchmarks

    package = Path(benchmarks.__file__).resolve().parent
    before = {p for p in package.rglob("*") if "__pycache__" not in p.parts}
    done = subprocess.run([sys.executable, "-m", "benchmarks", "paper", "--rows", "edf", "--scenarios", "id/train", "--roots", "1", "--episodes", "1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "results" / "paper" / "paper.json").exists() and (tmp_path / "results" / "cells").is_dir()
    assert {p for p in package.rglob("*") if "__pycache__" not in p.parts} == before  # nothing written into the package
