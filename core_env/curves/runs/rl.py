"""Batched advantage actor-critic (REINFORCE with a learned value baseline + GAE) on gymnasium.

Each update collects ``N_ENVS x ROLLOUT`` environment steps with the current policy, then makes one
pass over them in ``minibatches`` shuffled minibatches (one optimizer step each). The recorded "loss" of an
update is ``1 - normalised mean return`` of the episodes that finished during it (CartPole-v1:
``1 - R/500``; Acrobot-v1: ``-R/500``), carried forward when no episode finished; leading updates
before the first finished episode take the first observed value (counted in ``n_backfilled``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core_env.curves.runs import common as C
from core_env.extras import needs

ENVS = {"rl_cartpole": "CartPole-v1", "rl_acrobot": "Acrobot-v1"}
N_ENVS = 8
REWARD_SCALE = 0.01  # rewards are scaled for learning only (keeps value targets O(1)); returns are unscaled
ROLLOUT = 128
OPT_PROBS = {"adam": 0.6, "adamw": 0.15, "momentum": 0.25}
GOOD_LR = {"adam": 3e-3, "adamw": 3e-3, "momentum": 0.02}


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
    hp["minibatches"] = int(C.choice(rng, {2: 0.3, 4: 0.5, 8: 0.2}))
    hp["n_envs"], hp["rollout"] = N_ENVS, ROLLOUT
    hp["schedule"] = C.choice(rng, {"constant": 0.7, "linear": 0.3})
    return hp


def build(n_obs: int, n_act: int, hp: dict[str, Any]):
    with needs(__name__, "curves"):
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
    with needs(__name__, "curves"):
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


def make_envs(family: str):
    """8 vectorised gymnasium envs with NEXT_STEP autoreset (CartPole: gymnasium's numpy-vectorised version)."""
    import gymnasium as gym

    env_id = ENVS[family]
    if gym.envs.registry[env_id].vector_entry_point is not None:
        return gym.make_vec(env_id, num_envs=N_ENVS, vectorization_mode="vector_entry_point")
    return gym.vector.SyncVectorEnv([lambda: gym.make(env_id, disable_env_checker=True) for _ in range(N_ENVS)],
                                    autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)


class ActorCriticRun:
    """The state an actor-critic run carries from one update to the next (model, optimizer, the action
    generator, the envs, their last observation, open episodes' returns, NEXT_STEP autoreset flags):
    :func:`run` makes its updates one by one, and so does the resumable live task
    (:mod:`core_env.live.tasks`)."""

    def __init__(self, family: str, seeds: C.RunSeeds) -> None:
        self.family = family
        self.hp = hp = sample_hp(seeds.hp)
        C.torch_setup(seeds.torch_seed)
        self.envs = envs = make_envs(family)
        self.n_obs, self.n_act = n_obs, n_act = envs.single_observation_space.shape[0], int(envs.single_action_space.n)
        self.model = build(n_obs, n_act, hp)
        self.params = list(self.model.parameters())
        self.opt = C.make_optimizer(self.params, hp)
        self.rng = seeds.data
        self.obs, _ = envs.reset(seed=seeds.env_seed)
        self.ep_ret = np.zeros(N_ENVS)
        self.prev_done = np.zeros(N_ENVS, bool)  # NEXT_STEP autoreset: the step after a done only resets the env
        self.buf_obs = np.zeros((ROLLOUT + 1, N_ENVS, n_obs), np.float32)  # rewritten whole by every update
        self.buf_act = np.zeros((ROLLOUT, N_ENVS), np.int64)
        self.buf_rew = np.zeros((ROLLOUT, N_ENVS), np.float32)
        self.buf_term = np.zeros((ROLLOUT, N_ENVS), bool)
        self.buf_trunc = np.zeros((ROLLOUT, N_ENVS), bool)
        self.buf_valid = np.zeros((ROLLOUT, N_ENVS), bool)

    def update(self, update: int, steps: int) -> list[float]:
        """Update ``update`` (0-based) of ``steps``: the returns of the episodes that finished during it.

        Raises FloatingPointError (a non-finite policy or loss); ValueError / RuntimeError from torch."""
        with needs(__name__, "curves"):
            import torch
            import torch.nn.functional as F

        hp, model, opt, rng, envs, n_obs, n_act = self.hp, self.model, self.opt, self.rng, self.envs, self.n_obs, self.n_act
        buf_obs, buf_act, buf_rew = self.buf_obs, self.buf_act, self.buf_rew
        buf_term, buf_trunc, buf_valid = self.buf_term, self.buf_trunc, self.buf_valid
        gamma, lam = hp["gamma"], hp["gae_lambda"]
        C.set_lr(opt, hp["lr"], C.lr_factor(hp["schedule"], update, steps))
        actor = numpy_actor(model)  # parameters are fixed during a rollout
        finished: list[float] = []
        for t in range(ROLLOUT):
            probs = actor(self.obs)
            if not np.all(np.isfinite(probs)):
                raise FloatingPointError("non-finite policy")
            cdf = np.cumsum(probs, 1)
            action = np.minimum((rng.random(N_ENVS)[:, None] > cdf).sum(1), n_act - 1)
            next_obs, reward, term, trunc, _ = envs.step(action)
            valid = ~self.prev_done
            term, trunc = term & valid, trunc & valid
            self.ep_ret += np.where(valid, reward, 0.0)
            done = term | trunc
            for i in np.flatnonzero(done):
                finished.append(float(self.ep_ret[i]))
                self.ep_ret[i] = 0.0
            buf_obs[t], buf_act[t], buf_rew[t] = self.obs, action, np.where(valid, reward, 0.0) * REWARD_SCALE
            buf_term[t], buf_trunc[t], buf_valid[t] = term, trunc, valid
            self.prev_done = done
            self.obs = next_obs
        buf_obs[ROLLOUT] = self.obs
        with torch.no_grad():
            val = model(torch.from_numpy(buf_obs.reshape(-1, n_obs)))[1].numpy()
        val = val.reshape(ROLLOUT + 1, N_ENVS).astype(np.float64)
        adv = np.zeros((ROLLOUT, N_ENVS))
        last = np.zeros(N_ENVS)
        for t in reversed(range(ROLLOUT)):
            # truncated: obs[t+1] is the final observation (NEXT_STEP), so bootstrapping from it is right
            delta = buf_rew[t] + gamma * val[t + 1] * (~buf_term[t]) - val[t]
            cont = ~(buf_term[t] | buf_trunc[t])
            last = np.where(buf_valid[t], delta + gamma * lam * cont * last, 0.0)
            adv[t] = last
        valid_idx = np.flatnonzero(buf_valid.reshape(-1))
        obs_all = torch.from_numpy(buf_obs[:ROLLOUT].reshape(-1, n_obs))
        act_all = torch.from_numpy(buf_act.reshape(-1))
        ret_all = torch.from_numpy((adv + val[:ROLLOUT]).reshape(-1).astype(np.float32))
        adv_all = torch.from_numpy(adv.reshape(-1).astype(np.float32))
        if hp["normalize_advantages"] and valid_idx.size > 1:
            a = adv_all[torch.from_numpy(valid_idx)]
            adv_all = (adv_all - a.mean()) / (a.std() + 1e-8)
        # one pass over the rollout in hp["minibatches"] shuffled minibatches (one optimizer step each)
        for chunk in np.array_split(rng.permutation(valid_idx), hp["minibatches"]):
            if chunk.size == 0:
                continue
            idx = torch.from_numpy(chunk)
            logits, values = model(obs_all[idx])
            logp_all = torch.log_softmax(logits, -1)
            logp = logp_all.gather(1, act_all[idx].unsqueeze(1)).squeeze(1)
            entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
            loss = (-(logp * adv_all[idx]).mean() + hp["value_coef"] * F.mse_loss(values, ret_all[idx])
                    - hp["entropy_coef"] * entropy)
            if not torch.isfinite(loss):
                raise FloatingPointError("non-finite actor-critic loss")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if hp["grad_clip"] is not None:
                torch.nn.utils.clip_grad_norm_(self.params, hp["grad_clip"])
            opt.step()
        return finished

    def loss(self, finished: list[float]) -> float | None:
        """The recorded loss of an update whose finished episodes returned ``finished`` (None: none finished)."""
        return float(np.mean([normalised_loss(self.family, r) for r in finished])) if finished else None


def run(family: str, seeds: C.RunSeeds, steps: int) -> dict[str, Any]:
    ac = ActorCriticRun(family, seeds)
    curve: list[float | None] = []
    diverged, reason, n_episodes = False, "", 0
    try:
        for update in range(steps):
            finished = ac.update(update, steps)
            n_episodes += len(finished)
            curve.append(ac.loss(finished))
    except (FloatingPointError, ValueError, RuntimeError) as exc:
        diverged, reason = True, f"{type(exc).__name__}: {exc}"
    finally:
        ac.envs.close()
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
    return {"losses": losses, "diverged": diverged, "reason": reason, "hp": ac.hp,
            "eval": {"episodes": n_episodes, "n_backfilled": n_backfilled, "env_id": ENVS[family], "env_class": type(ac.envs.unwrapped).__name__},
            "n_params": sum(p.numel() for p in ac.params)}
