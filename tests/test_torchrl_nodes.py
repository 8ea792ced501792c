"""NodeBatchEnv: the batched engine as a TorchRL multi-agent env, step for step the vector env it wraps."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")

from tensordict import TensorDict  # noqa: E402

from core_env.vector import DiscreteCoREVectorEnv  # noqa: E402
from mara_agents.integrations.common import REPORTED_KEYS, SMALL_ENV  # noqa: E402
from mara_agents.integrations.torchrl_nodes import GROUP, NodeBatchEnv  # noqa: E402


def _actions(rng: np.random.Generator, mask: np.ndarray) -> np.ndarray:
    """A random allowed action per node (nodes may collide: the env resolves and counts it)."""
    B, N, _ = mask.shape
    return np.array([[rng.choice(np.flatnonzero(mask[b, n])) for n in range(N)] for b in range(B)], np.int64)


def test_specs_hold_and_shapes_are_the_multi_agent_layout():
    from torchrl.envs.utils import check_env_specs

    env = NodeBatchEnv(3, SMALL_ENV, seed=0)
    check_env_specs(env)
    td = env.rollout(4)
    N, K = SMALL_ENV["n_nodes"], SMALL_ENV["n_slots"]
    assert env.group_map == {GROUP: [f"node_{i}" for i in range(N)]}
    assert td[GROUP, "action_mask"].shape == (3, 4, N, K + 1) and td[GROUP, "action_mask"].dtype == torch.bool
    assert td["next", GROUP, "reward"].shape == (3, 4, N, 1)
    assert td["next", "done"].shape == (3, 4, 1)
    assert set(td["next", "stats"].keys()) == set(REPORTED_KEYS)


def test_steps_are_the_vector_envs_steps_including_the_final_statistics():
    # one implementation of the dynamics: the same seed and actions give the same observations, masks,
    # rewards, ends and episode statistics as DiscreteCoREVectorEnv itself
    B = 3
    env, vec = NodeBatchEnv(B, SMALL_ENV, seed=7), DiscreteCoREVectorEnv(B, autoreset_mode="disabled", **SMALL_ENV)
    td = env.reset()
    obs, _ = vec.reset(seed=7)
    rng = np.random.default_rng(0)
    ended = np.zeros(B, bool)
    for _ in range(400):
        np.testing.assert_array_equal(td[GROUP, "observation"].numpy(), obs["observation"])
        np.testing.assert_array_equal(td[GROUP, "action_mask"].numpy(), obs["action_mask"].astype(bool))
        actions = _actions(rng, obs["action_mask"])
        td[GROUP, "action"] = torch.as_tensor(actions)
        out = env.step(td)["next"]
        obs, rewards, terminated, truncated, infos = vec.step(actions)
        np.testing.assert_allclose(out[GROUP, "reward"].numpy()[..., 0], np.repeat(rewards[:, None], SMALL_ENV["n_nodes"], 1), rtol=1e-6)
        np.testing.assert_array_equal(out["done"].numpy()[:, 0], terminated | truncated)
        for key in REPORTED_KEYS:
            np.testing.assert_allclose(out["stats", key].numpy(), np.asarray(infos[key], float).reshape(B, -1).sum(-1))
        ended |= out["done"].numpy()[:, 0]
        if ended.any():
            break
        td = out
    assert ended.any(), "no episode ended in 400 steps of the small configuration"


def test_partial_reset_restarts_only_the_masked_envs_and_seeds_replay():
    env = NodeBatchEnv(2, SMALL_ENV, seed=3)
    td = env.reset()
    rng = np.random.default_rng(1)
    for _ in range(5):
        td[GROUP, "action"] = torch.as_tensor(_actions(rng, td[GROUP, "action_mask"].numpy()))
        td = env.step(td)["next"]
    before = td[GROUP, "observation"].clone()
    reset = env.reset(td.clone().set("_reset", torch.tensor([[True], [False]])))  # TorchRL keeps the unmasked envs' entries
    assert torch.equal(reset[GROUP, "observation"][1], before[1])  # env 1 untouched
    assert not torch.equal(reset[GROUP, "observation"][0], before[0])
    assert float(reset["stats", "t"][0]) == 0.0 and float(reset["stats", "t"][1]) == 5.0
    runs = []
    for _ in range(2):
        torch.manual_seed(0)  # the rollouts' random actions come from torch's generator
        runs.append(NodeBatchEnv(2, SMALL_ENV, seed=3).rollout(6, break_when_any_done=False))
    assert torch.equal(runs[0][GROUP, "observation"], runs[1][GROUP, "observation"])
    env.set_seed(3)  # a new seed restarts every env at the next reset
    assert torch.equal(env.reset()[GROUP, "observation"], NodeBatchEnv(2, SMALL_ENV, seed=3).reset()[GROUP, "observation"])


def test_bad_input_names_the_problem():
    with pytest.raises(TypeError, match="env_kwargs must be a mapping"):
        NodeBatchEnv(2, [("n_nodes", 2)])
    with pytest.raises(ValueError, match="num_envs"):
        NodeBatchEnv(0, SMALL_ENV)
    with pytest.raises((ValueError, TypeError), match="n_slots"):
        NodeBatchEnv(2, {"n_slots": -1})


# ---------------------------------------------------------------- issue 49: what the vector env refuses (faults)


def _started(B: int = 2):
    env = NodeBatchEnv(B, SMALL_ENV, seed=0)
    return env, env.reset()


@pytest.mark.faults
@pytest.mark.parametrize("value, dtype", [(1.9, torch.float32), (0.9, torch.float32), (float("nan"), torch.float32), (1.0, torch.float64),
                                          (True, torch.bool)])
def test_actions_that_are_not_integers_are_refused_never_cast(value, dtype):
    # 1.9 was cast to 1, 0.9 to idle, True to 1; NaN quoted -9223372036854775808 (the cast's value)
    env, td = _started()
    td[GROUP, "action"] = torch.full((2, SMALL_ENV["n_nodes"]), value, dtype=dtype)
    with pytest.raises(TypeError, match=rf"\('node', 'action'\) must be integers in \[0, {SMALL_ENV['n_slots']}\], got dtype {dtype}") as error:
        env.step(td)
    assert "9223372036854775808" not in str(error.value)
    assert env.vec.batch.sim.t.tolist() == [0, 0]  # nothing stepped
    td[GROUP, "action"] = torch.zeros((2, SMALL_ENV["n_nodes"]), dtype=torch.int64)
    assert env.step(td)["next", "stats", "t"].tolist() == [1.0, 1.0]  # still usable


@pytest.mark.faults
def test_actions_of_the_wrong_shape_or_range_name_the_problem():
    env, td = _started()
    N = SMALL_ENV["n_nodes"]
    td[GROUP, "action"] = torch.tensor([[0] * N, [99] + [0] * (N - 1)])
    with pytest.raises(ValueError, match=r"env 1, node_0: action 99"):
        env.step(td)
    with pytest.raises(ValueError, match=r"\('node', 'action'\): actions must have shape"):
        env._actions(TensorDict({GROUP: {"action": torch.zeros((2, 7), dtype=torch.int64)}}, batch_size=[]))


@pytest.mark.faults
@pytest.mark.parametrize("value, dtype", [(0.5, torch.float32), (float("nan"), torch.float32), (-1, torch.int64), (2, torch.int64),
                                          (1, torch.uint8)])
def test_a_reset_mask_that_is_not_bool_is_refused_and_resets_nothing(value, dtype):
    env, td = _started()
    td[GROUP, "action"] = torch.zeros((2, SMALL_ENV["n_nodes"]), dtype=torch.int64)
    td = env.step(td)["next"]
    with pytest.raises(TypeError, match=rf"'_reset' must be a bool mask of shape \(2, 1\), got dtype {dtype}"):
        env.reset(td.clone().set("_reset", torch.tensor([[value], [0]], dtype=dtype)))  # each read as True: every env reset
    assert env.vec.batch.sim.t.tolist() == [1, 1]
    with pytest.raises(ValueError, match=r"'_reset' must be a bool mask of shape \(2, 1\), got shape \(3, 1\)"):
        env._reset(TensorDict({"_reset": torch.ones((3, 1), dtype=torch.bool)}, batch_size=[]))
    out = env.reset(td.clone().set("_reset", torch.tensor([[True], [False]])))
    assert out["stats", "t"].tolist() == [0.0, 1.0]


@pytest.mark.faults
def test_the_batch_size_is_bounded_as_the_vector_envs_num_envs():
    from core_env.memory import MAX_NUM_ENVS

    with pytest.raises(ValueError, match=rf"num_envs must be in \[1, {MAX_NUM_ENVS}\].*got 1000000"):  # was a MemoryError
        NodeBatchEnv(10**6, SMALL_ENV)
    with pytest.raises(ValueError, match=r"num_envs=60000 needs at least .* GiB"):
        NodeBatchEnv(60000, {"n_nodes": 256, "n_slots": 1024})
    with pytest.raises(TypeError, match=r"num_envs must be an int"):
        NodeBatchEnv(2.5, SMALL_ENV)
