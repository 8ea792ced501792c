"""EnvConfig: defaults, validation boundaries, normalisation, and the same keyword names in every view."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
from conftest import tiny_bank

import core_env
from core_env import discrete_core_v1
from core_env.config import LOADS, TASK_SETS, EnvConfig, make_config
from core_env.gym_env import DiscreteCoREEnv
from core_env.sim import Simulator


def test_defaults_match_the_design():
    config = EnvConfig()
    assert (config.n_nodes, config.n_slots, config.arrival_steps, config.history) == (4, 16, 500, 8)
    assert (config.load, config.task_set, config.reward) == ("train", "id", "shaped")
    assert (config.switch_cost, config.node_speeds, config.strict) == (0.0, None, False)
    assert config.speeds.tolist() == [1.0] * 4


def test_named_loads_and_task_sets():
    assert set(LOADS) == {"train", "x1.25", "x1.5", "x2"}
    assert LOADS["x1.25"] == pytest.approx(1.25 * LOADS["train"])
    assert LOADS["x1.5"] == pytest.approx(1.5 * LOADS["train"])
    assert LOADS["x2"] == pytest.approx(2 * LOADS["train"])
    assert EnvConfig(load="x2").arrival_intensity == LOADS["x2"]
    assert EnvConfig(load=0.3).arrival_intensity == 0.3
    assert set(TASK_SETS) == {"id", "rl_ood", "vit_ood", "stress"}


@pytest.mark.parametrize("kwargs", [
    {"n_nodes": 1}, {"n_nodes": 256}, {"n_slots": 1}, {"n_slots": 1024}, {"load": 1.0}, {"load": 1e-6},
    {"load": 1}, {"switch_cost": 0.99}, {"kappa": 0.0}, {"history": 1}, {"max_cycles": 1}, {"strict": True},
    {"n_nodes": 2, "node_speeds": [1, 3]}, {"n_nodes": np.int64(3)}, {"load": np.float32(0.5)},
])
def test_boundary_values_are_accepted(kwargs):
    make_config(**kwargs)


@pytest.mark.parametrize("kwargs, exc", [
    ({"n_nodes": 257}, ValueError), ({"n_slots": 0}, ValueError), ({"n_slots": 1025}, ValueError),
    ({"arrival_steps": 0}, ValueError), ({"n_nodes": True}, TypeError), ({"kappa": -1.0}, ValueError),
])
def test_values_just_outside_the_ranges_are_rejected(kwargs, exc):
    with pytest.raises(exc, match=next(iter(kwargs))):
        make_config(**kwargs)


def test_node_speeds_are_normalised_to_a_tuple_of_floats():
    config = EnvConfig(n_nodes=3, node_speeds=np.array([1, 2, 3]))
    assert config.node_speeds == (1.0, 2.0, 3.0) and isinstance(config.node_speeds, tuple)
    assert config.speeds.dtype == np.float64 and config.speeds.tolist() == [1.0, 2.0, 3.0]
    hash(config)  # frozen and hashable


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        EnvConfig().n_nodes = 3


def test_make_config_overrides_an_existing_config_and_revalidates():
    base = EnvConfig(n_nodes=2)
    assert make_config(base) is base
    assert make_config(base, n_slots=3) == EnvConfig(n_nodes=2, n_slots=3)
    with pytest.raises(ValueError, match="n_slots"):
        make_config(base, n_slots=0)


def test_unknown_argument_error_lists_the_valid_names():
    with pytest.raises(TypeError, match=r"unknown environment argument\(s\) \['n_agents'\]; valid names: .*'n_nodes'"):
        make_config(n_agents=3)


def test_a_custom_curve_bank_is_a_valid_task_set():
    bank = tiny_bank()
    config = EnvConfig(task_set=bank, arrival_steps=20, load=0.5)
    assert config.task_set_name == "tiny"
    env = discrete_core_v1.parallel_env(task_set=bank, arrival_steps=20, load=0.5)
    env.reset(seed=0)
    assert env.episode.workload.bank is bank and len(env.episode.workload) > 0


KWARGS = {"n_nodes": 3, "n_slots": 5, "arrival_steps": 50, "load": "x1.5", "task_set": "rl_ood", "reward": "sparse",
          "kappa": 0.25, "history": 3, "node_speeds": (1.0, 2.0, 0.5), "switch_cost": 0.1, "strict": True,
          "max_cycles": 77, "render_mode": "ansi"}


@pytest.mark.parametrize("make", [
    discrete_core_v1.parallel_env,
    DiscreteCoREEnv,
    lambda **kw: discrete_core_v1.env(**kw).unwrapped,
    lambda **kw: gym.make(core_env.GYM_ID, **kw).unwrapped,
], ids=["parallel", "gym", "aec", "gym.make"])
def test_every_view_accepts_the_same_keyword_names(make):
    env = make(**KWARGS)
    assert env.config == EnvConfig(**KWARGS)
    assert env.render_mode == "ansi"
    sim = Simulator(EnvConfig(**KWARGS), batch_size=2)
    assert (sim.N, sim.K) == (3, 5) and sim.speeds.tolist() == [1.0, 2.0, 0.5]
