"""discrete_core_v0: deadline-constrained discrete-node CoRE-Learning (PettingZoo module).

| | |
|---|---|
| Actions | Discrete(K + 1): 0 = idle, k = train the task in slot k - 1 |
| Parallel API | yes |
| Agents | `node_0 … node_{N-1}` (N = `n_nodes`, default 4) |
| Action shape | () |
| Observation | Dict(`observation`: Box(float32, (D,)), `action_mask`: Box(0, 1, (K + 1,), int8)) |
| State | Box(float32, (3 + K·F,)) |

Learning tasks arrive over time; each must reach a target loss before its deadline; how much training it
needs is hidden. Every node (agent) trains at most one task per step; the lowest-index node wins a task
chosen by several. The team reward (identical for every node) counts completed tasks (`sparse`) or adds
a log-progress potential difference (`shaped`, default) whose undiscounted return equals the number of
completions exactly. Episodes end (terminate) when the arrival window is over and no task is active.

Full documentation (spaces, features, rewards, episode end, arguments, version history): docs/env.md.

Example::

    from core_env import discrete_core_v0
    env = discrete_core_v0.parallel_env(n_nodes=4, n_slots=16, task_set="id", load="train")
    observations, infos = env.reset(seed=0)
    while env.agents:
        actions = {a: env.action_space(a).sample(observations[a]["action_mask"]) for a in env.agents}
        observations, rewards, terminations, truncations, infos = env.step(actions)

Version history: v0 (2026-11) initial release.
"""

from __future__ import annotations

from typing import Any

from pettingzoo.utils import wrappers
from pettingzoo.utils.conversions import parallel_to_aec

from core_env.parallel import DiscreteCoREParallelEnv


def parallel_env(**kwargs: Any) -> DiscreteCoREParallelEnv:
    """The ParallelEnv (keyword arguments: see core_env.config.EnvConfig)."""
    return DiscreteCoREParallelEnv(**kwargs)


def raw_env(**kwargs: Any):
    """The AEC form, converted from the parallel env."""
    return parallel_to_aec(parallel_env(**kwargs))


def env(**kwargs: Any):
    """The AEC form with PettingZoo's order-enforcing wrapper."""
    return wrappers.OrderEnforcingWrapper(raw_env(**kwargs))


__all__ = ["env", "parallel_env", "raw_env"]
