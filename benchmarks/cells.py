"""Benchmark cells: the unit of work, cached on disk so an interrupted run resumes.

A :class:`Cell` is one agent row (and training seed, for learned agents) on one evaluation root of one
scenario: a task set, a load, environment overrides (nodes, slots, speeds, switching cost) and the
root's episodes, played as one batch. Its result (per-episode statistics and the cell's means) is a
JSON file named by the cell's key under the cache directory, written atomically; a run loads the cells
it finds valid and computes only the missing or corrupt ones, in parallel processes (``workers``) or on
a Ray cluster (``backend="ray"``, the optional ``ray`` extra; ``address`` picks the cluster).

Workloads: named loads at N = 4 replay the committed evaluation suites (``load_suite``); other
scenarios (more nodes, a numeric load) draw seeded workloads on the evaluation curves, reproducibly from
the cell; ``stress`` is the fixed stress scenario.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from benchmarks import RESULTS_DIR
from core_env.config import LOADS, EnvConfig
from core_env.curves import bank_for
from core_env.workload import SUITE_EPISODES, Workload, draw_workload, load_suite, stress_workload

#: Bump when a cell's result would change for the same key (invalidates every cached cell).
FORMAT = 2  # 2: discrete_core_v1 workloads
CELL_DIR = RESULTS_DIR / "cells"
#: Per-episode statistics kept in a cell's result.
EPISODE_STATS = ("completion_rate", "completed", "arrived", "failed", "rejected", "node_utilization", "busy_node_steps",
                 "wasted_node_steps", "switches", "conflicts", "invalid_actions", "t")
_DRAWN_SEED = 20261129


@dataclasses.dataclass(frozen=True)
class Cell:
    """One agent row × training seed × scenario × evaluation root (see the module docstring)."""

    agent: str
    task_set: str = "id"
    load: str | float = "train"
    root: int = 0
    seed: int = 0
    env: tuple[tuple[str, Any], ...] = ()  # EnvConfig overrides as sorted (name, value) pairs
    episodes: int = SUITE_EPISODES

    @property
    def key(self) -> str:
        from benchmarks.agents import weights_id

        weights = weights_id(self.agent, self.seed)  # learned rows: which checkpoint (heuristic keys are unchanged)
        text = json.dumps([FORMAT, dataclasses.asdict(self)] + ([weights] if weights else []), sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    def config(self) -> EnvConfig:
        overrides = dict(self.env)
        return EnvConfig(task_set=self.task_set, load=self.load, **overrides)

    def workloads(self) -> list[Workload]:
        config = self.config()
        if self.task_set == "stress":
            return [stress_workload(config.n_nodes)]
        if isinstance(self.load, str) and self.load in LOADS and config.n_nodes == EnvConfig().n_nodes:
            return [load_suite(self.task_set, self.load, self.root, e) for e in range(self.episodes)]
        bank = bank_for(self.task_set, "eval", config.curve_source)
        tag = zlib.crc32(f"{self.task_set}|{self.load}|{config.n_nodes}".encode())
        reference = bank_for(self.task_set, "train", config.curve_source)  # targets and deadlines from train runs, as in the suites
        return [draw_workload(bank, config.arrival_intensity, config.arrival_steps, np.random.default_rng([_DRAWN_SEED, tag, self.root, e]),
                              n_nodes=config.n_nodes, reference=reference) for e in range(self.episodes)]


def run_cell(cell: Cell) -> dict[str, Any]:
    """Play the cell's episodes with its agent (one batch); the JSON-ready result."""
    return run_group([cell])[0]


def run_group(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """Play cells that differ only in their root as one batch (one agent, one simulator): the same
    per-episode results as cell by cell, with fewer and larger predictor calls."""
    from benchmarks.agents import make_agent
    from benchmarks.rollout import run_agent

    import torch

    torch.set_num_threads(1)  # tiny per-step ops: one thread is fastest, and parallel workers must not oversubscribe the cores
    start = time.perf_counter()
    first = cells[0]
    if any(dataclasses.replace(c, root=first.root) != first for c in cells):
        raise ValueError("a group's cells must differ only in their root")
    workloads = [cell.workloads() for cell in cells]
    flat = [w for group in workloads for w in group]
    stats, decision_s, decisions = run_agent(make_agent(first.agent, first.seed), flat, first.config(), timed=True)
    per_env_ms = 1e3 * decision_s / max(decisions * len(flat), 1)
    results, offset = [], 0
    for cell, group in zip(cells, workloads):
        episodes = [{key: stats[key][offset + i].item() for key in EPISODE_STATS} for i in range(len(group))]
        offset += len(group)
        means = {key: float(np.mean([e[key] for e in episodes])) for key in EPISODE_STATS}
        results.append({"format": FORMAT, "key": cell.key, "cell": dataclasses.asdict(cell), "episodes": episodes, "mean": means,
                        "feasibility_bound": float(np.mean([w.feasibility_bound() for w in group])),
                        "decision_ms": per_env_ms, "wall_s": (time.perf_counter() - start) / len(cells)})
    return results


class CellStore:
    """Cell results as JSON files under ``directory`` (atomic writes; corrupt files count as missing)."""

    def __init__(self, directory: Path = CELL_DIR) -> None:
        self.directory = Path(directory)

    def path(self, cell: Cell) -> Path:
        return self.directory / f"{cell.key}.json"

    def load(self, cell: Cell) -> dict[str, Any] | None:
        """The cached result, or None when it is missing, unreadable or not this cell's."""
        try:
            result = json.loads(self.path(cell).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(result, dict) or result.get("format") != FORMAT or result.get("key") != cell.key \
                or not isinstance(result.get("episodes"), list) or len(result["episodes"]) == 0 or "mean" not in result:
            return None
        return result

    def save(self, cell: Cell, result: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(cell)
        temporary = path.with_suffix(f".tmp{os.getpid()}")
        temporary.write_text(json.dumps(result, indent=0, sort_keys=True))
        os.replace(temporary, path)


def run_cells(cells: Iterable[Cell], store: CellStore | None = None, workers: int = 1, backend: str = "process",
              address: str | None = None, progress: bool = True, runner: Callable[[Cell], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Results of ``cells`` in order: cached ones loaded, the others computed and cached as they finish.

    Args:
        cells: the cells (duplicates are computed once).
        store: the cache (default ``benchmarks/results/cells``).
        workers: parallel processes (``backend="process"``; 1 runs in this process).
        backend: ``"process"`` or ``"ray"`` (needs ``pip install -e ".[ray]"``).
        address: Ray cluster address (None starts or joins a local instance).
        progress: show a progress bar.
        runner: what computes one cell (tests substitute their own); by default cells that differ only
            in their root run as one batch (:func:`run_group`).
    """
    if backend not in ("process", "ray"):
        raise ValueError(f"backend must be 'process' or 'ray', got {backend!r}")
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    store = store or CellStore()
    cells = list(cells)
    results: dict[str, dict[str, Any]] = {}
    missing: dict[str, Cell] = {}
    for cell in cells:
        cached = store.load(cell)
        if cached is None:
            missing[cell.key] = cell
        else:
            results[cell.key] = cached
    bar = tqdm(total=len(missing), desc="cells", unit="cell", disable=not progress, leave=False)
    if runner is None:
        groups: dict[Cell, list[Cell]] = {}
        for cell in missing.values():
            groups.setdefault(dataclasses.replace(cell, root=0), []).append(cell)
        jobs, work = list(groups.values()), run_group
    else:
        jobs, work = [[cell] for cell in missing.values()], _PerCell(runner)
    for cell, result in _compute(jobs, workers, backend, address, work):
        result = json.loads(json.dumps(result, sort_keys=True))  # as a later run will load it
        store.save(cell, result)
        results[cell.key] = result
        bar.update()
    bar.close()
    return [results[cell.key] for cell in cells]


class _PerCell:
    """A per-cell runner as a job runner (picklable when the runner is)."""

    def __init__(self, runner: Callable[[Cell], dict[str, Any]]) -> None:
        self.runner = runner

    def __call__(self, job: list[Cell]) -> list[dict[str, Any]]:
        return [self.runner(cell) for cell in job]


def _compute(jobs: Sequence[list[Cell]], workers: int, backend: str, address: str | None, work: Callable[[list[Cell]], list[dict[str, Any]]]):
    """Yield (cell, result) as jobs (lists of cells) finish."""
    if not jobs:
        return
    if backend == "ray":
        finished = _compute_ray(jobs, address, work)
    elif workers == 1:
        finished = ((job, work(job)) for job in jobs)
    else:
        finished = _compute_pool(jobs, workers, work)
    for job, results in finished:
        yield from zip(job, results)


def _compute_pool(jobs: Sequence[list[Cell]], workers: int, work: Callable[[list[Cell]], list[dict[str, Any]]]):
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(work, job): job for job in jobs}
        for future in as_completed(futures):
            yield futures[future], future.result()


def _compute_ray(jobs: Sequence[list[Cell]], address: str | None, work: Callable[[list[Cell]], list[dict[str, Any]]]):
    try:
        import ray
    except ImportError:
        raise ImportError('the Ray backend needs ray: pip install -e ".[ray]"') from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        remote = ray.remote(work)
        pending = {remote.remote(job): job for job in jobs}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(done[0])
            yield job, ray.get(done[0])
    finally:
        if started:
            ray.shutdown()
