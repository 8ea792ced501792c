"""The synthetic curve prior: its shapes, breadth, determinism and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from core_env.curves import LOSS_FLOOR
from core_env.curves.bank import NON_LEARNER
from core_env.recipe import FamilyReference, draw_tasks
from mara_agents.predictors import curve_prior
from mara_agents.predictors.curve_prior import MODIFIERS, NOISES, SHAPES, Family, prior_bank, progress_left, sample_family


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_starts_at_its_initial_loss_and_falls(shape):
    x = np.linspace(0.0, 1.0, 401)
    for t, d, a, onset in ((0.05, 0.5, 0.5, 0.1), (0.3, 2.0, 2.0, 0.5), (1.0, 4.0, 1.0, 0.8)):
        s = progress_left(shape, x, t, d, a, onset)
        assert s[0] == pytest.approx(1.0)
        assert np.all(np.diff(s) <= 1e-12), shape
        assert np.all((s >= 0) & (s <= 1))
        assert s[-1] < 1.0  # every shape makes progress within the run


def test_an_unknown_shape_noise_or_modifier_is_named():
    with pytest.raises(ValueError, match="unknown shape 'zigzag'"):
        progress_left("zigzag", np.ones(3), 0.1, 1.0, 1.0, 0.1)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="unknown modifier"):
        curve_prior._modify("wobble", np.ones(10), 1.0, rng)


def test_the_prior_is_a_pure_function_of_seed_and_family_index():
    one = prior_bank(3, seed=7, runs=4)
    again = prior_bank(3, seed=7, runs=4)
    assert one.fingerprint == again.fingerprint
    later = prior_bank(2, seed=7, runs=4, first=1)  # families 1 and 2 alone: the same curves
    assert np.array_equal(one.values[one.offsets[4]:], later.values)
    assert prior_bank(3, seed=8, runs=4).fingerprint != one.fingerprint


def test_prior_curves_are_positive_finite_and_broad():
    bank = prior_bank(150, seed=3, runs=6)
    assert np.all(np.isfinite(bank.values)) and bank.values.min() >= LOSS_FLOOR and bank.values.max() <= 1e6
    families = {label.split("/")[0] for label in bank.family.tolist()}
    assert families == set(SHAPES)
    assert {label.split("/")[1] for label in bank.family.tolist()} == set(NOISES)
    assert np.any(bank.flags & NON_LEARNER)
    first = np.array([bank.curve(i)[:10].mean() for i in range(len(bank))])
    last = np.array([bank.curve(i)[-10:].mean() for i in range(len(bank))])
    assert np.mean(last < first / 10) > 0.1  # large drops
    assert np.mean(last > first) > 0.01  # collapses and divergence
    assert np.mean(bank.values <= 2 * LOSS_FLOOR) > 0  # RL-style dips to the floor


def test_every_modifier_is_drawn_by_some_family():
    seen = set()
    for i in range(300):
        seen |= set(Family.draw(np.random.default_rng([0, i])).modifiers)
    assert seen == set(MODIFIERS)


def test_the_recipe_on_prior_families_sets_reachable_and_unreachable_targets():
    bank = prior_bank(40, seed=1, runs=8)
    tasks = draw_tasks(bank, FamilyReference(bank), 2000, np.random.default_rng(0))
    assert 0.05 < np.mean(np.isinf(tasks["demand"])) < 0.7
    finite = tasks["demand"][np.isfinite(tasks["demand"])]
    assert finite.min() >= 1 and np.median(finite) < 200


@pytest.mark.parametrize("families, runs, match", [(0, 24, "families"), (2.5, 24, "families"), (True, 24, "families"), (3, 1, "runs")])
def test_bad_prior_sizes_are_refused(families, runs, match):
    with pytest.raises(ValueError, match=match):
        prior_bank(families, runs=runs)


def test_sample_family_returns_its_runs_and_flags():
    family, curves, flags = sample_family(0, 5, runs=5)
    assert family.shape in SHAPES and len(curves) == len(flags) == 5
    assert all(c.ndim == 1 and c.size >= 20 for c in curves)
