"""PPO with TorchRL on core_env (extra ``torchrl``): MAPPO / IPPO on the PettingZoo parallel env, and PPO
with the per-slot policy on the batched vector env (the suite's size).

**The vector view** (``view="vector"``, ``--view vector``; with ``--policy slot``, the only policy it takes):
TorchRL's own ``GymWrapper`` around one :class:`core_env.vector.DiscreteCoREVectorEnv` of ``n_envs`` envs
(``autoreset_mode="disabled"``, TorchRL's preferred mode: its collector resets finished envs through
``reset_mask``, and the finished episode's statistics are read from the step that ended it). The per-slot
actor (:class:`~mara_agents.integrations.nets.SlotActor`) feeds the conflict-free joint distribution
:class:`~mara_agents.integrations.nets.SequentialMaskedCategorical`; the critic is the pooled
:class:`~mara_agents.integrations.nets.SlotCritic`; TorchRL's collector, GAE and ``ClipPPOLoss`` do the rest.
Its weights are saved as ``policy.pt`` + ``policy.json`` (format :data:`FORMAT`; ``snapshot.pt`` after every
iteration, ``--init`` resumes) and :func:`load_agent` plays them as the benchmark row ``ppo-torchrl``.

**The PettingZoo view** (default, small configurations):

The env goes through TorchRL's own ``PettingZooWrapper`` after core_env's ``MaskToInfo`` wrapper, so the
nodes form one group ``"node"`` with flat ``("node", "observation")`` (N, D) and
``("node", "action_mask")`` (N, K+1) bool entries. The policy is one ``MultiAgentMLP`` with
``share_params=True`` (one policy shared by all nodes) whose logits feed TorchRL's ``MaskedCategorical``
with the env's ``action_mask``: masked actions are never sampled. The critic is a ``MultiAgentMLP`` with
``centralised=True`` (MAPPO; ``--ippo`` for a decentralised critic). Loss: TorchRL's ``ClipPPOLoss`` with
GAE, following TorchRL's multi-agent PPO tutorial. **Conflicts** are not prevented by the (independent
per-node) policy: the env resolves them (lowest index wins) and counts them; the report shows them.

``--policy slot`` there uses the same per-slot nets with
:class:`~mara_agents.integrations.nets.SequentialNodeCategorical`, whose per-node conditional log-probabilities
fit TorchRL's per-agent PPO ratio, so MAPPO too sends no conflict.

Run::

    python -m mara_agents.integrations.torchrl_ppo --small --iterations 16 --frames-per-batch 1024
    python -m mara_agents.integrations.torchrl_ppo --view vector --policy slot --n-envs 8 --iterations 320 \
        --frames-per-batch 2048 --minibatch-size 512 --out runs/torchrl_slot
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from core_env.extras import needs
from core_env.npz import write_atomic
from mara_agents.integrations.common import REPORTED_KEYS, SMALL_ENV, EpisodeLog, cli_env_kwargs, train_or_exit

GROUP = "node"
FORMAT = "mara_agents.integrations.torchrl_ppo/1"
MISSING = "no TorchRL per-slot checkpoint (train one with python -m mara_agents.integrations.torchrl_ppo --view vector --policy slot --out DIR)"
ROW_NAME = "PPO (TorchRL)"
#: The shipped per-slot policy (its train.json says how it was trained).
SHIPPED_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "torchrl_ppo" / "policy.pt"
VIEWS = ("parallel", "vector")
POLICIES = ("mlp", "slot")


def make_env(env_kwargs: Mapping[str, Any], seed: int = 0):
    """core_env's parallel env as a TorchRL env: ``PettingZooWrapper(MaskToInfo(parallel_env(...)))`` + episode reward sum."""
    with needs(__name__, "torchrl"):
        from torchrl.envs import RewardSum, TransformedEnv
        from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    from core_env import discrete_core_v1
    from core_env.wrappers import MaskToInfo

    env = PettingZooWrapper(MaskToInfo(discrete_core_v1.parallel_env(**env_kwargs)), categorical_actions=True, seed=seed)
    return TransformedEnv(env, RewardSum(in_keys=[env.reward_key], out_keys=[(GROUP, "episode_reward")]))


def make_vector_env(env_kwargs: Mapping[str, Any], n_envs: int = 8, seed: int = 0):
    """``n_envs`` envs of the batched vector env as one TorchRL env (batch [n_envs]) through TorchRL's ``GymWrapper``,
    autoreset disabled; the episode statistics of :data:`REPORTED_KEYS` are read from the infos at every step."""
    with needs(__name__, "torchrl"):
        import torch
        from torchrl.data import Unbounded
        from torchrl.envs.libs.gym import GymWrapper, default_info_dict_reader

    from core_env.vector import DiscreteCoREVectorEnv

    env = GymWrapper(DiscreteCoREVectorEnv(n_envs, autoreset_mode="disabled", **env_kwargs))
    env.set_info_dict_reader(default_info_dict_reader(list(REPORTED_KEYS),
                                                      spec={k: Unbounded(shape=(n_envs,), dtype=torch.float64) for k in REPORTED_KEYS}))
    env.set_seed(seed)
    return env


def _slot_modules(history: int, hidden: int, per_node: bool):
    """torch modules around the per-slot nets: (..., N, D) -> (..., N, K+1) logits and the state's value,
    (..., N, 1) (``per_node``, one copy per agent) or (..., 1)."""
    with needs(__name__, "torchrl"):
        from torch import nn

    from mara_agents.integrations.nets import SlotActor, SlotCritic, over_leading

    class SlotLogits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = SlotActor(history, hidden)

        def forward(self, obs):
            return over_leading(self.net, obs)

    class SlotValues(nn.Module):  # V(s), the same for every node (the team reward is shared)
        def __init__(self) -> None:
            super().__init__()
            self.net = SlotCritic(history, hidden)

        def forward(self, obs):
            value = over_leading(self.net, obs).unsqueeze(-1)
            return value.unsqueeze(-1).expand(*obs.shape[:-1], 1) if per_node else value

    return SlotLogits(), SlotValues()


def _key(view: str, name: str):
    """A tensordict key of ``view``: the PettingZoo view nests the nodes' entries under :data:`GROUP`."""
    return (GROUP, name) if view == "parallel" else name


def build(env, hidden: int = 64, centralised_critic: bool = True, policy: str = "mlp", history: int = 8, view: str = "parallel"):
    """(policy, critic) TensorDict modules: shared-parameter masked actor and a (centralised) critic.

    ``policy="slot"``: the per-slot actor and pooled critic of :mod:`mara_agents.integrations.nets` (``history``:
    the env's H) with the conflict-free joint distribution: per node
    (:class:`~mara_agents.integrations.nets.SequentialNodeCategorical`) on the PettingZoo view, joint
    (:class:`~mara_agents.integrations.nets.SequentialMaskedCategorical`) on the vector view.
    """
    with needs(__name__, "torchrl"):
        from tensordict.nn import TensorDictModule
        from torch import nn
        from torchrl.modules import MaskedCategorical, MultiAgentMLP, ProbabilisticActor

    if policy == "slot":
        from mara_agents.integrations.nets import SequentialMaskedCategorical, SequentialNodeCategorical

        logits, values = _slot_modules(history, hidden, per_node=view == "parallel")
        obs, key = _key(view, "observation"), (lambda name: _key(view, name))
        actor = ProbabilisticActor(
            module=TensorDictModule(logits, in_keys=[obs], out_keys=[key("logits")]),
            in_keys={"logits": key("logits"), "mask": key("action_mask")}, out_keys=[key("action")],
            distribution_class=SequentialNodeCategorical if view == "parallel" else SequentialMaskedCategorical,
            return_log_prob=True, log_prob_key=key("action_log_prob"))
        return actor, TensorDictModule(values, in_keys=[obs], out_keys=[key("state_value")])
    if view != "parallel":
        raise ValueError("the vector view takes the per-slot policy only (policy='slot')")

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


def slot_nets(actor, critic) -> tuple[Any, Any]:
    """The :class:`SlotActor` and :class:`SlotCritic` inside the TensorDict modules :func:`build` returns for ``policy="slot"``."""
    return actor.module[0].module.net, critic.module.net


def _episode_stats(data, view: str) -> list[dict[str, float]]:
    """Final statistics of the episodes that ended in a collected batch."""
    done = data.get(("next", "done")).reshape(-1)
    if not done.any():
        return []
    info = data.get(("next", GROUP, "info")) if view == "parallel" else data.get("next")
    out = []
    for i in done.nonzero().flatten().tolist():
        row = info.reshape(-1)[i] if info.batch_dims > 1 else info[i]
        out.append({k: float(row.get(k).reshape(-1)[0]) for k in REPORTED_KEYS})
    return out


def train(env_kwargs: Mapping[str, Any] | None = None, *, iterations: int = 20, frames_per_batch: int = 1024, epochs: int = 4,
          minibatch_size: int = 256, lr: float = 3e-4, hidden: int = 64, ent_coef: float = 0.01, centralised_critic: bool = True,
          seed: int = 0, threads: int | None = 1, verbose: bool = True, view: str = "parallel", policy: str = "mlp", n_envs: int = 8,
          out: Path | str | None = None, init: Path | str | None = None) -> dict[str, Any]:
    """Train for ``iterations`` collector batches of ``frames_per_batch`` env steps (over all envs); return a report.

    ``view``: ``"parallel"`` (PettingZoo, one env) or ``"vector"`` (``n_envs`` envs of the batched vector env,
    ``policy="slot"`` only). ``policy``: ``"mlp"`` (TorchRL's ``MultiAgentMLP``) or ``"slot"`` (the per-slot nets;
    with ``out``, ``snapshot.pt`` after every iteration and ``policy.pt`` + ``train.json`` at the end; ``init``: a
    checkpoint or run directory to start from).
    """
    if view not in VIEWS or policy not in POLICIES:
        raise ValueError(f"view must be one of {VIEWS} and policy one of {POLICIES}, got view={view!r}, policy={policy!r}")
    if policy != "slot" and (view == "vector" or init is not None):
        raise ValueError("the vector view and init (starting weights) need policy='slot'")
    with needs(__name__, "torchrl"):
        import torch
        try:  # torchrl >= 0.12 renamed SyncDataCollector to Collector
            from torchrl.collectors import Collector as SyncDataCollector
        except ImportError:
            from torchrl.collectors import SyncDataCollector
        from torchrl.data.replay_buffers import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
        from torchrl.objectives import ClipPPOLoss, ValueEstimators

    from core_env.config import EnvConfig
    from mara_agents.integrations import slot_policy

    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    env_kwargs = dict(env_kwargs or {})
    history = EnvConfig(**env_kwargs).history
    env = make_env(env_kwargs, seed) if view == "parallel" else make_vector_env(env_kwargs, n_envs, seed)
    actor, critic = build(env, hidden, centralised_critic, policy=policy, history=history, view=view)
    nets = slot_nets(actor, critic) if policy == "slot" else None
    if init is not None:
        slot_policy.load_weights(init, FORMAT, *nets)
    meta = {"env": env_kwargs, "seed": seed, "view": view, "policy": policy, "iterations": iterations, "frames_per_batch": frames_per_batch,
            **({"init": str(init)} if init is not None else {})}
    collector = SyncDataCollector(env, actor, frames_per_batch=frames_per_batch, total_frames=frames_per_batch * iterations)
    buffer = ReplayBuffer(storage=LazyTensorStorage(frames_per_batch), sampler=SamplerWithoutReplacement(), batch_size=minibatch_size)
    loss_module = ClipPPOLoss(actor_network=actor, critic_network=critic, clip_epsilon=0.2, entropy_coeff=ent_coef,
                              normalize_advantage=False)
    key = lambda name: _key(view, name)  # noqa: E731
    loss_module.set_keys(reward=key("reward"), action=key("action"), sample_log_prob=key("action_log_prob"), value=key("state_value"),
                         done=key("done"), terminated=key("terminated"))
    loss_module.make_value_estimator(ValueEstimators.GAE, gamma=0.99, lmbda=0.95)
    optim = torch.optim.Adam(loss_module.parameters(), lr)
    losses: list[float] = []
    log = EpisodeLog()
    start = time.perf_counter()
    for data in collector:
        log.episodes.extend(_episode_stats(data, view))
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
        if nets is not None and out is not None:
            Path(out).mkdir(parents=True, exist_ok=True)
            slot_policy.save_checkpoint(Path(out) / slot_policy.SNAPSHOT_FILE, FORMAT, *nets, {**meta, "iteration": len(losses)})
        if verbose and len(losses) % 10 == 0:
            recent = log.summary(20)
            print(f"iteration {len(losses)}/{iterations}: {len(losses) * frames_per_batch} env steps, {len(log)} episodes, "
                  f"{time.perf_counter() - start:.0f}s; completion of the last {recent['episodes']} training episodes "
                  f"{recent.get('completion_rate', float('nan')):.3f}", flush=True)
    seconds = time.perf_counter() - start
    collector.shutdown()
    torch.set_num_threads(previous_threads)
    quarter = max(1, len(log) // 4)
    report = {"library": "torchrl", "algorithm": "PPO" if view == "vector" else "MAPPO" if centralised_critic else "IPPO", "view": view,
              "policy": policy, "env": env_kwargs, "env_steps": frames_per_batch * iterations, "updates": len(losses),
              "seconds": round(seconds, 2), "loss": losses, "episodes": log.episodes, "first": EpisodeLog(log.episodes[:quarter]).summary(),
              "last": log.summary(quarter), "all": log.summary(),
              "conflict_rule": "sequential: node i cannot pick a task taken by nodes < i (no env conflicts)" if policy == "slot" else
              "independent per-node actions; env resolves conflicts (lowest index wins) and counts them"}
    if verbose:
        print(f"torchrl {report['algorithm']}: {report['env_steps']} steps, {len(losses)} iterations, {len(log)} episodes in "
              f"{seconds:.1f}s; completion first quarter {report['first'].get('completion_rate', float('nan')):.3f} -> last quarter "
              f"{report['last'].get('completion_rate', float('nan')):.3f}; invalid actions {report['all'].get('invalid_actions')}, "
              f"conflicts {report['all'].get('conflicts')}")
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        if nets is not None:
            report["checkpoint"] = str(slot_policy.save_checkpoint(out / slot_policy.POLICY_FILE, FORMAT, *nets, meta))
        write_atomic(out / "train.json", (json.dumps(report, indent=1, default=float) + "\n").encode())
    return report


def load_agent(path: Path | str = SHIPPED_CHECKPOINT, deterministic: bool = True):
    """The trained per-slot policy of a checkpoint (``policy.pt`` or its run directory; default the shipped one)
    as a :class:`~mara_agents.integrations.slot_policy.SlotPolicyAgent` (greedy by default), the benchmark row
    ``ppo-torchrl``. ValueError for a missing file or manifest, another format or a checksum mismatch."""
    from mara_agents.integrations import slot_policy

    return slot_policy.load_agent(path, FORMAT, MISSING, deterministic=deterministic, name=ROW_NAME)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m mara_agents.integrations.torchrl_ppo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--frames-per-batch", type=int, default=1024, help="env steps per collector batch (over all envs)")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--minibatch-size", type=int, default=256)
    parser.add_argument("--ippo", action="store_true", help="decentralised critic (IPPO) instead of MAPPO's centralised one")
    parser.add_argument("--view", choices=VIEWS, default="parallel", help="PettingZoo parallel env, or the batched vector env (--policy slot)")
    parser.add_argument("--policy", choices=POLICIES, default="mlp", help="TorchRL's MultiAgentMLP or the per-slot policy (module docstring)")
    parser.add_argument("--n-envs", type=int, default=8, help="envs of the vector view")
    parser.add_argument("--init", type=Path, default=None, help="--policy slot: start from this checkpoint's weights (e.g. DIR/snapshot.pt)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--small", action="store_true", help=f"train on the small test config {SMALL_ENV}")
    parser.add_argument("--env", type=json.loads, default=None, help="core_env kwargs as JSON")
    parser.add_argument("--out", type=Path, default=None, help="run directory: train.json (and policy.pt, snapshot.pt with --policy slot)")
    parser.add_argument("--eval-episodes", type=int, default=8, help="--policy slot with --out: greedy evaluation episodes after training (seeds 10000+)")
    args = parser.parse_args(argv)
    env_kwargs = cli_env_kwargs(args)
    report = train_or_exit(parser, train, env_kwargs, iterations=args.iterations, frames_per_batch=args.frames_per_batch,
                           epochs=args.epochs, minibatch_size=args.minibatch_size, centralised_critic=not args.ippo, seed=args.seed,
                           threads=args.threads, view=args.view, policy=args.policy, n_envs=args.n_envs, out=args.out, init=args.init)
    from mara_agents.integrations.slot_policy import finish_cli

    return finish_cli(report, module="mara_agents.integrations.torchrl_ppo", argv=argv, threads=args.threads, out=args.out,
                      env_kwargs=env_kwargs, eval_episodes=args.eval_episodes, load=load_agent if args.policy == "slot" else None)


if __name__ == "__main__":
    main()
