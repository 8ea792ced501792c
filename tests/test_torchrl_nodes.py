"""NodeBatchEnv: the batched engine as a TorchRL multi-agent env, step for step the vector env it wraps."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")

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
