"""MAPPO / IPPO with TorchRL on the PettingZoo parallel env of core_env (extra ``torchrl``).

The env goes through TorchRL's own ``PettingZooWrapper`` after core_env's ``MaskToInfo`` wrapper, so the
nodes form one group ``"node"`` with flat ``("node", "observation")`` (N, D) and
``("node", "action_mask")`` (N, K+1) bool entries. The policy is one ``MultiAgentMLP`` with
``share_params=True`` (one policy shared by all nodes) whose logits feed TorchRL's ``MaskedCategorical``
with the env's ``action_mask``: masked actions are never sampled. The critic is a ``MultiAgentMLP`` with
``centralised=True`` (MAPPO; ``--ippo`` for a decentralised critic). Loss: TorchRL's ``ClipPPOLoss`` with
GAE, following TorchRL's multi-agent PPO tutorial. **Conflicts** are not prevented by the (independent
per-node) policy: the env resolves them (lowest index wins) and counts them; the report shows them.

Run::

    python -m mara_agents.integrations.torchrl_ppo --iterations 20 --frames-per-batch 1024
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from mara_agents.integrations.common import SMALL_ENV

GROUP = "node"


def make_env(env_kwargs: Mapping[str, Any], seed: int = 0):
    """core_env's parallel env as a TorchRL env: ``PettingZooWrapper(MaskToInfo(parallel_env(...)))`` + episode reward sum."""
    from torchrl.envs import RewardSum, TransformedEnv
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    from core_env import discrete_core_v1
    from core_env.wrappers import MaskToInfo

    env = PettingZooWrapper(MaskToInfo(discrete_core_v1.parallel_env(**env_kwargs)), categorical_actions=True, seed=seed)
    return TransformedEnv(env, RewardSum(in_keys=[env.reward_key], out_keys=[(GROUP, "episode_reward")]))


def build(env, hidden: int = 64, centralised_critic: bool = True):
    """(policy, critic) TensorDict modules: shared-parameter masked actor and a (centralised) critic."""
    from tensordict.nn import TensorDictModule
    from torch import nn
    from torchrl.modules import MaskedCategorical, MultiAgentMLP, ProbabilisticActor

    obs_spec = env.observation_spec[GROUP, "observation"]
    n_agents, obs_dim = obs_spec.shape
    n_actions = env.observation_spec[GROUP, "action_mask"].shape[-1]
    actor_net = MultiAgentMLP(n_agent_inputs=obs_dim, n_agent_outputs=n_actions, n_agents=n_agents, centralised=False,
                              share_params=True, depth=2, num_cells=hidden, activation_class=nn.Tanh)
    policy = ProbabilisticActor(
        module=TensorDictModule(actor_net, in_keys=[(GROUP, "observation")], out_keys=[(GROUP, "logits")]),
        in_keys={"logits": (GROUP, "logits"), "mask": (GROUP, "action_mask")}, out_keys=[(GROUP, "action")],
        distribution_class=MaskedCategorical, return_log_prob=True, log_prob_key=(GROUP, "action_log_prob"))
    critic_net = MultiAgentMLP(n_agent_inputs=obs_dim, n_agent_outputs=1, n_agents=n_agents, centralised=centralised_critic,
                               share_params=True, depth=2, num_cells=hidden, activation_class=nn.Tanh)
    critic = TensorDictModule(critic_net, in_keys=[(GROUP, "observation")], out_keys=[(GROUP, "state_value")])
    return policy, critic


def _episode_stats(data) -> list[dict[str, float]]:
    """Final statistics of the episodes that ended in a collected batch."""
    done = data.get(("next", "done")).reshape(-1)
    if not done.any():
        return []
    info = data.get(("next", GROUP, "info"))
    out = []
    for i in done.nonzero().flatten().tolist():
        row = info.reshape(-1)[i] if info.batch_dims > 1 else info[i]
        out.append({k: float(row.get(k).reshape(-1)[0]) for k in ("completion_rate", "completed", "arrived", "invalid_actions", "conflicts", "t")})
    return out


def train(env_kwargs: Mapping[str, Any] | None = None, *, iterations: int = 20, frames_per_batch: int = 1024, epochs: int = 4,
          minibatch_size: int = 256, lr: float = 3e-4, hidden: int = 64, ent_coef: float = 0.01, centralised_critic: bool = True,
          seed: int = 0, threads: int | None = 1, verbose: bool = True) -> dict[str, Any]:
    """Train for ``iterations`` collector batches of ``frames_per_batch`` env steps; return a report."""
    import torch
    try:  # torchrl >= 0.12 renamed SyncDataCollector to Collector
        from torchrl.collectors import Collector as SyncDataCollector
    except ImportError:
        from torchrl.collectors import SyncDataCollector
    from torchrl.data.replay_buffers import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
    from torchrl.objectives import ClipPPOLoss, ValueEstimators

    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    env_kwargs = dict(env_kwargs or {})
    env = make_env(env_kwargs, seed)
    policy, critic = build(env, hidden, centralised_critic)
    collector = SyncDataCollector(env, policy, frames_per_batch=frames_per_batch, total_frames=frames_per_batch * iterations)
    buffer = ReplayBuffer(storage=LazyTensorStorage(frames_per_batch), sampler=SamplerWithoutReplacement(), batch_size=minibatch_size)
    loss_module = ClipPPOLoss(actor_network=policy, critic_network=critic, clip_epsilon=0.2, entropy_coeff=ent_coef,
                              normalize_advantage=False)
    loss_module.set_keys(reward=env.reward_key, action=env.action_key, sample_log_prob=(GROUP, "action_log_prob"),
                         value=(GROUP, "state_value"), done=(GROUP, "done"), terminated=(GROUP, "terminated"))
    loss_module.make_value_estimator(ValueEstimators.GAE, gamma=0.99, lmbda=0.95)
    optim = torch.optim.Adam(loss_module.parameters(), lr)
    losses: list[float] = []
    episodes: list[dict[str, float]] = []
    start = time.perf_counter()
    for data in collector:
        episodes.extend(_episode_stats(data))
        with torch.no_grad():
            loss_module.value_estimator(data, params=loss_module.critic_network_params, target_params=loss_module.target_critic_network_params)
        buffer.extend(data.reshape(-1))
        batch_losses = []
        for _ in range(epochs):
            for _ in range(max(1, frames_per_batch // minibatch_size)):
                parts = loss_module(buffer.sample())
                loss = parts["loss_objective"] + parts["loss_critic"] + parts["loss_entropy"]
                optim.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(loss_module.parameters(), 0.5)
                optim.step()
                batch_losses.append(float(loss.detach()))
        losses.append(float(np.mean(batch_losses)))
        collector.update_policy_weights_()
    seconds = time.perf_counter() - start
    collector.shutdown()
    torch.set_num_threads(previous_threads)
    quarter = max(1, len(episodes) // 4)

    def summary(eps):
        if not eps:
            return {"episodes": 0}
        return {"episodes": len(eps), "completion_rate": float(np.mean([e["completion_rate"] for e in eps])),
                "invalid_actions": int(sum(e["invalid_actions"] for e in eps)), "conflicts": int(sum(e["conflicts"] for e in eps))}

    report = {"library": "torchrl", "algorithm": "MAPPO" if centralised_critic else "IPPO", "env": env_kwargs,
              "env_steps": frames_per_batch * iterations, "updates": len(losses), "seconds": round(seconds, 2), "loss": losses,
              "episodes": episodes, "first": summary(episodes[:quarter]), "last": summary(episodes[-quarter:]), "all": summary(episodes),
              "conflict_rule": "independent per-node actions; env resolves conflicts (lowest index wins) and counts them"}
    if verbose:
        print(f"torchrl {report['algorithm']}: {report['env_steps']} steps, {len(losses)} iterations, {len(episodes)} episodes in "
              f"{seconds:.1f}s; completion first quarter {report['first'].get('completion_rate', float('nan')):.3f} -> last quarter "
              f"{report['last'].get('completion_rate', float('nan')):.3f}; invalid actions {report['all'].get('invalid_actions')}, "
              f"conflicts {report['all'].get('conflicts')}")
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m mara_agents.integrations.torchrl_ppo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--frames-per-batch", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--ippo", action="store_true", help="decentralised critic (IPPO) instead of MAPPO's centralised one")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", action="store_true", help=f"train on the small test config {SMALL_ENV}")
    parser.add_argument("--env", type=json.loads, default=None, help="core_env kwargs as JSON")
    parser.add_argument("--out", default=None, help="write the report (without per-episode rows) to this JSON file")
    args = parser.parse_args(argv)
    env_kwargs = dict(SMALL_ENV) if args.small else {}
    env_kwargs.update(args.env or {})
    report = train(env_kwargs, iterations=args.iterations, frames_per_batch=args.frames_per_batch, epochs=args.epochs,
                   centralised_critic=not args.ippo, seed=args.seed)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({k: v for k, v in report.items() if k != "episodes"}, f, indent=1)
    return report


if __name__ == "__main__":
    main()
