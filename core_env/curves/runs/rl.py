"""Batched advantage actor-critic (REINFORCE with a learned value baseline + GAE) on gymnasium.

One optimizer step per update of ``N_ENVS x ROLLOUT`` environment steps. The recorded "loss" of an
update is ``1 - normalised mean return`` of the episodes that finished during it (CartPole-v1:
``1 - R/500``; Acrobot-v1: ``-R/500``), carried forward when no episode finished; leading updates
before the first finished episode take the first observed value (counted in ``n_backfilled``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core_env.curves.runs import common as C

ENVS = {"rl_cartpole": "CartPole-v1", "rl_acrobot": "Acrobot-v1"}
N_ENVS = 8
ROLLOUT = 128
OPT_PROBS = {"adam": 0.6, "adamw": 0.15, "momentum": 0.25}
GOOD_LR = {"adam": 3e-3, "adamw": 3e-3, "momentum": 0.01}


def normalised_loss(family: str, episode_return: float) -> float:
    if family == "rl_cartpole":
        return float(np.clip(1.0 - episode_return / 500.0, 0.0, 1.0))
    return float(np.clip(-episode_return / 500.0, 0.0, 1.0))


def sample_hp(rng) -> dict[str, Any]:
    hp = C.sample_optim(rng, OPT_PROBS, GOOD_LR, core=0.75, tail_p=0.15, tail=(-1.75, 1.25))
    if hp["optimizer"] == "adamw":
        hp["weight_decay"] = C.log_uniform(rng, 1e-4, 1e-2)
    hp["width"] = int(C.choice(rng, [16, 32, 64]))
    hp["depth"] = int(rng.integers(1, 3))
    hp["shared_trunk"] = bool(rng.random() < 0.5)
    hp["gamma"] = float(C.choice(rng, [0.97, 0.99, 0.995]))
    hp["gae_lambda"] = float(C.choice(rng, [0.9, 0.95, 1.0]))
    hp["entropy_coef"] = float(C.choice(rng, {0.0: 0.4, 0.001: 0.3, 0.01: 0.3}))
    hp["value_coef"] = 0.5
    hp["grad_clip"] = C.choice(rng, {0.5: 0.7, None: 0.3})
    hp["normalize_advantages"] = bool(rng.random() < 0.7)
    hp["n_envs"], hp["rollout"] = N_ENVS, ROLLOUT
    hp["schedule"] = C.choice(rng, {"constant": 0.7, "linear": 0.3})
    return hp


def build(n_obs: int, n_act: int, hp: dict[str, Any]):
    import torch.nn as nn

    def mlp(n_out: int, final: bool = True):
        layers, d = [], n_obs
        for _ in range(hp["depth"]):
            layers += [nn.Linear(d, hp["width"]), nn.Tanh()]
            d = hp["width"]
        if final:
            layers.append(nn.Linear(d, n_out))
        return nn.Sequential(*layers)

    class ActorCritic(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            if hp["shared_trunk"]:
                self.trunk = mlp(0, final=False)
                self.pi, self.v = nn.Linear(hp["width"], n_act), nn.Linear(hp["width"], 1)
            else:
                self.trunk = None
                self.pi, self.v = mlp(n_act), mlp(1)

        def forward(self, x):
            if self.trunk is not None:
                h = self.trunk(x)
                return self.pi(h), self.v(h).squeeze(-1)
            return self.pi(x), self.v(x).squeeze(-1)

    return ActorCritic()


def numpy_actor(model):
    """The policy of ``model`` as a float64 numpy function obs -> action probabilities (fast rollouts)."""
    import torch.nn as nn

    mods = ([m for m in model.trunk] if model.trunk is not None else []) + (
        [model.pi] if model.trunk is not None else [m for m in model.pi])
    layers = []
    for m in mods:
        if isinstance(m, nn.Linear):
            layers.append(("linear", m.weight.detach().numpy().astype(np.float64).T, m.bias.detach().numpy().astype(np.float64)))
        elif isinstance(m, nn.Tanh):
            layers.append(("tanh", None, None))

    def actor(obs: np.ndarray) -> np.ndarray:
        h = np.asarray(obs, np.float64)
        for kind, w, b in layers:
            h = h @ w + b if kind == "linear" else np.tanh(h)
        with np.errstate(over="ignore", invalid="ignore"):
            z = np.exp(h - h.max(1, keepdims=True))
            return z / z.sum(1, keepdims=True)

    return actor


def run(family: str, seeds: C.RunSeeds, steps: int) -> dict[str, Any]:
    import gymnasium as gym
    import torch
    import torch.nn.functional as F

    hp = sample_hp(seeds.hp)
    C.torch_setup(seeds.torch_seed)
    env_id = ENVS[family]
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id, disable_env_checker=True) for _ in range(N_ENVS)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    n_obs, n_act = envs.single_observation_space.shape[0], int(envs.single_action_space.n)
    model = build(n_obs, n_act, hp)
    params = list(model.parameters())
    opt = C.make_optimizer(params, hp)
    rng = seeds.data
    obs, _ = envs.reset(seed=seeds.env_seed)
    ep_ret = np.zeros(N_ENVS)
    gamma, lam = hp["gamma"], hp["gae_lambda"]
    curve: list[float | None] = []
    diverged, reason, n_episodes = False, "", 0
    buf_obs = np.zeros((ROLLOUT + 1, N_ENVS, n_obs), np.float32)
    buf_act = np.zeros((ROLLOUT, N_ENVS), np.int64)
    buf_rew = np.zeros((ROLLOUT, N_ENVS), np.float32)
    buf_done = np.zeros((ROLLOUT, N_ENVS), np.float32)
    try:
        for update in range(steps):
            C.set_lr(opt, hp["lr"], C.lr_factor(hp["schedule"], update, steps))
            actor = numpy_actor(model)  # parameters are fixed during a rollout
            finished: list[float] = []
            truncated: list[tuple[int, int, np.ndarray]] = []
            for t in range(ROLLOUT):
                probs = actor(obs)
                if not np.all(np.isfinite(probs)):
                    raise FloatingPointError("non-finite policy")
                cdf = np.cumsum(probs, 1)
                action = np.minimum((rng.random(N_ENVS)[:, None] > cdf).sum(1), n_act - 1)
                next_obs, reward, term, trunc, info = envs.step(action)
                ep_ret += reward
                done = term | trunc
                for i in np.flatnonzero(trunc & ~term):  # time-limit: bootstrap from the final observation
                    truncated.append((t, int(i), np.asarray(info["final_obs"][i], np.float32)))
                for i in np.flatnonzero(done):
                    finished.append(float(ep_ret[i]))
                    ep_ret[i] = 0.0
                buf_obs[t], buf_act[t], buf_rew[t], buf_done[t] = obs, action, reward, done
                obs = next_obs
            buf_obs[ROLLOUT] = obs
            logits, values = model(torch.from_numpy(buf_obs.reshape(-1, n_obs)))
            logits = logits[: ROLLOUT * N_ENVS]
            val = values.detach().numpy().reshape(ROLLOUT + 1, N_ENVS)
            values = values[: ROLLOUT * N_ENVS]
            rew = buf_rew.copy()
            if truncated:
                with torch.no_grad():
                    v_fin = model(torch.from_numpy(np.stack([o for _, _, o in truncated])))[1].numpy()
                for (t, i, _), v in zip(truncated, v_fin):
                    rew[t, i] += gamma * v
            adv = np.zeros((ROLLOUT, N_ENVS), np.float32)
            last = np.zeros(N_ENVS, np.float32)
            for t in reversed(range(ROLLOUT)):
                nonterm = 1.0 - buf_done[t]
                delta = rew[t] + gamma * val[t + 1] * nonterm - val[t]
                last = delta + gamma * lam * nonterm * last
                adv[t] = last
            ret = torch.from_numpy((adv + val[:ROLLOUT]).reshape(-1).astype(np.float32))
            adv_t = torch.from_numpy(adv.reshape(-1))
            if hp["normalize_advantages"]:
                adv_t = (adv_t - adv_t.mean()) / (adv_t.std() + 1e-8)
            logp_all = torch.log_softmax(logits, -1)
            logp = logp_all.gather(1, torch.from_numpy(buf_act.reshape(-1, 1))).squeeze(1)
            entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
            loss = -(logp * adv_t).mean() + hp["value_coef"] * F.mse_loss(values, ret) - hp["entropy_coef"] * entropy
            if not torch.isfinite(loss):
                raise FloatingPointError("non-finite actor-critic loss")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if hp["grad_clip"] is not None:
                torch.nn.utils.clip_grad_norm_(params, hp["grad_clip"])
            opt.step()
            n_episodes += len(finished)
            curve.append(float(np.mean([normalised_loss(family, r) for r in finished])) if finished else None)
    except (FloatingPointError, ValueError, RuntimeError) as exc:
        diverged, reason = True, f"{type(exc).__name__}: {exc}"
    finally:
        envs.close()
    losses, n_backfilled, prev = [], 0, None
    first = next((c for c in curve if c is not None), None)
    for c in curve:
        if c is None:
            if prev is None:
                n_backfilled += 1
                c = first if first is not None else 1.0
            else:
                c = prev
        losses.append(c)
        prev = c
    return {"losses": losses, "diverged": diverged, "reason": reason, "hp": hp,
            "eval": {"episodes": n_episodes, "n_backfilled": n_backfilled, "env_id": env_id},
            "n_params": sum(p.numel() for p in params)}
