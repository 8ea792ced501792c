"""RLlib PPO with action masking on the PettingZoo parallel env of core_env (extra ``rllib``).

``ray[rllib]`` pins its own gymnasium (2.60.0: ``gymnasium==1.2.2``), so it lives in its own venv
(``make rllib-venv`` builds ``build/rllib-venv``); core_env works on gymnasium 1.2.2 as on 1.4.

The env goes through RLlib's own ``ParallelPettingZooEnv`` after core_env's ``RLlibKeys`` wrapper, which
renames the observation key to ``"observations"`` as RLlib's action-masking RLModule expects. All nodes map
to **one shared policy** (``"shared"``) whose RLModule is RLlib's example ``ActionMaskingTorchRLModule``
(``ray.rllib.examples.rl_modules.classes.action_masking_rlm``): it adds ``log(mask)`` (clamped to
``FLOAT_MIN``) to the logits, so masked actions are never sampled. Nodes act independently: **conflicts**
are resolved by the env (lowest index wins) and counted; the report shows them.

**The per-slot policy** (``policy="slot"``, ``--policy slot``; the suite's size): RLlib's single-agent
PPO on the central Gymnasium view (``gym.make("core_env/DiscreteCoRE-v1")``, ``num_envs_per_env_runner``
copies) with :class:`~mara_agents.integrations.rllib_policy.SlotRLModule` and its conflict-free joint
distribution (no conflicts; ``use_kl_loss=False``). Its weights are saved as ``policy.pt`` + ``policy.json``
(format :data:`FORMAT`; ``snapshot.pt`` after every iteration) and :func:`load_agent` (no Ray needed) plays
them as the benchmark row ``ppo-rllib``.

Ray runs locally (``ray.init()``) unless ``--address`` (or ``RAY_ADDRESS``) names a cluster.

Run (in the rllib venv)::

    build/rllib-venv/bin/python -m mara_agents.integrations.rllib_ppo --iterations 10 --small
    build/rllib-venv/bin/python -m mara_agents.integrations.rllib_ppo --policy slot --iterations 320 --train-batch-size 2048 \
        --minibatch-size 512 --out runs/rllib_slot
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from core_env.extras import needs
from core_env.npz import write_atomic
from mara_agents.integrations.common import SMALL_ENV, cli_env_kwargs

ENV_NAME = "core_env_discrete_core_v1"
#: The central Gymnasium view, for the per-slot policy.
CENTRAL_ENV_NAME = "core_env_discrete_core_v1_central"
POLICY = "shared"
_STATS = ("completion_rate", "invalid_actions", "conflicts")
FORMAT = "mara_agents.integrations.rllib_ppo/1"
MISSING = "no RLlib per-slot checkpoint (train one with python -m mara_agents.integrations.rllib_ppo --policy slot --out DIR)"
ROW_NAME = "PPO (RLlib)"
#: The shipped per-slot policy (its train.json says how it was trained).
SHIPPED_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "rllib_ppo" / "policy.pt"
POLICIES = ("mlp", "slot")


def env_creator(config: Mapping[str, Any]):
    """RLlib env factory: ``ParallelPettingZooEnv(RLlibKeys(parallel_env(**config)))``."""
    with needs(__name__, "rllib"):
        from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

    from core_env import discrete_core_v1
    from core_env.wrappers import RLlibKeys

    return ParallelPettingZooEnv(RLlibKeys(discrete_core_v1.parallel_env(**dict(config))))


def central_env_creator(config: Mapping[str, Any]):
    """RLlib env factory of the central view: ``gym.make("core_env/DiscreteCoRE-v1", **config)``."""
    from mara_agents.integrations.common import make_gym_env

    return make_gym_env(**dict(config))


def on_episode_end(*, episode, metrics_logger=None, **kwargs) -> None:
    """Log the final episode statistics (of node_0 on the PettingZoo view: team statistics, identical for every node)."""
    infos = episode.get_infos(-1)
    info = (infos.get("node_0") if "node_0" in infos else infos) if isinstance(infos, Mapping) else None
    if info and metrics_logger is not None:
        for key in _STATS:
            metrics_logger.log_value(f"core_{key}", float(info[key]), reduce="mean" if key == "completion_rate" else "sum")
        metrics_logger.log_value("core_episodes", 1, reduce="sum")


def build_config(env_kwargs: Mapping[str, Any], *, train_batch_size: int = 1024, minibatch_size: int = 256, epochs: int = 4,
                 lr: float = 3e-4, hidden: int = 64, seed: int = 0, policy: str = "mlp", n_envs: int = 8):
    """The PPOConfig, new API stack, local env runner: one shared masked MLP policy for all nodes on the
    PettingZoo view (``policy="mlp"``), or the per-slot RLModule on ``n_envs`` copies of the central view."""
    with needs(__name__, "rllib"):
        from ray.rllib.algorithms.ppo import PPOConfig
        from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
        from ray.rllib.core.rl_module.rl_module import RLModuleSpec
        from ray.rllib.examples.rl_modules.classes.action_masking_rlm import ActionMaskingTorchRLModule
        from ray.tune.registry import register_env

    if policy == "slot":
        from core_env.config import EnvConfig
        from mara_agents.integrations.rllib_policy import SlotRLModule

        register_env(CENTRAL_ENV_NAME, central_env_creator)
        return (PPOConfig()
                .environment(CENTRAL_ENV_NAME, env_config=dict(env_kwargs))
                .framework("torch")
                .env_runners(num_env_runners=0, num_envs_per_env_runner=n_envs)
                .learners(num_learners=0)
                .rl_module(rl_module_spec=RLModuleSpec(module_class=SlotRLModule,
                                                       model_config={"history": EnvConfig(**env_kwargs).history, "hidden": hidden}))
                .training(train_batch_size_per_learner=train_batch_size, minibatch_size=minibatch_size, num_epochs=epochs, lr=lr,
                          gamma=0.99, lambda_=0.95, entropy_coeff=0.01, clip_param=0.2, vf_loss_coeff=0.5, grad_clip=0.5,
                          use_kl_loss=False)
                .callbacks(on_episode_end=on_episode_end)
                .debugging(seed=seed))
    register_env(ENV_NAME, env_creator)
    return (PPOConfig()
            .environment(ENV_NAME, env_config=dict(env_kwargs))
            .framework("torch")
            .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
            .learners(num_learners=0)
            .multi_agent(policies={POLICY}, policy_mapping_fn=lambda agent_id, *args, **kw: POLICY)
            .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={POLICY: RLModuleSpec(
                module_class=ActionMaskingTorchRLModule, model_config={"fcnet_hiddens": [hidden, hidden], "head_fcnet_hiddens": [],
                                                                        "vf_share_layers": False})}))
            .training(train_batch_size_per_learner=train_batch_size, minibatch_size=minibatch_size, num_epochs=epochs, lr=lr,
                      gamma=0.99, lambda_=0.95, entropy_coeff=0.01)
            .callbacks(on_episode_end=on_episode_end)
            .debugging(seed=seed))


def train(env_kwargs: Mapping[str, Any] | None = None, *, iterations: int = 10, address: str | None = None, num_cpus: int | None = 2,
          seed: int = 0, verbose: bool = True, policy: str = "mlp", out: Path | str | None = None, threads: int | None = 1,
          **config_kwargs: Any) -> dict[str, Any]:
    """Train for ``iterations`` ``algo.train()`` calls on a local (or ``address``) Ray instance; return a report.

    ``policy="slot"``: the per-slot policy on the central view; with ``out``, ``snapshot.pt`` after every
    iteration and ``policy.pt`` + ``train.json`` at the end.
    """
    with needs(__name__, "rllib"):
        import ray
        import torch

    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if threads:
        torch.set_num_threads(threads)
    env_kwargs = dict(env_kwargs or {})
    address = address or os.environ.get("RAY_ADDRESS")
    if not ray.is_initialized():
        if address:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    algo = build_config(env_kwargs, seed=seed, policy=policy, **config_kwargs).build_algo()
    module_id = "default_policy" if policy == "slot" else POLICY
    meta = {"env": env_kwargs, "seed": seed, "policy": policy, "iterations": iterations, **config_kwargs}
    history: list[dict[str, float]] = []
    start = time.perf_counter()
    try:
        for _ in range(iterations):
            result = algo.train()
            if policy == "slot" and out is not None:
                _save(algo, Path(out) / "snapshot.pt", {**meta, "iteration": len(history) + 1})
            learner = result.get("learners", {}).get(module_id, {})
            runners = result.get("env_runners", {})
            history.append({"loss": float(learner.get("total_loss", np.nan)), "policy_loss": float(learner.get("policy_loss", np.nan)),
                            "vf_loss": float(learner.get("vf_loss", np.nan)), "entropy": float(learner.get("entropy", np.nan)),
                            "env_steps": int(result.get("num_env_steps_sampled_lifetime", runners.get("num_env_steps_sampled_lifetime", 0))),
                            **{key: float(runners[f"core_{key}"]) for key in _STATS if np.isfinite(runners.get(f"core_{key}", np.nan))},
                            "episodes": int(np.nan_to_num(runners.get("core_episodes", 0)))})
            if verbose:
                print(f"iteration {len(history)}: {history[-1]}", flush=True)
        if policy == "slot" and out is not None:
            checkpoint = _save(algo, Path(out) / "policy.pt", meta)
    finally:
        algo.stop()
    seconds = time.perf_counter() - start
    algorithm = "PPO + SlotRLModule (per-slot policy, central view)" if policy == "slot" else "PPO + ActionMaskingTorchRLModule (shared policy)"
    report = {"library": "rllib", "ray": ray.__version__, "algorithm": algorithm, "policy": policy, "env": env_kwargs,
              "iterations": iterations, "env_steps": history[-1]["env_steps"] if history else 0, "seconds": round(seconds, 2),
              "loss": [h["loss"] for h in history], "history": history,
              "invalid_actions": int(sum(h.get("invalid_actions", 0) for h in history)),
              "conflicts": int(sum(h.get("conflicts", 0) for h in history)),
              "episodes": int(sum(h["episodes"] for h in history)),
              "conflict_rule": "sequential: node i cannot pick a task taken by nodes < i (no env conflicts)" if policy == "slot" else
              "independent per-node actions; env resolves conflicts (lowest index wins) and counts them"}
    if policy == "slot" and out is not None:
        report["checkpoint"] = str(checkpoint)
        write_atomic(Path(out) / "train.json", (json.dumps(report, indent=1, default=float) + "\n").encode())
    if verbose:
        rates = [h.get("completion_rate") for h in history if "completion_rate" in h]
        print(f"rllib PPO: {iterations} iterations, {report['episodes']} episodes in {seconds:.1f}s; completion (running mean) "
              f"{rates[0] if rates else float('nan'):.3f} -> {rates[-1] if rates else float('nan'):.3f}; invalid actions "
              f"{report['invalid_actions']}, conflicts {report['conflicts']}; loss {report['loss']}")
    return report


def _save(algo, path: Path, meta: Mapping[str, Any]) -> Path:
    """The per-slot module's actor and critic as a :data:`FORMAT` checkpoint (+ manifest)."""
    from mara_agents.integrations import slot_policy

    module = algo.get_module("default_policy")
    path.parent.mkdir(parents=True, exist_ok=True)
    return slot_policy.save_checkpoint(path, FORMAT, module.actor_net, module.critic_net, meta)


def load_agent(path: Path | str = SHIPPED_CHECKPOINT, deterministic: bool = True):
    """The trained per-slot policy of a checkpoint (``policy.pt`` or its run directory; default the shipped one)
    as a :class:`~mara_agents.integrations.slot_policy.SlotPolicyAgent` (greedy by default; no Ray needed), the
    benchmark row ``ppo-rllib``. ValueError for a missing file or manifest, another format or a checksum mismatch."""
    from mara_agents.integrations import slot_policy

    return slot_policy.load_agent(path, FORMAT, MISSING, deterministic=deterministic, name=ROW_NAME)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m mara_agents.integrations.rllib_ppo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--train-batch-size", type=int, default=1024, help="env steps (agent steps summed) per iteration")
    parser.add_argument("--minibatch-size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS, else a local ray.init())")
    parser.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local Ray instance")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", action="store_true", help=f"train on the small test config {SMALL_ENV}")
    parser.add_argument("--env", type=json.loads, default=None, help="core_env kwargs as JSON")
    parser.add_argument("--policy", choices=POLICIES, default="mlp", help="RLlib's masked MLP per node, or the per-slot policy (module docstring)")
    parser.add_argument("--n-envs", type=int, default=8, help="--policy slot: envs per env runner")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="run directory: train.json (and policy.pt, snapshot.pt with --policy slot)")
    parser.add_argument("--eval-episodes", type=int, default=8, help="--policy slot with --out: greedy evaluation episodes after training (seeds 10000+)")
    args = parser.parse_args(argv)
    env_kwargs = cli_env_kwargs(args)
    extra = {"n_envs": args.n_envs} if args.policy == "slot" else {}
    report = train(env_kwargs, iterations=args.iterations, address=args.address, num_cpus=args.num_cpus, seed=args.seed, policy=args.policy,
                   out=args.out, threads=args.threads, train_batch_size=args.train_batch_size, minibatch_size=args.minibatch_size,
                   epochs=args.epochs, **extra)
    from mara_agents.integrations.slot_policy import finish_cli

    return finish_cli(report, module="mara_agents.integrations.rllib_ppo", argv=argv, threads=args.threads, out=args.out, env_kwargs=env_kwargs,
                      eval_episodes=args.eval_episodes, load=load_agent if args.policy == "slot" else None)


if __name__ == "__main__":
    main()
