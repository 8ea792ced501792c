"""The PettingZoo and Gymnasium APIs, checked with the libraries' own test utilities."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pettingzoo
import pytest
from gymnasium.utils.env_checker import check_env
from conftest import act, parallel_on, tiny_workload
from pettingzoo.test import api_test, max_cycles_test, parallel_api_test, parallel_seed_test, render_test, state_test

import core_env
from core_env import features
from core_env import discrete_core_v1
from core_env.gym_env import DiscreteCoREEnv
from core_env.parallel import DiscreteCoREParallelEnv

SMALL = {"n_nodes": 3, "n_slots": 4, "arrival_steps": 40}

# PettingZoo's tests reset with options={"options": 1} (we warn and ignore) and warn about Dict spaces.
pytestmark = [
    pytest.mark.filterwarnings("ignore:ignoring unknown reset option"),
    pytest.mark.filterwarnings("ignore:Observation space for each agent probably should be"),
    pytest.mark.filterwarnings("ignore:Observation is not a NumPy array"),
]


def test_parallel_api_test_passes():
    parallel_api_test(discrete_core_v1.parallel_env(**SMALL), num_cycles=300)


def test_parallel_seed_test_passes():
    parallel_seed_test(lambda: discrete_core_v1.parallel_env(**SMALL), num_cycles=50)


def test_aec_api_test_passes():
    api_test(discrete_core_v1.env(**SMALL), num_cycles=200)


def test_max_cycles_test_passes():
    max_cycles_test(discrete_core_v1)


def test_render_test_passes_for_every_render_mode(capsys):
    render_test(lambda render_mode=None: discrete_core_v1.env(render_mode=render_mode, **SMALL))
    assert "slot" in capsys.readouterr().out  # human mode printed the ansi table


def test_state_test_passes():
    state_test(discrete_core_v1.env(**SMALL), discrete_core_v1.parallel_env(**SMALL))


@pytest.mark.skipif(not hasattr(pettingzoo, "register"), reason="PettingZoo < 1.27 has no registry")
def test_pettingzoo_registry_makes_the_parallel_and_aec_env():
    par = pettingzoo.make("parallel", core_env.PETTINGZOO_ID, n_nodes=2, n_slots=3)
    assert isinstance(par, DiscreteCoREParallelEnv)
    assert par.possible_agents == ["node_0", "node_1"] and par.action_space("node_0").n == 4
    aec = pettingzoo.make("aec", core_env.PETTINGZOO_ID, n_nodes=2)
    aec.reset(seed=0)
    assert aec.agent_selection == "node_0"


def test_spaces_match_the_documented_layout():
    env = discrete_core_v1.parallel_env(n_nodes=3, n_slots=5, history=4)
    obs, _ = env.reset(seed=0)
    space = env.observation_space("node_2")
    assert space is env.observation_space("node_0")  # identical (and cached) for every node
    assert env.action_space("node_1") is env.action_space("node_0")
    assert space["observation"].dtype == np.float32 and space["observation"].shape == (6 + 5 * 12,)
    assert space["action_mask"].dtype == np.int8 and space["action_mask"].shape == (6,)
    assert obs["node_0"]["action_mask"].dtype == np.int8
    assert env.state().shape == env.state_space.shape == (3 + 5 * 12,)
    # the observation length does not depend on the number of nodes
    assert discrete_core_v1.parallel_env(n_nodes=7, n_slots=5, history=4).observation_space("node_0") == space


def test_gym_check_env_passes():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # check_env reports problems as warnings
        check_env(gym.make(core_env.GYM_ID, **SMALL).unwrapped, skip_render_check=True)
    check_env(gym.make(core_env.GYM_ID, render_mode="ansi", **SMALL).unwrapped)


def test_gym_make_with_module_prefix_works_in_a_fresh_process():
    code = (
        "import sys, gymnasium as gym\n"
        "assert 'core_env' not in sys.modules\n"
        "env = gym.make('core_env:core_env/DiscreteCoRE-v1', n_nodes=2, n_slots=3)\n"
        "obs, info = env.reset(seed=0)\n"
        "print(type(env.unwrapped).__name__, obs['observation'].shape, env.action_space)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "DiscreteCoREEnv"
    assert "MultiDiscrete([4 4])" in result.stdout


def test_gym_action_masks_are_the_flat_boolean_per_node_masks():
    env = gym.make(core_env.GYM_ID, n_nodes=3, n_slots=4)
    obs, _ = env.reset(seed=5)
    for _ in range(20):
        masks = env.unwrapped.action_masks()
        assert masks.dtype == np.bool_ and masks.shape == (3 * 5,)
        per_node = masks.reshape(3, 5)
        assert per_node[:, 0].all()
        assert np.array_equal(per_node, obs["action_mask"].astype(bool))
        assert np.array_equal(per_node[0, 1:], env.unwrapped.episode.sim.active[0])
        action = [int(np.flatnonzero(row)[-1]) for row in per_node]
        obs, *_ = env.step(np.array(action))


def test_gym_spaces_are_centralized():
    env = DiscreteCoREEnv(n_nodes=3, n_slots=4, history=2)
    assert env.observation_space["observation"].shape == (3, 6 + 4 * 10)
    assert env.observation_space["action_mask"].shape == (3, 5)
    assert env.observation_space["action_mask"].dtype == np.int8
    assert np.array_equal(env.action_space.nvec, [5, 5, 5])


def test_full_history_accessor_returns_every_report_beyond_the_observation_window():
    env, _, _ = parallel_on(tiny_workload([(0, 20, 0.5, 1.0)]), n_nodes=1, n_slots=1, history=2)
    for _ in range(6):
        obs = act(env, 1)[0]
    history = env.reported_history(0)
    assert history.tolist() == [10.0, 9.0, 8.0, 7.0, 6.0, 5.0]
    # the observation holds only the last H = 2 log losses, most recent first
    start = 6 + features.SLOT_BASE  # node (3) and global (3) features, then slot 0's features
    assert obs["node_0"]["observation"][start : start + 2] == pytest.approx(np.log([5.0, 6.0]))
    history[:] = -1.0  # a copy: the env is not affected
    assert env.reported_history(0)[0] == 10.0
    assert env.slot_task(0) == 0


def test_gym_returned_arrays_never_share_memory():
    env = DiscreteCoREEnv(n_nodes=2, n_slots=3)
    for obs, info in [env.reset(seed=0), env.step(np.array([1, 0]))[::4]]:
        arrays = [obs["observation"], obs["action_mask"], info["conflict"], info["invalid_action"]]
        assert not any(np.shares_memory(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1:])


def test_module_docstring_is_the_documentation_page():
    """PettingZoo convention: the env module's docstring is its documentation page (docs/env.md)."""
    from pathlib import Path

    from core_env import discrete_core_v1

    page = (Path(__file__).resolve().parents[1] / "docs" / "env.md").read_text()
    assert discrete_core_v1.__doc__.strip() == page.strip()
