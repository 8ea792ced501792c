"""core_env.observation: the one structured parser of observations, checked against the simulator's state."""

from __future__ import annotations

import numpy as np
import pytest

from core_env import discrete_core_v1, features
from core_env.observation import ParsedObservation, parse_observation
from mara_agents.heuristics import EDF


def rows(env, observations) -> tuple[np.ndarray, np.ndarray]:
    """(N, D) observations and (N, K+1) masks of a PettingZoo step, node order."""
    return (np.stack([observations[a]["observation"] for a in env.agents]),
            np.stack([observations[a]["action_mask"] for a in env.agents]))


def run(steps: int, **config):
    """Yield (env, observation (N, D), previous actions (N,) or None) for a few EDF-scheduled steps."""
    env = discrete_core_v1.parallel_env(**config)
    observations, _ = env.reset(seed=0)
    agent, previous = EDF(), None
    for _ in range(steps):
        obs, mask = rows(env, observations)
        yield env, obs, previous
        previous = agent.act(obs[None], mask[None])[0]
        observations, *_ = env.step(dict(zip(env.agents, previous.tolist())))


def test_fields_match_the_simulator():
    checked_tasks = checked_reports = checked_served = 0
    tasks_before = None
    for env, obs, previous in run(25):
        sim, config = env.unwrapped.episode.sim, env.unwrapped.config
        parsed = parse_observation(obs, config.n_slots)
        N, K, H = config.n_nodes, config.n_slots, config.history
        assert parsed.history == H and parsed.slots.shape == (K, features.slot_width(H)) and parsed.extra.shape == (K, 0)
        assert np.shares_memory(parsed.slots, obs) and np.shares_memory(parsed.nodes, obs)  # views, not copies

        active, t = sim.active[0], int(sim.t[0])
        np.testing.assert_array_equal(parsed.present, active)
        np.testing.assert_array_equal(parsed.age, np.where(active, t - sim.arrival[0], 0))
        np.testing.assert_array_equal(parsed.steps_to_deadline, np.where(active, sim.deadline[0] - t, 0))
        np.testing.assert_array_equal(parsed.node_steps, np.where(active, sim.steps[0], 0))
        np.testing.assert_allclose(parsed.target, np.where(active, sim.target[0], 1.0), rtol=1e-6)
        for k in np.flatnonzero(active):
            reported = env.unwrapped.reported_history(int(k))  # oldest first
            recent = np.log(np.maximum(reported[::-1][:H], 1e-6))
            assert parsed.node_steps[k] == len(reported)
            np.testing.assert_allclose(parsed.log_losses[k, : len(recent)], recent, rtol=1e-6, atol=1e-6)
            assert not parsed.log_losses[k, len(recent):].any()
            if len(reported):
                assert parsed.last_log_loss[k] == pytest.approx(recent[0], rel=1e-6, abs=1e-6)
                assert parsed.log_gap[k] == pytest.approx(recent[0] - np.log(sim.target[0, k]), rel=1e-5, abs=1e-5)
                checked_reports += 1
            checked_tasks += 1
        assert not parsed.slots[~active].any()

        np.testing.assert_array_equal(parsed.node_index, np.arange(N))
        np.testing.assert_allclose(parsed.speed, config.speeds)
        expected_last = np.full(N, -1) if previous is None else previous - 1
        np.testing.assert_array_equal(parsed.last_slot, expected_last)
        tasks = np.array([env.unwrapped.slot_task(k) for k in range(K)])
        if previous is not None:  # served last step: a node chose the slot, and its task is still there
            served = np.isin(np.arange(K), previous - 1) & active & (tasks == tasks_before)
            np.testing.assert_array_equal(parsed.served_last, served)
            checked_served += int(served.sum())
        tasks_before = tasks
        assert parsed.time == pytest.approx(t / config.arrival_steps)
        assert parsed.arrival_window_left == pytest.approx(max(config.arrival_steps - t, 0) / config.arrival_steps)
        assert parsed.active_share == pytest.approx(active.sum() / K)
    assert checked_tasks > 20 and checked_reports > 10 and checked_served > 10  # the loop saw tasks with reports


def test_batched_parse_is_the_single_env_parse_per_env():
    envs = [list(run(6, history=h))[-1][1] for h in (4, 4)]
    batch = np.stack(envs)  # (B, N, D)
    parsed = parse_observation(batch, 16)
    assert parsed.slots.shape == (2, 16, features.slot_width(4)) and parsed.node_index.shape == (2, 4) and parsed.time.shape == (2,)
    for b, obs in enumerate(envs):
        single = parse_observation(obs, 16)
        for name in ("present", "age", "steps_to_deadline", "node_steps", "target", "log_losses", "served_last", "node_index",
                     "speed", "last_slot", "time", "arrival_window_left", "active_share", "extra"):
            np.testing.assert_array_equal(getattr(parsed, name)[b], getattr(single, name), err_msg=name)


@pytest.mark.parametrize("history", [1, 12])
def test_history_is_inferred_from_the_observation_length(history):
    env, obs, _ = list(run(8, history=history))[-1]
    K = env.unwrapped.config.n_slots
    assert obs.shape[1] == features.obs_dim(K, history)
    parsed = parse_observation(obs, K)
    assert parsed.history == history and parsed.log_losses.shape == (K, history)
    assert parse_observation(obs, K, history).history == history
    np.testing.assert_array_equal(parsed.served_last, parsed.slots[:, -1] > 0.5)
    with pytest.raises(ValueError, match="does not fit"):
        parse_observation(obs, K, history + 1)


def test_extra_columns_after_the_env_observation():
    """K · E extra features (predictor_observations' layout: slot 0's E first) come back as (K, E)."""
    env, obs, _ = list(run(5))[-1]
    K, H = env.unwrapped.config.n_slots, env.unwrapped.config.history
    extra = np.arange(K * 3, dtype=np.float32).reshape(K, 3) + 0.5
    extended = np.concatenate([obs, np.broadcast_to(extra.reshape(-1), (obs.shape[0], 3 * K))], axis=1)
    parsed, plain = parse_observation(extended, K, H), parse_observation(obs, K)
    np.testing.assert_array_equal(parsed.extra, extra)
    np.testing.assert_array_equal(parsed.slots, plain.slots)
    assert parsed.history == H


@pytest.mark.parametrize("length", [features.obs_dim(16, 8) - 1, features.obs_dim(16, 8) - 5, features.obs_dim(16, 0), 3])
def test_wrong_length_raises(length):
    """D that is not 6 + K·(8 + H) for an H >= 1 (H = 0 included) is refused, naming D and K."""
    _, obs, _ = list(run(2))[-1]
    with pytest.raises(ValueError, match=f"observation length D={length} does not fit the core_env layout with K=16 slots"):
        parse_observation(obs[:, :length], 16)


def test_bad_shapes_raise():
    _, obs, _ = list(run(2))[-1]
    with pytest.raises(ValueError, match="shape"):
        parse_observation(obs[0], 16)
    with pytest.raises(ValueError, match="n_slots"):
        parse_observation(obs, 0)
    with pytest.raises(ValueError, match="history"):
        parse_observation(obs, 16, 0)
    parsed = parse_observation(obs[None], 16)
    with pytest.raises(ValueError, match="nodes"):
        ParsedObservation.from_parts(parsed.nodes[..., :2], parsed.global_, parsed.slots)
    with pytest.raises(ValueError, match="global_"):
        ParsedObservation.from_parts(parsed.nodes, parsed.global_[..., :2], parsed.slots)
    with pytest.raises(ValueError, match="slots"):
        ParsedObservation.from_parts(parsed.nodes, parsed.global_, parsed.slots[0])
    with pytest.raises(ValueError, match="extra"):
        ParsedObservation.from_parts(parsed.nodes, parsed.global_, parsed.slots, np.zeros((1, 15, 3)))


def test_from_parts_agrees_with_the_flat_observation():
    for env, obs, _ in run(12):
        sim = env.unwrapped.episode.sim
        flat = parse_observation(obs[None], 16)  # (B=1, N, D)
        # The compact central layout: per-node features (B, N, 3), global (B, 3), slot table (B, K, F).
        compact = ParsedObservation.from_parts(obs[None, :, : features.NODE_FEATURES], features.global_features(sim),
                                               features.slot_table(sim, env.unwrapped.config.history))
        for name in ("present", "age", "steps_to_deadline", "node_steps", "served_last", "node_index", "last_slot", "extra"):
            np.testing.assert_array_equal(getattr(compact, name), getattr(flat, name), err_msg=name)
        for name in ("target", "log_target", "log_losses", "last_log_loss", "log_gap", "time", "arrival_window_left", "active_share", "speed"):
            np.testing.assert_allclose(getattr(compact, name), getattr(flat, name), rtol=1e-6, atol=1e-6, err_msg=name)
        again = ParsedObservation.from_parts(flat.nodes, flat.global_, flat.slots, flat.extra)
        assert all(getattr(again, f) is getattr(flat, f) for f in ("nodes", "global_", "slots", "extra"))
