"""Recorded whole-episode trajectories of the environment, for the equivalence test of its implementation.

``python tests/trajectories.py`` (re)writes ``tests/data/trajectories.npz``. It was first run on the numpy
simulator (commit 0cc09af) before the step was rewritten as compiled loops; the test replays each case's
recorded actions on the current implementation and requires the same trajectory: every integer
(statistics, masks, terminations) exactly, rewards and potentials within 1e-9, observations within float32
rounding of the logarithm (1e-5), so the comparison does not depend on a SIMD path. One case was
re-recorded since: ``tiny_truncated`` (max_cycles 120 < arrival_steps 500), when seeded draws stopped at
``max_cycles`` (issue 29) and its workload changed; its entries were replaced alone, the other cases are
the original recording.

A case is a PettingZoo episode (B = 1) driven by seeded actions: masked-random, or uniform over [0, K] so
that invalid choices and conflicts occur too; ``batched`` cases step B environments together through the
batched interface.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data" / "trajectories.npz"
#: Observations are stored every OBS_EVERY steps (and at the last step) to keep the file small.
OBS_EVERY = 25

#: name -> (env kwargs, reset options or seed, action rule)
CASES = {
    "id_suite_masked": ({}, {"suite": "eval", "task_set": "id", "load": "train", "root": 0, "episode": 0}, "masked"),
    "rl_x2_speeds_switch": ({"task_set": "rl_ood", "load": "x2", "n_slots": 8, "switch_cost": 0.3, "node_speeds": [1.0, 2.0, 0.5, 1.5],
                             "kappa": 0.7, "history": 4}, {"suite": "eval", "root": 3, "episode": 1}, "masked"),
    "seeded_uniform_sparse": ({"n_nodes": 8, "n_slots": 16, "reward": "sparse", "load": 0.15}, 3, "uniform"),
    "vit_uniform": ({"task_set": "vit_ood", "n_slots": 6, "history": 12}, {"suite": "eval", "root": 2, "episode": 3}, "uniform"),
    "stress_masked": ({"task_set": "stress"}, 0, "masked"),
    "tiny_truncated": ({"n_nodes": 1, "n_slots": 2, "history": 1, "max_cycles": 120, "load": 0.5}, 11, "masked"),
}
BATCHED = {"batched_vit": ({"task_set": "vit_ood", "n_slots": 8}, [{"suite": "eval", "root": r, "episode": e} for r in range(3) for e in range(2)])}


def choose(rule: str, rng: np.random.Generator, mask: np.ndarray) -> np.ndarray:
    """Actions for (…, K+1) masks: ``masked`` uniform over allowed actions, ``uniform`` over [0, K]."""
    if rule == "masked":
        return np.argmax(rng.random(mask.shape) * mask, axis=-1).astype(np.int64)
    return rng.integers(0, mask.shape[-1], mask.shape[:-1]).astype(np.int64)


def record_case(kwargs: dict, reset, rule: str) -> dict[str, np.ndarray]:
    from core_env import discrete_core_v1
    from core_env.episode import EPISODE_KEYS

    env = discrete_core_v1.parallel_env(**kwargs)
    seed, options = (reset, None) if isinstance(reset, int) else (0, reset)
    obs, infos = env.reset(seed=seed, options=options)
    rng = np.random.default_rng(12345)
    agents = env.possible_agents
    out = {k: [] for k in ("actions", "rewards", "done", "stats", "potential", "masks", "node_flags", "obs", "obs_steps", "state")}

    def observe(t: int, obs, infos, last: bool) -> None:
        out["masks"].append(np.stack([obs[a]["action_mask"] for a in agents]))
        out["stats"].append([float(infos[agents[0]][k]) for k in EPISODE_KEYS])
        out["potential"].append(infos[agents[0]]["potential"])
        out["node_flags"].append([[infos[a]["conflict"], infos[a]["invalid_action"]] for a in agents])
        if t % OBS_EVERY == 0 or last:
            out["obs"].append(np.stack([obs[a]["observation"] for a in agents]))
            out["state"].append(env.state())
            out["obs_steps"].append(t)

    observe(0, obs, infos, False)
    t = 0
    while env.agents:
        actions = choose(rule, rng, out["masks"][-1])
        obs, rewards, terms, truncs, infos = env.step(dict(zip(agents, actions.tolist())))
        t += 1
        out["actions"].append(actions)
        out["rewards"].append(rewards[agents[0]])
        out["done"].append([terms[agents[0]], truncs[agents[0]]])
        observe(t, obs, infos, not env.agents)
    dtypes = {"actions": np.int16, "masks": np.int8, "node_flags": np.int8, "obs_steps": np.int64, "done": bool}
    return {k: np.asarray(v, dtype=dtypes.get(k, np.float64 if k not in ("obs", "state") else np.float32)) for k, v in out.items()}


def record_batched(kwargs: dict, options: list[dict]) -> dict[str, np.ndarray]:
    """B environments stepped together (uniform actions, so invalid choices and conflicts occur).

    Recorded on the numpy ``Simulator`` + ``TeamReward`` + ``features.observations``; replayed on the
    public vector env (``autoreset_mode="disabled"``: finished environments are frozen, reward 0).
    """
    from core_env.vector import EPISODE_KEYS, DiscreteCoREVectorEnv

    envs = DiscreteCoREVectorEnv(len(options), "disabled", **kwargs)
    observation, _ = envs.reset(seed=0, options=options)
    rng = np.random.default_rng(777)
    out = {k: [] for k in ("actions", "rewards", "done", "stats", "masks", "obs", "obs_steps")}
    t = 0
    while not envs.batch.sim.done.all():
        obs, mask = observation["observation"], observation["action_mask"]
        if t % OBS_EVERY == 0:
            out["obs"].append(obs)
            out["obs_steps"].append(t)
        out["masks"].append(mask)
        actions = choose("uniform", rng, mask)
        out["actions"].append(actions)
        observation, rewards, terminated, truncated, infos = envs.step(actions)
        out["rewards"].append(rewards)
        out["done"].append(np.stack([terminated, truncated]))
        out["stats"].append(np.stack([np.asarray(infos[k], np.float64) for k in sorted(EPISODE_KEYS)]))
        t += 1
    dtypes = {"actions": np.int16, "masks": np.int8, "obs_steps": np.int64, "done": bool, "obs": np.float32}
    return {k: np.asarray(v, dtype=dtypes.get(k, np.float64)) for k, v in out.items()}


def record_all() -> dict[str, np.ndarray]:
    arrays = {}
    for name, (kwargs, reset, rule) in CASES.items():
        for key, value in record_case(kwargs, reset, rule).items():
            arrays[f"{name}/{key}"] = value
    for name, (kwargs, options) in BATCHED.items():
        for key, value in record_batched(kwargs, options).items():
            arrays[f"{name}/{key}"] = value
    return arrays


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    arrays = record_all()
    DATA.parent.mkdir(exist_ok=True)
    np.savez_compressed(DATA, **arrays)
    for name in list(CASES) + list(BATCHED):
        print(name, arrays[f"{name}/actions"].shape, "final stats", arrays[f"{name}/stats"][-1][:5])
    print(DATA, DATA.stat().st_size, "bytes")
