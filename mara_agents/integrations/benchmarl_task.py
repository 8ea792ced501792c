"""A BenchMARL task for core_env, and a short MAPPO run (extra ``benchmarl``; own venv).

BenchMARL (1.5) pins ``torchrl<0.12``, which conflicts with the ``torchrl`` extra of the main venv, so it
is installed beside RLlib in ``build/rllib-venv`` (``make rllib-venv``).

:class:`CoreEnvTask` is a BenchMARL ``Task`` enum with one member, ``DISCRETE_CORE``; its
:class:`CoreEnvClass` builds ``PettingZooWrapper(MaskToInfo(parallel_env(**config)))`` (TorchRL), so
BenchMARL sees one group ``"node"`` with ``observation`` (N, D), ``action_mask`` (N, K+1) (BenchMARL's
``action_mask_spec``: its discrete policies mask the logits with it) and the global ``state``. Task
configs are YAML files of core_env keyword arguments: ``benchmarl_conf/discrete_core.yaml`` (the
env's defaults) and ``benchmarl_conf/discrete_core_small.yaml``::

    task = CoreEnvTask.DISCRETE_CORE.get_from_yaml(str(CONF / "discrete_core.yaml"))
    Experiment(task=task, algorithm_config=MappoConfig.get_from_yaml(), model_config=MlpConfig.get_from_yaml(),
               critic_model_config=MlpConfig.get_from_yaml(), seed=0, config=ExperimentConfig.get_from_yaml()).run()

Run (in the rllib venv)::

    build/rllib-venv/bin/python -m mara_agents.integrations.benchmarl_task --small --iterations 5
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from benchmarl.environments.common import Task, TaskClass
from benchmarl.experiment.callback import Callback

CONF = Path(__file__).resolve().parent / "benchmarl_conf"
GROUP = "node"
_DEFAULTS = {"n_nodes": 4, "n_slots": 16, "arrival_steps": 500, "max_cycles": 5000}


class CoreEnvClass(TaskClass):
    """How BenchMARL builds core_env: TorchRL's PettingZooWrapper over ``MaskToInfo(parallel_env(**config))``."""

    def get_env_fun(self, num_envs: int, continuous_actions: bool, seed: int | None, device) -> Callable:
        from torchrl.envs.libs.pettingzoo import PettingZooWrapper

        from core_env import discrete_core_v1
        from core_env.wrappers import MaskToInfo

        config = copy.deepcopy(self.config)
        return lambda: PettingZooWrapper(MaskToInfo(discrete_core_v1.parallel_env(**config)), categorical_actions=True,
                                         return_state=True, seed=seed, device=device)

    def supports_continuous_actions(self) -> bool:
        return False

    def supports_discrete_actions(self) -> bool:
        return True

    def has_render(self, env) -> bool:
        return False

    def max_steps(self, env) -> int:
        return int(self.config.get("max_cycles", 5000))

    def group_map(self, env) -> dict[str, list[str]]:
        return env.group_map

    def _only(self, env, keep: str):
        spec = env.observation_spec.clone()
        for group in self.group_map(env):
            for key in list(spec[group].keys()):
                if key != keep:
                    del spec[group][key]
            if spec[group].is_empty():
                del spec[group]
        if "state" in spec.keys():
            del spec["state"]
        return spec

    def observation_spec(self, env):
        return self._only(env, "observation")

    def action_mask_spec(self, env):
        spec = self._only(env, "action_mask")
        return None if spec.is_empty() else spec

    def info_spec(self, env):
        return self._only(env, "info")

    def state_spec(self, env):
        from torchrl.data import Composite

        return Composite({"state": env.observation_spec["state"].clone()}) if "state" in env.observation_spec.keys() else None

    def action_spec(self, env):
        return env.full_action_spec

    @staticmethod
    def env_name() -> str:
        return "core_env"


class CoreEnvTask(Task):
    """core_env tasks for BenchMARL."""

    DISCRETE_CORE = None

    @staticmethod
    def associated_class():
        return CoreEnvClass


def load_task(path: Path | str | None = None) -> CoreEnvClass:
    """The ``DISCRETE_CORE`` task with the config of a YAML file (default: ``benchmarl_conf/discrete_core.yaml``)."""
    path = Path(path) if path else CONF / "discrete_core.yaml"
    if path.exists():
        import warnings

        with warnings.catch_warnings():  # "TaskConfig python dataclass not found": core_env validates its own kwargs
            warnings.simplefilter("ignore")
            return CoreEnvTask.DISCRETE_CORE.get_from_yaml(str(path))
    return CoreEnvTask.DISCRETE_CORE.get_task(config=dict(_DEFAULTS))


class RecordCallback(Callback):
    """Records each training iteration's loss (objective + critic + entropy) and the final statistics of
    every episode collected (module level: BenchMARL pickles its callbacks)."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []
        self.episodes: list[dict[str, float]] = []

    def on_batch_collected(self, batch) -> None:
        done = batch.get(("next", "done")).reshape(-1)
        info = batch.get(("next", GROUP, "info")).reshape(-1)
        for i in done.nonzero().flatten().tolist():
            self.episodes.append({k: float(info[i].get(k).reshape(-1)[0]) for k in ("completion_rate", "invalid_actions", "conflicts")})

    def on_train_end(self, training_td, group: str) -> None:
        keys = [k for k in ("loss_objective", "loss_critic", "loss_entropy") if k in training_td.keys()]
        self.losses.append(float(sum(training_td.get(k).mean() for k in keys)))


def train(task: CoreEnvClass, *, iterations: int = 5, frames_per_batch: int = 1024, minibatch_size: int = 256, minibatch_iters: int = 8,
          seed: int = 0, save_folder: Path | str | None = None, verbose: bool = True) -> dict[str, Any]:
    """A short BenchMARL MAPPO experiment on ``task``; returns losses and episode statistics from callbacks."""
    import tempfile

    from benchmarl.algorithms import MappoConfig
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig

    record = RecordCallback()
    losses, episodes = record.losses, record.episodes
    config = ExperimentConfig.get_from_yaml()
    config.sampling_device = config.train_device = config.buffer_device = "cpu"
    config.max_n_iters, config.max_n_frames = iterations, None
    config.on_policy_collected_frames_per_batch = frames_per_batch
    config.on_policy_n_envs_per_worker = 1
    config.on_policy_minibatch_size = minibatch_size
    config.on_policy_n_minibatch_iters = minibatch_iters
    config.lr = 3e-4
    config.evaluation, config.render, config.loggers, config.create_json = False, False, [], False
    config.checkpoint_interval, config.checkpoint_at_end = 0, False
    folder = Path(save_folder or tempfile.mkdtemp(prefix="benchmarl_core_"))
    folder.mkdir(parents=True, exist_ok=True)
    config.save_folder = str(folder)
    experiment = Experiment(task=task, algorithm_config=MappoConfig.get_from_yaml(), model_config=MlpConfig.get_from_yaml(),
                            critic_model_config=MlpConfig.get_from_yaml(), seed=seed, config=config, callbacks=[record])
    start = time.perf_counter()
    experiment.run()
    seconds = time.perf_counter() - start
    quarter = max(1, len(episodes) // 4)

    def summary(eps):
        return {"episodes": len(eps), "completion_rate": float(np.mean([e["completion_rate"] for e in eps])) if eps else float("nan")}

    report = {"library": "benchmarl", "algorithm": "MAPPO (BenchMARL defaults, MLP)", "task": dict(task.config), "iterations": iterations,
              "env_steps": iterations * frames_per_batch, "seconds": round(seconds, 2), "loss": losses, "episodes": len(episodes),
              "first": summary(episodes[:quarter]), "last": summary(episodes[-quarter:]),
              "invalid_actions": int(sum(e["invalid_actions"] for e in episodes)), "conflicts": int(sum(e["conflicts"] for e in episodes))}
    if verbose:
        print(f"benchmarl MAPPO: {iterations} iterations, {len(episodes)} episodes in {seconds:.1f}s; completion "
              f"{report['first']['completion_rate']:.3f} -> {report['last']['completion_rate']:.3f}; invalid actions "
              f"{report['invalid_actions']}, conflicts {report['conflicts']}; loss {losses}")
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m mara_agents.integrations.benchmarl_task", description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", type=Path, default=None, help="task YAML (default benchmarl_conf/discrete_core.yaml)")
    parser.add_argument("--small", action="store_true", help="use benchmarl_conf/discrete_core_small.yaml")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--frames-per-batch", type=int, default=1024)
    parser.add_argument("--minibatch-size", type=int, default=256)
    parser.add_argument("--minibatch-iters", type=int, default=8, help="minibatch gradient steps per iteration")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write the report as JSON to this file")
    args = parser.parse_args(argv)
    task = load_task(CONF / "discrete_core_small.yaml" if args.small else args.task)
    report = train(task, iterations=args.iterations, frames_per_batch=args.frames_per_batch, minibatch_size=args.minibatch_size,
                   minibatch_iters=args.minibatch_iters, seed=args.seed)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    main()
