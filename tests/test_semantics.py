"""The step semantics of docs/env.md (A step) on hand-made tiny workloads whose answers are known.

The default tiny bank's curve 0 is LINEAR: batch b has loss 10 - b (b = 0..9), so a node-step that trains
batches [x0, x1) reports the mean of those values; past batch 10 the loss is the plateau 5.5 (mean of the
last 10 points). Targets below 1 are never reached.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FLAT, LINEAR, act, parallel_on, tiny_bank, tiny_workload

from core_env.episode import EPISODE_KEYS
from core_env.gym_env import DiscreteCoREEnv

NEVER = 0.5  # a target below every reported loss of LINEAR


def sim_of(env):
    return env.episode.sim


def reported(env, slot: int = 0) -> list[float]:
    return env.reported_history(slot).tolist()


# ---------------------------------------------------------------- conflicts and invalid choices


@pytest.mark.parametrize("choosers", [(0, 1), (1, 2), (0, 2)])
def test_two_nodes_choosing_one_task_lowest_index_wins(choosers):
    env, _, _ = parallel_on(tiny_workload([(0, 9, NEVER, 1.0)]), n_nodes=3)
    actions = [0, 0, 0]
    for node in choosers:
        actions[node] = 1
    _, _, _, _, infos = act(env, *actions)
    winner, loser = choosers
    assert sim_of(env).node_slot[0].tolist() == [0 if i == winner else -1 for i in range(3)]
    assert sim_of(env).progress[0, 0] == 1.0  # served once, not twice
    assert [infos[f"node_{i}"]["conflict"] for i in range(3)] == [int(i == loser) for i in range(3)]
    assert all(info["conflicts"] == 1 and info["busy_node_steps"] == 1 for info in infos.values())
    assert infos[f"node_{loser}"]["invalid_action"] == 0


def test_choosing_an_empty_slot_idles_and_counts_an_invalid_action():
    env, obs, _ = parallel_on(tiny_workload([(0, 9, NEVER, 1.0)]))
    assert obs["node_1"]["action_mask"].tolist() == [1, 1, 0]
    _, _, _, _, infos = act(env, 1, 2)
    assert sim_of(env).node_slot[0].tolist() == [0, -1]
    assert infos["node_1"]["invalid_action"] == 1 and infos["node_0"]["invalid_action"] == 0
    assert infos["node_0"]["invalid_actions"] == 1 and infos["node_0"]["conflicts"] == 0
    assert infos["node_0"]["busy_node_steps"] == 1


def test_strict_mode_raises_on_an_empty_slot_naming_the_node_and_changes_nothing():
    env, _, _ = parallel_on(tiny_workload([(0, 9, NEVER, 1.0)]), strict=True)
    with pytest.raises(ValueError, match="node_1"):
        act(env, 1, 2)
    assert sim_of(env).t[0] == 0 and sim_of(env).progress[0, 0] == 0.0
    act(env, 1, 0)
    assert sim_of(env).t[0] == 1 and sim_of(env).progress[0, 0] == 1.0


# ---------------------------------------------------------------- timing


def test_task_is_visible_from_its_arrival_step_and_fails_after_its_window():
    a, d = 2, 5
    env, obs, _ = parallel_on(tiny_workload([(a, d, NEVER, 1.0)], arrival_steps=3))
    visible_at, failed_after = [], None
    for t in range(10):
        if obs["node_0"]["action_mask"][1]:
            visible_at.append(t)
        obs, _, terms, _, infos = act(env, 1 if obs["node_0"]["action_mask"][1] else 0, 0)
        if infos["node_0"]["failed"]:
            failed_after = t
            break
    assert visible_at == list(range(a, d))  # d - a steps, from step a
    assert failed_after == d - 1
    assert terms == {"node_0": True, "node_1": True}


@pytest.mark.parametrize("deadline, completes", [(3, True), (2, False)])
def test_task_can_complete_on_the_last_step_of_its_window(deadline, completes):
    # reports 10, 9, 8: target 8 is reached on the third service
    env, _, _ = parallel_on(tiny_workload([(0, deadline, 8.0, 1.0)]), reward="sparse")
    total = 0.0
    while env.agents:
        _, rewards, _, _, infos = act(env, 1, 0)
        total += rewards["node_0"]
    assert total == float(completes)
    assert (infos["node_0"]["completed"], infos["node_0"]["failed"]) == ((1, 0) if completes else (0, 1))


# ---------------------------------------------------------------- reported losses


@pytest.mark.parametrize("target, completion_step", [(7.5, 2), (7.4999, 3)])
def test_completes_on_the_very_step_the_interval_averaged_loss_reaches_the_target(target, completion_step):
    # two batches per step: reports mean(10, 9) = 9.5, mean(8, 7) = 7.5, mean(6, 5) = 5.5
    env, _, _ = parallel_on(tiny_workload([(0, 9, target, 2.0)]), reward="sparse")
    rewards = []
    while len(rewards) < completion_step:
        rewards.append(act(env, 1, 0)[1]["node_0"])
    assert rewards == [0.0] * (completion_step - 1) + [1.0]
    assert not sim_of(env).active[0, 0]


def test_interval_average_over_fractional_batches_is_exact():
    env, _, _ = parallel_on(tiny_workload([(0, 9, NEVER, 1.5)]))
    for _ in range(3):
        act(env, 1, 0)
    # [0, 1.5), [1.5, 3), [3, 4.5) of the piecewise-constant curve 10, 9, 8, 7, 6, ...
    expected = [(10 + 0.5 * 9) / 1.5, (0.5 * 9 + 8) / 1.5, (7 + 0.5 * 6) / 1.5]
    np.testing.assert_allclose(reported(env), expected, rtol=1e-13)
    assert sim_of(env).progress[0, 0] == 4.5


def test_fractional_progress_accumulates_across_steps_without_rounding():
    env, _, _ = parallel_on(tiny_workload([(0, 40, NEVER, 0.3)]), n_nodes=1)
    for _ in range(10):
        act(env, 1)
    assert sim_of(env).progress[0, 0] == pytest.approx(3.0, abs=1e-12)
    history = reported(env)
    # batches [0, 3) were trained: the mean of all reports (equal widths) is the mean of 10, 9, 8
    assert np.mean(history) == pytest.approx(9.0, abs=1e-12)
    assert history[3] == pytest.approx((10 * 0.1 + 9 * 0.2) / 0.3, abs=1e-12)  # [0.9, 1.2)


def test_loss_stays_at_the_plateau_past_the_end_of_the_curve():
    env, _, _ = parallel_on(tiny_workload([(0, 9, 3.0, 4.0)]), n_nodes=1)
    for _ in range(5):
        act(env, 1)
    # [0,4): 8.5; [4,8): 4.5; [8,12): (2 + 1 + 5.5 + 5.5) / 4; then the plateau 5.5 forever
    assert reported(env) == pytest.approx([8.5, 4.5, 3.5, 5.5, 5.5], abs=1e-12)
    assert sim_of(env).active[0, 0]  # target 3 is never reached although raw points go below it


def test_plateau_is_the_mean_of_the_curves_last_window():
    bank = tiny_bank(np.arange(40.0, 0.0, -1.0))  # window max(10, 40 // 20) = 10 points: 10..1
    env, _, _ = parallel_on(tiny_workload([(0, 9, NEVER, 40.0)], bank=bank), n_nodes=1)
    act(env, 1)
    act(env, 1)
    assert reported(env) == pytest.approx([20.5, 5.5], abs=1e-12)


# ---------------------------------------------------------------- switching cost and speeds


def test_switching_node_or_resuming_loses_the_switch_cost_but_first_service_does_not():
    env, _, _ = parallel_on(tiny_workload([(0, 20, NEVER, 2.0)]), switch_cost=0.5)
    progress = []
    for actions in [(1, 0), (1, 0), (0, 1), (0, 0), (0, 1), (0, 1)]:
        act(env, *actions)
        progress.append(sim_of(env).progress[0, 0])
    # first service: 2; same node: +2; other node: +1; pause; resume: +1; same node again: +2
    assert progress == [2.0, 4.0, 5.0, 5.0, 6.0, 8.0]
    assert reported(env) == pytest.approx([9.5, 7.5, 6.0, 5.0, 3.5], abs=1e-12)
    assert sim_of(env).stats["switches"][0] == 2


def test_node_speed_multiplies_the_batches_a_step_trains():
    env, _, _ = parallel_on(tiny_workload([(0, 20, NEVER, 2.0), (0, 20, NEVER, 2.0)]), node_speeds=(1.0, 2.5))
    act(env, 1, 2)
    assert sim_of(env).progress[0].tolist() == [2.0, 5.0]
    assert reported(env, 1) == pytest.approx([8.0])  # mean(10, 9, 8, 7, 6)


# ---------------------------------------------------------------- arrivals, rejection, episode end


def test_arrival_is_rejected_when_every_slot_is_full_and_counted():
    workload = tiny_workload([(0, 9, NEVER, 1.0), (0, 9, NEVER, 1.0), (1, 9, NEVER, 1.0)], arrival_steps=2)
    env, _, infos = parallel_on(workload, n_slots=1)
    assert (infos["node_0"]["arrived"], infos["node_0"]["rejected"], infos["node_0"]["active"]) == (2, 1, 1)
    assert env.slot_task(0) == 0
    _, _, _, _, infos = act(env, 0, 0)
    assert (infos["node_0"]["arrived"], infos["node_0"]["rejected"]) == (3, 2)
    assert infos["node_0"]["failed"] == 0 and env.slot_task(0) == 0


def test_slot_freed_by_a_completion_takes_the_next_arrival():
    workload = tiny_workload([(0, 9, 10.0, 1.0), (1, 9, NEVER, 1.0)], arrival_steps=2)
    env, _, _ = parallel_on(workload, n_slots=1)
    _, rewards, _, _, infos = act(env, 1, 0)
    assert infos["node_0"]["completed"] == 1 and infos["node_0"]["rejected"] == 0
    assert env.slot_task(0) == 1 and sim_of(env).steps[0, 0] == 0
    assert env.reported_history(0).size == 0


def test_episode_drains_after_the_arrival_window_then_terminates():
    env, _, _ = parallel_on(tiny_workload([(2, 6, NEVER, 1.0)], arrival_steps=3))
    steps = 0
    while env.agents:
        _, _, terms, truncs, _ = act(env, 0, 0)
        steps += 1
        if steps in (3, 4, 5):  # arrival window over, the task is still active
            assert not any(terms.values())
    assert steps == 6
    assert all(terms.values()) and not any(truncs.values())
    assert env.agents == []
    with pytest.raises(RuntimeError, match="reset"):
        act(env, 0, 0)


def test_empty_workload_terminates_when_the_arrival_window_ends():
    env, _, _ = parallel_on(tiny_workload([], arrival_steps=3))
    for _ in range(3):
        _, _, terms, truncs, _ = act(env, 0, 0)
    assert all(terms.values()) and not any(truncs.values()) and env.agents == []


def test_max_cycles_truncates_the_episode():
    env, _, _ = parallel_on(tiny_workload([(0, 50, NEVER, 1.0)]), max_cycles=3)
    for _ in range(2):
        _, _, terms, truncs, _ = act(env, 1, 0)
        assert not any(truncs.values())
    _, _, terms, truncs, infos = act(env, 1, 0)
    assert all(truncs.values()) and not any(terms.values())
    assert env.agents == [] and infos["node_0"]["active"] == 1


def test_max_cycles_is_an_assignable_attribute_that_takes_effect_at_reset():
    workload = tiny_workload([(0, 50, NEVER, 1.0)])
    env, _, _ = parallel_on(workload)
    env.max_cycles = 2
    assert env.max_cycles == 2
    env.reset(options={"workload": workload})
    act(env, 0, 0)
    _, _, _, truncs, _ = act(env, 0, 0)
    assert all(truncs.values()) and env.agents == []


def test_gym_view_truncates_and_terminates_like_the_parallel_view():
    env = DiscreteCoREEnv(n_nodes=2, n_slots=2, max_cycles=3)
    env.reset(options={"workload": tiny_workload([(0, 50, NEVER, 1.0)])})
    results = [env.step(np.array([1, 0]))[2:4] for _ in range(3)]
    assert results == [(False, False), (False, False), (False, True)]
    env.reset(options={"workload": tiny_workload([(0, 2, NEVER, 1.0)])})
    results = [env.step(np.array([1, 0]))[2:4] for _ in range(2)]
    assert results == [(False, False), (True, False)]


# ---------------------------------------------------------------- infos


REQUIRED_STATS = {"arrived", "completed", "failed", "rejected", "completion_rate"}


def test_episode_statistics_are_in_every_info_with_the_same_keys():
    workload = tiny_workload([(0, 4, 9.0, 1.0), (1, 3, NEVER, 1.0), (1, 5, NEVER, 1.0, 1)], arrival_steps=2,
                             bank=tiny_bank(LINEAR, FLAT))
    env, _, infos = parallel_on(workload, n_slots=2)
    keys = set(infos["node_0"])
    assert REQUIRED_STATS | set(EPISODE_KEYS) | {"conflict", "invalid_action"} <= keys
    seen = [infos]
    while env.agents:
        seen.append(act(env, 1, 1)[4])
    for step_infos in seen:
        assert set(step_infos) == {"node_0", "node_1"}
        assert all(set(info) == keys for info in step_infos.values())
    final = seen[-1]["node_0"]
    assert (final["arrived"], final["completed"], final["failed"], final["rejected"]) == (3, 1, 1, 1)
    assert final["completion_rate"] == pytest.approx(1 / 3)


def test_gym_info_has_the_same_statistics_at_reset_and_every_step():
    env = DiscreteCoREEnv(n_nodes=2, n_slots=2)
    _, info = env.reset(options={"workload": tiny_workload([(0, 3, NEVER, 1.0)])})
    keys = set(info)
    assert REQUIRED_STATS <= keys
    done = False
    while not done:
        _, _, terminated, truncated, info = env.step(np.array([1, 1]))
        assert set(info) == keys
        done = terminated or truncated
    assert info["conflict"].tolist() == [0, 1] and info["failed"] == 1
