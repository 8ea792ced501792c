"""Whole episodes of the current implementation against trajectories recorded on the numpy simulator.

``tests/data/trajectories.npz`` was written by ``tests/trajectories.py`` before the dynamics were rewritten
as compiled loops. Replaying each case's actions must give the same trajectory: integers (statistics,
masks, node flags, terminations) exactly, rewards and potentials within 1e-9, observations and states
within 1e-5 (float32; the logarithm may differ by an ulp between math libraries, never more).
"""

from __future__ import annotations

import numpy as np
import pytest

from trajectories import BATCHED, CASES, DATA, record_batched, record_case

RECORDED = np.load(DATA)


def _compare(name: str, replayed: dict[str, np.ndarray]) -> None:
    for key, value in replayed.items():
        expected = RECORDED[f"{name}/{key}"]
        assert value.shape == expected.shape, (name, key)
        if key in ("rewards", "potential", "stats"):
            np.testing.assert_allclose(value, expected, rtol=0, atol=1e-9, err_msg=f"{name}/{key}")
        elif key in ("obs", "state"):
            np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5, err_msg=f"{name}/{key}")
        else:
            np.testing.assert_array_equal(value, expected, err_msg=f"{name}/{key}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_episode_matches_recorded_trajectory(name):
    kwargs, reset, rule = CASES[name]
    _compare(name, record_case(kwargs, reset, rule))


@pytest.mark.parametrize("name", sorted(BATCHED))
def test_batched_episodes_match_recorded_trajectory(name):
    kwargs, options = BATCHED[name]
    _compare(name, record_batched(kwargs, options))


def test_recorded_cases_cover_invalid_choices_conflicts_switches_and_truncation():
    """The recording exercises every rule of a step (else the equivalence would prove little)."""
    flags = np.concatenate([RECORDED[f"{n}/node_flags"].reshape(-1, 2) for n in CASES])
    assert flags[:, 0].sum() > 0 and flags[:, 1].sum() > 0  # conflicts, invalid actions
    done = {n: RECORDED[f"{n}/done"][-1] for n in CASES}
    assert done["tiny_truncated"][1] and done["id_suite_masked"][0]
    from core_env.episode import EPISODE_KEYS

    final = RECORDED["rl_x2_speeds_switch/stats"][-1]
    assert final[EPISODE_KEYS.index("switches")] > 0 and final[EPISODE_KEYS.index("completed")] > 0
