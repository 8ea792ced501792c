"""Paired statistics on constructed data with textbook answers."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.stats import bootstrap_ci, paired_difference, permutation_p


def test_a_known_difference_is_found_and_bracketed():
    rng = np.random.default_rng(0)
    b = rng.normal(50, 5, size=15)
    a = b + 5 + rng.normal(0, 0.5, size=15)
    result = paired_difference(a, b)
    assert result["n"] == 15 and result["mean"] == pytest.approx(np.mean(a - b))
    assert result["ci_low"] < 5 < result["ci_high"] and result["ci_low"] > 4
    assert result["p_value"] == pytest.approx(2 / 2**15)  # every difference positive: only the all-+ and all-− patterns tie


def test_a_zero_difference_gives_p_one_and_a_ci_around_zero():
    d = np.array([-3.0, -1.0, 1.0, 3.0, -2.0, 2.0])
    assert permutation_p(d) == pytest.approx(1.0)
    lo, hi = bootstrap_ci(d)
    assert lo < 0 < hi and lo == pytest.approx(-hi, abs=0.3)


def test_exact_sign_flip_p_values_match_hand_counts():
    assert permutation_p(np.ones(5)) == pytest.approx(2 / 32)
    # d = (1, 2, 3): only the all-+ and all-− patterns reach |sum| = 6; the others give 4, 2 or 0
    assert permutation_p(np.array([1.0, 2.0, 3.0])) == pytest.approx(2 / 8)
    # d = (1, −1, 5), |sum| = 5: patterns (±1, ±1, +5) give |sums| 5, 7, 3, 5, so 3 of 4 and their mirrors
    assert permutation_p(np.array([1.0, -1.0, 5.0])) == pytest.approx(6 / 8)


def test_monte_carlo_p_for_many_cells_is_close_to_exact_behaviour():
    rng = np.random.default_rng(1)
    null = rng.normal(0, 1, size=40)
    assert permutation_p(null) > 0.05 or abs(null.mean()) > 0.3
    shifted = rng.normal(1, 1, size=40)
    assert permutation_p(shifted) < 1e-3


def test_bad_input_raises():
    with pytest.raises(ValueError, match="paired"):
        paired_difference(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="finite"):
        permutation_p(np.array([1.0, np.nan]))
