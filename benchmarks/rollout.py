"""Rollouts of an :class:`mara_agents.Agent`: batched on the vector env (:func:`mara_agents.rollout.play`), or one episode of the PettingZoo view."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from core_env.config import EnvConfig
from core_env.vector import EPISODE_KEYS, DiscreteCoREVectorEnv
from core_env.task_source import TaskSource
from core_env.workload import Workload
from mara_agents.protocols import REMAINING_DEMAND, Agent, PettingZooPolicy
from mara_agents.rollout import agent_policy, final_statistics, play


def run_agent(agent: Agent, workloads: Sequence[Workload], config: EnvConfig | None = None, timed: bool = False,
              shadow: Agent | None = None, task_source: TaskSource | None = None):
    """Play one episode per workload, all W of them in one batch of the vector env, to the end.

    Args:
        agent: the scheduler; oracle agents get the env's ``remaining_demand()`` every step.
        workloads: W workloads sharing one CurveBank.
        config: environment configuration (N, K, history, ...); the default EnvConfig if None.
        timed: also return the seconds spent in ``agent.act`` and the number of batched decisions.
        shadow: another agent (e.g. a learned agent's teacher) shown the same observations every step;
            its actions are only compared with the played ones (:class:`Agreement`), never played.
        task_source: what served tasks report (:mod:`core_env.task_source`; default the curve bank), e.g.
            a :class:`core_env.live.LiveSource` (benchmarks/fidelity.py).

    Returns:
        Final episode statistics, each a (W,) array: ``core_env.vector.EPISODE_KEYS``
        (``completion_rate``, ``completed``, ``arrived``, ``failed``, ``rejected``,
        ``node_utilization``, ...) plus ``truncated``, and with ``shadow`` ``same_tasks_served`` and
        ``served_also_by_shadow``; with ``timed``, ``(stats, seconds, decisions)``.
    """
    envs = DiscreteCoREVectorEnv(len(workloads), autoreset_mode="disabled", task_source=task_source, config=config or EnvConfig())
    policy, clock = agent_policy(agent, envs), [0.0, 0]
    agreement = Agreement(agent_policy(shadow, envs), len(workloads)) if shadow is not None else None

    def act(observation, action_mask):
        start = time.perf_counter()
        actions = policy(observation, action_mask)
        clock[0], clock[1] = clock[0] + time.perf_counter() - start, clock[1] + 1
        if agreement is not None:
            agreement.compare(observation, action_mask, np.asarray(actions))
        return actions

    played = play(envs, act, workloads, on_step=None if agreement is None else agreement.on_step)
    stats = final_statistics(played)
    stats["truncated"] = played.truncated
    if agreement is not None:
        stats.update(agreement.shares())
    return (stats, clock[0], clock[1]) if timed else stats


class Agreement:
    """How often a played agent serves the tasks a shadow agent would serve, on the played agent's own
    trajectories, per environment over its live steps with at least one task to serve:
    ``same_tasks_served`` is the share of steps where both serve the same set of slots, and
    ``served_also_by_shadow`` the share of the slots the played agent serves that the shadow serves too."""

    def __init__(self, shadow_act, envs: int) -> None:
        self.shadow_act = shadow_act
        self.steps, self.same = np.zeros(envs), np.zeros(envs)
        self.served, self.shared = np.zeros(envs), np.zeros(envs)
        self._pending: tuple[np.ndarray, np.ndarray] | None = None

    def compare(self, observation: np.ndarray, mask: np.ndarray, actions: np.ndarray) -> None:
        """Ask the shadow for its actions on this observation (it sees every step, so its own state stays
        in step with the episode)."""
        theirs = np.asarray(self.shadow_act(observation, mask))
        K = mask.shape[-1] - 1
        mine_set, their_set = _served(actions, K), _served(theirs, K)
        choice = mask[:, 0, 1:].astype(bool).any(axis=1)  # a task to serve
        self._pending = (choice, mine_set, their_set)

    def on_step(self, step) -> None:
        choice, mine, theirs = self._pending
        counted = step.live & choice
        self.steps += counted
        self.same += counted & (mine == theirs).all(axis=1)
        self.served += np.where(counted, mine.sum(axis=1), 0)
        self.shared += np.where(counted, (mine & theirs).sum(axis=1), 0)

    def shares(self) -> dict[str, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            return {"same_tasks_served": np.where(self.steps > 0, self.same / np.maximum(self.steps, 1), np.nan),
                    "served_also_by_shadow": np.where(self.served > 0, self.shared / np.maximum(self.served, 1), np.nan)}


def _served(actions: np.ndarray, K: int) -> np.ndarray:
    """(B, K) bool: the slots some node chooses (conflicting choices count once; idle is not a slot)."""
    B = actions.shape[0]
    out = np.zeros((B, K + 1), bool)
    out[np.arange(B)[:, None], actions] = True
    return out[:, 1:]


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
