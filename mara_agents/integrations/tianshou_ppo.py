"""Masked PPO with Tianshou (2.x) on the centralized Gymnasium view of core_env.

One policy is shared by all nodes (:class:`~mara_agents.integrations.nets.SlotActor`: the same weights
score every (node, slot) pair) and trained through Tianshou's own ``Collector`` and ``OnPolicyTrainer``
with Tianshou's ``PPO`` algorithm on ``gym.make("core_env/DiscreteCoRE-v1")`` (MultiDiscrete actions,
one joint action per step, scalar team reward).

**Masks.** Tianshou's PPO never reads masks itself; here the actor returns the logits *and* the env's
``action_mask`` and the distribution (:class:`~mara_agents.integrations.nets.SequentialMaskedCategorical`)
puts ``-1e9`` on masked logits. **Conflicts** (two nodes on one task) are resolved *sequentially*: node i
cannot pick a task that nodes 0..i-1 already picked this step, and the log-probability PPO uses is the
exact probability of the joint action under that rule. So no invalid action and no conflict is ever sent
to the env; the training report counts both from the env's infos (they stay 0).

**Predictor features** (``--predictor fm`` or ``wls``): the env is wrapped in
:class:`~mara_agents.predictors.features.GymPredictorFeatures`, which appends each slot's predicted
remaining demand, its spread and the probability that it fits the steps to deadline; the same per-slot
MLP then reads them beside the slot's own features (``SlotActor(extra=3)``). The trained agent rebuilds
them from its own observations (:class:`~mara_agents.predictors.features.ObservedFeatures`), as the
MAT agents do.

Run::

    python -m mara_agents.integrations.tianshou_ppo --epochs 10 --steps-per-epoch 4096 --out runs/tianshou_ppo
    python -m mara_agents.integrations.tianshou_ppo --predictor fm --out runs/tianshou_ppo_fm

which writes ``policy.pt`` (+ ``policy.json`` manifest and ``train.json`` with the learning curve).
:func:`load_agent` returns the trained policy as a :class:`mara_agents.protocols.Agent` (greedy by
default) for the benchmark row "PPO (Tianshou)".
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
from mara_agents.integrations import slot_policy
from mara_agents.integrations.common import SMALL_ENV, EpisodeLog, RecordEpisodes, cli_env_kwargs, make_gym_env, train_or_exit
from mara_agents.integrations.nets import SequentialMaskedCategorical, SlotActor, SlotCritic
from mara_agents.integrations.slot_policy import POLICY_FILE, SNAPSHOT_FILE, SlotPolicyAgent, evaluate
from mara_agents.predictors.features import PREDICTOR_FEATURE_NAMES

with needs(__name__):
    import torch
    from torch import nn

FORMAT = "mara_agents.integrations.tianshou_ppo/1"
MISSING = "no Tianshou PPO checkpoint (train one with python -m mara_agents.integrations.tianshou_ppo --out DIR)"
ROW_NAME = "PPO (Tianshou)"
#: The shipped policy: trained with the module's defaults (env defaults N=4, K=16, 8 epochs x 4096 steps, seed 0).
SHIPPED_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "tianshou_ppo" / POLICY_FILE
#: The shipped policy on flow-matching predictor features (``--predictor fm``; its train.json says how).
SHIPPED_FM_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "tianshou_ppo_fm" / POLICY_FILE
#: Predictors whose features a policy may read (``--predictor``).
PREDICTOR_CHOICES = ("fm", "wls")
PREDICTOR_FEATURES = len(PREDICTOR_FEATURE_NAMES)


# --------------------------------------------------------------------------------------------------
# Tianshou glue: the obs Batch -> tensors


def _obs_tensors(obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, N, D) float32 observations and (B, N, K+1) masks from Tianshou's obs Batch (numpy or torch)."""
    return (torch.as_tensor(np.asarray(obs.observation) if not torch.is_tensor(obs.observation) else obs.observation, dtype=torch.float32),
            torch.as_tensor(np.asarray(obs.action_mask) if not torch.is_tensor(obs.action_mask) else obs.action_mask))


class JointActor(nn.Module):
    """Tianshou actor: obs Batch -> ((logits (B, N, K+1), mask (B, N, K+1)), state)."""

    def __init__(self, net: SlotActor) -> None:
        super().__init__()
        self.net = net

    def forward(self, obs: Any, state: Any = None, info: Any = None):
        observation, mask = _obs_tensors(obs)
        return (self.net(observation), mask), state


class JointCritic(nn.Module):
    """Tianshou critic: obs Batch -> V(s) (B,)."""

    def __init__(self, net: SlotCritic) -> None:
        super().__init__()
        self.net = net

    def forward(self, obs: Any) -> torch.Tensor:
        return self.net(_obs_tensors(obs)[0])


def _policy_class():
    with needs(__name__):
        from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy
        from tianshou.data import Batch

    class JointMaskedPolicy(ProbabilisticActorPolicy):
        """ProbabilisticActorPolicy whose distribution knows the masks; in the update the stored joint
        action is also handed to the distribution so the entropy bonus follows it."""

        def forward(self, batch, state=None):
            (logits, mask), hidden = self.actor(batch.obs, state=state, info=batch.get("info"))
            act = batch.get("act")
            path = torch.as_tensor(np.asarray(act) if not torch.is_tensor(act) else act).long() if act is not None else None
            dist = SequentialMaskedCategorical(logits, mask, path)
            sample = dist.mode if self.deterministic_eval and not self.is_within_training_step else dist.sample()
            return Batch(logits=logits, act=sample, state=hidden, dist=dist)

    return JointMaskedPolicy


def _ppo_class():
    with needs(__name__):
        from tianshou.algorithm import PPO

    class RecordingPPO(PPO):
        """Tianshou's PPO, unchanged, that also keeps every update's mean losses."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.loss_history: list[dict[str, float]] = []

        def _update_with_batch(self, batch, batch_size, repeat):
            stats = super()._update_with_batch(batch, batch_size, repeat)
            self.loss_history.append({k: float(getattr(stats, k).mean) for k in ("loss", "actor_loss", "vf_loss", "ent_loss")})
            return stats

    return RecordingPPO


# --------------------------------------------------------------------------------------------------
# Training


def train(env_kwargs: Mapping[str, Any] | None = None, *, epochs: int = 10, steps_per_epoch: int = 4096, collect_steps: int = 1024,
          n_envs: int = 4, batch_size: int = 256, repeat: int = 4, lr: float = 3e-4, hidden: int = 64, gamma: float = 0.99,
          gae_lambda: float = 0.95, ent_coef: float = 0.01, seed: int = 0, out: Path | str | None = None,
          threads: int | None = 1, predictor: str | None = None, init: Path | str | None = None, verbose: bool = True) -> dict[str, Any]:
    """Train masked PPO with Tianshou's collector and trainer; return a report (and write a checkpoint to ``out``).

    Args:
        env_kwargs: core_env keyword arguments (EnvConfig names); default: the env's defaults.
        epochs / steps_per_epoch: Tianshou trainer epochs and env steps per epoch (total steps = product).
        collect_steps: env steps collected (over ``n_envs`` envs) before each PPO update.
        batch_size / repeat: PPO minibatch size and passes over each collected batch.
        threads: torch intra-op threads (None: leave torch's default).
        predictor: ``"fm"`` or ``"wls"``: append that predictor's per-slot features to the observation
            (module docstring); None: the plain observation.
        init: a checkpoint (or run directory) whose actor and critic weights training starts from, e.g. the
            snapshot an interrupted run left: with ``out``, ``snapshot.pt`` is rewritten after every epoch
            (the optimizer's state starts afresh on resume).

    Returns:
        ``{"loss": [...], "episodes": [...], "first": {...}, "last": {...}, "env_steps", "seconds", "checkpoint"}``
        where ``first``/``last`` summarize the completion rate, invalid actions and conflicts of the first and
        last quarter of the training episodes.
    """
    with needs(__name__):
        from tianshou.algorithm.optim import AdamOptimizerFactory
        from tianshou.data import Collector, VectorReplayBuffer
        from tianshou.env import DummyVectorEnv
        from tianshou.trainer import OnPolicyTrainerParams

    if predictor is not None and predictor not in PREDICTOR_CHOICES:
        raise ValueError(f"predictor must be one of {PREDICTOR_CHOICES} or None, got {predictor!r}")
    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    env_kwargs = dict(env_kwargs or {})
    torch.manual_seed(seed)
    np.random.seed(seed)
    log = EpisodeLog()
    venv = DummyVectorEnv([lambda: RecordEpisodes(_make_env(env_kwargs, predictor), log) for _ in range(n_envs)])
    venv.seed([seed * 1000 + i for i in range(n_envs)])
    history, extra = venv.get_env_attr("config", [0])[0].history, 0 if predictor is None else PREDICTOR_FEATURES
    actor_net, critic_net = SlotActor(history, hidden, extra), SlotCritic(history, hidden, extra)
    if init is not None:
        _load_weights(init, actor_net, critic_net)
    meta = {"env": env_kwargs, "seed": seed, "epochs": epochs, "steps_per_epoch": steps_per_epoch, "predictor": predictor,
            **({"init": str(init)} if init is not None else {}), **_predictor_sha(predictor)}

    finished = [0]

    def snapshot(epoch: int, env_step: int) -> None:  # called before each collection: once per epoch, keep the last one's weights, log progress
        if epoch - 1 <= finished[0]:
            return
        finished[0] = epoch - 1
        if out is not None:
            Path(out).mkdir(parents=True, exist_ok=True)
            save_checkpoint(Path(out) / SNAPSHOT_FILE, actor_net, critic_net, {**meta, "epoch": epoch - 1, "env_step": env_step})
        if verbose:
            recent = log.summary(20)
            print(f"epoch {epoch - 1}/{epochs}: {env_step} env steps, {len(log)} episodes, {time.perf_counter() - start:.0f}s; "
                  f"completion of the last {recent['episodes']} training episodes {recent.get('completion_rate', float('nan')):.3f}", flush=True)

    policy = _policy_class()(actor=JointActor(actor_net), dist_fn=lambda x: x, action_space=venv.action_space[0],
                             observation_space=venv.observation_space[0], action_scaling=False, action_bound_method=None,
                             deterministic_eval=True)
    algorithm = _ppo_class()(policy=policy, critic=JointCritic(critic_net), optim=AdamOptimizerFactory(lr=lr), gamma=gamma,
                             gae_lambda=gae_lambda, ent_coef=ent_coef, vf_coef=0.5, max_grad_norm=0.5, eps_clip=0.2)
    collector = Collector(algorithm, venv, VectorReplayBuffer(collect_steps, n_envs))
    collector.reset()
    params = OnPolicyTrainerParams(training_collector=collector, max_epochs=epochs, epoch_num_steps=steps_per_epoch,
                                   collection_step_num_env_steps=collect_steps, batch_size=batch_size,
                                   update_step_num_repetitions=repeat, test_collector=None, show_progress=False, verbose=False,
                                   training_fn=snapshot)
    start = time.perf_counter()
    result = algorithm.run_training(params)
    seconds = time.perf_counter() - start
    venv.close()
    torch.set_num_threads(previous_threads)
    quarter = max(1, len(log) // 4)
    report = {"library": "tianshou", "row": ROW_NAME, "env": env_kwargs, "predictor": predictor, "epochs": epochs, "env_steps": int(result.train_step),
              "updates": len(algorithm.loss_history), "seconds": round(seconds, 2), "loss": [h["loss"] for h in algorithm.loss_history],
              "episodes": log.episodes, "first": _head(log, quarter), "last": log.summary(quarter), "all": log.summary(),
              "conflict_rule": "sequential: node i cannot pick a task taken by nodes < i (no env conflicts)"}
    if verbose:
        print(f"tianshou PPO: {report['updates']} updates, {len(log)} episodes in {seconds:.1f}s; completion first quarter "
              f"{report['first'].get('completion_rate', float('nan')):.3f} -> last quarter {report['last'].get('completion_rate', float('nan')):.3f}; "
              f"invalid actions {log.summary()['invalid_actions'] if len(log) else 0}, conflicts {log.summary()['conflicts'] if len(log) else 0}")
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        report["checkpoint"] = str(save_checkpoint(out / POLICY_FILE, actor_net, critic_net, meta))
        write_atomic(out / "train.json", (json.dumps(report, indent=1, default=float) + "\n").encode())
    return report


def _make_env(env_kwargs: Mapping[str, Any], predictor: str | None):
    env = make_gym_env(**env_kwargs)
    if predictor is None:
        return env
    from mara_agents.mat.agent import make_predictor
    from mara_agents.predictors.features import GymPredictorFeatures

    return GymPredictorFeatures(env, make_predictor(predictor))


def _predictor_sha(predictor: str | None) -> dict[str, str]:
    """``{"<name>_sha256": ...}`` of the shipped predictor checkpoint behind the features (empty without one)."""
    from mara_agents.mat.agent import shipped_predictor_sha256

    sha = shipped_predictor_sha256(predictor) if predictor else None
    return {f"{predictor}_sha256": sha} if sha else {}


def _load_weights(path: Path | str, actor: SlotActor, critic: SlotCritic) -> None:
    slot_policy.load_weights(path, FORMAT, actor, critic)


def _head(log: EpisodeLog, n: int) -> dict[str, float]:
    return EpisodeLog(log.episodes[:n]).summary()


# --------------------------------------------------------------------------------------------------
# Checkpoints and the Agent


def save_checkpoint(path: Path | str, actor: SlotActor, critic: SlotCritic | None = None, meta: Mapping[str, Any] | None = None) -> Path:
    """Write ``policy.pt`` (format :data:`FORMAT`) and its ``.json`` manifest (:func:`slot_policy.save_checkpoint`)."""
    return slot_policy.save_checkpoint(path, FORMAT, actor, critic, meta)


#: A trained Tianshou policy as an Agent (the shared per-slot policy agent).
TianshouPPOAgent = SlotPolicyAgent


def load_agent(path: Path | str = SHIPPED_CHECKPOINT, deterministic: bool = True, predictor=None) -> SlotPolicyAgent:
    """The :class:`~mara_agents.integrations.slot_policy.SlotPolicyAgent` of a Tianshou checkpoint
    (``policy.pt`` or a run directory holding one; default: the shipped :data:`SHIPPED_CHECKPOINT`), for the
    benchmark row :data:`ROW_NAME`. A policy trained on predictor features gets a fresh predictor of the
    kind its manifest names, unless ``predictor`` is given.

    Raises:
        ValueError: missing file or manifest (``policy.json``, required), another format, a checksum
            that does not match the manifest, or (without ``predictor``) features from a shipped predictor
            checkpoint that has changed since training.
    """
    return slot_policy.load_agent(path, FORMAT, MISSING, deterministic=deterministic, predictor=predictor, name=ROW_NAME)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m mara_agents.integrations.tianshou_ppo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/tianshou_ppo"), help="run directory for policy.pt, policy.json, train.json")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--steps-per-epoch", type=int, default=4096, help="env steps per trainer epoch")
    parser.add_argument("--collect-steps", type=int, default=1024, help="env steps per PPO update")
    parser.add_argument("--n-envs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=4, help="PPO passes per collected batch")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--ent-coef", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--predictor", choices=PREDICTOR_CHOICES, default=None, help="append this predictor's per-slot features to the observation")
    parser.add_argument("--init", type=Path, default=None, help="start from this checkpoint's weights (e.g. DIR/snapshot.pt of an interrupted run)")
    parser.add_argument("--small", action="store_true", help=f"train on the small test config {SMALL_ENV}")
    parser.add_argument("--env", type=json.loads, default=None, help='core_env kwargs as JSON, e.g. \'{"n_nodes": 4, "n_slots": 16}\'')
    parser.add_argument("--eval-episodes", type=int, default=8, help="greedy evaluation episodes after training (seeds 10000+)")
    args = parser.parse_args(argv)
    env_kwargs = cli_env_kwargs(args)
    report = train_or_exit(parser, train, env_kwargs, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                           collect_steps=args.collect_steps, n_envs=args.n_envs, batch_size=args.batch_size, repeat=args.repeat,
                           lr=args.lr, ent_coef=args.ent_coef, seed=args.seed, out=args.out, threads=args.threads,
                           predictor=args.predictor, init=args.init)
    return slot_policy.finish_cli(report, module="mara_agents.integrations.tianshou_ppo", argv=argv, threads=args.threads, out=args.out,
                                  env_kwargs=env_kwargs, eval_episodes=args.eval_episodes, load=load_agent)


if __name__ == "__main__":
    main()
