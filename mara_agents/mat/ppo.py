"""PPO trainer for the MAT allocator (MARA and its ablations), in the spirit of CleanRL's ppo.py.

Usage::

    python -m mara_agents.mat.ppo --variant mara --seed 0 --minutes 60 --out runs/mara_s0
    python -m mara_agents.mat.ppo --variant mat --steps 100000 --n-nodes 8 --n-slots 32 --load x1.5 --task-set rl_ood --out runs/mat_n8

The environment flags (``--n-nodes``, ``--n-slots``, ``--load``, ``--task-set``) set the EnvConfig trained on;
left out, it is the benchmark's (N = 4, K = 16, the train load on ``id``).

Variants (:data:`VARIANTS`): ``mara`` (flow-matching predictor features, shaped reward), ``mara-wls``
(WLS features, shaped), ``mara-sparse`` (FM features, sparse reward), ``mat`` (no predictor features,
shaped), ``mara-pfn`` (PFN predictor features, shaped; issue 27), ``mara-post`` / ``mara-post-sparse`` (PFN
features plus each slot's truncated Gittins index, shaped / sparse; issue 48). Rerunning the same command resumes from ``OUT/train_state.pt``.

One iteration:

1. **Rollout.** ``num_envs`` environments, split into ``env_groups`` groups (one
   :class:`core_env.vector.DiscreteCoREVectorEnv` each, autoreset disabled, staggered in episode phase),
   played by :func:`mara_agents.rollout.play`. Every environment plays
   seeded workloads drawn from the task set's *train* curves at the training load (never the
   evaluation suites); a group whose episodes have all ended starts fresh ones. Environments whose
   episode ended before the rest of their group are frozen and masked out of the loss. The policy
   samples one joint action per step (autoregressive over nodes, :class:`MATModel.act`) and the masks
   it applied are stored.
2. **Advantages.** GAE per node on the team reward, γ = 1 (episodes are finite and end at a true
   terminal state), λ = 0.95; values live in units normalized by a running (EMA) mean/std of returns.
3. **Update.** ``epochs`` × ``minibatches`` passes of clipped PPO over (step, env) samples (all nodes
   of a step kept together), entropy bonus, value loss, gradient clipping, Adam. Policy loss and
   entropy count only nodes with a real choice (more than one allowed action).

Logged per iteration (tqdm bar, ``OUT/metrics.jsonl``, TensorBoard if installed): approximate KL,
clip fraction, explained variance, entropy, losses, env-steps/s, training completion rate; every few
minutes (and once at the start, on the random initialisation) a deterministic evaluation on fixed seeded
*training-curve* workloads.

The file reads in CleanRL's order: the arguments (:mod:`mara_agents.mat.ppo_config`: hyperparameters,
their limits, the command line), the environments, the model's play, the value normaliser, then the
:class:`Trainer`'s rollout (:meth:`Trainer.collect`), advantages (:meth:`Trainer.advantages`, GAE), PPO
epochs (:meth:`Trainer.update`) and diagnostics; checkpoint I/O and resume compatibility live in
:mod:`mara_agents.mat.train_state`.

Outputs in OUT: ``train_state.pt`` (everything needed to resume: model, optimizer, value normalizer,
RNG states, counters, elapsed wall time; written atomically every few minutes, at the end and on
Ctrl-C / SIGTERM) and, at the end, ``mat.pt`` (policy only) with its manifest ``mat.json``.
Environments are not checkpointed: a resumed run starts fresh episodes. An OUT inside the package's shipped
checkpoints (``mara_agents/checkpoints/``) exits 2 unless ``--overwrite-shipped`` is given.
"""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from core_env.config import EnvConfig
from core_env.extras import MissingExtra, needs
from core_env.npz import write_atomic
from core_env.vector import DiscreteCoREVectorEnv
from core_env.generators import generator_for
from core_env.workload import Workload
from mara_agents import rollout
from mara_agents.checkpoint_files import non_finite_tensors
from mara_agents.cli_checks import unwritable
from mara_agents.mat.agent import POLICY_FILE, make_predictor, save_policy
from mara_agents.mat.model import MATConfig, MATModel, Tokens, observation_tokens
from mara_agents.mat.ppo_config import ENV_FLAGS, LIMITS, VARIANTS, PPOConfig, parse_args, parse_command  # noqa: F401  (the trainer's arguments)
from mara_agents.mat.train_state import (ADDED_ENV_FIELDS, METRICS_FILE, STATE_FILE, STATE_FORMAT, env_summary,  # noqa: F401
                                         identity, provenance, read_state, saved_env, write_state)
from mara_agents.predictors.features import predictor_observation, split_feature_set

with needs(__name__):
    import torch

#: Seed of the fixed evaluation workloads (training curves), the same for every training seed.
EVAL_SEED = 20260901

WorkloadFn = Callable[[np.random.Generator], Workload]

class TrainingDiverged(RuntimeError):
    """A loss or a parameter became NaN or infinite: training stops and no checkpoint is written."""


def training_workloads(config: EnvConfig) -> WorkloadFn:
    """Seeded workloads of ``config``'s own generator (:func:`core_env.generators.generator_for`: its task
    set's *train* curves at its load, by ``config.recipe``, as ``reset(seed=...)`` draws them)."""
    generator = generator_for(config)
    if not generator.trains:
        raise ValueError(f"task_set={config.task_set!r} is evaluation-only; train on a task set with training curves")
    return generator.workload


# --------------------------------------------------------------------------------------------------
# Environments


def training_envs(config: EnvConfig, batch: int, predictor=None, index: bool = False) -> DiscreteCoREVectorEnv:
    """``batch`` environments of the vector env (autoreset disabled: an ended episode is frozen until the
    trainer resets them all); with a predictor, a :class:`SlotPredictions` observes them and
    :func:`predictor_observation` appends its features to what the model sees (with ``index``, the truncated
    Gittins index as a 4th per slot)."""
    from mara_agents.predictors.features import SlotPredictions

    envs = DiscreteCoREVectorEnv(batch, autoreset_mode="disabled", config=config)
    if predictor is not None:
        SlotPredictions(predictor, index=index).attach(envs.batch)
    return envs


def play(model: MATModel, model_config: MATConfig, envs: DiscreteCoREVectorEnv, workloads: list[Workload],
         deterministic: bool = True, generator: torch.Generator | None = None) -> dict[str, np.ndarray]:
    """Play ``workloads`` to the end with the model (with the envs' predictor features); final statistics."""
    K = envs.batch.K

    def act(observation: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return model.decide(observation_tokens(observation, K, model_config), torch.from_numpy(mask.astype(bool)), deterministic, generator).numpy()

    with torch.inference_mode():
        return rollout.final_statistics(rollout.play(envs, act, workloads, observe=predictor_observation))


# --------------------------------------------------------------------------------------------------
# Value normalization


class ValueNormalizer:
    """EMA mean/std of returns with bias correction (MAT's ValueNorm with a faster decay)."""

    def __init__(self, decay: float) -> None:
        self.decay = decay
        self.mean = self.mean_sq = self.weight = 0.0

    def update(self, x: torch.Tensor) -> None:
        d = self.decay
        self.mean = d * self.mean + (1 - d) * float(x.mean())
        self.mean_sq = d * self.mean_sq + (1 - d) * float((x * x).mean())
        self.weight = d * self.weight + (1 - d)

    @property
    def stats(self) -> tuple[float, float]:
        if self.weight == 0.0:
            return 0.0, 1.0
        mean = self.mean / self.weight
        var = max(self.mean_sq / self.weight - mean * mean, 1e-4)
        return mean, math.sqrt(var)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = self.stats
        return (x - mean) / std

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = self.stats
        return x * std + mean

    def state_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "mean_sq": self.mean_sq, "weight": self.weight}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.mean, self.mean_sq, self.weight = state["mean"], state["mean_sq"], state["weight"]


# --------------------------------------------------------------------------------------------------
# The trainer


class Trainer:
    """PPO on MAT; :meth:`run` trains until a budget is spent or a stop is requested, resuming from ``out``.

    Args:
        cfg: hyperparameters and stop conditions.
        out: output directory (checkpoints, manifest, metrics).
        env_config: environment (default EnvConfig() with the variant's reward).
        workload_fn: draws one training workload from a numpy Generator (default: the task set's train
            curves at the configured load, :func:`training_workloads`).
        quiet: no progress bar and no TensorBoard.
        callback: called with the trainer after every iteration (tests use it to request a stop).
    """

    def __init__(self, cfg: PPOConfig, out: Path | str, env_config: EnvConfig | None = None,
                 workload_fn: WorkloadFn | None = None, quiet: bool = False,
                 callback: Callable[[Trainer], None] | None = None) -> None:
        self.cfg, self.out, self.quiet, self.callback = cfg, Path(out), quiet, callback
        env_config = env_config or EnvConfig()
        self.env_config = dataclasses.replace(env_config, reward=cfg.reward)
        self.workload_fn = workload_fn or training_workloads(self.env_config)
        self.model_config = cfg.model_config(self.env_config.history)
        self.model = MATModel(self.model_config, seed=cfg.seed)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
        self.value_norm = ValueNormalizer(cfg.value_norm_decay)
        self.workload_rng = np.random.default_rng([cfg.seed, 1])
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.env_steps = self.updates = self.episodes = 0
        self.pretrained = False  # behaviour cloning on the teacher's demonstrations done
        self.demos = None  # mara_agents.mat.imitation.Demonstrations when a teacher is configured
        self.pretraining: dict[str, Any] = {}
        self.elapsed = 0.0  # wall seconds over all runs
        self.evals: list[dict[str, Any]] = []
        self.baselines: dict[str, float] = {}
        self.stop_requested = False
        self._predictor = make_predictor(cfg.predictor)
        self._index = bool(cfg.predictor) and split_feature_set(cfg.predictor)[1]  # a -post feature set
        self._eval_workloads = [self.workload_fn(np.random.default_rng([EVAL_SEED, i])) for i in range(cfg.eval_episodes)]
        self._recent_completion: list[float] = []

    # ------------------------------------------------------------------ state
    def _identity(self) -> dict[str, Any]:
        """What must match for a resume (:func:`mara_agents.mat.train_state.identity`)."""
        return identity(self.cfg, self.model_config, self.env_config)

    def state_dict(self) -> dict[str, Any]:
        return {"format": STATE_FORMAT, "identity": self._identity(),
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "value_norm": self.value_norm.state_dict(),
                "workload_rng": self.workload_rng.bit_generator.state, "generator": self.generator.get_state(),
                "counters": {"env_steps": self.env_steps, "updates": self.updates, "episodes": self.episodes, "elapsed": self.elapsed,
                             "pretrained": self.pretrained}, "pretraining": self.pretraining,
                "evals": self.evals, "baselines": self.baselines}

    def save(self) -> None:
        self.check_finite("training")  # a diverged state is never written
        write_state(self.out / STATE_FILE, self.state_dict())

    def load(self) -> bool:
        """Resume from ``out/train_state.pt`` if it exists; ValueError if it belongs to another run or fails
        its checksum (:func:`mara_agents.mat.train_state.read_state`)."""
        state = read_state(self.out / STATE_FILE, self._identity())
        if state is None:
            return False
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.value_norm.load_state_dict(state["value_norm"])
        self.workload_rng.bit_generator.state = state["workload_rng"]
        self.generator.set_state(state["generator"])
        counters = state["counters"]
        self.env_steps, self.updates, self.episodes, self.elapsed = (counters[k] for k in ("env_steps", "updates", "episodes", "elapsed"))
        self.pretrained, self.pretraining = bool(counters.get("pretrained", False)), dict(state.get("pretraining", {}))
        self.evals, self.baselines = list(state["evals"]), dict(state["baselines"])
        return True

    def budget_spent(self) -> bool:
        cfg = self.cfg
        return ((cfg.minutes is not None and self.elapsed >= 60.0 * cfg.minutes)
                or (cfg.steps is not None and self.env_steps >= cfg.steps))

    # ------------------------------------------------------------------ rollout
    def _start_groups(self) -> None:
        from mara_agents.heuristics.random import RandomAgent

        cfg = self.cfg
        size = cfg.num_envs // cfg.env_groups
        self.groups = [training_envs(self.env_config, size, self._predictor, self._index) for _ in range(cfg.env_groups)]
        if self._predictor is not None and len(self.groups) > 1:
            from mara_agents.predictors.features import predict_together

            predict_together([envs.batch for envs in self.groups])  # one predictor call per step for every group
        warmup = RandomAgent(seed=cfg.seed)
        for g, envs in enumerate(self.groups):  # stagger episode phases
            rollout.play(envs, warmup.act, self._workloads(size), steps=g * self.env_config.arrival_steps // cfg.env_groups)

    def _workloads(self, count: int) -> list[Workload]:
        return [self.workload_fn(self.workload_rng) for _ in range(count)]

    def _tokens(self, observation: np.ndarray) -> Tokens:
        return observation_tokens(observation, self.env_config.n_slots, self.model_config)

    def collect(self) -> dict[str, torch.Tensor] | None:
        """One rollout of ``cfg.rollout`` steps of every environment (None if a stop was requested).

        Every group plays on in :func:`mara_agents.rollout.play` (one joint model decision per step); a
        group whose episodes have all ended starts fresh ones."""
        steps: list[dict[str, torch.Tensor]] = []
        decided: dict[str, Any] = {}

        def act(observation: np.ndarray, mask: np.ndarray) -> np.ndarray:
            tokens = self._tokens(observation)
            actions, logp, masks, values = self.model.act(tokens, torch.from_numpy(mask.astype(bool)), generator=self.generator)
            decided.update(nodes=tokens.nodes, slots=tokens.slots, last=tokens.last, masks=masks, actions=actions, logp=logp, values=values)
            return actions.numpy()

        def on_step(step: rollout.Transition) -> None:
            if step.ended.any():
                self._recent_completion.extend(step.infos["completion_rate"][step.ended].tolist())
            steps.append({**decided, "reward": torch.from_numpy(step.rewards).float(), "valid": torch.from_numpy(step.live),
                          "done": torch.from_numpy(step.ended | ~step.live)})
            self.env_steps += int(step.live.sum())

        def restart(_: int, envs: DiscreteCoREVectorEnv):
            self.episodes += envs.num_envs
            return envs.reset(options=[{"workload": w} for w in self._workloads(envs.num_envs)])

        with torch.no_grad():  # not inference_mode: stored tensors feed the update's autograd graph
            played = rollout.play(self.groups, act, observe=predictor_observation, on_step=on_step, steps=self.cfg.rollout, restart=restart,
                                  stop=lambda: self.stop_requested)
            if played.stopped:
                return None
            next_values = self.model.values(self._tokens(played.observe()[0]))
        batch = {key: torch.stack([s[key] for s in steps]) for key in steps[0]}
        batch["next_values"] = next_values
        return batch

    def advantages(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE (per node, team reward) in return units: advantages and returns, (T, B, N)."""
        cfg = self.cfg
        values = self.value_norm.denormalize(batch["values"])
        next_values = self.value_norm.denormalize(batch["next_values"])
        T = values.shape[0]
        advantages = torch.zeros_like(values)
        last = torch.zeros_like(values[0])
        for t in reversed(range(T)):
            nonterminal = (~batch["done"][t]).float().unsqueeze(-1)
            following = next_values if t == T - 1 else values[t + 1]
            delta = batch["reward"][t].unsqueeze(-1) + cfg.gamma * following * nonterminal - values[t]
            last = delta + cfg.gamma * cfg.gae_lambda * nonterminal * last
            advantages[t] = last
        return advantages, advantages + values

    # ------------------------------------------------------------------ update
    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        cfg = self.cfg
        advantages, returns = self.advantages(batch)
        valid = batch["valid"].reshape(-1)
        flat = {key: value.reshape(-1, *value.shape[2:])[valid] for key, value in batch.items() if key != "next_values"}
        advantages, returns = advantages.reshape(-1, advantages.shape[-1])[valid], returns.reshape(-1, returns.shape[-1])[valid]
        old_values = self.value_norm.denormalize(flat["values"])
        self.value_norm.update(returns)
        targets = self.value_norm.normalize(returns)
        decision = flat["masks"].sum(-1) > 1  # (M, N) nodes with a real choice
        chosen = advantages[decision]
        advantages = (advantages - chosen.mean()) / (chosen.std() + 1e-8) if chosen.numel() > 1 else advantages
        M = valid.sum().item()
        size = math.ceil(M / cfg.minibatches)
        log: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "entropy": [], "approx_kl": [], "clip_fraction": [], "demo_ce": []}
        bc_weight = self.bc_weight()
        for _ in range(cfg.epochs):
            order = torch.randperm(M, generator=self.generator)
            for start in range(0, M, size):
                i = order[start : start + size]
                tokens = Tokens(flat["nodes"][i], flat["slots"][i], flat["last"][i])
                logp, entropy, values = self.model.evaluate_actions(tokens, flat["masks"][i], flat["actions"][i])
                d = decision[i].float()
                n = d.sum().clamp(min=1.0)
                log_ratio = logp - flat["logp"][i]
                ratio = log_ratio.exp()
                adv = advantages[i]
                policy_loss = -(torch.min(ratio * adv, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * adv) * d).sum() / n
                value_loss = 0.5 * ((values - targets[i]) ** 2).mean()
                entropy_mean = (entropy * d).sum() / n
                loss = policy_loss - cfg.ent_coef * entropy_mean + cfg.vf_coef * value_loss
                if bc_weight > 0.0:  # DAPG: keep the teacher's actions likely, with a decaying weight
                    demo_ce, _ = self.demos.cross_entropy(self.model, torch.randint(len(self.demos), (len(i),), generator=self.generator))
                    loss = loss + bc_weight * demo_ce
                    log["demo_ce"].append(demo_ce.item())
                if not torch.isfinite(loss):
                    raise TrainingDiverged(f"PPO update {self.updates + 1}: the loss is {loss.item()} (policy {policy_loss.item()}, "
                                           f"value {value_loss.item()}, entropy {entropy_mean.item()}); lower --lr or check the "
                                           f"hyperparameters. No checkpoint was written for this state.")
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                with torch.no_grad():
                    log["policy_loss"].append(policy_loss.item())
                    log["value_loss"].append(value_loss.item())
                    log["entropy"].append(entropy_mean.item())
                    log["approx_kl"].append((((ratio - 1) - log_ratio) * d).sum().item() / n.item())
                    log["clip_fraction"].append((((ratio - 1).abs() > cfg.clip).float() * d).sum().item() / n.item())
        self.check_finite(f"PPO update {self.updates + 1}")
        self.updates += 1
        residual = (returns - old_values).var().item()
        metrics = {key: float(np.mean(values)) for key, values in log.items() if values}
        metrics["bc_weight"] = bc_weight
        metrics["explained_variance"] = 1.0 - residual / max(returns.var().item(), 1e-8)
        metrics["return_mean"], metrics["return_std"] = self.value_norm.stats
        return metrics

    def check_finite(self, when: str) -> None:
        """TrainingDiverged when a model parameter is NaN or infinite (after ``when``)."""
        bad = non_finite_tensors(self.model.state_dict())
        if bad:
            raise TrainingDiverged(f"after {when} the parameters {', '.join(bad[:5])} hold NaN or inf; lower --lr or check the "
                                   "hyperparameters. No checkpoint was written for this state.")

    def bc_weight(self) -> float:
        """Weight of the teacher's cross-entropy in the next update: ``bc_coef · bc_decay^u`` for update
        u < ``bc_until``, then 0 (no teacher: 0)."""
        cfg = self.cfg
        if self.demos is None or self.updates >= cfg.bc_until:
            return 0.0
        return cfg.bc_coef * cfg.bc_decay ** self.updates

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> float:
        """Mean completion rate of the deterministic policy on the fixed evaluation workloads."""
        envs = training_envs(self.env_config, len(self._eval_workloads), self._predictor, self._index)
        stats = play(self.model, self.model_config, envs, self._eval_workloads)
        return float(stats["completion_rate"].mean())

    def evaluate_baselines(self) -> dict[str, float]:
        from mara_agents.heuristics import EDF, RandomAgent

        envs = training_envs(self.env_config, len(self._eval_workloads))
        agents = [("edf", EDF()), ("random", RandomAgent(seed=0))] + ([(self.cfg.teacher, self._teacher())] if self.cfg.teacher else [])
        return {name: float(rollout.play(envs, agent, self._eval_workloads).infos["completion_rate"].mean()) for name, agent in agents}

    # ------------------------------------------------------------------ teacher warm start
    def _teacher(self):
        from mara_agents.mat.imitation import make_teacher

        return make_teacher(self.cfg.teacher)

    def pretrain(self) -> None:
        """Collect the teacher's demonstrations (or load them) and, once per run, clone them (imitation.py)."""
        from mara_agents.mat import imitation

        path = self.out / imitation.DEMONSTRATIONS_FILE
        if path.exists():
            self.demos = imitation.Demonstrations.load(path)
        else:
            rng = np.random.default_rng([self.cfg.seed, 2])
            workloads = [self.workload_fn(rng) for _ in range(self.cfg.demo_episodes)]
            envs = training_envs(self.env_config, len(workloads), self._predictor, self._index)
            parse = lambda obs: observation_tokens(obs, self.env_config.n_slots, self.model_config)  # noqa: E731
            self.demos = imitation.collect_demonstrations(self._teacher(), envs, workloads, parse)
            self.demos.save(path)
        if self.pretrained:
            return
        started = time.perf_counter()
        report = imitation.clone(self.model, self.demos, self.value_norm, self.optimizer, self.cfg.bc_epochs, self.cfg.bc_batch,
                                 self.cfg.vf_coef, self.cfg.max_grad_norm, self.generator)
        self.check_finite("behaviour cloning")
        self.pretraining = {**self.demos.info, **report, "clone_seconds": round(time.perf_counter() - started, 1)}
        self.pretrained = True

    # ------------------------------------------------------------------ main loop
    def request_stop(self, *_: Any) -> None:
        self.stop_requested = True

    def run(self) -> dict[str, Any]:
        """Train (resuming if a state exists) until the budget is spent or a stop is requested."""
        self.out.mkdir(parents=True, exist_ok=True)
        resumed = self.load()
        self._trim_metrics()
        handlers = self._install_signal_handlers()
        writer = self._tensorboard()
        bar = None
        try:
            if not self.baselines:
                self.baselines = self.evaluate_baselines()
            if not self.quiet:
                with needs(__name__):
                    from tqdm import tqdm

                bar = tqdm(total=self.cfg.steps, initial=self.env_steps, unit="env-step", dynamic_ncols=True,
                           desc=f"{self.cfg.variant} s{self.cfg.seed}" + (" (resumed)" if resumed else ""))
            started = time.perf_counter()
            base_elapsed, last_save = self.elapsed, self.elapsed
            if not self.evals and not self.budget_spent():
                self._record_eval({})  # the random initialisation: the wall-clock curve starts at 0
            if self.cfg.teacher and not self.budget_spent():
                was_pretrained = self.pretrained
                self.pretrain()  # counts towards the wall-clock budget
                if not was_pretrained:
                    self.elapsed = base_elapsed + (time.perf_counter() - started)
                    self._record_eval({})
                    self._log_pretraining(bar)
                    self.save()
            if not self.budget_spent():
                self._start_groups()
            last_eval = self.evals[-1]["elapsed"] if self.evals else -math.inf
            while not self.budget_spent() and not self.stop_requested:
                t0, steps0 = time.perf_counter(), self.env_steps
                batch = self.collect()
                if batch is None:
                    self.env_steps = steps0  # a partial rollout is discarded
                    break
                t1 = time.perf_counter()
                metrics = self.update(batch)
                t2 = time.perf_counter()
                self.elapsed = base_elapsed + (t2 - started)
                metrics.update(env_steps=self.env_steps, updates=self.updates, elapsed=self.elapsed,
                               sps=(self.env_steps - steps0) / (t2 - t0), rollout_sps=(self.env_steps - steps0) / (t1 - t0))
                if self._recent_completion:
                    metrics["train_completion"] = float(np.mean(self._recent_completion))
                    self._recent_completion = []
                if self.elapsed - last_eval >= 60.0 * self.cfg.eval_minutes:
                    self._record_eval(metrics)
                    last_eval = self.elapsed
                self._log(metrics, writer, bar)
                if self.elapsed - last_save >= 60.0 * self.cfg.save_minutes:
                    self.save()
                    last_save = self.elapsed
                if self.callback is not None:
                    self.callback(self)
            if self.budget_spent() and (not self.evals or self.evals[-1]["env_steps"] != self.env_steps):
                self._record_eval({})
            self.save()
            manifest = self.finish() if self.budget_spent() else {}
        finally:
            if bar is not None:
                bar.close()
            if writer is not None:
                writer.close()
            self._restore_signal_handlers(handlers)
        return manifest

    def _trim_metrics(self) -> None:
        """Drop the metrics.jsonl rows written after the state we resume from (a run killed between two
        saves logged updates the state does not hold), so the log stays monotone in ``updates``."""
        path = self.out / METRICS_FILE
        if not path.exists():
            return
        kept = []
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # a line cut short by the kill
                continue
            if ("pretraining" in row and self.pretrained) or row.get("updates", math.inf) <= self.updates:
                kept.append(line)
        write_atomic(path, "".join(line + "\n" for line in kept).encode())

    def _record_eval(self, metrics: dict[str, Any]) -> None:
        rate = self.evaluate()
        self.evals.append({"env_steps": self.env_steps, "updates": self.updates, "elapsed": round(self.elapsed, 1), "completion_rate": rate})
        metrics["eval_completion"] = rate

    def finish(self) -> dict[str, Any]:
        """Write the policy checkpoint and manifest for the final state."""
        manifest = {"variant": self.cfg.variant, "seed": self.cfg.seed, "predictor": self.cfg.predictor, "reward": self.cfg.reward,
                    **provenance(self.env_config, self.cfg), "teacher": self.cfg.teacher or None,
                    "ppo_config": dataclasses.asdict(self.cfg), "env_config": env_summary(self.env_config),
                    "env_steps": self.env_steps, "updates": self.updates, "episodes": self.episodes, "wall_seconds": round(self.elapsed, 1),
                    "pretraining": self.pretraining or None,
                    "eval": {"workloads": f"{len(self._eval_workloads)} seeded training-curve workloads (seed {EVAL_SEED})",
                             "history": self.evals, "final_completion_rate": self.evals[-1]["completion_rate"] if self.evals else None,
                             "baselines": self.baselines},
                    "command": " ".join(sys.argv) if sys.argv and sys.argv[0].endswith("ppo.py") else None}
        return save_policy(self.model, self.out / POLICY_FILE, manifest)

    def _log_pretraining(self, bar) -> None:
        with open(self.out / METRICS_FILE, "a") as handle:
            handle.write(json.dumps({"pretraining": self.pretraining, "elapsed": self.elapsed, "eval_completion": self.evals[-1]["completion_rate"]}) + "\n")
        if bar is not None:
            bar.write(f"teacher {self.cfg.teacher}: {self.pretraining}; cloned policy eval {self.evals[-1]['completion_rate']:.3f}")

    def _log(self, metrics: dict[str, Any], writer, bar) -> None:
        with open(self.out / METRICS_FILE, "a") as handle:
            handle.write(json.dumps(metrics) + "\n")
        if writer is not None:
            for key, value in metrics.items():
                if key not in ("env_steps", "updates"):
                    writer.add_scalar(key, value, self.env_steps)
        if bar is not None:
            bar.update(self.env_steps - bar.n)
            shown = {"sps": f"{metrics['sps']:.0f}", "kl": f"{metrics['approx_kl']:.4f}", "ev": f"{metrics['explained_variance']:.2f}",
                     "ent": f"{metrics['entropy']:.2f}", "min": f"{self.elapsed / 60:.1f}"}
            if "train_completion" in metrics:
                shown["train"] = f"{metrics['train_completion']:.3f}"
            if self.evals:
                shown["eval"] = f"{self.evals[-1]['completion_rate']:.3f}"
            bar.set_postfix(shown, refresh=False)

    def _tensorboard(self):
        """A SummaryWriter under ``OUT/tb`` (None when quiet); without tensorboard the run goes on and says, on
        stderr, that it writes no TensorBoard logs and which extra adds them."""
        if self.quiet:
            return None
        try:
            with needs(__name__, "tensorboard"):
                import tensorboard  # noqa: F401  (what torch.utils.tensorboard needs)
                from torch.utils.tensorboard import SummaryWriter
        except MissingExtra as missing:
            print(f"no TensorBoard logs: {missing}", file=sys.stderr)
            return None
        return SummaryWriter(str(self.out / "tb"))

    def _install_signal_handlers(self) -> dict[int, Any]:
        """Ctrl-C and SIGTERM request a clean stop (checkpoint, then exit); a second Ctrl-C interrupts at once."""
        previous = {}

        def on_signal(signum: int, frame: Any) -> None:
            if self.stop_requested and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self.request_stop()

        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                previous[signum] = signal.signal(signum, on_signal)
            except ValueError:  # not the main thread
                pass
        return previous

    @staticmethod
    def _restore_signal_handlers(previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# --------------------------------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> None:
    cfg, out, env_config = parse_command(argv)
    torch.set_num_threads(cfg.threads)
    reason = unwritable(out)  # e.g. under /proc: fails here, before any training
    if reason is not None:
        print(f"python -m mara_agents.mat.ppo: error: --out {out} cannot be written: {reason}", file=sys.stderr)
        raise SystemExit(2)
    trainer = Trainer(cfg, out, env_config=env_config)
    try:
        manifest = trainer.run()
    except (TrainingDiverged, ValueError) as error:
        sys.exit(f"error: {error}")
    if manifest:
        final = manifest["eval"]["final_completion_rate"]
        print(f"done: {trainer.env_steps} env-steps in {trainer.elapsed / 60:.1f} min; eval completion {final:.3f} "
              f"(EDF {trainer.baselines.get('edf', float('nan')):.3f}, random {trainer.baselines.get('random', float('nan')):.3f}); "
              f"policy at {out / POLICY_FILE}")
    else:
        print(f"stopped at {trainer.env_steps} env-steps ({trainer.elapsed / 60:.1f} min); rerun the same command to resume")


if __name__ == "__main__":
    main()
