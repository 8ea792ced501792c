"""perf: env-steps/s of every view of core_env, side by side with the API floor (targets: docs/benchmarks.md, Throughput).

Measured: (1) the PettingZoo view ``discrete_core_v1.parallel_env()``, (2) the Gymnasium view
``gym.make("core_env/DiscreteCoRE-v1").unwrapped``, (3) the batched ``Simulator.step`` at several B,
alone and with ``features.observations``, and (4) :class:`MinimalParallelEnv`, a ParallelEnv that only
builds dicts of our shapes and keys. Actions are masked-random (each node picks uniformly among its
allowed actions); only the environment's own calls (step and reset) are timed, not the action choice.
An env-step is one step of one environment (all N nodes); the batched rows count only live
environments. Each rate is the median over five chunks of a measurement (the machine may be busy).
Also measured: the median time of a PettingZoo ``reset(seed=s)`` (a freshly drawn workload), and each
agent's decision time: ``act`` per step (B = 1, N = 4, K = 16) over a whole `id` evaluation episode,
predictions included, with one torch thread. Results go to ``benchmarks/results/perf.json``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv
from tqdm import tqdm

from benchmarks import add_out, markdown_table, write_results
from benchmarks.agents import QUICK_ROWS, make_agent
from core_env import GYM_ID, discrete_core_v1, features
from core_env.config import EnvConfig
from core_env.episode import EPISODE_KEYS, NODE_KEYS, TEAM_KEYS
from core_env.parallel import node_name, observation_space
from core_env.sim import Simulator
from core_env.workload import SUITE_EPISODES, SUITE_ROOTS, load_suite
from mara_agents.protocols import REMAINING_DEMAND

BATCH_SIZES = (1, 64, 256)
TARGET_RATIO, GOAL_RATIO, TARGET_BATCHED = 0.25, 0.5, 250_000  # the throughput targets of docs/benchmarks.md

#: advances an environment once; returns (env-steps done, seconds spent inside the environment).
Stepper = Callable[[], tuple[int, float]]


class MinimalParallelEnv(ParallelEnv):
    """The API floor: a ParallelEnv with our spaces, dict shapes and info keys, and no dynamics.

    Every step builds fresh observation arrays (zeros, all-ones masks), rewards, terminations,
    truncations and infos (``EPISODE_KEYS`` + ``NODE_KEYS`` + ``TEAM_KEYS``), and ends the episode after
    ``episode_steps`` steps.
    """

    metadata = {"name": "minimal_v0"}

    def __init__(self, n_nodes: int = 4, n_slots: int = 16, history: int = 8, episode_steps: int = 550) -> None:
        self.possible_agents = [node_name(i) for i in range(n_nodes)]
        self.agents: list[str] = []
        self._observation_space = observation_space(n_slots, history)
        self._action_space = gym.spaces.Discrete(n_slots + 1)
        self.episode_steps = episode_steps
        self.t = 0

    def observation_space(self, agent: str) -> gym.Space:
        return self._observation_space

    def action_space(self, agent: str) -> gym.Space:
        return self._action_space

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        self.agents = list(self.possible_agents)
        self.t = 0
        return self._observations(), self._infos()

    def step(self, actions: dict[str, int]):
        self.t += 1
        done = self.t >= self.episode_steps
        agents = self.agents
        rewards = {a: 0.0 for a in agents}
        terminations = {a: done for a in agents}
        truncations = {a: False for a in agents}
        observations, infos = self._observations(), self._infos()
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def _observations(self) -> dict[str, dict[str, np.ndarray]]:
        n = len(self.possible_agents)
        obs = np.zeros((n,) + self._observation_space["observation"].shape, np.float32)
        mask = np.ones((n,) + self._observation_space["action_mask"].shape, np.int8)
        return {a: {"observation": obs[i], "action_mask": mask[i]} for i, a in enumerate(self.possible_agents)}

    def _infos(self) -> dict[str, dict[str, float]]:
        stats = dict.fromkeys(EPISODE_KEYS, 0)
        return {a: {**stats, **dict.fromkeys(NODE_KEYS, 0), **dict.fromkeys(TEAM_KEYS, 0.0)} for a in self.possible_agents}


def masked_random(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(...,) int64 an action per mask row (..., K+1), uniform over the row's allowed actions."""
    return np.argmax(rng.random(mask.shape) * mask, axis=-1)


def parallel_stepper(env: ParallelEnv, rng: np.random.Generator) -> Stepper:
    observations, _ = env.reset(seed=0)

    def step() -> tuple[int, float]:
        nonlocal observations
        masks = np.stack([observations[a]["action_mask"] for a in env.agents])
        actions = dict(zip(env.agents, masked_random(masks, rng).tolist()))
        start = time.perf_counter()
        observations, *_ = env.step(actions)
        if not env.agents:
            observations, _ = env.reset()
        return 1, time.perf_counter() - start

    return step


def gym_stepper(env: gym.Env, rng: np.random.Generator) -> Stepper:
    observation, _ = env.reset(seed=0)

    def step() -> tuple[int, float]:
        nonlocal observation
        action = masked_random(observation["action_mask"], rng)
        start = time.perf_counter()
        observation, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            observation, _ = env.reset()
        return 1, time.perf_counter() - start

    return step


def sim_stepper(batch_size: int, with_observations: bool, rng: np.random.Generator) -> Stepper:
    """Batched steps on the id/train evaluation workloads (repeated to fill the batch)."""
    config = EnvConfig()
    suite = [load_suite("id", "train", r, e) for r in range(SUITE_ROOTS) for e in range(SUITE_EPISODES)]
    workloads = [suite[i % len(suite)] for i in range(batch_size)]
    sim = Simulator(config, batch_size)
    sim.reset(workloads)
    mask = features.action_masks(sim)

    def step() -> tuple[int, float]:
        nonlocal mask
        actions = masked_random(mask, rng)
        live = int(np.count_nonzero(~sim.done))
        start = time.perf_counter()
        sim.step(actions)
        if sim.done.all():
            sim.reset(workloads)
        if with_observations:
            _, mask = features.observations(sim, config.history)
        elapsed = time.perf_counter() - start
        if not with_observations:
            mask = features.action_masks(sim)
        return live, elapsed

    return step


def measure(stepper: Stepper, seconds: float, chunks: int = 5) -> dict[str, float]:
    """Run ``stepper`` for about ``seconds`` of wall time, in ``chunks`` equal parts.

    Returns env-steps and seconds spent inside the env, and the median over chunks of the rate
    (env-steps per second inside the env), which a busy machine disturbs less than the mean.
    """
    steps, inside, rates = 0, 0.0, []
    for _ in range(chunks):
        chunk_steps, chunk_inside = 0, 0.0
        end = time.perf_counter() + seconds / chunks
        while time.perf_counter() < end:
            done, elapsed = stepper()
            chunk_steps += done
            chunk_inside += elapsed
        steps, inside = steps + chunk_steps, inside + chunk_inside
        rates.append(chunk_steps / chunk_inside)
    return {"env_steps": steps, "seconds": inside, "env_steps_per_s": float(np.median(rates))}


def measure_reset(repeats: int = 200) -> float:
    """Median seconds of ``parallel_env().reset(seed=s)`` over ``repeats`` seeds (each draws a workload)."""
    env = discrete_core_v1.parallel_env()
    env.reset(seed=0)  # the first reset fills caches (curve bank, smoothed curves)
    times = []
    for seed in range(1, repeats + 1):
        start = time.perf_counter()
        env.reset(seed=seed)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def cases(rng: np.random.Generator) -> dict[str, tuple[str, int, Callable[[], Stepper]]]:
    """Measurement name -> (view, B, factory of its stepper)."""
    table: dict[str, tuple[str, int, Callable[[], Stepper]]] = {
        "pettingzoo": ("PettingZoo parallel_env()", 1, lambda: parallel_stepper(discrete_core_v1.parallel_env(), rng)),
        "minimal": ("minimal ParallelEnv (API floor)", 1, lambda: parallel_stepper(MinimalParallelEnv(), rng)),
        "gymnasium": ("Gymnasium gym.make(...).unwrapped", 1, lambda: gym_stepper(gym.make(GYM_ID).unwrapped, rng)),
    }
    for with_obs in (False, True):
        view = "Simulator.step + observations" if with_obs else "Simulator.step"
        for b in BATCH_SIZES:
            table[f"sim{'_obs' if with_obs else ''}_b{b}"] = (view, b, lambda b=b, with_obs=with_obs: sim_stepper(b, with_obs, rng))
    return table


def decision_times(rows: Sequence[str] = QUICK_ROWS) -> dict[str, dict[str, float]]:
    """Per agent row: median and mean milliseconds of one joint decision (``act``, B = 1) over an episode.

    Torch runs with one thread here, as in benchmark cells: intra-op threads on tensors this small only
    add synchronisation (on the 2-core VM a MARA decision took about 35% longer with two).
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _decision_times(rows)
    finally:
        torch.set_num_threads(threads)


def _decision_times(rows: Sequence[str]) -> dict[str, dict[str, float]]:
    config = EnvConfig()
    out = {}
    for row in tqdm(rows, desc="decisions", unit="agent", leave=False):
        agent, sim = make_agent(row), Simulator(config, 1)
        sim.reset([load_suite("id", "train", 0, 0)])
        agent.reset(1, sim.N, sim.K)
        times, feature_times = [], []
        while not sim.done.all():
            observation, mask = features.observations(sim, config.history)
            oracle = {REMAINING_DEMAND: sim.remaining_demand()} if agent.needs_oracle else None
            before = getattr(agent, "feature_seconds", 0.0)  # MAT agents: time spent rebuilding predictor features
            start = time.perf_counter()
            actions = agent.act(observation, mask, oracle)
            times.append(time.perf_counter() - start)
            feature_times.append(getattr(agent, "feature_seconds", 0.0) - before)
            sim.step(actions)
        out[row] = {"median_ms": 1e3 * float(np.median(times)), "mean_ms": 1e3 * float(np.mean(times)), "decisions": len(times)}
        if any(feature_times):
            out[row]["features_median_ms"] = 1e3 * float(np.median(feature_times))
            out[row]["policy_median_ms"] = 1e3 * float(np.median(np.subtract(times, feature_times)))
    return out


def run(seconds: float, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    results = {}
    for name, (view, batch, factory) in tqdm(cases(rng).items(), desc="perf", unit="case", leave=False):
        results[name] = {"view": view, "B": batch, **measure(factory(), seconds)}
    ratio = results["pettingzoo"]["env_steps_per_s"] / results["minimal"]["env_steps_per_s"]
    return {"cases": results, "pettingzoo_over_minimal": ratio, "gymnasium_over_minimal": results["gymnasium"]["env_steps_per_s"] / results["minimal"]["env_steps_per_s"],
            "reset_seeded_ms": 1e3 * measure_reset(), "decision_ms": decision_times()}


def summary(result: dict[str, Any]) -> str:
    """Markdown: the views' env-steps/s, the throughput targets (docs/benchmarks.md), and every agent's decision time."""
    rows = [(c["view"], c["B"], f"{c['env_steps_per_s']:,.0f}") for c in result["cases"].values()]
    ratio = result["pettingzoo_over_minimal"]
    batched = result["cases"][f"sim_b{BATCH_SIZES[-1]}"]["env_steps_per_s"]
    with_obs = result["cases"][f"sim_obs_b{BATCH_SIZES[-1]}"]["env_steps_per_s"]
    lines = [markdown_table(("view", "B", "env-steps/s"), rows), "",
             f"PettingZoo / minimal = {ratio:.3f} (target >= {TARGET_RATIO}, goal {GOAL_RATIO}): "
             f"{'met' if ratio >= TARGET_RATIO else 'MISSED (why: docs/benchmarks.md, perf)'}  ",
             f"Gymnasium / minimal = {result['gymnasium_over_minimal']:.3f}  ",
             f"Simulator.step at B={BATCH_SIZES[-1]}: {batched:,.0f} env-steps/s (target >= {TARGET_BATCHED:,}): "
             f"{'met' if batched >= TARGET_BATCHED else 'MISSED'}  ",
             f"Simulator.step + observations at B={BATCH_SIZES[-1]}: {with_obs:,.0f} env-steps/s (>= {TARGET_BATCHED:,}: "
             f"{'yes' if with_obs >= TARGET_BATCHED else 'no'})  ",
             f"PettingZoo reset(seed=s), a drawn workload: {result['reset_seeded_ms']:.2f} ms (median)", "",
             "Decision time: `act` per step, B = 1, N = 4, K = 16, over one `id` episode, predictions included, one torch thread.", "",
             markdown_table(("agent", "decision ms (median)", "decision ms (mean)", "of which: policy / predictor features (median ms)"),
                            [(row, f"{t['median_ms']:.2f}", f"{t['mean_ms']:.2f}",
                              f"{t['policy_median_ms']:.2f} / {t['features_median_ms']:.2f}" if "features_median_ms" in t else "")
                             for row, t in result["decision_ms"].items()])]
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks perf", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.5, help="wall time per measurement (default 2.5)")
    add_out(parser)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    result = run(args.seconds)
    wall = time.perf_counter() - start
    print(summary(result))
    paths = write_results("perf", {"suite": "perf", "wall_s": wall, "seconds_per_case": args.seconds, **result}, out=args.out)
    print(f"wall time {wall:.1f} s; wrote {', '.join(str(p) for p in paths)}")
    return 0
