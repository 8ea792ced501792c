"""The compiled observation features against an independent numpy reference (every step, any H)."""

from __future__ import annotations

import numpy as np
import pytest

from core_env import features
from core_env.config import EnvConfig
from core_env.curves import LOSS_FLOOR, bank_for
from core_env.sim import Simulator
from core_env.workload import draw_workload


def reference_slot_table(sim: Simulator, history: int) -> np.ndarray:
    """(B, K, F) the slot table by numpy, from the full loss histories (an independent reference)."""
    table = np.zeros((sim.B, sim.K, features.slot_width(history)))
    present, t = sim.active, sim.t[:, None]
    reported = present & (sim.steps > 0)
    log = lambda x: np.log(np.maximum(x, LOSS_FLOOR))  # noqa: E731
    table[..., features.PRESENT] = present
    table[..., features.AGE] = np.where(present, (t - sim.arrival) / features.TIME_SCALE, 0.0)
    table[..., features.STEPS_TO_DEADLINE] = np.where(present, (sim.deadline - t) / features.TIME_SCALE, 0.0)
    table[..., features.NODE_STEPS] = np.where(present, sim.steps / features.TIME_SCALE, 0.0)
    table[..., features.LAST_LOG_LOSS] = np.where(reported, log(sim.last_loss), 0.0)
    table[..., features.LOG_TARGET] = np.where(present, log(sim.target), 0.0)
    table[..., features.LOG_GAP] = np.where(reported, log(sim.last_loss) - log(sim.target), 0.0)
    back = sim.steps[..., None] - 1 - np.arange(history)
    known = (back >= 0) & present[..., None]
    losses = np.take_along_axis(sim.history, np.clip(back, 0, sim.max_history - 1), axis=2)
    table[..., features.HISTORY_START : features.HISTORY_START + history] = np.where(known, log(losses), 0.0)
    table[..., features.SERVED_LAST] = sim.served_last & present
    return np.clip(table, -features.OBS_BOUND, features.OBS_BOUND)


@pytest.mark.parametrize("config", [EnvConfig(), EnvConfig(n_nodes=3, n_slots=5, history=3, switch_cost=0.3, node_speeds=(1.0, 0.5, 2.0), load=0.6),
                                    EnvConfig(n_nodes=2, n_slots=2, history=1, load=0.9)])
def test_compiled_observations_match_a_numpy_reference_every_step(config):
    rng = np.random.default_rng(7)
    bank = bank_for("id", "train")
    batch = 6
    sim = Simulator(config, batch)
    sim.reset([draw_workload(bank, config.arrival_intensity, 120, rng) for _ in range(batch)])
    steps = 0
    while not sim.done.all():
        obs, mask = features.observations(sim, config.history)
        reference = reference_slot_table(sim, config.history)
        for h in (config.history, 1, 12):  # any H, straight from the histories
            np.testing.assert_allclose(features.slot_table(sim, h), reference_slot_table(sim, h), rtol=1e-12, atol=1e-12)
        slots = obs[..., features.SLOT_TABLE_START :].reshape(batch, config.n_nodes, config.n_slots, -1)
        np.testing.assert_allclose(slots, np.broadcast_to(reference[:, None], slots.shape), rtol=1e-6, atol=1e-6)
        horizon = sim.arrival_steps[:, None]
        expected_global = np.concatenate([sim.t[:, None] / horizon, np.maximum(horizon - sim.t[:, None], 0) / horizon,
                                          sim.active.sum(axis=1, keepdims=True) / config.n_slots], axis=1)
        np.testing.assert_allclose(obs[:, 0, features.NODE_FEATURES : features.SLOT_TABLE_START], expected_global, rtol=1e-6)
        np.testing.assert_allclose(obs[..., 2], (sim.node_slot + 1) / config.n_slots, rtol=1e-6)
        assert (mask[..., 1:] == sim.active[:, None, :]).all() and (mask[..., 0] == 1).all()
        actions = np.argmax(rng.random(mask.shape) * mask, axis=2)
        sim.step(actions)
        steps += 1
    assert steps > 100


def test_named_feature_positions_match_the_layout():
    names = features.slot_feature_names(8)
    assert len(names) == features.slot_width(8)
    assert names[features.AGE] == "age" and names[features.STEPS_TO_DEADLINE] == "steps_to_deadline"
    assert features.SLOT_TABLE_START == features.NODE_FEATURES + features.GLOBAL_FEATURES
