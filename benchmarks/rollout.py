"""Rollouts of an :class:`mara_agents.Agent`: batched on the vector env (:func:`mara_agents.rollout.play`), or one episode of the PettingZoo view."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any


from core_env.config import EnvConfig
from core_env.vector import EPISODE_KEYS, DiscreteCoREVectorEnv
from core_env.workload import Workload
from mara_agents.protocols import REMAINING_DEMAND, Agent, PettingZooPolicy
from mara_agents.rollout import agent_policy, final_statistics, play


def run_agent(agent: Agent, workloads: Sequence[Workload], config: EnvConfig | None = None, timed: bool = False):
    """Play one episode per workload, all W of them in one batch of the vector env, to the end.

    Args:
        agent: the scheduler; oracle agents get the env's ``remaining_demand()`` every step.
        workloads: W workloads sharing one CurveBank.
        config: environment configuration (N, K, history, ...); the default EnvConfig if None.
        timed: also return the seconds spent in ``agent.act`` and the number of batched decisions.

    Returns:
        Final episode statistics, each a (W,) array: ``core_env.vector.EPISODE_KEYS``
        (``completion_rate``, ``completed``, ``arrived``, ``failed``, ``rejected``,
        ``node_utilization``, ...) plus ``truncated``; with ``timed``, ``(stats, seconds, decisions)``.
    """
    envs = DiscreteCoREVectorEnv(len(workloads), autoreset_mode="disabled", config=config or EnvConfig())
    policy, clock = agent_policy(agent, envs), [0.0, 0]

    def act(observation, action_mask):
        start = time.perf_counter()
        actions = policy(observation, action_mask)
        clock[0], clock[1] = clock[0] + time.perf_counter() - start, clock[1] + 1
        return actions

    played = play(envs, act, workloads)
    stats = final_statistics(played)
    stats["truncated"] = played.truncated
    return (stats, clock[0], clock[1]) if timed else stats


def run_parallel_episode(env: Any, agent: Agent, seed: int | None = None, options: dict[str, Any] | None = None) -> dict[str, float]:
    """Play one episode of a core_env PettingZoo ParallelEnv with ``agent`` through :class:`PettingZooPolicy`.

    Oracle agents get the remaining demand added to the infos they see, read from the env's batch.

    Returns:
        The final episode statistics (``core_env.episode.EPISODE_KEYS`` of ``node_0``'s last info).
    """
    policy = PettingZooPolicy(agent)
    observations, infos = env.reset(seed=seed, options=options)
    batch = env.unwrapped.episode.batch
    while env.agents:
        if agent.needs_oracle:
            remaining = batch.remaining_demand()[0]
            infos = {a: {**info, REMAINING_DEMAND: remaining} for a, info in infos.items()}
        observations, _, _, _, infos = env.step(policy(observations, infos))
    final = infos[env.possible_agents[0]]
    return {key: final[key] for key in EPISODE_KEYS}
