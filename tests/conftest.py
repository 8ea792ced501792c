"""Shared helpers for the core_env test suite: tiny hand-made workloads, episode runners, digests.

The helpers are plain functions so that test modules (and the subprocess in test_determinism) can
``from conftest import ...`` them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pytest

from core_env import discrete_core_v1
from core_env.curves import CurveBank
from core_env.gym_env import DiscreteCoREEnv
from core_env.workload import Workload

#: A linear curve whose batch b has loss 10 - b (b = 0..9): interval means are easy to compute by hand.
LINEAR = np.arange(10.0, 0.0, -1.0)
#: A flat curve that never goes below 1 (a naturally infeasible task for targets < 1).
FLAT = np.full(20, 1.0)


def tiny_bank(*curves: Sequence[float]) -> CurveBank:
    """A CurveBank of the given curves (defaults: LINEAR, FLAT)."""
    curves = curves or (LINEAR, FLAT)
    return CurveBank("tiny", [np.asarray(c, dtype=float) for c in curves], [f"c{i}" for i in range(len(curves))])


def tiny_workload(tasks: Sequence[tuple], arrival_steps: int = 1, bank: CurveBank | None = None) -> Workload:
    """A hand-made workload; ``tasks`` are (arrival, deadline, target, batches_per_step[, curve=0])."""
    bank = bank or tiny_bank()
    rows = [tuple(t) + (0,) * (5 - len(t)) for t in tasks]
    arrival, deadline, target, bps, curve = (np.array(col) for col in zip(*rows)) if rows else ([],) * 5
    demand = [bank.demand(int(c), float(t), float(b)) for c, t, b in zip(curve, target, bps)]
    return Workload(bank, arrival, deadline, target, bps, curve, demand, arrival_steps)


def parallel_on(workload: Workload, **config):
    """A PettingZoo parallel env reset onto ``workload``; returns (env, observations, infos)."""
    config.setdefault("n_nodes", 2)
    config.setdefault("n_slots", 2)
    env = discrete_core_v1.parallel_env(**config)
    obs, infos = env.reset(seed=0, options={"workload": workload})
    return env, obs, infos


def act(env, *actions: int) -> tuple:
    """Step a parallel env with node i taking ``actions[i]``; returns the five step dicts."""
    return env.step({f"node_{i}": a for i, a in enumerate(actions)})


def masked_random_actions(rng: np.random.Generator, masks: np.ndarray) -> np.ndarray:
    """(N,) uniformly random valid actions for (N, K+1) int8 masks (idle always allowed)."""
    out = np.empty(masks.shape[0], np.int64)
    for i, row in enumerate(masks):
        out[i] = rng.choice(np.flatnonzero(row))
    return out


def parallel_masks(obs: dict) -> np.ndarray:
    return np.stack([obs[a]["action_mask"] for a in sorted(obs, key=lambda a: int(a.split("_")[1]))])


def run_parallel(env, seed: int | None = None, options: dict | None = None, policy_seed: int = 0) -> list:
    """One whole episode with masked random actions; returns the trajectory as a list of steps."""
    rng = np.random.default_rng(policy_seed)
    obs, infos = env.reset(seed=seed, options=options)
    trajectory = [(obs, infos)]
    while env.agents:
        actions = masked_random_actions(rng, parallel_masks(obs))
        obs, rewards, terms, truncs, infos = env.step({f"node_{i}": int(a) for i, a in enumerate(actions)})
        trajectory.append((obs, rewards, terms, truncs, infos))
    return trajectory


def run_gym(env: DiscreteCoREEnv, seed: int | None = None, options: dict | None = None, policy_seed: int = 0) -> list:
    """One whole episode of the Gymnasium view with masked random actions."""
    rng = np.random.default_rng(policy_seed)
    obs, info = env.reset(seed=seed, options=options)
    trajectory = [(obs, info)]
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(masked_random_actions(rng, obs["action_mask"]))
        trajectory.append((obs, reward, terminated, truncated, info))
        done = terminated or truncated
    return trajectory


def _feed(digest, value) -> None:
    if isinstance(value, dict):
        digest.update(b"{")
        for key in sorted(value):
            digest.update(repr(key).encode())
            _feed(digest, value[key])
        digest.update(b"}")
    elif isinstance(value, (list, tuple)):
        digest.update(b"[")
        for item in value:
            _feed(digest, item)
        digest.update(b"]")
    elif isinstance(value, np.ndarray):
        digest.update(f"{value.dtype}{value.shape}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    else:
        digest.update(f"{type(value).__name__}:{value!r}".encode())


def trajectory_digest(trajectory) -> str:
    """sha256 over every array's bytes, every number's repr and every dict key of a trajectory."""
    digest = hashlib.sha256()
    _feed(digest, trajectory)
    return digest.hexdigest()


def parallel_trajectory_digest(seed: int, policy_seed: int = 0, **config) -> str:
    """Digest of one PettingZoo episode (used in-process and from a subprocess)."""
    return trajectory_digest(run_parallel(discrete_core_v1.parallel_env(**config), seed=seed, policy_seed=policy_seed))


@pytest.fixture
def one_torch_thread():
    """Run a torch test on one thread (deterministic timings and reductions), then restore the count."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def small_fidelity(monkeypatch):
    """:mod:`benchmarks.fidelity` shrunk for an end-to-end run (skipped without torch or scikit-learn): two MLP
    families of two 240-step runs each, profiled for 0.1 s."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from benchmarks import fidelity

    monkeypatch.setattr(fidelity, "FAMILIES", ("mlp_wine", "mlp_breast_cancer"))
    monkeypatch.setattr(fidelity, "RUNS_PER_FAMILY", 2)
    monkeypatch.setattr(fidelity, "RUN_STEPS", 240)
    monkeypatch.setattr(fidelity, "PROFILE_SECONDS", 0.1)
    return fidelity
