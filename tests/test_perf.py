"""benchmarks.perf's quick modes (issue 51): the ratios to the API floor alone, and a baseline checkout's
side by side with this one's in one run."""

from __future__ import annotations

from pathlib import Path

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
