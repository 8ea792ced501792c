"""PPO trainer for the MAT allocator (MARA and its ablations), in the spirit of CleanRL's ppo.py.

Usage::

    python -m mara_agents.mat.ppo --variant mara --seed 0 --minutes 60 --out runs/mara_s0
    python -m mara_agents.mat.ppo --variant mat --steps 100000 --n-nodes 8 --load x1.5 --task-set rl_ood --out runs/mat_n8
    python -m mara_agents.mat.ppo --variant mat --steps 100000 --env '{"node_speeds": [1, 1, 2, 2], "switch_cost": 0.1}' --out runs/s

Arguments, variants and the environment (``--n-nodes``, ``--n-slots``, ``--load``, ``--task-set``, or any EnvConfig
field in ``--env`` JSON): :mod:`~mara_agents.mat.ppo_config`. Rerunning the same command resumes. One iteration:

1. **Rollout** (:meth:`Trainer.collect`): ``num_envs`` environments in ``env_groups`` staggered vector envs play seeded
   training-curve workloads (:mod:`~mara_agents.mat.train_envs`); the policy samples one joint action per step,
   autoregressive over nodes; an environment whose episode ended before its group is frozen and masked out of the loss.
2. **Advantages** (:meth:`Trainer.advantages`): GAE per node on the team reward, γ = 1, λ = 0.95, in return units (the
   value head predicts returns normalised by an EMA mean/std, :mod:`~mara_agents.mat.value_norm`).
3. **Update** (:meth:`Trainer.update`): ``epochs`` × ``minibatches`` passes of clipped PPO over (step, env) samples:
   entropy bonus and policy loss over nodes with a real choice, value loss, the teacher's decaying cross-entropy
   (DAPG) when there is one, gradient clipping, Adam.

Around it, one module a job: the teacher's warm start (:mod:`~mara_agents.mat.imitation`), evaluations and baselines
(:mod:`~mara_agents.mat.evaluation`), logs and stop signals (:mod:`~mara_agents.mat.train_log`), checkpoint I/O
(:mod:`~mara_agents.mat.train_state`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from core_env.config import EnvConfig
from core_env.extras import needs
from core_env.vector import DiscreteCoREVectorEnv
from core_env.workload import Workload
from mara_agents import rollout
from mara_agents.checkpoint_files import non_finite_tensors
from mara_agents.cli_checks import unwritable
from mara_agents.mat import imitation
from mara_agents.mat.agent import POLICY_FILE, make_predictor, save_policy
from mara_agents.mat.evaluation import EVAL_SEED, baseline_completions, evaluation_workloads, play, policy_completion  # noqa: F401
from mara_agents.mat.model import MATModel, Tokens, observation_tokens
from mara_agents.mat.ppo_config import ENV_FLAGS, LIMITS, VARIANTS, PPOConfig, parse_args, parse_command  # noqa: F401
from mara_agents.mat.train_envs import WorkloadFn, training_envs, training_groups, training_workloads
from mara_agents.mat.train_log import TrainLog, stop_signals
from mara_agents.mat.train_state import (ADDED_ENV_FIELDS, METRICS_FILE, STATE_FILE, STATE_FORMAT, env_summary, identity,  # noqa: F401
                                         policy_manifest, provenance, read_state, restore, saved_env, trainer_state, write_state)
from mara_agents.mat.value_norm import ValueNormalizer
from mara_agents.predictors.features import predictor_observation, split_feature_set

with needs(__name__):
    import torch


class TrainingDiverged(RuntimeError):
    """A loss or a parameter became NaN or infinite: training stops and no checkpoint is written."""


class Trainer:
    """PPO on MAT; :meth:`run` trains until a budget is spent or a stop is requested, resuming from ``out``.

    ``cfg``: hyperparameters and stop conditions; ``out``: output directory (checkpoints, manifest, metrics);
    ``env_config``: environment (default EnvConfig(), always with the variant's reward); ``workload_fn``: draws one
    training workload from a numpy Generator (default :func:`training_workloads`); ``quiet``: no progress bar, no
    TensorBoard; ``callback``: called with the trainer after every iteration (tests use it to request a stop).
    """

    def __init__(self, cfg: PPOConfig, out: Path | str, env_config: EnvConfig | None = None, workload_fn: WorkloadFn | None = None,
                 quiet: bool = False, callback: Callable[[Trainer], None] | None = None) -> None:
        self.cfg, self.out, self.quiet, self.callback = cfg, Path(out), quiet, callback
        self.env_config = dataclasses.replace(env_config or EnvConfig(), reward=cfg.reward)
        self.workload_fn = workload_fn or training_workloads(self.env_config)
        self.model_config = cfg.model_config(self.env_config.history)
        self.model = MATModel(self.model_config, seed=cfg.seed)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
        self.value_norm = ValueNormalizer(cfg.value_norm_decay)
        self.workload_rng = np.random.default_rng([cfg.seed, 1])
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.env_steps = self.updates = self.episodes = 0
        self.elapsed = 0.0  # wall seconds over all runs
        self.pretrained, self.pretraining = False, {}  # behaviour cloning on the teacher's demonstrations done, its report
        self.demos: imitation.Demonstrations | None = None  # the teacher's, when one is configured
        self.evals, self.baselines = [], {}  # the policy's evaluations so far; EDF's, random's and the teacher's completion
        self.stop_requested = False
        self._predictor = make_predictor(cfg.predictor)
        self._index = bool(cfg.predictor) and split_feature_set(cfg.predictor)[1]  # a -post feature set
        self.eval_workloads = evaluation_workloads(self.workload_fn, cfg.eval_episodes)
        self._recent_completion: list[float] = []

    def _envs(self, batch: int) -> DiscreteCoREVectorEnv:
        return training_envs(self.env_config, batch, self._predictor, self._index)

    def _workloads(self, count: int) -> list[Workload]:
        return [self.workload_fn(self.workload_rng) for _ in range(count)]

    def _tokens(self, observation: np.ndarray) -> Tokens:
        return observation_tokens(observation, self.env_config.n_slots, self.model_config)

    # ------------------------------------------------------------------ checkpoints (train_state.py)
    def save(self) -> None:
        self.check_finite("training")  # a diverged state is never written
        write_state(self.out / STATE_FILE, trainer_state(self))

    def load(self) -> bool:
        """Resume from ``out/train_state.pt`` if it exists; ValueError if it belongs to another run or fails
        its checksum (:func:`mara_agents.mat.train_state.read_state`)."""
        state = read_state(self.out / STATE_FILE, identity(self.cfg, self.model_config, self.env_config))
        if state is not None:
            restore(self, state)
        return state is not None

    def budget_spent(self) -> bool:
        cfg = self.cfg
        return (cfg.minutes is not None and self.elapsed >= 60.0 * cfg.minutes) or (cfg.steps is not None and self.env_steps >= cfg.steps)

    # ------------------------------------------------------------------ rollout
    def collect(self) -> dict[str, torch.Tensor] | None:
        """One rollout of ``cfg.rollout`` steps of every environment (None if a stop was requested); a group whose
        episodes have all ended starts fresh ones."""
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

    # ------------------------------------------------------------------ advantages
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
        return 0.0 if self.demos is None or self.updates >= cfg.bc_until else cfg.bc_coef * cfg.bc_decay ** self.updates

    # ------------------------------------------------------------------ warm start and evaluation
    def pretrain(self) -> None:
        """The teacher's demonstrations (collected once, then read back) and, once per run, their cloning (imitation.py)."""
        cfg, rng = self.cfg, np.random.default_rng([self.cfg.seed, 2])
        self.demos = imitation.demonstrations(self.out / imitation.DEMONSTRATIONS_FILE, cfg.teacher,
                                              lambda: [self.workload_fn(rng) for _ in range(cfg.demo_episodes)], self._envs, self._tokens)
        if not self.pretrained:
            started = time.perf_counter()
            report = imitation.clone(self.model, self.demos, self.value_norm, self.optimizer, cfg.bc_epochs, cfg.bc_batch, cfg.vf_coef,
                                     cfg.max_grad_norm, self.generator)
            self.check_finite("behaviour cloning")
            self.pretraining, self.pretrained = {**self.demos.info, **report, "clone_seconds": round(time.perf_counter() - started, 1)}, True

    def _record_eval(self, metrics: dict[str, Any]) -> None:
        """Evaluate the deterministic policy on the fixed evaluation workloads (evaluation.py); record it."""
        rate = policy_completion(self.model, self.model_config, self._envs(len(self.eval_workloads)), self.eval_workloads)
        self.evals.append({"env_steps": self.env_steps, "updates": self.updates, "elapsed": round(self.elapsed, 1), "completion_rate": rate})
        metrics["eval_completion"] = rate

    # ------------------------------------------------------------------ main loop
    def request_stop(self, *_: Any) -> None:
        self.stop_requested = True

    def run(self) -> dict[str, Any]:
        """Train (resuming if a state exists) until the budget is spent or a stop is requested; the policy's
        manifest when the budget is spent, else {}."""
        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        resumed = self.load()
        with TrainLog(self.out, self.quiet, self.updates, self.pretrained) as log, stop_signals(self):
            if not self.baselines:
                envs = training_envs(self.env_config, len(self.eval_workloads))
                self.baselines = baseline_completions(envs, self.eval_workloads, cfg.teacher)
            log.progress(cfg.steps, self.env_steps, f"{cfg.variant} s{cfg.seed}" + (" (resumed)" if resumed else ""))
            started, base_elapsed, last_save = time.perf_counter(), self.elapsed, self.elapsed
            if not self.evals and not self.budget_spent():
                self._record_eval({})  # the random initialisation: the wall-clock curve starts at 0
            if cfg.teacher and not self.budget_spent():
                was_pretrained = self.pretrained
                self.pretrain()  # counts towards the wall-clock budget
                if not was_pretrained:
                    self.elapsed = base_elapsed + (time.perf_counter() - started)
                    self._record_eval({})
                    log.pretraining(self.pretraining, self.elapsed, self.evals[-1]["completion_rate"], cfg.teacher)
                    self.save()
            if not self.budget_spent():
                self.groups = training_groups(self.env_config, cfg.num_envs, cfg.env_groups, self._predictor, self._index, self._workloads, cfg.seed)
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
                if self.elapsed - last_eval >= 60.0 * cfg.eval_minutes:
                    self._record_eval(metrics)
                    last_eval = self.elapsed
                log.update(metrics, self.env_steps, self.elapsed, self.evals[-1]["completion_rate"] if self.evals else None)
                if self.elapsed - last_save >= 60.0 * cfg.save_minutes:
                    self.save()
                    last_save = self.elapsed
                if self.callback is not None:
                    self.callback(self)
            if self.budget_spent() and (not self.evals or self.evals[-1]["env_steps"] != self.env_steps):
                self._record_eval({})
            self.save()
            return self.finish() if self.budget_spent() else {}

    def finish(self) -> dict[str, Any]:
        """Write the policy checkpoint and its manifest (:func:`mara_agents.mat.train_state.policy_manifest`)."""
        return save_policy(self.model, self.out / POLICY_FILE, policy_manifest(self))


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
