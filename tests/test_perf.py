"""benchmarks.perf's quick modes (issue 51): the ratios to the API floor alone, and a baseline checkout's
side by side with this one's in one run; and the full run's parts that no other test times."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

perf = pytest.importorskip("benchmarks.perf")


def test_the_ratios_alone_cover_every_ratio():
    paired = perf.ratios(0.02, rounds=1)
    assert set(paired) == set(perf.RATIOS)
    assert all(spread["median"] > 0 and spread["rounds"] == 1 for spread in paired.values())


def test_a_baseline_is_measured_in_its_own_processes_beside_this_checkout():
    here = Path(perf.__file__).resolve().parents[1]
    compared = perf.compare(here, 0.01, repeats=1)  # this checkout as its own baseline: the plumbing, not the speed
    assert set(compared) == {"baseline", "this"}
    assert all(set(side) == set(perf.RATIOS) and all(len(v) == 1 and v[0] > 0 for v in side.values()) for side in compared.values())
    text = perf.comparison_summary({"baseline": {name: [0.4, 0.5, 0.6] for name in perf.RATIOS},
                                    "this": {name: [0.7, 0.8, 0.9] for name in perf.RATIOS}}, Path("/tmp/base"))
    assert "baseline /tmp/base vs this checkout, 3 alternating processes" in text
    assert "| pettingzoo_over_minimal | >= 0.5x | 0.50x (0.40–0.60) | 0.80x (0.70–0.90) |" in text
    assert "| gymnasium_over_minimal |  | 0.50x (0.40–0.60) |" in text


def test_the_compile_is_timed_twice_in_fresh_processes_on_one_new_numba_cache(monkeypatch):
    # the probe stands in for the first PettingZoo step: it sees the cache directory compile_seconds made
    probe = ("import os, pathlib; cache = pathlib.Path(os.environ['NUMBA_CACHE_DIR']); seen = len(list(cache.iterdir()));"
             "(cache / f'entry{seen}').write_text(''); print(f'{seen}.5')")
    monkeypatch.setattr(perf, "_COMPILE_PROBE", probe)
    assert perf.compile_seconds() == {"cold_cache_s": 0.5, "warm_cache_s": 1.5}  # empty first, then the first run's entry


def test_memory_per_env_counts_the_state_and_both_observation_kinds():
    memory = perf.memory_per_env(batch_size=4)
    assert memory["state_bytes"] > 0 and 0 < memory["compact_observation_bytes"] < memory["per_node_observation_bytes"]


def test_the_full_run_writes_every_figure_its_summary_reads(monkeypatch, tmp_path, capsys):
    # the slow parts have their own tests (above and in tests/test_benchmarks.py); here they return fixed figures
    monkeypatch.setattr(perf, "compile_seconds", lambda: {"cold_cache_s": 9.5, "warm_cache_s": 0.61})
    monkeypatch.setattr(perf, "decision_times", lambda: {"edf": {"median_ms": 0.02, "mean_ms": 0.03}})
    monkeypatch.setattr(perf, "predictor_times", lambda: {"wls": {"median_ms": 4.0, "min_ms": 3.0, "histories": 8}})
    assert perf.main(["--seconds", "0.005", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "perf.json").read_text())
    assert set(result["cases"]) == set(perf.cases(np.random.default_rng(0)))
    assert all(result[ratio] > 0 for ratio in perf.RATIOS) and result["memory"]["state_bytes"] > 0 and result["reset_seeded_ms"] > 0
    printed = capsys.readouterr().out
    assert "9.5 s with an empty numba cache" in printed and "| wls | 4.0 | 3.0 | met |" in printed and "| edf | 0.02 | 0.03 |  |" in printed
