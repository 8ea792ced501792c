"""RLlib PPO with action masking on the PettingZoo parallel env of core_env (extra ``rllib``).

``ray[rllib]`` pins its own gymnasium (2.60.0: ``gymnasium==1.2.2``), so it lives in its own venv
(``make rllib-venv`` builds ``build/rllib-venv``); core_env works on gymnasium 1.2.2 as on 1.4.

The env goes through RLlib's own ``ParallelPettingZooEnv`` after core_env's ``RLlibKeys`` wrapper, which
renames the observation key to ``"observations"`` as RLlib's action-masking RLModule expects. All nodes map
to **one shared policy** (``"shared"``) whose RLModule is RLlib's example ``ActionMaskingTorchRLModule``
(``ray.rllib.examples.rl_modules.classes.action_masking_rlm``): it adds ``log(mask)`` (clamped to
``FLOAT_MIN``) to the logits, so masked actions are never sampled. Nodes act independently: **conflicts**
are resolved by the env (lowest index wins) and counted; the report shows them.

Ray runs locally (``ray.init()``) unless ``--address`` (or ``RAY_ADDRESS``) names a cluster.

Run (in the rllib venv)::

    build/rllib-venv/bin/python -m mara_agents.integrations.rllib_ppo --iterations 10 --small
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from mara_agents.integrations.common import SMALL_ENV

ENV_NAME = "core_env_discrete_core_v1"
POLICY = "shared"
_STATS = ("completion_rate", "invalid_actions", "conflicts")


def env_creator(config: Mapping[str, Any]):
    """RLlib env factory: ``ParallelPettingZooEnv(RLlibKeys(parallel_env(**config)))``."""
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

    from core_env import discrete_core_v1
    from core_env.wrappers import RLlibKeys

    return ParallelPettingZooEnv(RLlibKeys(discrete_core_v1.parallel_env(**dict(config))))


def on_episode_end(*, episode, metrics_logger=None, **kwargs) -> None:
    """Log the final episode statistics of node_0 (team statistics, identical for every node)."""
    infos = episode.get_infos(-1)
    info = infos.get("node_0") if isinstance(infos, Mapping) else None
    if info and metrics_logger is not None:
        for key in _STATS:
            metrics_logger.log_value(f"core_{key}", float(info[key]), reduce="mean" if key == "completion_rate" else "sum")
        metrics_logger.log_value("core_episodes", 1, reduce="sum")


def build_config(env_kwargs: Mapping[str, Any], *, train_batch_size: int = 1024, minibatch_size: int = 256, epochs: int = 4,
                 lr: float = 3e-4, hidden: int = 64, seed: int = 0):
    """The PPOConfig: one shared masked policy for all nodes, local env runner, new API stack."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.examples.rl_modules.classes.action_masking_rlm import ActionMaskingTorchRLModule
    from ray.tune.registry import register_env

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
          seed: int = 0, verbose: bool = True, **config_kwargs: Any) -> dict[str, Any]:
    """Train for ``iterations`` ``algo.train()`` calls on a local (or ``address``) Ray instance; return a report."""
    import ray

    env_kwargs = dict(env_kwargs or {})
    address = address or os.environ.get("RAY_ADDRESS")
    if not ray.is_initialized():
        if address:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    algo = build_config(env_kwargs, seed=seed, **config_kwargs).build_algo()
    history: list[dict[str, float]] = []
    start = time.perf_counter()
    try:
        for _ in range(iterations):
            result = algo.train()
            learner = result.get("learners", {}).get(POLICY, {})
            runners = result.get("env_runners", {})
            history.append({"loss": float(learner.get("total_loss", np.nan)), "policy_loss": float(learner.get("policy_loss", np.nan)),
                            "vf_loss": float(learner.get("vf_loss", np.nan)), "entropy": float(learner.get("entropy", np.nan)),
                            "env_steps": int(result.get("num_env_steps_sampled_lifetime", runners.get("num_env_steps_sampled_lifetime", 0))),
                            **{key: float(runners[f"core_{key}"]) for key in _STATS if f"core_{key}" in runners},
                            "episodes": int(runners.get("core_episodes", 0))})
            if verbose:
                print(f"iteration {len(history)}: {history[-1]}", flush=True)
    finally:
        algo.stop()
    seconds = time.perf_counter() - start
    report = {"library": "rllib", "ray": ray.__version__, "algorithm": "PPO + ActionMaskingTorchRLModule (shared policy)", "env": env_kwargs,
              "iterations": iterations, "seconds": round(seconds, 2), "loss": [h["loss"] for h in history], "history": history,
              "invalid_actions": int(sum(h.get("invalid_actions", 0) for h in history)),
              "conflicts": int(sum(h.get("conflicts", 0) for h in history)),
              "episodes": int(sum(h["episodes"] for h in history)),
              "conflict_rule": "independent per-node actions; env resolves conflicts (lowest index wins) and counts them"}
    if verbose:
        rates = [h.get("completion_rate") for h in history if "completion_rate" in h]
        print(f"rllib PPO: {iterations} iterations, {report['episodes']} episodes in {seconds:.1f}s; completion (running mean) "
              f"{rates[0] if rates else float('nan'):.3f} -> {rates[-1] if rates else float('nan'):.3f}; invalid actions "
              f"{report['invalid_actions']}, conflicts {report['conflicts']}; loss {report['loss']}")
    return report


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
    parser.add_argument("--out", default=None, help="write the report as JSON to this file")
    args = parser.parse_args(argv)
    env_kwargs = dict(SMALL_ENV) if args.small else {}
    env_kwargs.update(args.env or {})
    report = train(env_kwargs, iterations=args.iterations, address=args.address, num_cpus=args.num_cpus, seed=args.seed,
                   train_batch_size=args.train_batch_size, minibatch_size=args.minibatch_size, epochs=args.epochs)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    main()
