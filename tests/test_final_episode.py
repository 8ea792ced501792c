"""FinalEpisode: the finished episode's statistics survive autoreset (tested with SuperSuit's vectorizers)."""

from __future__ import annotations

import numpy as np
import pytest
import supersuit

from core_env import discrete_core_v1
from core_env.wrappers import FinalEpisode, MaskToInfo

SMALL = {"n_nodes": 2, "n_slots": 4, "arrival_steps": 30}


def last_allowed(mask) -> int:
    return int(np.flatnonzero(mask)[-1])


def play_to_end(env, seed: int):
    """One episode of the 'last allowed choice' rule; returns (final step infos, summed rewards, reset infos)."""
    observations, reset_infos = env.reset(seed=seed)
    infos, returns = reset_infos, {a: 0.0 for a in env.agents}
    while env.agents:
        observations, rewards, _, _, infos = env.step({a: last_allowed(observations[a]["action_mask"]) for a in env.agents})
        for a, r in rewards.items():
            returns[a] += r
    return infos, returns, reset_infos


def test_final_episode_is_in_the_ending_step_and_the_next_reset_only():
    env = FinalEpisode(discrete_core_v1.parallel_env(**SMALL))
    infos, returns, reset_infos = play_to_end(env, seed=1)
    assert all("final_episode" not in info for info in reset_infos.values())  # nothing has finished yet
    for agent, info in infos.items():
        final = info["final_episode"]
        assert final["index"] == 0
        for key in ("completion_rate", "completed", "arrived", "rejected", "failed", "conflicts", "invalid_actions", "t"):
            assert final[key] == info[key], key
        assert "action_mask" not in final and "potential" not in final
        # a terminated episode's shaped return is its completions (core_env.reward)
        assert final["return"] == pytest.approx(returns[agent]) == pytest.approx(final["completed"], abs=1e-4)
    observations, next_reset = env.reset(seed=2)
    assert {a: i["final_episode"] for a, i in next_reset.items()} == {a: i["final_episode"] for a, i in infos.items()}
    step_infos = env.step({a: 0 for a in env.agents})[4]
    assert all("final_episode" not in info for info in step_infos.values())
    assert play_to_end(env, seed=3)[0]["node_0"]["final_episode"]["index"] == 1


def test_without_the_wrapper_supersuit_autoreset_reports_the_new_episodes_zeros_and_with_it_the_finished_one():
    reference, _, _ = play_to_end(FinalEpisode(discrete_core_v1.parallel_env(**SMALL)), seed=5)
    expected = reference["node_0"]["final_episode"]
    assert expected["completed"] > 0  # else the comparison below could not fail

    for wrapped in (False, True):
        env = discrete_core_v1.parallel_env(**SMALL)
        venv = supersuit.pettingzoo_env_to_vec_env_v1(MaskToInfo(FinalEpisode(env) if wrapped else env))
        observations, infos = venv.reset(seed=5)
        for _ in range(10_000):
            observations, rewards, terminations, truncations, infos = venv.step(np.array([last_allowed(i["action_mask"]) for i in infos]))
            if np.any(terminations | truncations):
                break
        else:
            pytest.fail("the episode did not end")
        if wrapped:
            assert infos[0]["final_episode"] == expected
        else:
            assert infos[0]["completion_rate"] == 0.0 and infos[0]["completed"] == 0  # the reset's zeros replaced the episode's


def test_final_episode_counts_every_episode_of_a_concatenated_supersuit_vec_env():
    venv = supersuit.concat_vec_envs_v1(supersuit.pettingzoo_env_to_vec_env_v1(MaskToInfo(FinalEpisode(discrete_core_v1.parallel_env(**SMALL)))),
                                        2, num_cpus=0, base_class="gymnasium")
    observations, infos = venv.reset(seed=0)
    seen: dict[tuple[int, int], float] = {}
    for _ in range(600):
        observations, rewards, terminations, truncations, infos = venv.step(np.array([last_allowed(i["action_mask"]) for i in infos]))
        for row, info in enumerate(infos):
            if "final_episode" in info:
                final = info["final_episode"]
                seen[(row // 2, final["index"])] = final["completion_rate"]  # 2 agents (rows) per env
                assert 0.0 <= final["completion_rate"] <= 1.0 and final["arrived"] > 0
    assert {env for env, _ in seen} == {0, 1} and max(index for _, index in seen) >= 2
    assert any(rate > 0 for rate in seen.values())
