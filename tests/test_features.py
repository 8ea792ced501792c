"""The incrementally maintained slot table equals the from-scratch reference, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from core_env import features
from core_env.config import EnvConfig
from core_env.curves import bank_for
from core_env.sim import Simulator
from core_env.workload import draw_workload


@pytest.mark.parametrize("config", [EnvConfig(), EnvConfig(n_nodes=3, n_slots=5, history=3, switch_cost=0.3, node_speeds=(1.0, 0.5, 2.0), load=0.6),
                                    EnvConfig(n_nodes=2, n_slots=2, history=1, load=0.9)])
def test_incremental_slot_table_matches_the_reference_every_step(config):
    rng = np.random.default_rng(7)
    bank = bank_for("id", "train")
    batch = 6
    sim = Simulator(config, batch)
    sim.reset([draw_workload(bank, config.arrival_intensity, 120, rng) for _ in range(batch)])
    steps = 0
    while not sim.done.all():
        incremental = sim.slot_features.current().copy()
        reference = features.slot_table(sim, config.history)
        assert incremental.tobytes() == reference.tobytes(), f"slot table differs at step {steps}"
        assert sim.slot_features.global_features().tobytes() == features.global_features(sim).tobytes()
        masks = np.concatenate([np.ones((batch, config.n_nodes, 1), np.int64), np.repeat(sim.active[:, None, :], config.n_nodes, 1)], axis=2)
        actions = np.argmax(rng.random(masks.shape) * masks, axis=2)
        sim.step(actions)
        steps += 1
    assert steps > 100


def test_named_feature_positions_match_the_layout():
    names = features.slot_feature_names(8)
    assert len(names) == features.slot_width(8)
    assert names[features.AGE] == "age" and names[features.STEPS_TO_DEADLINE] == "steps_to_deadline"
    assert features.SLOT_TABLE_START == features.NODE_FEATURES + features.GLOBAL_FEATURES
