"""Rollouts of an :class:`mara_agents.Agent`: batched on the simulator, or one episode of the PettingZoo view."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any


from core_env import features
from core_env.config import EnvConfig
from core_env.episode import EPISODE_KEYS
from core_env.sim import Simulator
from core_env.workload import Workload
from mara_agents.protocols import REMAINING_DEMAND, Agent, PettingZooPolicy


def run_agent(agent: Agent, workloads: Sequence[Workload], config: EnvConfig | None = None, timed: bool = False):
    """Play one episode per workload, all W of them in one batch of the simulator, to the end.

    Args:
        agent: the scheduler; oracle agents get ``Simulator.remaining_demand()`` every step.
        workloads: W workloads sharing one CurveBank.
        config: environment configuration (N, K, history, ...); the default EnvConfig if None.
        timed: also return the seconds spent in ``agent.act`` and the number of batched decisions.

    Returns:
        Final episode statistics, each a (W,) array: the keys of ``Simulator.episode_statistics()``
        (``completion_rate``, ``completed``, ``arrived``, ``failed``, ``rejected``,
        ``node_utilization``, ...) plus ``truncated``; with ``timed``, ``(stats, seconds, decisions)``.
    """
    config = config or EnvConfig()
    sim = Simulator(config, len(workloads))
    sim.reset(workloads)
    agent.reset(sim.B, sim.N, sim.K)
    seconds, decisions = 0.0, 0
    while not sim.done.all():
        observation, action_mask = features.observations(sim, config.history)
        oracle = {REMAINING_DEMAND: sim.remaining_demand()} if agent.needs_oracle else None
        start = time.perf_counter()
        actions = agent.act(observation, action_mask, oracle)
        seconds, decisions = seconds + time.perf_counter() - start, decisions + 1
        sim.step(actions)
    stats = sim.episode_statistics()
    stats["truncated"] = sim.truncated.copy()
    return (stats, seconds, decisions) if timed else stats


def run_parallel_episode(env: Any, agent: Agent, seed: int | None = None, options: dict[str, Any] | None = None) -> dict[str, float]:
    """Play one episode of a core_env PettingZoo ParallelEnv with ``agent`` through :class:`PettingZooPolicy`.

    Oracle agents get the remaining demand added to the infos they see, read from the env's simulator.

    Returns:
        The final episode statistics (``core_env.episode.EPISODE_KEYS`` of ``node_0``'s last info).
    """
    policy = PettingZooPolicy(agent)
    observations, infos = env.reset(seed=seed, options=options)
    sim = env.unwrapped.episode.sim
    while env.agents:
        if agent.needs_oracle:
            remaining = sim.remaining_demand()[0]
            infos = {a: {**info, REMAINING_DEMAND: remaining} for a, info in infos.items()}
        observations, _, _, _, infos = env.step(policy(observations, infos))
    final = infos[env.possible_agents[0]]
    return {key: final[key] for key in EPISODE_KEYS}
