"""Root-level paired statistics on constructed data with hand-computed answers."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.stats import MIN_BOOTSTRAP_UNITS, bootstrap_ci, paired_difference, root_means, seed_spread, sign_flip_p, t_interval


def test_ten_roots_all_positive_give_the_exact_p_two_in_1024():
    d = np.arange(1.0, 11.0)
    assert sign_flip_p(d) == pytest.approx(2 / 1024)
    assert paired_difference(d + 50, np.full(10, 50.0))["p_value"] == pytest.approx(2 / 1024)


def test_exact_sign_flip_p_values_match_hand_counts():
    assert sign_flip_p(np.ones(5)) == pytest.approx(2 / 32)
    # d = (1, 2, 3): only the all-+ and all-− patterns reach |sum| = 6; the others give 4, 2 or 0
    assert sign_flip_p(np.array([1.0, 2.0, 3.0])) == pytest.approx(2 / 8)
    # d = (1, −1, 5), |sum| = 5: patterns (±1, ±1, +5) give |sums| 5, 7, 3, 5, so 3 of 4 and their mirrors
    assert sign_flip_p(np.array([1.0, -1.0, 5.0])) == pytest.approx(6 / 8)
    assert sign_flip_p(np.array([-3.0, -1.0, 1.0, 3.0])) == pytest.approx(1.0)


def test_t_interval_matches_the_textbook_formula():
    # d = (1, 2, 3, 4): mean 2.5, sd = sqrt(5/3), t_{3, 0.975} = 3.182446305
    lo, hi = t_interval(np.array([1.0, 2.0, 3.0, 4.0]))
    half = 3.182446305284263 * np.sqrt(5 / 3) / 2
    assert (lo, hi) == pytest.approx((2.5 - half, 2.5 + half))
    # paired: the same as the interval of the differences
    assert t_interval(np.array([11.0, 12.0, 13.0, 14.0]), np.full(4, 10.0)) == pytest.approx((2.5 - half, 2.5 + half))
    assert t_interval(np.array([2.0])) == (2.0, 2.0)


def test_paired_difference_of_a_known_shift():
    rng = np.random.default_rng(0)
    b = rng.normal(50, 5, size=10)
    a = b + 5 + rng.normal(0, 0.5, size=10)
    result = paired_difference(a, b)
    assert result["n"] == 10 and result["mean"] == pytest.approx(np.mean(a - b))
    assert result["ci_low"] < 5 < result["ci_high"] and result["ci_low"] > 4
    assert result["p_value"] == pytest.approx(2 / 1024)


def test_no_percentile_bootstrap_on_few_units():
    with pytest.raises(ValueError, match="t_interval"):
        bootstrap_ci(np.ones(MIN_BOOTSTRAP_UNITS - 1))
    lo, hi = bootstrap_ci(np.array([-3.0, -1.0, 1.0, 3.0, -2.0, 2.0, 0.5, -0.5, 1.5, -1.5]))
    assert lo < 0 < hi


def test_seeds_are_averaged_within_a_root_and_their_spread_reported_apart():
    values = {(0, 0): 10.0, (1, 0): 20.0, (0, 1): 30.0, (1, 1): 50.0}
    assert root_means(values) == {0: 15.0, 1: 40.0}
    spread = seed_spread(values)  # seed 0: mean 20, seed 1: mean 35
    assert spread == pytest.approx({"mean": 27.5, "sd": np.std([20.0, 35.0], ddof=1), "n": 2})


def test_bad_input_raises():
    with pytest.raises(ValueError, match="paired"):
        paired_difference(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="finite"):
        sign_flip_p(np.array([1.0, np.nan]))
