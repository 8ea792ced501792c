"""PettingZoo parallel wrappers that adapt ``discrete_core_v1.parallel_env()`` to RL libraries.

Each wrapper subclasses :class:`pettingzoo.utils.wrappers.BaseParallelWrapper`, returns fresh arrays,
returns the same space object for an agent on every call, and forwards assignments to ``max_cycles``
(PettingZoo's ``parallel_api_test`` sets it). Unknown attributes (``reported_history``, ``slot_task``,
``config``, ``state``, ...) reach the wrapped env.

=====================  ==============================================================================
wrapper                observation per agent / what it adds
=====================  ==============================================================================
FlattenObservation     one float32 Box ``[observation, action_mask]``; mask also in ``infos[a]``
MaskToInfo             the Box ``observation``; the int8 mask moves to ``infos[a]["action_mask"]``
RLlibKeys              Dict ``{"observations", "action_mask"}`` (RLlib's action-masking RLModule)
LongerHistory          the canonical Dict with H reported log losses per slot (≙ ``history=H``)
OracleDemand           unchanged; adds the HIDDEN remaining demand to ``infos[a]`` (oracle rows only)
FinalEpisode           unchanged; the finished episode's statistics survive autoreset in ``infos[a]``
EpisodeRecorder        unchanged; records the workload and every action for :func:`replay`
=====================  ==============================================================================

Order matters where a wrapper reads the canonical Dict observation: ``LongerHistory`` must wrap an env
whose observations are still ``{"observation", "action_mask"}`` and the observation-reshaping wrappers
(``FlattenObservation``, ``MaskToInfo``, ``RLlibKeys``) go last, e.g.
``MaskToInfo(LongerHistory(parallel_env(), 32))``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper

from core_env import features
from core_env.config import TASK_SETS, EnvConfig
from core_env.curves import CORPUS_TASK_SETS, CurveBank, bank_for
from core_env.generators import generator_for
from core_env.parallel import DiscreteCoREParallelEnv
from core_env.workload import Workload

__all__ = ["EpisodeRecorder", "FinalEpisode", "FlattenObservation", "LongerHistory", "MaskToInfo", "OracleDemand", "RLlibKeys", "replay"]

Observations = dict[str, Any]
Infos = dict[str, dict[str, Any]]


class ObservationWrapper(BaseParallelWrapper):
    """Shared plumbing: one hook rewrites every (observations, infos) pair from reset and step.

    Subclasses override :meth:`_transform_space` (per-agent observation space, cached here) and
    :meth:`_transform` (observations and infos of the agents present; never mutates its inputs).
    """

    def __init__(self, env: ParallelEnv) -> None:
        super().__init__(env)
        self._spaces: dict[str, spaces.Space] = {}

    @property
    def max_cycles(self) -> int:
        return self.env.max_cycles

    @max_cycles.setter
    def max_cycles(self, value: int) -> None:
        self.env.max_cycles = value

    def observation_space(self, agent: str) -> spaces.Space:
        if agent not in self._spaces:
            self._spaces[agent] = self._transform_space(self.env.observation_space(agent))
        return self._spaces[agent]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observations, Infos]:
        return self._transform(*self.env.reset(seed=seed, options=options))

    def step(self, actions: Mapping[str, Any]):
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        observations, infos = self._transform(observations, infos)
        return observations, rewards, terminations, truncations, infos

    def _transform_space(self, space: spaces.Space) -> spaces.Space:
        return space

    def _transform(self, observations: Observations, infos: Infos) -> tuple[Observations, Infos]:
        return observations, infos


def canonical_space(space: spaces.Space, wrapper: str) -> spaces.Dict:
    """The wrapped env's Dict space, or a TypeError saying the wrapper is in the wrong place."""
    if not (isinstance(space, spaces.Dict) and {"observation", "action_mask"} <= set(space.spaces)):
        raise TypeError(f"{wrapper} needs observations {{'observation', 'action_mask'}} from the env it wraps, got {space}; "
                        "apply observation-reshaping wrappers last")
    return space


def _with_mask(infos: Infos, observations: Observations) -> Infos:
    """Infos with each agent's int8 action mask added as ``"action_mask"``."""
    return {a: {**info, "action_mask": observations[a]["action_mask"]} for a, info in infos.items()}


class FlattenObservation(ObservationWrapper):
    """One flat float32 vector per agent, for libraries that want a single Box per agent.

    Serves SuperSuit's ``pettingzoo_env_to_vec_env_v1`` (parameter sharing, e.g. with Stable-Baselines3)
    and any MLP policy. The vector is ``concatenate([observation (D,), action_mask (K+1,) as 0.0/1.0])``
    (observation first, in that order, unlike ``gymnasium.spaces.flatten`` which sorts the Dict keys and
    puts the mask first). The int8 mask is also copied to ``infos[agent]["action_mask"]`` so maskable
    learners need not slice it back out.
    """

    def _transform_space(self, space: spaces.Space) -> spaces.Box:
        obs, mask = (canonical_space(space, type(self).__name__)[key] for key in ("observation", "action_mask"))
        low = np.concatenate([obs.low, np.zeros(mask.shape)]).astype(np.float32)
        high = np.concatenate([obs.high, np.ones(mask.shape)]).astype(np.float32)
        return spaces.Box(low, high, dtype=np.float32)

    def _transform(self, observations: Observations, infos: Infos) -> tuple[Observations, Infos]:
        flat = {a: np.concatenate([o["observation"], o["action_mask"]], dtype=np.float32) for a, o in observations.items()}
        return flat, _with_mask(infos, observations)


class MaskToInfo(ObservationWrapper):
    """Box observations with the int8 action mask in ``infos[agent]["action_mask"]``.

    Serves every library that takes Box observations and reads the mask from the infos: TorchRL's
    ``PettingZooWrapper`` and BenchMARL (flat ``("node", "observation")`` and ``("node", "action_mask")``
    entries instead of a nested observation dict), SuperSuit's vectorizers (they pass infos through), and
    hand-written loops (``infos[agent]["action_mask"]``; docs/views.md, "Libraries that read the mask from
    the infos"). The mask is present in the infos from reset on (TorchRL builds its info spec from the
    first reset).
    """

    def _transform_space(self, space: spaces.Space) -> spaces.Box:
        return canonical_space(space, type(self).__name__)["observation"]

    def _transform(self, observations: Observations, infos: Infos) -> tuple[Observations, Infos]:
        return {a: o["observation"] for a, o in observations.items()}, _with_mask(infos, observations)


class RLlibKeys(ObservationWrapper):
    """Renames the observation key ``"observation"`` to ``"observations"`` and keeps ``"action_mask"``.

    Serves RLlib (``ParallelPettingZooEnv``): its action-masking RLModule
    (``rllib/examples/rl_modules/classes/action_masking_rlm.py``) reads ``obs["observations"]`` and
    ``obs["action_mask"]``.
    """

    def _transform_space(self, space: spaces.Space) -> spaces.Dict:
        space = canonical_space(space, type(self).__name__)
        return spaces.Dict({"observations": space["observation"], "action_mask": space["action_mask"]})

    def _transform(self, observations: Observations, infos: Infos) -> tuple[Observations, Infos]:
        return {a: {"observations": o["observation"], "action_mask": o["action_mask"]} for a, o in observations.items()}, infos


def _feature_box(dim: int) -> spaces.Box:
    return spaces.Box(-features.OBS_BOUND, features.OBS_BOUND, (dim,), np.float32)


class LongerHistory(ObservationWrapper):
    """Observations (and the state) with the last ``history`` reported log losses per slot.

    Library-neutral: for predictors and policies that want a longer loss window than the env's H. The
    features are recomputed by :mod:`core_env.features` on the unwrapped env's simulator, which keeps
    every task's full history, so ``LongerHistory(parallel_env(), H)`` observes exactly what
    ``parallel_env(history=H)`` does (any ``history >= 1`` works, shorter ones too). ``state()`` and
    ``state_space`` follow; ``config.history`` still names the wrapped env's H.
    """

    def __init__(self, env: ParallelEnv, history: int) -> None:
        if isinstance(history, bool) or not isinstance(history, (int, np.integer)) or history < 1:
            raise ValueError(f"history must be an int >= 1, got {history!r}")
        super().__init__(env)
        self.history = int(history)
        self.state_space = _feature_box(features.state_dim(env.unwrapped.config.n_slots, self.history))

    def _transform_space(self, space: spaces.Space) -> spaces.Dict:
        space = canonical_space(space, type(self).__name__)
        observation = _feature_box(features.obs_dim(self.unwrapped.config.n_slots, self.history))
        return spaces.Dict({**space.spaces, "observation": observation})

    def _transform(self, observations: Observations, infos: Infos) -> tuple[Observations, Infos]:
        obs = features.observations(self._sim(), self.history)[0][0]  # (N, D)
        index = {a: i for i, a in enumerate(self.possible_agents)}
        return {a: {**o, "observation": obs[index[a]]} for a, o in observations.items()}, infos

    def state(self) -> np.ndarray:
        if not self.unwrapped.episode.started:
            raise RuntimeError("call reset() before state()")
        return features.state(self._sim(), self.history)[0]

    def _sim(self):
        return self.unwrapped.episode.sim


class OracleDemand(ObservationWrapper):
    """HIDDEN INFORMATION: adds each slot's true remaining demand to ``infos[agent]["remaining_demand"]``.

    For oracle agents (clairvoyant schedulers, oracle predictors) only: never apply it by default,
    never feed it to an agent whose results are reported as non-clairvoyant. Library-neutral.

    ``infos[agent]["remaining_demand"]`` is a float64 (K,) array (a fresh copy per agent): the nominal
    node-steps (speed 1, no switching cost) the task in each slot still needs to reach its target,
    ``0.0`` for empty slots and ``inf`` for a task that never reaches its target (a float ``inf``
    is kept rather than a large sentinel, so comparisons such as ``demand <= window`` stay correct;
    replace it with ``np.nan_to_num(..., posinf=M)`` before feeding it to a network). The values are
    :meth:`core_env.sim.Simulator.remaining_demand` of the unwrapped env.
    """

    def _transform(self, observations: Observations, infos: Infos) -> tuple[Observations, Infos]:
        demand = self.unwrapped.episode.sim.remaining_demand()[0]
        return observations, {a: {**info, "remaining_demand": demand.copy()} for a, info in infos.items()}


#: Per-step info keys that are not statistics of the episode (:class:`FinalEpisode` leaves them out).
_PER_STEP_KEYS = frozenset({"action_mask", "conflict", "invalid_action", "potential", "active", "remaining_demand"})


class FinalEpisode(ObservationWrapper):
    """Keeps the statistics of the last finished episode in the infos, through autoreset.

    Autoresetting vectorizers (SuperSuit's ``pettingzoo_env_to_vec_env_v1`` / ``concat_vec_envs_v1``, and
    others alike) reset an env in the step that ends its episode and merge (or replace) that step's infos
    with the reset's, so ``completion_rate``, ``completed``, ... of the episode that ended read as the new
    episode's zeros. With this wrapper, ``infos[agent]["final_episode"]`` holds the finished episode's
    statistics: a dict with every episode statistic of the env's infos (``completion_rate``,
    ``completed``, ``arrived``, ``rejected``, ``failed``, ``conflicts``, ``invalid_actions``, ``t``, ...),
    ``"return"`` (the agent's summed reward) and ``"index"`` (0 for the first episode this wrapper saw end,
    then 1, 2, ...). It is in the infos of the step that ends the episode and of the reset that follows
    (so a vectorizer that keeps only the reset's infos still delivers it; count an episode once per
    ``index``), and absent otherwise. Library-neutral; wrap it inside the observation-reshaping wrappers,
    e.g. ``MaskToInfo(FinalEpisode(parallel_env()))``.
    """

    def __init__(self, env: ParallelEnv) -> None:
        super().__init__(env)
        self._finished = 0
        self._returns: dict[str, float] = {}
        self._last: dict[str, dict[str, Any]] | None = None

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observations, Infos]:
        observations, infos = super().reset(seed=seed, options=options)
        self._returns = {a: 0.0 for a in self.possible_agents}
        last, self._last = self._last, None
        if last is not None:
            infos = {a: {**info, "final_episode": dict(last[a])} if a in last else info for a, info in infos.items()}
        return observations, infos

    def step(self, actions: Mapping[str, Any]):
        observations, rewards, terminations, truncations, infos = super().step(actions)
        for a, r in rewards.items():
            self._returns[a] = self._returns.get(a, 0.0) + float(r)
        if infos and all(terminations.get(a, False) or truncations.get(a, False) for a in infos):
            self._last = {a: {**{k: v for k, v in info.items() if k not in _PER_STEP_KEYS and np.ndim(v) == 0},
                              "return": self._returns.get(a, 0.0), "index": self._finished} for a, info in infos.items()}
            self._finished += 1
            infos = {a: {**info, "final_episode": dict(self._last[a])} for a, info in infos.items()}
        return observations, rewards, terminations, truncations, infos


# --------------------------------------------------------------------------------------------------
# Recording and replaying episodes

RECORD_FORMAT = "core_env.episode_record/1"
_WORKLOAD_FIELDS = ("arrival", "deadline", "target", "batches_per_step", "curve", "demand")


class EpisodeRecorder(ObservationWrapper):
    """Records an episode so that :func:`replay` can reproduce it exactly, on any machine.

    Library-neutral (debugging, regression fixtures, sharing a failure). Observations, rewards and infos
    pass through unchanged. :attr:`record` is the episode since the last ``reset``: a plain dict of
    ``str``, ``int``, ``float``, ``None`` and lists, so ``json.dumps(record, allow_nan=False)`` and
    ``json.loads`` round-trip it exactly (floats are written with ``repr`` precision). Keys:

    * ``format``: ``"core_env.episode_record/1"``;
    * ``config``: the unwrapped env's configuration (``task_set`` is a name, or a bank file's resolved
      path; ``recipe`` a dict; ``custom_bank`` is True when it was a custom :class:`CurveBank`, which
      :func:`replay` then needs through ``env_fn``);
    * ``seed``, ``options``: the reset arguments, for reference (``options`` without a ``"workload"``
      entry); replay does not use them, because a ``reset()`` without a seed continues the env's
      generator;
    * ``bank``: name and fingerprint of the curve bank the workload trains on;
    * ``workload``: the episode's task arrays (``arrival_steps`` and one list per task field; an infinite
      ``demand`` is written as ``None``);
    * ``agents``: agent order of the action lists; ``actions``: one list of ints per step.
    """

    def __init__(self, env: ParallelEnv) -> None:
        super().__init__(env)
        self.record: dict[str, Any] | None = None

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Observations, Infos]:
        result = super().reset(seed=seed, options=options)
        episode = self.unwrapped.episode
        self.record = {
            "format": RECORD_FORMAT,
            "config": _config_dict(episode.config),
            "seed": None if seed is None else int(seed),
            "options": {k: _plain(v) for k, v in (options or {}).items() if k != "workload" and isinstance(v, (str, int, float, np.generic))},
            "bank": {"name": episode.workload.bank.name, "fingerprint": episode.workload.bank.fingerprint},
            "workload": _workload_dict(episode.workload),
            "agents": list(self.possible_agents),
            "actions": [],
        }
        return result

    def step(self, actions: Mapping[str, Any]):
        result = super().step(actions)  # raises (and records nothing) on a malformed action dict
        self.record["actions"].append([int(actions[a]) for a in self.record["agents"]])
        return result


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _config_dict(config) -> dict[str, Any]:
    out = dataclasses.asdict(config)
    custom = isinstance(config.task_set, CurveBank)
    out["task_set"] = config.bank_path if config.bank_path is not None else config.task_set_name
    out["recipe"] = config.recipe.as_dict()
    out["custom_bank"] = custom
    if out["node_speeds"] is not None:
        out["node_speeds"] = list(out["node_speeds"])
    return out


def _workload_dict(workload: Workload) -> dict[str, Any]:
    out: dict[str, Any] = {"arrival_steps": int(workload.arrival_steps)}
    for name in _WORKLOAD_FIELDS:
        values = getattr(workload, name).tolist()
        out[name] = [None if isinstance(v, float) and not np.isfinite(v) else v for v in values]
    return out


def _workload_from_dict(data: Mapping[str, Any], bank: CurveBank) -> Workload:
    fields = {name: np.array(data[name], dtype=np.float64 if name != "curve" else np.int64) for name in _WORKLOAD_FIELDS if name != "demand"}
    demand = np.array([np.inf if v is None else v for v in data["demand"]], dtype=np.float64)
    return Workload(bank, demand=demand, arrival_steps=int(data["arrival_steps"]), **fields)


def _find_bank(record: Mapping[str, Any], env: ParallelEnv) -> CurveBank:
    """The curve bank with the record's fingerprint, among the banks ``env`` and the record can name."""
    name, fingerprint = record["bank"]["name"], record["bank"]["fingerprint"]
    config = env.unwrapped.config
    candidates: list[Callable[[], CurveBank]] = []
    if isinstance(config.task_set, CurveBank):
        candidates.append(lambda: config.task_set)
    if config.bank_path is not None:  # a bank file: either split
        candidates += [lambda: config.bank("train"), lambda: config.bank("eval")]
    for task_set in dict.fromkeys([name, config.task_set_name]):
        if task_set in CORPUS_TASK_SETS:
            candidates += [lambda t=task_set: bank_for(t, "train"), lambda t=task_set: bank_for(t, "eval")]
        elif task_set in TASK_SETS:  # a constructed scenario: the bank of its generator
            candidates.append(lambda t=task_set: generator_for(EnvConfig(task_set=t)).bank)
    for candidate in candidates:
        bank = candidate()
        if bank.fingerprint == fingerprint:
            return bank
    raise ValueError(f"the record's curve bank {name!r} (fingerprint {fingerprint[:12]}…) is not available; "
                     "pass env_fn building an env whose task_set is that CurveBank")


def _default_env_fn(record: Mapping[str, Any]) -> Callable[[], ParallelEnv]:
    config = {k: v for k, v in record["config"].items() if k not in ("custom_bank", "render_mode")}
    if record["config"]["custom_bank"]:
        raise ValueError("the record was made on a custom CurveBank: pass env_fn building an env with that task_set")

    return lambda: DiscreteCoREParallelEnv(**config)


def replay(record: Mapping[str, Any], env_fn: Callable[[], ParallelEnv] | None = None) -> dict[str, list]:
    """Replays an :class:`EpisodeRecorder` record on a fresh env and returns the trajectory.

    Args:
        record: ``EpisodeRecorder.record``, possibly after a JSON round trip.
        env_fn: builds the fresh env (wrappers included, so the trajectory is seen through them);
            default: ``parallel_env(**record["config"])`` without rendering.

    Returns:
        ``{"observations": [...], "infos": [...]}`` with T + 1 entries (from ``reset`` first) and
        ``{"rewards", "terminations", "truncations"}`` with T entries, each entry the per-agent dict the
        env returned.
    """
    if record.get("format") != RECORD_FORMAT:
        raise ValueError(f"not an episode record of format {RECORD_FORMAT!r}: format={record.get('format')!r}")
    env = (env_fn or _default_env_fn(record))()
    workload = _workload_from_dict(record["workload"], _find_bank(record, env))
    observations, infos = env.reset(options={"workload": workload})
    trajectory: dict[str, list] = {"observations": [observations], "infos": [infos], "rewards": [], "terminations": [], "truncations": []}
    agents = record["agents"]
    for actions in record["actions"]:
        step = dict(zip(agents, actions))
        result = env.step({a: step[a] for a in env.agents})
        for key, value in zip(("observations", "rewards", "terminations", "truncations", "infos"), result):
            trajectory[key].append(value)
    env.close()
    return trajectory
