"""The observe → act → step loop every rollout runs, on the public vector env.

Benchmarks (:func:`benchmarks.rollout.run_agent`, the decision-point and Gantt recorders), the MAT
trainer's evaluation, PPO collection and teacher warm start all play through :func:`play` on
:class:`core_env.vector.DiscreteCoREVectorEnv` instances with ``autoreset_mode="disabled"``: an
environment whose episode has ended is frozen (reward 0) until it is reset.

>>> from core_env.vector import DiscreteCoREVectorEnv
>>> from mara_agents.heuristics import EDF
>>> envs = DiscreteCoREVectorEnv(4, autoreset_mode="disabled")
>>> final = play(envs, EDF(), workloads)            # doctest: +SKIP
>>> final.infos["completion_rate"]                   # (4,) final episode statistics  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from core_env.vector import EPISODE_KEYS, DiscreteCoREVectorEnv
from core_env.workload import Workload
from mara_agents.protocols import REMAINING_DEMAND, Agent

#: ``act(observation (B, N, D), action_mask (B, N, K + 1)) -> (B, N) int actions``.
Act = Callable[[np.ndarray, np.ndarray], np.ndarray]
#: ``observe(envs, obs)``: an env's observation dict -> the (B, N, D) observations ``act`` sees and the masks.
Observe = Callable[[DiscreteCoREVectorEnv, Mapping[str, np.ndarray]], tuple[np.ndarray, np.ndarray]]


@dataclasses.dataclass
class Transition:
    """One step of :func:`play` (all environments, concatenated over ``envs`` in order)."""

    observation: np.ndarray  # (B, N, D) what act saw
    action_mask: np.ndarray  # (B, N, K + 1)
    actions: np.ndarray  # (B, N)
    rewards: np.ndarray  # (B,) team rewards (0 for frozen environments)
    live: np.ndarray  # (B,) bool: the episode was running before the step
    ended: np.ndarray  # (B,) bool: the episode ended at this step
    infos: dict[str, np.ndarray]  # the step's infos ((B,) arrays), before any restart


@dataclasses.dataclass
class Played:
    """Where :func:`play` stopped: the last infos (after any restart; the final episode statistics)."""

    infos: dict[str, np.ndarray]
    terminated: np.ndarray  # (B,) bool, as the last step (or reset) left them
    truncated: np.ndarray  # (B,) bool
    steps: int
    stopped: bool  # ``stop()`` ended the loop
    _envs: list[DiscreteCoREVectorEnv]
    _current: list[dict[str, np.ndarray]]
    _observe: Observe

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """The current observation and mask, as ``act`` would see them next (computed on request)."""
        return _seen(self._envs, self._current, self._observe)


def plain_observation(envs: DiscreteCoREVectorEnv, obs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The per-node observation and mask of the env, as every :class:`Agent` reads them."""
    return obs["observation"], obs["action_mask"]


def agent_policy(agent: Agent, envs: DiscreteCoREVectorEnv) -> Act:
    """Reset ``agent`` for the batch of ``envs`` and return its ``act``, given the hidden remaining demand
    of ``envs`` when it is an oracle agent."""
    agent.reset(envs.num_envs, envs.batch.N, envs.batch.K)
    if not agent.needs_oracle:
        return agent.act
    return lambda observation, mask: agent.act(observation, mask, {REMAINING_DEMAND: envs.remaining_demand()})


def final_statistics(played: Played) -> dict[str, np.ndarray]:
    """The episode statistics (``core_env.vector.EPISODE_KEYS``, (B,) arrays) of the last infos."""
    return {key: played.infos[key] for key in EPISODE_KEYS}


def play(envs: DiscreteCoREVectorEnv | Sequence[DiscreteCoREVectorEnv], act: Act | Agent, workloads: Sequence[Workload] | None = None, *,
         observe: Observe = plain_observation, on_step: Callable[[Transition], None] | None = None, steps: int | None = None,
         restart: Callable[[int, DiscreteCoREVectorEnv], tuple[dict, dict]] | None = None, stop: Callable[[], bool] | None = None) -> Played:
    """Observe → act → step until every episode has ended (or ``steps`` steps, or ``stop()``).

    Args:
        envs: a vector env with ``autoreset_mode="disabled"``, or several stepped as one batch (their
            observations concatenated for ``act``, its actions split among them).
        act: ``act(observation, action_mask) -> (B, N)`` actions, or an :class:`Agent` (reset at every
            start, given the oracle when it needs one; one env only).
        workloads: reset the envs on these (one per environment, over ``envs`` in order) first; None: go on
            from their current state.
        observe: what ``act`` sees of one env's observation (default: the plain per-node observation).
        on_step: called with every :class:`Transition`.
        steps: stop after this many steps (None: when every episode has ended).
        restart: ``restart(i, env)`` is called when every episode of ``envs[i]`` has ended (after
            ``on_step``); it resets the env, returns what ``env.reset`` returned, and play goes on (then
            give ``steps``).
        stop: checked before every step; True ends the loop.

    Returns:
        :class:`Played`: the last infos (the final episode statistics) and the current observation.
    """
    group = [envs] if isinstance(envs, DiscreteCoREVectorEnv) else list(envs)
    agent = act if isinstance(act, Agent) else None
    if agent is not None:
        if len(group) != 1:
            raise ValueError("an Agent plays one vector env; pass a function to act on several")
        act = agent_policy(agent, group[0])
    current: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = []
    offset = 0
    for env in group:
        if workloads is not None:
            current.append(env.reset(options=[{"workload": w} for w in workloads[offset : offset + env.num_envs]]))
            offset += env.num_envs
        else:
            current.append(_current(env))
    if workloads is not None and offset != len(workloads):
        raise ValueError(f"got {len(workloads)} workloads for {offset} environments")
    flags = [_flags(env) for env in group]
    count, stopped = 0, False
    while steps is None or count < steps:
        if steps is None and all(f.done.all() for f in flags):
            break
        if stop is not None and stop():
            stopped = True
            break
        observation, mask = _seen(group, [obs for obs, _ in current], observe)
        actions = np.asarray(act(observation, mask))
        live = ~np.concatenate([f.done for f in flags])
        results, start = [], 0
        for i, env in enumerate(group):
            obs, rewards, terminated, truncated, infos = env.step(actions[start : start + env.num_envs])
            start += env.num_envs
            current[i] = (obs, infos)
            flags[i] = _Flags(terminated, truncated)
            results.append((rewards, infos))
        count += 1
        if on_step is not None:
            infos = _cat_infos([r[1] for r in results])
            on_step(Transition(observation, mask, actions, np.concatenate([r[0] for r in results]), live, live & np.concatenate([f.done for f in flags]), infos))
        if restart is not None:
            for i, env in enumerate(group):
                if flags[i].done.all():
                    current[i], flags[i] = restart(i, env), _flags(env)
                    if agent is not None:
                        agent.reset(env.num_envs, env.batch.N, env.batch.K)
    return Played(_cat_infos([infos for _, infos in current]), _cat([f.terminated for f in flags]), _cat([f.truncated for f in flags]),
                  count, stopped, group, [obs for obs, _ in current], observe)


@dataclasses.dataclass
class _Flags:
    terminated: np.ndarray
    truncated: np.ndarray

    @property
    def done(self) -> np.ndarray:
        return self.terminated | self.truncated


def _flags(env: DiscreteCoREVectorEnv) -> _Flags:
    """An env's episode-end flags as they stand (a reset leaves them False unless a workload ends at once)."""
    sim = env.batch.sim
    return _Flags(sim.terminated.copy(), sim.truncated.copy())


def _current(env: DiscreteCoREVectorEnv) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The observation dict and infos of an env as they stand (after a reset or step)."""
    obs, mask = env.batch.observe()
    return {"observation": obs, "action_mask": mask}, env.batch.infos()


def _seen(group: list[DiscreteCoREVectorEnv], observations: list[dict[str, np.ndarray]], observe: Observe) -> tuple[np.ndarray, np.ndarray]:
    """What ``act`` sees of every env of ``group``, concatenated: observations and masks."""
    seen = [observe(env, obs) for env, obs in zip(group, observations)]
    return _cat([s[0] for s in seen]), _cat([s[1] for s in seen])


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _cat_infos(infos: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return infos[0] if len(infos) == 1 else {key: np.concatenate([i[key] for i in infos]) for key in infos[0]}


__all__ = ["Played", "Transition", "agent_policy", "final_statistics", "play", "plain_observation"]
