"""Shared pieces of the library integrations: small env configs, episode statistics, masked logits.

Nothing here imports an optional library; torch is imported lazily by the helpers that need it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from core_env import GYM_ID
from core_env.extras import needs

#: A small configuration for tests and smoke runs: 2 nodes, 4 slots, a 60-step arrival window
#: (episodes of roughly 60–120 steps).
SMALL_ENV: dict[str, Any] = {"n_nodes": 2, "n_slots": 4, "arrival_steps": 60}

#: Value written over the logits of masked actions (finite, so that 0 · logit stays finite in entropies).
MASKED_LOGIT = -1e9

#: Final-episode statistics every integration reports (keys of the env infos).
REPORTED_KEYS = ("completion_rate", "completed", "arrived", "invalid_actions", "conflicts", "t")


def cli_env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The env kwargs a training CLI asked for: :data:`SMALL_ENV` with ``--small``, updated by ``--env``'s JSON object."""
    env_kwargs = dict(SMALL_ENV) if args.small else {}
    env_kwargs.update(args.env or {})
    return env_kwargs


def train_or_exit(parser: argparse.ArgumentParser, train: Callable[..., dict[str, Any]], env_kwargs: Mapping[str, Any],
                  **kwargs: Any) -> dict[str, Any]:
    """A training CLI's ``train(env_kwargs, **kwargs)``: a ValueError (a bad argument or checkpoint) is a CLI error
    (``parser.error``: exit 2 with one line), not a traceback."""
    try:
        return train(env_kwargs, **kwargs)
    except ValueError as error:
        parser.error(str(error))


def make_gym_env(**env_kwargs: Any) -> gym.Env:
    """The centralized Gymnasium view ``core_env/DiscreteCoRE-v1`` (keyword arguments: EnvConfig)."""
    return gym.make(GYM_ID, **env_kwargs)


@dataclasses.dataclass
class EpisodeLog:
    """Final statistics of finished episodes, one dict per episode (keys :data:`REPORTED_KEYS`)."""

    episodes: list[dict[str, float]] = dataclasses.field(default_factory=list)

    def add(self, info: Mapping[str, Any]) -> None:
        self.episodes.append({k: float(np.asarray(info[k]).sum()) if k in ("invalid_actions", "conflicts") else float(info[k])
                              for k in REPORTED_KEYS if k in info})

    def __len__(self) -> int:
        return len(self.episodes)

    def summary(self, last: int | None = None) -> dict[str, float]:
        """Mean completion rate and totals of invalid actions and conflicts over the (last) episodes."""
        eps = self.episodes[-last:] if last else self.episodes
        if not eps:
            return {"episodes": 0}
        return {"episodes": len(eps), "completion_rate": float(np.mean([e["completion_rate"] for e in eps])),
                "invalid_actions": int(sum(e["invalid_actions"] for e in eps)),
                "conflicts": int(sum(e["conflicts"] for e in eps))}


class RecordEpisodes(gym.Wrapper):
    """Records the final statistics of every finished episode of the Gymnasium view into an :class:`EpisodeLog`.

    Works in-process (Tianshou's ``DummyVectorEnv``, SB3's ``DummyVecEnv``): pass one shared log to all
    copies.
    """

    def __init__(self, env: gym.Env, log: EpisodeLog) -> None:
        super().__init__(env)
        self.log = log

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            self.log.add(info)
        return obs, reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:  # sb3-contrib looks the method up through wrappers
        return self.env.unwrapped.action_masks()


def masked_logits(logits, mask):
    """``logits`` with :data:`MASKED_LOGIT` where ``mask`` is 0 (torch tensors, broadcastable shapes)."""
    with needs(__name__):
        import torch

    return torch.where(mask.bool(), logits, torch.full_like(logits, MASKED_LOGIT))


def random_masked_completion(env_kwargs: Mapping[str, Any], seeds: Iterable[int]) -> float:
    """Mean completion rate of uniformly random masked actions (the floor a trained policy should beat)."""
    env = make_gym_env(**env_kwargs)
    rates = []
    for seed in seeds:
        obs, info = env.reset(seed=int(seed))
        rng = np.random.default_rng(seed)
        done = False
        while not done:
            mask = obs["action_mask"].astype(bool)
            action = np.array([rng.choice(np.flatnonzero(m)) for m in mask], dtype=np.int64)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        rates.append(info["completion_rate"])
    env.close()
    return float(np.mean(rates))
