"""perf: env-steps/s of every view of core_env, side by side with the API floor (targets: docs/benchmarks.md, Throughput).

Measured in one process (run with OMP_NUM_THREADS=1): (1) the PettingZoo view ``discrete_core_v1.parallel_env()``,
(2) the Gymnasium view ``gym.make("core_env/DiscreteCoRE-v1").unwrapped``, (3) the public vector env
``DiscreteCoREVectorEnv`` at several B: its full ``step`` (observations, shaped reward, infos; per-node
and compact observations) and its ``EnvBatch.step`` alone (the compiled dynamics and the shaped reward,
no observations), and (4) :class:`MinimalParallelEnv`, a ParallelEnv that only builds dicts of our shapes
and keys (the API floor). Actions are masked-random; only the environment's ``step`` calls are timed,
not the action choice and not the resets between episodes (a seeded reset draws a workload:
its median time is measured apart). An env-step is one step of one environment (all N nodes); batched rows
count only live environments. Each rate is the median over five chunks (the machine may be busy).
Also: per-step cost at N = 4, 16, 64, 256 (K = 4N), the compile time of the compiled step (cold numba
cache vs warm), memory per environment, the median time of a seeded ``reset`` (a drawn workload), and
each agent's decision time (``act`` per step, B = 1, N = 4, K = 16, one `id` episode, one torch thread).
Results go to ``results/perf.json`` (under the working directory; ``--out`` to change).

``--ratios`` measures the ratios to the API floor alone (seconds, not minutes; ``results/perf_ratios.json``).
``--baseline DIR`` measures them for another checkout too, side by side in one run: processes of the
baseline (its ``core_env``, this module's measurement) and of this checkout alternate ``--repeats`` times on
the same machine (``results/perf_compare.json``), e.g. ``git worktree add /tmp/base main`` then
``python -m benchmarks perf --baseline /tmp/base``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

from benchmarks import add_out, markdown_table, write_results
from benchmarks.agents import QUICK_ROWS, make_agent
from core_env import GYM_ID, discrete_core_v1
from core_env.config import EnvConfig
from core_env.episode import EPISODE_KEYS, NODE_KEYS, TEAM_KEYS
from core_env.extras import needs
from core_env.parallel import node_name, observation_space
from core_env.generators import SuiteEpisode
from core_env.vector import DiscreteCoREVectorEnv
from core_env.workload import SUITE_EPISODES, SUITE_NODES, SUITE_ROOTS
from mara_agents.protocols import REMAINING_DEMAND

with needs(__name__):
    from tqdm import tqdm

BATCH_SIZES = (1, 64, 256)
SCALE_NODES, SCALE_BATCH = (4, 16, 64, 256), 16
#: The targets of docs/benchmarks.md: the PettingZoo view at >= 0.5x the API floor's steps/s; the vector env
#: at B = 256 >= 10x the floor without observations and >= 8x with observations and the shaped reward.
TARGET_SINGLE, TARGET_BATCHED, TARGET_BATCHED_OBS = 0.5, 10.0, 8.0

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
        elapsed = time.perf_counter() - start
        if not env.agents:  # resets are timed apart (measure_reset): a seeded one draws a workload
            observations, _ = env.reset()
        return 1, elapsed

    return step


def gym_stepper(env: gym.Env, rng: np.random.Generator) -> Stepper:
    observation, _ = env.reset(seed=0)

    def step() -> tuple[int, float]:
        nonlocal observation
        action = masked_random(observation["action_mask"], rng)
        start = time.perf_counter()
        observation, _, terminated, truncated, _ = env.step(action)
        elapsed = time.perf_counter() - start
        if terminated or truncated:
            observation, _ = env.reset()
        return 1, elapsed

    return step


def id_suite(cells: Sequence[tuple[int, int]]) -> list:
    """The workloads of the (root, episode) ``cells`` of the committed id/train evaluation suite, each from its
    generator (:class:`core_env.generators.SuiteEpisode`, what ``generators.suite_workloads`` asks; spelled out
    here because a ``--baseline`` checkout runs this module on its own packages, which may predate that helper)."""
    return [SuiteEpisode("id", "train", root, episode, SUITE_NODES).workload() for root, episode in cells]


def suite_batch(batch_size: int) -> list:
    """The id/train evaluation workloads, repeated to fill a batch."""
    suite = id_suite([(r, e) for r in range(SUITE_ROOTS) for e in range(SUITE_EPISODES)])
    return [suite[i % len(suite)] for i in range(batch_size)]


def vector_stepper(batch_size: int, rng: np.random.Generator, observation: str | None = "per_node", **kwargs: Any) -> Stepper:
    """Batched steps of the vector env in its steady state: every env that ends is reset (untimed, like
    the single views' resets) onto the next id/train suite workload (or a seeded draw with ``kwargs``), so
    all B stay live. ``observation=None``: ``EnvBatch.step`` alone (dynamics and shaped reward, no
    observations or infos)."""
    envs = DiscreteCoREVectorEnv(batch_size, "disabled", observation or "per_node", **kwargs)
    pool = None if kwargs else suite_batch(SUITE_ROOTS * SUITE_EPISODES)
    served = [batch_size]  # workloads of the pool handed out so far

    def options(count: int) -> list[dict[str, Any]] | None:
        if pool is None:
            return None
        picked = [{"workload": pool[(served[0] + i) % len(pool)]} for i in range(count)]
        served[0] += count
        return picked

    envs.reset(seed=0, options=None if pool is None else [{"workload": pool[i % len(pool)]} for i in range(batch_size)])
    batch = envs.batch

    def step() -> tuple[int, float]:
        actions = masked_random(envs.action_masks(), rng)
        start = time.perf_counter()
        if observation is None:
            batch.step(actions)
        else:
            envs.step(actions)
        elapsed = time.perf_counter() - start
        if batch.sim.done.any():
            ended = np.flatnonzero(batch.sim.done)
            batch.reset(batch.workloads_for(ended, options(ended.size)), ended)
        return batch_size, elapsed

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


#: The ratios to the API floor with a target: name -> the case measured against the floor.
RATIOS = {"pettingzoo_over_minimal": "pettingzoo", "gymnasium_over_minimal": "gymnasium",
          "vector_no_obs_over_minimal": f"vector_none_b{BATCH_SIZES[-1]}", "vector_obs_over_minimal": f"vector_per_node_b{BATCH_SIZES[-1]}",
          "vector_compact_over_minimal": f"vector_compact_b{BATCH_SIZES[-1]}"}


def paired_ratios(floor: Stepper, steppers: dict[str, Stepper], seconds: float, rounds: int = 8) -> dict[str, dict[str, float]]:
    """Each stepper's rate over the floor's, measured side by side: in every round the floor and each
    stepper run one short chunk in turn, and a round's ratio is a chunk's rate over the floor chunk's of
    the same round (a busy machine slows neighbouring chunks alike). Median, min and max over rounds."""
    chunk = seconds / rounds
    ratios: dict[str, list[float]] = {name: [] for name in steppers}
    for _ in range(rounds):
        base = measure(floor, chunk, chunks=1)["env_steps_per_s"]
        for name, stepper in steppers.items():
            ratios[name].append(measure(stepper, chunk, chunks=1)["env_steps_per_s"] / base)
    return {name: {"median": float(np.median(r)), "min": float(np.min(r)), "max": float(np.max(r)), "rounds": rounds} for name, r in ratios.items()}


def ratios(seconds: float, rounds: int = 8, seed: int = 0) -> dict[str, dict[str, float]]:
    """:func:`paired_ratios` of every case of :data:`RATIOS` against the floor, alone (``--ratios``), after
    20 warm-up steps of each (no round measures a compile)."""
    table = cases(np.random.default_rng(seed))
    floor, steppers = table["minimal"][2](), {ratio: table[case][2]() for ratio, case in RATIOS.items()}
    for stepper in (floor, *steppers.values()):
        for _ in range(20):
            stepper()
    return paired_ratios(floor, steppers, seconds * len(RATIOS), rounds)


_RATIO_PROBE = """
import json, runpy, sys
sys.path.insert(0, sys.argv[1])  # the checkout measured: its core_env; the measurement is the module at argv[2]
perf = runpy.run_path(sys.argv[2], run_name="perf_probe")
print(json.dumps(perf["ratios"](float(sys.argv[3]))))
"""


def compare(baseline: Path, seconds: float, repeats: int = 3) -> dict[str, dict[str, list[float]]]:
    """:func:`ratios` of the checkout ``baseline`` and of this one, side by side: a process of each, in
    turn, ``repeats`` times (``OMP_NUM_THREADS=1``); per side and ratio, the median of each process. The
    baseline process runs this module on the baseline's packages, so they must provide what it imports."""
    here = Path(__file__).resolve().parents[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    out: dict[str, dict[str, list[float]]] = {"baseline": {}, "this": {}}
    for _ in tqdm(range(repeats), desc="perf baseline/this", unit="pair", leave=False):
        for side, root in (("baseline", Path(baseline).resolve()), ("this", here)):
            run = subprocess.run([sys.executable, "-c", _RATIO_PROBE, str(root), str(Path(__file__).resolve()), str(seconds)],
                                 cwd=root, env=env, check=True, capture_output=True, text=True)
            for name, spread in json.loads(run.stdout.strip().splitlines()[-1]).items():
                out[side].setdefault(name, []).append(spread["median"])
    return out


#: The target of each ratio that has one (the verdicts of ``--ratios`` and ``--baseline``).
RATIO_TARGETS = {"pettingzoo_over_minimal": TARGET_SINGLE, "vector_no_obs_over_minimal": TARGET_BATCHED,
                 "vector_obs_over_minimal": TARGET_BATCHED_OBS, "vector_compact_over_minimal": TARGET_BATCHED_OBS}


def comparison_summary(result: dict[str, dict[str, list[float]]], baseline: Path) -> str:
    """Markdown: each ratio of the baseline and of this checkout (median of the processes' medians, and their range)."""
    cell = lambda values: f"{np.median(values):.2f}x ({min(values):.2f}–{max(values):.2f})"  # noqa: E731
    rows = [(name, f">= {RATIO_TARGETS[name]}x" if name in RATIO_TARGETS else "", cell(result["baseline"][name]), cell(result["this"][name]))
            for name in RATIOS]
    return (f"Ratios to the API floor, baseline {baseline} vs this checkout, {len(result['this'][next(iter(RATIOS))])} alternating "
            "processes each (median over processes; range):\n\n" + markdown_table(("ratio", "target", "baseline", "this checkout"), rows))


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
    for observation, view in ((None, "EnvBatch.step (no observations)"), ("per_node", "vector env step, per-node observations"),
                              ("compact", "vector env step, compact observations")):
        for b in BATCH_SIZES:
            table[f"vector_{observation or 'none'}_b{b}"] = (view, b, lambda b=b, o=observation: vector_stepper(b, rng, o))
    return table


def scale_cases(rng: np.random.Generator) -> dict[str, tuple[str, int, int, Callable[[], Stepper]]]:
    """Per-step cost at larger N (K = 4N, seeded workloads at the training load): name -> (view, N, B, stepper factory)."""
    table = {}
    for n in SCALE_NODES:
        kwargs = {"n_nodes": n, "n_slots": 4 * n, "arrival_steps": 200}
        table[f"pettingzoo_n{n}"] = ("PettingZoo parallel_env()", n, 1, lambda kw=kwargs: parallel_stepper(discrete_core_v1.parallel_env(**kw), rng))
        for observation in ("per_node", "compact"):
            table[f"vector_{observation}_n{n}"] = (f"vector env, {observation}", n, SCALE_BATCH,
                                                   lambda kw=kwargs, o=observation: vector_stepper(SCALE_BATCH, rng, o, **kw))
    return table


_COMPILE_PROBE = """
import time
start = time.perf_counter()
import numpy as np
from core_env import discrete_core_v1
env = discrete_core_v1.parallel_env()
env.reset(seed=0, options={"suite": "eval", "root": 0, "episode": 0})
env.step({a: 0 for a in env.agents})
print(time.perf_counter() - start)
"""


def compile_seconds() -> dict[str, float]:
    """Seconds from a fresh interpreter to the first PettingZoo step, with an empty numba cache (the
    compile) and again with the cache it wrote (every later process)."""
    import os
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        run = lambda: float(subprocess.run([sys.executable, "-c", _COMPILE_PROBE], env=env, check=True, capture_output=True, text=True).stdout)  # noqa: E731
        return {"cold_cache_s": run(), "warm_cache_s": run()}


def memory_per_env(batch_size: int = 64) -> dict[str, float]:
    """Bytes per environment: the vector env's state (id/train suite workloads) and one step's observations."""
    envs = DiscreteCoREVectorEnv(batch_size, "disabled")
    envs.reset(options=[{"workload": w} for w in suite_batch(batch_size)])
    sim = envs.batch.sim
    state = sum(v.nbytes for v in vars(sim).values() if isinstance(v, np.ndarray) and v.base is None)
    per_node = sum(v.nbytes for v in envs._observation().values())
    envs.observation_kind = "compact"
    compact = sum(v.nbytes for v in envs._observation().values())
    return {"state_bytes": state / batch_size, "per_node_observation_bytes": per_node / batch_size, "compact_observation_bytes": compact / batch_size}


#: Rows whose decision time is measured: the quick rows and the posterior index rule on fm+pfn with the
#: curve-free prior (issue 48's decision-time target is set on the index rule).
DECISION_ROWS = (*QUICK_ROWS, "index:fm+pfn,deadline_pct=0,explore=0,prior=1")


def decision_times(rows: Sequence[str] = DECISION_ROWS) -> dict[str, dict[str, float]]:
    """Per agent row: median and mean milliseconds of one joint decision (``act``, B = 1) over an episode.

    Torch runs with one thread here, as in benchmark cells: intra-op threads on tensors this small only
    add synchronisation (on the 2-core VM a MARA decision took about 35% longer with two).
    """
    with needs(__name__):
        import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _decision_times(rows)
    finally:
        torch.set_num_threads(threads)


def _decision_times(rows: Sequence[str]) -> dict[str, dict[str, float]]:
    out = {}
    for row in tqdm(rows, desc="decisions", unit="agent", leave=False):
        agent, envs = make_agent(row, task_set="id"), DiscreteCoREVectorEnv(1, "disabled")
        observation, _ = envs.reset(options={"workload": id_suite([(0, 0)])[0]})
        agent.reset(1, envs.batch.N, envs.batch.K)
        times, feature_times = [], []
        while not envs.batch.sim.done.all():
            oracle = {REMAINING_DEMAND: envs.remaining_demand()} if agent.needs_oracle else None
            before = getattr(agent, "feature_seconds", 0.0)  # MAT agents: time spent rebuilding predictor features
            start = time.perf_counter()
            actions = agent.act(observation["observation"], observation["action_mask"], oracle)
            times.append(time.perf_counter() - start)
            feature_times.append(getattr(agent, "feature_seconds", 0.0) - before)
            observation, *_ = envs.step(actions)
        out[row] = {"median_ms": 1e3 * float(np.median(times)), "mean_ms": 1e3 * float(np.mean(times)), "decisions": len(times)}
        if any(feature_times):
            out[row]["features_median_ms"] = 1e3 * float(np.median(feature_times))
            out[row]["policy_median_ms"] = 1e3 * float(np.median(np.subtract(times, feature_times)))
    return out


#: Predictors timed side by side on one batch of decision-point histories (issue 27: the PFN's target).
PREDICT_ROWS = ("fm", "pfn")
PREDICT_BATCH = 1024
#: Milliseconds one predict call on PREDICT_BATCH histories may take on one CPU thread.
PREDICT_TARGET_MS = 50.0


def predictor_times(rows: Sequence[str] = PREDICT_ROWS, count: int = PREDICT_BATCH, rounds: int = 11) -> dict[str, dict[str, float]]:
    """Per predictor: median and min milliseconds of one ``predict`` call on ``count`` histories of EDF's
    decision points on the ``id`` suite (root 0; cycled to ``count``), the remaining window as the
    budget, one torch thread; the predictors alternate within each round so both see the same machine."""
    with needs(__name__):
        import torch

    from benchmarks.decision_points import collect
    from mara_agents.predictors import PREDICTORS

    points = collect("edf", id_suite([(0, e) for e in range(2)]), EnvConfig())
    index = np.arange(count) % len(points)
    histories, targets = [points.history(int(i)) for i in index], points.target[index]
    budgets, windows = points.window[index], points.deadline_window[index]
    predictors = {row: PREDICTORS[row]() for row in rows}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    times: dict[str, list[float]] = {row: [] for row in rows}
    try:
        for predictor in predictors.values():  # warm-up: weights loaded, kernels touched
            predictor.predict(histories, targets, budgets, windows=windows)
        for _ in range(rounds):
            for row, predictor in predictors.items():
                start = time.perf_counter()
                predictor.predict(histories, targets, budgets, windows=windows)
                times[row].append(1e3 * (time.perf_counter() - start))
    finally:
        torch.set_num_threads(threads)
    return {row: {"median_ms": float(np.median(t)), "min_ms": float(np.min(t)), "histories": count} for row, t in times.items()}


def run(seconds: float, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    results, scale = {}, {}
    for name, (view, batch, factory) in tqdm(cases(rng).items(), desc="perf", unit="case", leave=False):
        results[name] = {"view": view, "B": batch, **measure(factory(), seconds)}
    for name, (view, n, batch, factory) in tqdm(scale_cases(rng).items(), desc="scale", unit="case", leave=False):
        scale[name] = {"view": view, "N": n, "K": 4 * n, "B": batch, **measure(factory(), seconds / 2)}
        scale[name]["us_per_env_step"] = 1e6 / scale[name]["env_steps_per_s"]
    table = cases(rng)
    paired = paired_ratios(table["minimal"][2](), {ratio: table[case][2]() for ratio, case in RATIOS.items()}, seconds * len(RATIOS))
    return {"cases": results, "scale": scale, **{ratio: paired[ratio]["median"] for ratio in RATIOS}, "ratio_spread": paired,
            "compile": compile_seconds(), "memory": memory_per_env(), "reset_seeded_ms": 1e3 * measure_reset(), "decision_ms": decision_times(),
            "predict_ms": predictor_times()}


def _verdict(value: float, target: float, spread: dict[str, float] | None = None) -> str:
    within = f" [rounds {spread['min']:.2f}–{spread['max']:.2f}]" if spread else ""
    return f"{value:.2f}x{within} (target >= {target}x): {'met' if value >= target else 'MISSED'}"


def summary(result: dict[str, Any]) -> str:
    """Markdown: the views' env-steps/s, the ratios to the API floor against their targets, the per-N
    cost, compile time, memory and every agent's decision time."""
    rows = [(c["view"], c["B"], f"{c['env_steps_per_s']:,.0f}") for c in result["cases"].values()]
    top = BATCH_SIZES[-1]
    scale_rows = {}
    for c in result["scale"].values():
        scale_rows.setdefault((c["N"], c["K"]), {})[c["view"]] = f"{c['us_per_env_step']:,.1f}"
    views = list(dict.fromkeys(c["view"] for c in result["scale"].values()))
    compile_, memory = result["compile"], result["memory"]
    spread = result.get("ratio_spread", {})
    lines = [markdown_table(("view", "B", "env-steps/s"), rows), "",
             "Ratios to the API floor: medians over rounds that run the floor and each view side by side.  ",
             f"PettingZoo / API floor = {_verdict(result['pettingzoo_over_minimal'], TARGET_SINGLE, spread.get('pettingzoo_over_minimal'))}  ",
             f"Gymnasium / API floor = {result['gymnasium_over_minimal']:.2f}x  ",
             f"EnvBatch.step at B={top} (no observations) / API floor = {_verdict(result['vector_no_obs_over_minimal'], TARGET_BATCHED, spread.get('vector_no_obs_over_minimal'))}  ",
             f"vector env step at B={top} (per-node observations, shaped reward, infos) / API floor = "
             f"{_verdict(result['vector_obs_over_minimal'], TARGET_BATCHED_OBS, spread.get('vector_obs_over_minimal'))}  ",
             f"vector env step at B={top} (compact observations, shaped reward, infos) / API floor = "
             f"{_verdict(result['vector_compact_over_minimal'], TARGET_BATCHED_OBS, spread.get('vector_compact_over_minimal'))}  ",
             f"first PettingZoo step of a fresh process: {compile_['cold_cache_s']:.1f} s with an empty numba cache (the compile), "
             f"{compile_['warm_cache_s']:.2f} s with the cache  ",
             f"memory per env: state {memory['state_bytes'] / 1024:.1f} KiB; one step's observations {memory['per_node_observation_bytes'] / 1024:.1f} KiB "
             f"per-node, {memory['compact_observation_bytes'] / 1024:.1f} KiB compact  ",
             f"PettingZoo reset(seed=s), a drawn workload: {result['reset_seeded_ms']:.2f} ms (median)", "",
             f"Per-step cost, µs per env-step (K = 4N, seeded workloads, vector env at B = {SCALE_BATCH}):", "",
             markdown_table(("N", "K", *views), [(n, k, *(cells.get(v, "") for v in views)) for (n, k), cells in scale_rows.items()]), "",
             f"Predictors: one `predict` call on {PREDICT_BATCH:,} histories (EDF's decision points on the `id` suite), one torch thread, "
             "alternating rounds (median; min):", "",
             markdown_table(("predictor", "ms per call (median)", "ms (min)", f"target <= {PREDICT_TARGET_MS:.0f} ms"),
                            [(row, f"{t['median_ms']:.1f}", f"{t['min_ms']:.1f}", "met" if t["median_ms"] <= PREDICT_TARGET_MS else "MISSED")
                             for row, t in result.get("predict_ms", {}).items()]), "",
             "Decision time: `act` per step, B = 1, N = 4, K = 16, over one `id` episode, predictions included, one torch thread.", "",
             markdown_table(("agent", "decision ms (median)", "decision ms (mean)", "of which: policy / predictor features (median ms)"),
                            [(row, f"{t['median_ms']:.2f}", f"{t['mean_ms']:.2f}",
                              f"{t['policy_median_ms']:.2f} / {t['features_median_ms']:.2f}" if "features_median_ms" in t else "")
                             for row, t in result["decision_ms"].items()])]
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks perf", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.5, help="wall time per measurement (default 2.5)")
    parser.add_argument("--ratios", action="store_true", help="only the ratios to the API floor (seconds, not minutes)")
    parser.add_argument("--baseline", type=Path, metavar="DIR", help="also measure the ratios of the checkout DIR, side by side (implies --ratios)")
    parser.add_argument("--repeats", type=int, default=3, help="with --baseline: processes per side, alternating (default 3)")
    add_out(parser)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.baseline is not None:
        compared = compare(args.baseline, args.seconds, args.repeats)
        print(comparison_summary(compared, args.baseline))
        paths = write_results("perf_compare", {"suite": "perf", "baseline": str(args.baseline), "wall_s": time.perf_counter() - start,
                                               "seconds_per_case": args.seconds, **compared}, out=args.out)
        print(f"wrote {', '.join(str(p) for p in paths)}")
        return 0
    if args.ratios:
        paired = ratios(args.seconds)
        for name, spread in paired.items():
            target = RATIO_TARGETS.get(name)
            print(f"{name} = {_verdict(spread['median'], target, spread) if target else format(spread['median'], '.2f') + 'x'}")
        paths = write_results("perf_ratios", {"suite": "perf", "wall_s": time.perf_counter() - start, "seconds_per_case": args.seconds,
                                              **{name: spread["median"] for name, spread in paired.items()}, "ratio_spread": paired}, out=args.out)
        print(f"wrote {', '.join(str(p) for p in paths)}")
        return 0
    result = run(args.seconds)
    wall = time.perf_counter() - start
    print(summary(result))
    paths = write_results("perf", {"suite": "perf", "wall_s": wall, "seconds_per_case": args.seconds, **result}, out=args.out)
    print(f"wall time {wall:.1f} s; wrote {', '.join(str(p) for p in paths)}")
    return 0
