"""CoreVecEnv (mara_agents/integrations/sb3_vec.py): SB3's VecEnv API over one batched core_env.

MaskablePPO trains on it with 0 invalid actions; the infos of an ended env carry that episode's final
statistics (compared with an ``autoreset_mode="disabled"`` vector env run on the same seeds and actions);
the VecEnv API behaves as SB3 expects; and the masks of ``gym.make`` envs are reachable the ways
sb3-contrib looks for them.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sb3_contrib", reason="sb3-contrib is the 'sb3' extra: pip install -e '.[sb3]'")

import gymnasium as gym  # noqa: E402
from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

import core_env  # noqa: E402,F401  (registers core_env/DiscreteCoRE-v1)
from core_env.vector import EPISODE_KEYS, DiscreteCoREVectorEnv  # noqa: E402
from mara_agents.integrations.sb3_vec import CoreVecEnv  # noqa: E402

TINY = {"n_nodes": 2, "n_slots": 4, "arrival_steps": 30}
B, N, K = 4, TINY["n_nodes"], TINY["n_slots"]


@pytest.fixture(autouse=True)
def one_torch_thread():
    torch = pytest.importorskip("torch")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _masked_random(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(B, N) actions drawn uniformly among each node's allowed ones; ``masks`` (B, N, K+1)."""
    return np.array([[rng.choice(np.flatnonzero(m)) for m in env] for env in masks], dtype=np.int64)


def test_maskable_ppo_trains_on_core_vec_env_without_invalid_actions():
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback

    venv = CoreVecEnv(B, **TINY)
    venv.seed(0)
    finals, invalid_steps = [], []

    class Watch(BaseCallback):
        def _on_step(self) -> bool:
            infos, dones = self.locals["infos"], self.locals["dones"]
            invalid_steps.append(sum(int(np.sum(info["invalid_action"])) for info in infos))
            finals.extend(info for info, done in zip(infos, dones) if done)
            return True

    model = MaskablePPO("MultiInputPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, policy_kwargs={"net_arch": [32]})
    model.learn(total_timesteps=512, callback=Watch())
    assert model.num_timesteps == 512 and len(invalid_steps) == 512 // B
    assert finals, "no episode ended in 512 steps"
    assert all({"episode", "terminal_observation", "completion_rate"} <= set(info) for info in finals)
    assert sum(info["invalid_actions"] for info in finals) == 0 and sum(invalid_steps) == 0
    assert len(model.ep_info_buffer) == len(finals)  # SB3 read our "episode" entries
    venv.close()


def test_unmasked_actions_are_counted_as_invalid():
    """The counter the training test reads can fail: actions on empty slots show up in it."""
    venv = CoreVecEnv(B, **TINY)
    venv.seed(0)
    venv.reset()
    masks = venv.action_masks().reshape(B, N, K + 1)
    bad = np.argmin(masks, axis=2)  # a masked-out choice for every node (slot K-1 is empty at the start)
    assert not np.take_along_axis(masks, bad[..., None], axis=2).any()
    _, _, _, infos = venv.step(bad)
    assert sum(info["invalid_actions"] for info in infos) == B * N


def test_ended_env_infos_hold_the_final_statistics_not_the_reset():
    seed = 3
    venv = CoreVecEnv(B, **TINY)
    venv.seed(seed)
    obs = venv.reset()
    frozen = DiscreteCoREVectorEnv(B, autoreset_mode="disabled", **TINY)
    ref_obs, _ = frozen.reset(seed=seed)
    assert all(np.array_equal(obs[key], ref_obs[key]) for key in ref_obs)
    rng = np.random.default_rng(0)
    ended = np.zeros(B, bool)
    returns = np.zeros(B)
    while not ended.all():
        actions = _masked_random(frozen.action_masks(), rng)
        actions[ended] = 0  # env b of venv plays its next episode; the frozen one stays ended
        ref_obs, rewards, terminated, truncated, ref_infos = frozen.step(actions)
        _, vec_rewards, dones, infos = venv.step(actions)
        returns[~ended] += rewards[~ended]
        np.testing.assert_allclose(vec_rewards[~ended], rewards[~ended], rtol=1e-6)
        now = (terminated | truncated) & ~ended
        assert np.array_equal(dones[~ended], now[~ended])
        for b in np.flatnonzero(now):
            info = infos[b]
            for key in EPISODE_KEYS:
                assert np.array_equal(info[key], ref_infos[key][b]), (b, key, info[key], ref_infos[key][b])
            assert all(np.array_equal(info["terminal_observation"][key], ref_obs[key][b]) for key in ref_obs)
            assert info["TimeLimit.truncated"] == bool(truncated[b] and not terminated[b])
            assert info["episode"]["l"] == info["t"] and info["episode"]["r"] == pytest.approx(returns[b], rel=1e-5)
            assert info["t"] > 0 and info["arrived"] > 0
            assert venv.reset_infos[b]["t"] == 0 and venv.reset_infos[b]["completed"] == 0  # the reset went there instead
            assert venv.reset_infos[b]["t"] != info["t"]
        ended |= now


def test_vec_env_api():
    venv = CoreVecEnv(B, **TINY)
    assert venv.seed(7) == [7 + i for i in range(B)]
    obs = venv.reset()
    ref, _ = DiscreteCoREVectorEnv(B, **TINY).reset(seed=7)
    assert set(obs) == {"observation", "action_mask"} and obs["observation"].shape == ref["observation"].shape
    assert obs["observation"].shape[:2] == (B, N) and obs["action_mask"].shape == (B, N, K + 1)
    assert all(np.array_equal(obs[key], ref[key]) for key in ref)
    assert venv.observation_space.contains({key: value[0] for key, value in obs.items()})

    masks = venv.env_method("action_masks")
    assert len(masks) == B and all(m.shape == (N * (K + 1),) and m.dtype == bool for m in masks)
    assert np.array_equal(np.stack(masks), venv.action_masks()) and np.array_equal(get_action_masks(venv), venv.action_masks())
    assert np.array_equal(venv.action_masks().reshape(B, N, K + 1), obs["action_mask"].astype(bool))
    assert np.array_equal(venv.env_method("action_masks", indices=[2])[0], masks[2])
    assert np.array_equal(venv.get_attr("action_masks", indices=1)[0](), masks[1])
    assert venv.has_attr("action_masks") and is_masking_supported(venv) and venv.has_attr("config")
    assert not venv.has_attr("no_such_attribute")
    assert len(venv.env_method("state")) == B
    with pytest.raises(AttributeError):
        venv.env_method("no_such_method")
    assert venv.get_attr("render_mode") == [None] * B and venv.env_is_wrapped(gym.Wrapper) == [False] * B
    with pytest.raises(ValueError, match="share"):
        venv.set_attr("render_mode", None, indices=[0])

    actions = _masked_random(obs["action_mask"], np.random.default_rng(0))
    result = venv.step(actions)
    assert isinstance(result, tuple) and len(result) == 4
    new_obs, rewards, dones, infos = result
    assert new_obs["observation"].shape == obs["observation"].shape and rewards.shape == (B,) and dones.shape == (B,)
    assert dones.dtype == bool and isinstance(infos, list) and len(infos) == B
    assert {"completion_rate", "invalid_actions", "conflicts", "conflict", "invalid_action"} <= set(infos[0])
    with pytest.raises(RuntimeError):
        venv.step_wait()  # no step_async before it
    venv.close()


def test_gym_make_masks_are_reachable_for_sb3_contrib():
    """What works through gym.make's wrappers (OrderEnforcing(PassiveEnvChecker(DiscreteCoREEnv)))."""
    env = gym.make("core_env/DiscreteCoRE-v1", **TINY)
    env.reset(seed=0)
    mask = env.get_wrapper_attr("action_masks")()
    assert mask.shape == (N * (K + 1),) and mask.dtype == bool
    assert np.array_equal(mask, env.unwrapped.action_masks()) and np.array_equal(get_action_masks(env), mask)
    assert is_masking_supported(env)

    venv = DummyVecEnv([lambda: gym.make("core_env/DiscreteCoRE-v1", **TINY) for _ in range(2)])
    assert is_masking_supported(venv)
    venv.seed(0)
    venv.reset()
    masks = get_action_masks(venv)
    assert masks.shape == (2, N * (K + 1)) and masks.dtype == bool
    core = CoreVecEnv(2, **TINY)
    core.seed(0)
    core.reset()
    assert np.array_equal(masks, core.action_masks())  # same seeds, same first states


def test_gym_make_env_has_action_masks_method():
    env = gym.make("core_env/DiscreteCoRE-v1", **TINY)
    env.reset(seed=0)
    assert env.action_masks().shape == (N * (K + 1),)


@pytest.mark.faults
def test_float_or_bool_actions_are_refused_never_cast():
    venv = CoreVecEnv(B, **TINY)
    venv.seed(0)
    venv.reset()
    for bad in (np.full((B, N), 1.9), np.ones((B, N), bool)):
        with pytest.raises(TypeError, match="integers"):
            venv.step_async(bad)
    venv.step(np.zeros((B, N), np.int64))  # integer actions still step
    venv.close()
