"""BenchMARL on core_env (extra ``benchmarl``; own venv): two routes to the env, MAPPO with BenchMARL's MLP
or with the per-slot policy.

BenchMARL (1.5) pins ``torchrl<0.12``, which conflicts with the ``torchrl`` extra of the main venv, so it
is installed beside RLlib in ``build/rllib-venv`` (``make rllib-venv``).

:class:`CoreEnvTask` is a BenchMARL ``Task`` enum; both members give BenchMARL one group ``"node"`` with
``observation`` (N, D) and ``action_mask`` (N, K+1) (BenchMARL's ``action_mask_spec``: its discrete
policies mask the logits with it):

- ``DISCRETE_CORE_BATCHED`` (``--route batched``, the suite's size): the TorchRL-native
  :class:`~mara_agents.integrations.torchrl_nodes.NodeBatchEnv` over the batched engine, BenchMARL's
  ``n_envs_per_worker`` envs stepped in one call (batch ``(n_envs,)``); no global ``state`` (the critic
  reads the nodes' observations).
- ``DISCRETE_CORE`` (``--route pettingzoo``, small configurations): ``PettingZooWrapper(MaskToInfo(
  parallel_env(**config)))``, one env step at a time, BenchMARL's ``SerialEnv`` around it, and the global
  ``state`` for the critic.

Task configs are YAML files of core_env keyword arguments: ``benchmarl_conf/discrete_core.yaml`` (the
env's defaults) and ``benchmarl_conf/discrete_core_small.yaml``.

``--policy slot`` plugs the per-slot nets of :mod:`mara_agents.integrations.nets` into BenchMARL's own
extension points: :class:`SlotConfig` is a BenchMARL ``ModelConfig`` whose model is
:class:`~mara_agents.integrations.nets.SlotActor` as the policy and the pooled
:class:`~mara_agents.integrations.nets.SlotCritic` as the (shared, centralised) critic, and
:class:`SlotMappoConfig` is BenchMARL's MAPPO with
:class:`~mara_agents.integrations.nets.SequentialNodeCategorical` in place of ``MaskedCategorical``:
each node's conditional log-probability feeds MAPPO's per-agent ratio, and no conflict reaches the env.
With ``--out``, the per-slot weights are saved as ``snapshot.pt`` after every iteration and as
``policy.pt`` + manifest at the end (format :data:`mara_agents.integrations.benchmarl_ppo.FORMAT`), which
:func:`mara_agents.integrations.benchmarl_ppo.load_agent` plays without BenchMARL as the benchmark row
``mappo-benchmarl``::

    task = CoreEnvTask.DISCRETE_CORE_BATCHED.get_from_yaml(str(CONF / "discrete_core.yaml"))
    Experiment(task=task, algorithm_config=SlotMappoConfig.default(), model_config=SlotConfig(),
               critic_model_config=SlotConfig(), seed=0, config=ExperimentConfig.get_from_yaml()).run()

Run (in the rllib venv)::

    build/rllib-venv/bin/python -m mara_agents.integrations.benchmarl_task --small --route pettingzoo --iterations 5
    build/rllib-venv/bin/python -m mara_agents.integrations.benchmarl_task --route batched --policy slot --n-envs 8 \
        --iterations 320 --frames-per-batch 2048 --minibatch-size 512 --minibatch-iters 4 --out runs/benchmarl_slot
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from core_env.config import EnvConfig
from core_env.extras import needs
from core_env.npz import write_atomic
from mara_agents.integrations.benchmarl_ppo import FORMAT, load_agent
from mara_agents.integrations.common import REPORTED_KEYS, EpisodeLog
from mara_agents.integrations.nets import SequentialNodeCategorical, SlotActor, SlotCritic, over_leading

with needs(__name__, "benchmarl"):
    import torch
    from benchmarl.algorithms import MappoConfig
    from benchmarl.algorithms.mappo import Mappo
    from benchmarl.environments.common import Task, TaskClass
    from benchmarl.experiment.callback import Callback
    from benchmarl.models.common import Model, ModelConfig

CONF = Path(__file__).resolve().parent / "benchmarl_conf"
GROUP = "node"
_DEFAULTS = {"n_nodes": 4, "n_slots": 16, "arrival_steps": 500, "max_cycles": 5000}
ROUTES = {"pettingzoo": "DISCRETE_CORE", "batched": "DISCRETE_CORE_BATCHED"}
POLICIES = ("mlp", "slot")
#: core_env keywords that are BenchMARL's, not the env's.
_TASK_ONLY = ("max_cycles",)


class CoreEnvClass(TaskClass):
    """How BenchMARL builds core_env: the batched :class:`~mara_agents.integrations.torchrl_nodes.NodeBatchEnv`
    (``DISCRETE_CORE_BATCHED``) or TorchRL's PettingZooWrapper over ``MaskToInfo(parallel_env(**config))``."""

    @property
    def batched(self) -> bool:
        return self.name == "DISCRETE_CORE_BATCHED"

    def get_env_fun(self, num_envs: int, continuous_actions: bool, seed: int | None, device) -> Callable:
        config = copy.deepcopy(self.config)
        if self.batched:
            from mara_agents.integrations.torchrl_nodes import NodeBatchEnv

            env_kwargs = {k: v for k, v in config.items() if k not in _TASK_ONLY}
            return lambda: NodeBatchEnv(num_envs, env_kwargs, seed=seed, device=device)
        with needs(__name__, "benchmarl"):
            from torchrl.envs.libs.pettingzoo import PettingZooWrapper

        from core_env import discrete_core_v1
        from core_env.wrappers import MaskToInfo

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
        """The observation spec with only ``keep`` in each group (nothing outside the groups); unbatched for the
        batched route (BenchMARL's specs describe one env)."""
        spec = (env.full_observation_spec_unbatched if self.batched else env.observation_spec).clone()
        groups = self.group_map(env)
        for key in list(spec.keys()):
            if key not in groups:
                del spec[key]
        for group in groups:
            for key in list(spec[group].keys()):
                if key != keep:
                    del spec[group][key]
            if spec[group].is_empty():
                del spec[group]
        return spec

    def observation_spec(self, env):
        return self._only(env, "observation")

    def action_mask_spec(self, env):
        spec = self._only(env, "action_mask")
        return None if spec.is_empty() else spec

    def info_spec(self, env):
        if self.batched:
            with needs(__name__, "benchmarl"):
                from torchrl.data import Composite

            return Composite({"stats": env.full_observation_spec_unbatched["stats"].clone()})
        return self._only(env, "info")

    def state_spec(self, env):
        with needs(__name__, "benchmarl"):
            from torchrl.data import Composite

        return Composite({"state": env.observation_spec["state"].clone()}) if "state" in env.observation_spec.keys() else None

    def action_spec(self, env):
        return env.full_action_spec_unbatched if self.batched else env.full_action_spec

    @staticmethod
    def env_name() -> str:
        return "core_env"


class CoreEnvTask(Task):
    """core_env tasks for BenchMARL: ``DISCRETE_CORE`` (PettingZoo view) and ``DISCRETE_CORE_BATCHED`` (batched engine)."""

    DISCRETE_CORE = None
    DISCRETE_CORE_BATCHED = None

    @staticmethod
    def associated_class():
        return CoreEnvClass


def load_task(path: Path | str | None = None, route: str = "pettingzoo") -> CoreEnvClass:
    """The task of ``route`` (:data:`ROUTES`) with the config of a YAML file (default: ``benchmarl_conf/discrete_core.yaml``)."""
    if route not in ROUTES:
        raise ValueError(f"route must be one of {tuple(ROUTES)}, got {route!r}")
    member = CoreEnvTask[ROUTES[route]]
    path = Path(path) if path else CONF / "discrete_core.yaml"
    if path.exists():
        import warnings

        with warnings.catch_warnings():  # "TaskConfig python dataclass not found": core_env validates its own kwargs
            warnings.simplefilter("ignore")
            return member.get_from_yaml(str(path))
    return member.get_task(config=dict(_DEFAULTS))


class SlotModel(Model):
    """BenchMARL model around the per-slot nets: as a policy, :class:`SlotActor` ((..., N, D) -> (..., N, K+1)
    logits, one set of weights for every node); as a critic, :class:`SlotCritic` (the state's value, shared by
    the nodes: (..., 1), or (..., N, 1) where BenchMARL wants one per node)."""

    def __init__(self, history: int = 8, hidden: int = 64, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if len(self.in_keys) != 1 or not self.input_has_agent_dim:
            raise ValueError(f"the per-slot model reads the nodes' observations only (one input with the node dimension), got {self.in_keys}"
                             " (use the per-slot critic without a global state: the batched route)")
        self.net = (SlotCritic if self.is_critic else SlotActor)(history, hidden)

    def _forward(self, tensordict):
        obs = tensordict.get(self.in_keys[0])
        out = over_leading(self.net, obs)
        if self.is_critic:
            out = out.unsqueeze(-1)
            if self.output_has_agent_dim:
                out = out.unsqueeze(-2).expand(*obs.shape[:-1], 1)
        tensordict.set(self.out_key, out)
        return tensordict


@dataclasses.dataclass
class SlotConfig(ModelConfig):
    """BenchMARL model config of :class:`SlotModel` (``history``: the env's H; ``hidden``: layer width)."""

    history: int = 8
    hidden: int = 64

    @staticmethod
    def associated_class():
        return SlotModel


class SlotMappo(Mappo):
    """BenchMARL's MAPPO whose policy samples the conflict-free joint action node by node
    (:class:`SequentialNodeCategorical`) instead of independent ``MaskedCategorical`` picks."""

    def _get_policy_for_loss(self, group, model_config, continuous):
        with needs(__name__, "benchmarl"):
            from tensordict.nn import ProbabilisticTensorDictModule

        policy = super()._get_policy_for_loss(group, model_config, continuous)
        heads = [m for m in policy.modules() if isinstance(m, ProbabilisticTensorDictModule)]
        if continuous or self.action_mask_spec is None or len(heads) != 1:
            raise ValueError("SlotMappo needs discrete actions with an action mask")
        heads[0].distribution_class = SequentialNodeCategorical
        return policy


@dataclasses.dataclass
class SlotMappoConfig(MappoConfig):
    """:class:`SlotMappo`'s config (MAPPO's fields)."""

    @staticmethod
    def associated_class():
        return SlotMappo

    @classmethod
    def default(cls, **changes: Any) -> SlotMappoConfig:
        """BenchMARL's MAPPO defaults with ``changes``."""
        return cls(**{**dataclasses.asdict(MappoConfig.get_from_yaml()), **changes})


@contextlib.contextmanager
def slot_nets(experiment) -> Iterator[tuple[SlotActor, SlotCritic]]:
    """The :class:`SlotActor` and :class:`SlotCritic` a per-slot experiment trains, holding its live weights
    (TorchRL's loss keeps them apart from its modules; inside the block they are put back)."""
    loss = experiment.losses[GROUP]
    with loss.actor_network_params.to_module(loss.actor_network), loss.critic_network_params.to_module(loss.critic_network):
        actor = next(m.net for m in loss.actor_network.modules() if isinstance(m, SlotModel))
        critic = next(m.net for m in loss.critic_network.modules() if isinstance(m, SlotModel))
        yield actor, critic


class RecordCallback(Callback):
    """Records each training iteration's loss (objective + critic + entropy), the final statistics of every
    episode collected and, with ``out`` and the per-slot policy, a snapshot of the weights after every
    iteration (module level: BenchMARL pickles its callbacks)."""

    def __init__(self, out: Path | None = None, meta: dict[str, Any] | None = None, init: Path | None = None) -> None:
        super().__init__()
        self.losses: list[float] = []
        self.log = EpisodeLog()
        self.out, self.meta, self.init = out, dict(meta or {}), init

    def on_setup(self) -> None:
        if self.init is not None:
            from mara_agents.integrations import slot_policy

            with slot_nets(self.experiment) as (actor, critic):
                slot_policy.load_weights(self.init, FORMAT, actor, critic)
            self.experiment.collector.update_policy_weights_()

    def on_batch_collected(self, batch) -> None:
        done = batch.get(("next", "done")).reshape(-1)
        if ("next", "stats") in batch.keys(True):  # the batched route
            stats = batch.get(("next", "stats")).reshape(-1)
            for i in done.nonzero().flatten().tolist():
                self.log.episodes.append({k: float(stats[i].get(k)) for k in REPORTED_KEYS})
            return
        info = batch.get(("next", GROUP, "info")).reshape(-1)
        for i in done.nonzero().flatten().tolist():
            self.log.episodes.append({k: float(info[i].get(k).reshape(-1)[0]) for k in ("completion_rate", "invalid_actions", "conflicts")})

    def on_train_end(self, training_td, group: str) -> None:
        keys = [k for k in ("loss_objective", "loss_critic", "loss_entropy") if k in training_td.keys()]
        self.losses.append(float(sum(training_td.get(k).mean() for k in keys)))
        if self.out is not None and isinstance(self.experiment.model_config, SlotConfig):
            from mara_agents.integrations import slot_policy

            with slot_nets(self.experiment) as (actor, critic):
                slot_policy.save_checkpoint(self.out / slot_policy.SNAPSHOT_FILE, FORMAT, actor, critic,
                                            {**self.meta, "iteration": len(self.losses)})
        if len(self.losses) % 10 == 0:
            recent = self.log.summary(20)
            print(f"iteration {len(self.losses)}: {len(self.log)} episodes; completion of the last {recent['episodes']} training "
                  f"episodes {recent.get('completion_rate', float('nan')):.3f}", flush=True)


def train(task: CoreEnvClass, *, iterations: int = 5, frames_per_batch: int = 1024, minibatch_size: int = 256, minibatch_iters: int = 8,
          seed: int = 0, policy: str = "mlp", n_envs: int = 1, lr: float = 3e-4, ent_coef: float = 0.0, hidden: int = 64,
          threads: int | None = 1, out: Path | str | None = None, init: Path | str | None = None, verbose: bool = True) -> dict[str, Any]:
    """A BenchMARL MAPPO experiment on ``task``; returns losses and episode statistics from callbacks.

    ``policy="mlp"``: BenchMARL's MAPPO and MLPs (its defaults but ``lr`` and ``ent_coef``); ``"slot"``:
    :class:`SlotMappoConfig` with :class:`SlotConfig` models (``hidden`` wide), PPO settings as the other
    libraries' per-slot runs (clip 0.2, GAE λ 0.95, γ 0.99, gradient norm 0.5, ``minibatch_iters`` passes).
    ``n_envs``: envs per collector (the batched route steps them in one call). With ``out`` (a run directory):
    ``snapshot.pt`` after every iteration, ``policy.pt`` + ``train.json`` at the end (per-slot policy);
    ``init``: a checkpoint or run directory to start from.
    """
    import tempfile

    with needs(__name__, "benchmarl"):
        from benchmarl.experiment import Experiment, ExperimentConfig
        from benchmarl.models.mlp import MlpConfig

    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if policy == "slot" and not task.batched:
        raise ValueError("the per-slot policy reads the nodes' observations in its critic: use the batched route (route='batched')")
    if init is not None and policy != "slot":
        raise ValueError("init (starting weights) needs policy='slot'")
    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    out = Path(out) if out is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    env_kwargs = {k: v for k, v in task.config.items() if k not in _TASK_ONLY}
    history = EnvConfig(**env_kwargs).history
    meta = {"env": env_kwargs, "seed": seed, "route": "batched" if task.batched else "pettingzoo", "policy": policy, "iterations": iterations,
            "frames_per_batch": frames_per_batch, **({"init": str(init)} if init is not None else {})}
    record = RecordCallback(out, meta, Path(init) if init is not None else None)
    config = ExperimentConfig.get_from_yaml()
    config.sampling_device = config.train_device = config.buffer_device = "cpu"
    config.max_n_iters, config.max_n_frames = iterations, None
    config.on_policy_collected_frames_per_batch = frames_per_batch
    config.on_policy_n_envs_per_worker = n_envs
    config.on_policy_minibatch_size = minibatch_size
    config.on_policy_n_minibatch_iters = minibatch_iters
    config.lr = lr
    config.evaluation, config.render, config.loggers, config.create_json = False, False, [], False
    config.checkpoint_interval, config.checkpoint_at_end = 0, False
    folder = Path(tempfile.mkdtemp(prefix="benchmarl_core_"))
    config.save_folder = str(folder)
    if policy == "slot":
        config.clip_grad_val = 0.5
        algorithm = SlotMappoConfig.default(entropy_coef=ent_coef, lmbda=0.95, clip_epsilon=0.2)
        model, critic_model = SlotConfig(history, hidden), SlotConfig(history, hidden)
    else:
        algorithm = dataclasses.replace(MappoConfig.get_from_yaml(), entropy_coef=ent_coef)
        model, critic_model = MlpConfig.get_from_yaml(), MlpConfig.get_from_yaml()
    experiment = Experiment(task=task, algorithm_config=algorithm, model_config=model, critic_model_config=critic_model, seed=seed,
                            config=config, callbacks=[record])
    start = time.perf_counter()
    experiment.run()
    seconds = time.perf_counter() - start
    torch.set_num_threads(previous_threads)
    log, quarter = record.log, max(1, len(record.log) // 4)
    totals = log.summary()
    report = {"library": "benchmarl", "algorithm": f"MAPPO ({'per-slot policy, conflict-free joint action' if policy == 'slot' else 'BenchMARL defaults, MLP'})",
              "route": meta["route"], "policy": policy, "env": env_kwargs, "n_envs": n_envs, "iterations": iterations,
              "env_steps": iterations * frames_per_batch, "seconds": round(seconds, 2), "loss": record.losses, "episodes": log.episodes,
              "first": EpisodeLog(log.episodes[:quarter]).summary(), "last": log.summary(quarter), "all": totals,
              "invalid_actions": totals.get("invalid_actions", 0), "conflicts": totals.get("conflicts", 0),
              "conflict_rule": "sequential: node i cannot pick a task taken by nodes < i (no env conflicts)" if policy == "slot" else
              "independent per-node actions; env resolves conflicts (lowest index wins) and counts them"}
    if verbose:
        print(f"benchmarl {report['algorithm']}: {iterations} iterations, {len(log)} episodes in {seconds:.1f}s; completion "
              f"{report['first'].get('completion_rate', float('nan')):.3f} -> {report['last'].get('completion_rate', float('nan')):.3f}; "
              f"invalid actions {report['invalid_actions']}, conflicts {report['conflicts']}", flush=True)
    if out is not None and policy == "slot":
        from mara_agents.integrations import slot_policy

        with slot_nets(experiment) as (actor, critic):
            report["checkpoint"] = str(slot_policy.save_checkpoint(out / slot_policy.POLICY_FILE, FORMAT, actor, critic, meta))
    experiment.close()
    return report


def compare_routes(config: Path | str | None = None, *, iterations: int = 2, frames_per_batch: int = 2048, n_envs: int = 8,
                   seed: int = 0) -> dict[str, Any]:
    """The same short MAPPO run (BenchMARL's MLP policy, ``n_envs`` envs per collector) on both routes, one after
    the other on this machine: wall seconds and env steps per second of each, and their ratio."""
    runs = {}
    for route in ROUTES:
        report = train(load_task(config, route), iterations=iterations, frames_per_batch=frames_per_batch, minibatch_size=min(512, frames_per_batch),
                       minibatch_iters=1, seed=seed, n_envs=n_envs, verbose=False)
        runs[route] = {"seconds": report["seconds"], "env_steps": report["env_steps"],
                       "env_steps_per_s": round(report["env_steps"] / report["seconds"], 1)}
        print(f"{route}: {report['env_steps']} env steps in {report['seconds']:.1f}s ({runs[route]['env_steps_per_s']:.1f} env steps/s)", flush=True)
    ratio = runs["batched"]["env_steps_per_s"] / runs["pettingzoo"]["env_steps_per_s"]
    print(f"batched / pettingzoo: {ratio:.1f}x the env steps per second")
    return {"suite": "benchmarl-routes", "env": report["env"], "n_envs": n_envs, "iterations": iterations, "frames_per_batch": frames_per_batch,
            "policy": "mlp", "routes": runs, "ratio": round(ratio, 1)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m mara_agents.integrations.benchmarl_task", description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", type=Path, default=None, help="task YAML (default benchmarl_conf/discrete_core.yaml)")
    parser.add_argument("--small", action="store_true", help="use benchmarl_conf/discrete_core_small.yaml")
    parser.add_argument("--route", choices=tuple(ROUTES), default="pettingzoo", help="the env BenchMARL collects from (module docstring)")
    parser.add_argument("--policy", choices=POLICIES, default="mlp", help="BenchMARL's MLP, or the per-slot policy (--route batched)")
    parser.add_argument("--n-envs", type=int, default=1, help="envs per collector")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--frames-per-batch", type=int, default=1024)
    parser.add_argument("--minibatch-size", type=int, default=256)
    parser.add_argument("--minibatch-iters", type=int, default=8, help="passes over each batch (each of frames/minibatch gradient steps)")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--ent-coef", type=float, default=None, help="entropy coefficient (default 0.01 with --policy slot, else BenchMARL's 0)")
    parser.add_argument("--init", type=Path, default=None, help="--policy slot: start from this checkpoint's weights (e.g. DIR/snapshot.pt)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="run directory: train.json (and policy.pt, snapshot.pt with --policy slot)")
    parser.add_argument("--eval-episodes", type=int, default=8, help="--policy slot with --out: greedy evaluation episodes after training (seeds 10000+)")
    parser.add_argument("--compare-routes", action="store_true",
                        help="instead of training: the same short MLP run on both routes side by side (--iterations, --frames-per-batch, "
                             "--n-envs); writes OUT/benchmarl_routes.json")
    args = parser.parse_args(argv)
    for name in ("n_envs", "iterations", "frames_per_batch", "minibatch_size", "minibatch_iters"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    ent_coef = args.ent_coef if args.ent_coef is not None else 0.01 if args.policy == "slot" else 0.0
    if args.compare_routes:
        from mara_agents.integrations.slot_policy import finish_cli

        task_file = CONF / "discrete_core_small.yaml" if args.small else args.task
        result = compare_routes(task_file, iterations=args.iterations, frames_per_batch=args.frames_per_batch, n_envs=args.n_envs, seed=args.seed)
        result = finish_cli(result, module="mara_agents.integrations.benchmarl_task", argv=argv, threads=args.threads, out=None, env_kwargs={})
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            write_atomic(args.out / "benchmarl_routes.json", (json.dumps(result, indent=1) + "\n").encode())
        return result
    try:
        task = load_task(CONF / "discrete_core_small.yaml" if args.small else args.task, args.route)
        report = train(task, iterations=args.iterations, frames_per_batch=args.frames_per_batch, minibatch_size=args.minibatch_size,
                       minibatch_iters=args.minibatch_iters, seed=args.seed, policy=args.policy, n_envs=args.n_envs, lr=args.lr,
                       ent_coef=ent_coef, threads=args.threads, out=args.out, init=args.init)
    except ValueError as error:  # a bad argument or checkpoint: a CLI error (exit 2), not a traceback
        parser.error(str(error))
    from mara_agents.integrations.slot_policy import finish_cli

    return finish_cli(report, module="mara_agents.integrations.benchmarl_task", argv=argv, threads=args.threads, out=args.out,
                      env_kwargs=report["env"], eval_episodes=args.eval_episodes, load=load_agent if args.policy == "slot" else None)


if __name__ == "__main__":
    main()
