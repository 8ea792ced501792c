"""Demonstrations from a teacher allocator, behaviour cloning, and the DAPG-style anchor used by the trainer.

The MAT trained by PPO alone plateaus a few points above EDF (docs/agents.md, "MARA"). The trainer can
therefore start from a teacher (``--teacher lara-fm``), as DAPG (Rajeswaran et al., RSS 2018) and
AlphaStar do:

1. :func:`collect_demonstrations` plays seeded *training-curve* workloads to the end with the teacher and
   stores what the student would see (its tokens, with its own predictor features), the teacher's joint
   action with the autoregressive masks it implies, and the return-to-go of the student's reward;
2. :func:`clone` fits the policy to the teacher's actions (cross-entropy over nodes with a real choice)
   and the value head to the returns-to-go (so PPO starts with a critic that fits the policy);
3. PPO then fine-tunes on its own rollouts while :meth:`Demonstrations.cross_entropy` on a minibatch of
   demonstrations is added to the loss with a weight that decays every update (DAPG's augmented loss).

Demonstrations are written to ``OUT/demonstrations.pt`` (atomically) so a resumed run needs no teacher.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from core_env import features
from core_env.extras import needs
from mara_agents.checkpoint_files import read_checked, write_checked
from mara_agents.mat.model import MATModel, Tokens, autoregressive_masks
from mara_agents.predictors.features import predictor_observation
from mara_agents.rollout import Transition, agent_policy, play

with needs(__name__):
    import torch

DEMONSTRATIONS_FILE = "demonstrations.pt"
DEMONSTRATIONS_FORMAT = "mara_agents.mat.demonstrations/1"


def teacher_names() -> list[str]:
    """Agents that can teach: the allocators and the heuristics that need no oracle."""
    from mara_agents.allocators import ALLOCATORS
    from mara_agents.heuristics import HEURISTICS

    return sorted([*ALLOCATORS, *(name for name in HEURISTICS if name not in ("clairvoyant", "random"))])


def check_teacher(spec: str) -> None:
    """ValueError unless ``spec`` names a teacher: a heuristic that needs no oracle, or an allocator
    ``NAME[:PREDICTOR][,KEY=INT,...]`` on a non-oracle predictor. Builds nothing (no predictor is loaded)."""
    from mara_agents.allocators import ALLOCATORS, parse_allocator_spec

    name = spec.split(",")[0].partition(":")[0]
    if name in ALLOCATORS and parse_allocator_spec(spec)[1] != "oracle":
        return
    if name not in ALLOCATORS and spec in teacher_names():
        return
    raise ValueError(f"unknown teacher {spec!r}: a heuristic in {[n for n in teacher_names() if n not in ALLOCATORS]} or an "
                     "allocator NAME[:PREDICTOR][,KEY=INT...] on a non-oracle predictor (or '' for none)")


def make_teacher(spec: str):
    """The teacher agent of ``spec`` (see :func:`check_teacher`), e.g. ``"edf-admission:fm,min_reports=5"``; oracle
    agents cannot teach (the student acts on observations). ValueError for anything else."""
    from mara_agents.allocators import make_allocator
    from mara_agents.heuristics import HEURISTICS

    check_teacher(spec)
    return HEURISTICS[spec]() if spec in HEURISTICS else make_allocator(spec)


class Demonstrations:
    """A flat set of teacher decisions: tokens, applied masks, actions and returns-to-go ((M, ...) tensors)."""

    def __init__(self, data: dict[str, torch.Tensor], info: dict[str, Any]) -> None:
        self.data, self.info = data, info

    def __len__(self) -> int:
        return int(self.data["actions"].shape[0])

    def tokens(self, index: torch.Tensor) -> Tokens:
        return Tokens(self.data["nodes"][index].float(), self.data["slots"][index].float(), self.data["last"][index])

    def cross_entropy(self, model: MATModel, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean −log-prob of the teacher's actions over nodes with a real choice, and the per-node values."""
        masks, actions = self.data["masks"][index], self.data["actions"][index]
        logp, _, values = model.evaluate_actions(self.tokens(index), masks, actions)
        decision = (masks.sum(-1) > 1).float()
        return -(logp * decision).sum() / decision.sum().clamp(min=1.0), values

    def save(self, path: Path) -> None:
        write_checked(path, {"format": DEMONSTRATIONS_FORMAT, "data": self.data, "info": self.info})

    @classmethod
    def load(cls, path: Path) -> Demonstrations:
        state = read_checked(path, "a demonstrations file")
        if not isinstance(state, dict) or state.get("format") != DEMONSTRATIONS_FORMAT:
            found = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"{path} is not a demonstrations file (format {found!r})")
        return cls(state["data"], state["info"])


def collect_demonstrations(teacher, envs, workloads: list, parse, max_samples: int | None = None) -> Demonstrations:
    """Play ``workloads`` to the end with ``teacher`` on ``envs`` (:func:`mara_agents.rollout.play`).

    Args:
        teacher: a non-oracle :class:`~mara_agents.protocols.Agent` acting on plain env observations.
        envs: the trainer's vector env of len(workloads) environments (:func:`mara_agents.mat.train_envs.training_envs`:
            its predictor features give the student's observations, its reward the student's reward).
        parse: (B, N, D) student observations -> Tokens.
        max_samples: keep at most this many (step, env) samples, drawn evenly (None: all).
    """
    plain = features.obs_dim(envs.batch.K, envs.config.history)  # the env part of the student's observation (features follow it)
    policy = agent_policy(teacher, envs)
    steps: list[dict[str, torch.Tensor]] = []

    def record(step: Transition) -> None:
        tokens, actions = parse(step.observation), torch.from_numpy(np.asarray(step.actions, dtype=np.int64))
        steps.append({"nodes": tokens.nodes.half(), "slots": tokens.slots.half(), "last": tokens.last,
                      "masks": autoregressive_masks(torch.from_numpy(step.action_mask.astype(bool)), actions), "actions": actions,
                      "reward": torch.from_numpy(step.rewards).float(), "live": torch.from_numpy(step.live)})

    started = time.perf_counter()
    played = play(envs, lambda observation, mask: policy(observation[..., :plain], mask), workloads, observe=predictor_observation, on_step=record)
    rewards = torch.stack([s["reward"] for s in steps])  # (T, B)
    returns = rewards.flip(0).cumsum(0).flip(0)  # γ = 1: return-to-go
    live = torch.stack([s["live"] for s in steps])
    data = {key: torch.cat([s[key][s["live"]] for s in steps]) for key in ("nodes", "slots", "last", "masks", "actions")}
    data["returns"] = returns[live]
    if max_samples is not None and len(data["actions"]) > max_samples:
        keep = torch.linspace(0, len(data["actions"]) - 1, max_samples).round().long()
        data = {key: value[keep] for key, value in data.items()}
    info = {"episodes": envs.num_envs, "samples": int(data["actions"].shape[0]), "seconds": round(time.perf_counter() - started, 1),
            "teacher_completion": float(np.mean(played.infos["completion_rate"]))}
    return Demonstrations(data, info)


def demonstrations(path: Path, teacher: str, workloads, make_envs, parse) -> Demonstrations:
    """The demonstrations saved at ``path``; none there yet: the teacher ``teacher``'s (:func:`make_teacher`) on
    ``workloads()``, played on ``make_envs(len(workloads))`` (:func:`collect_demonstrations`), saved at ``path``."""
    if path.exists():
        return Demonstrations.load(path)
    drawn = workloads()
    envs = make_envs(len(drawn))
    demos = collect_demonstrations(make_teacher(teacher), envs, drawn, parse)
    demos.save(path)
    return demos


def clone(model: MATModel, demos: Demonstrations, value_norm, optimizer: torch.optim.Optimizer, epochs: float,
          batch_size: int, vf_coef: float, max_grad_norm: float, generator: torch.Generator) -> dict[str, float]:
    """Behaviour cloning of the policy and regression of the values on the demonstrations' returns."""
    value_norm.update(demos.data["returns"])
    targets = value_norm.normalize(demos.data["returns"]).unsqueeze(-1)
    M = len(demos)
    updates = max(1, math.ceil(epochs * M / batch_size))
    losses, value_losses = [], []
    for u in range(updates):
        if u % math.ceil(M / batch_size) == 0:
            order = torch.randperm(M, generator=generator)
        start = (u % math.ceil(M / batch_size)) * batch_size
        index = order[start : start + batch_size]
        ce, values = demos.cross_entropy(model, index)
        value_loss = 0.5 * ((values - targets[index]) ** 2).mean()
        loss = ce + vf_coef * value_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        losses.append(ce.item())
        value_losses.append(value_loss.item())
    tail = max(1, len(losses) // 10)
    return {"bc_updates": updates, "bc_loss_first": float(np.mean(losses[:tail])), "bc_loss_last": float(np.mean(losses[-tail:])),
            "bc_value_loss_last": float(np.mean(value_losses[-tail:]))}
