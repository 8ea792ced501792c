"""Benchmark cells: the unit of work, cached on disk so an interrupted run resumes.

A :class:`Cell` is one agent row (and training seed, for learned agents) on one evaluation root of one
scenario: a task set, a load, environment overrides (nodes, slots, speeds, switching cost) and the
root's episodes. Its result (per-episode statistics and the cell's means) is a JSON file named by the
cell's key under the cache directory, written atomically (a temporary file unique to the process and
thread, renamed into place). A run loads the cells it finds valid and computes only the missing or
corrupt ones, in parallel processes (``workers``) or on a Ray cluster (``backend="ray"``, the optional
``ray`` extra; ``address`` picks the cluster; a job lost with its Ray node or worker is resubmitted, at
most :data:`NODE_RETRIES` times, with a :class:`NodeLostWarning`: :func:`_compute_ray`). Cells that differ
only in their root run as one batch, in jobs of at most :data:`GROUP_ROOTS` roots.

Integrity: each saved cell carries ``checksum``, the sha256 of its canonical JSON (``json.dumps`` of the
result without ``checksum``, ``sort_keys=True``). :meth:`CellStore.load` treats a cell as missing (so it
is recomputed) unless the checksum verifies, the result is this cell's (format, key, cell fields), its
episode list is complete (the cell's ``episodes``; one for ``stress``) and every mean agrees with the
episodes. A computed result that fails the same checks is an error, never saved or returned.

Interruption: results are saved as each job finishes. On Ctrl-C (KeyboardInterrupt) or any other
exception in the runner, finished results are saved, pending jobs are cancelled and the worker
processes are terminated at once (killed if they do not stop within about a second); then the exception
propagates. Workers never outlive the runner, even under ``kill -9``: on Linux each worker asks the
kernel for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``), and everywhere a watchdog thread
in each worker exits the worker within about half a second of the runner's death. Workers ignore
SIGINT: a terminal's Ctrl-C reaches the whole process group and the runner stops them itself.

Workloads: named loads at N = 4 replay the committed evaluation suites (``load_suite``); other
scenarios (more nodes, a numeric load) draw seeded workloads on the evaluation curves, reproducibly from
the cell; ``stress`` is the fixed stress scenario. A cell whose ``task_set`` is a **bank file** (your own
curves, ``python -m core_env.curves import``) draws its episodes on the bank's eval split with the train
split as reference: at a named load and N = 4 by the suites' seeding scheme
(:func:`core_env.workload.suite_rng`), so root ``r`` episode ``e`` is exactly episode ``(r, e)`` of
``python -m core_env.suites generate --task-set BANK``; otherwise as the other drawn scenarios. Its key
includes the bank file's sha256, so a changed bank never reuses cached cells. A cell with a ``trace``
(layout, path, step_seconds) replays that job trace on its task set (:meth:`Cell.trace_workloads`);
its key includes the trace file's sha256 and its ``max_cycles`` is raised to the trace's horizon.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import math
import os
import signal
import sys
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS_DIR
from core_env.config import EnvConfig
from core_env.curves import bank_file, is_bank_path
from core_env.extras import needs
from core_env.generators import Drawn, Given, SuiteEpisode, WorkloadGenerator, committed_suite_fits, generator_for, is_fixed_scenario, suite_scheme
from core_env.workload import SUITE_EPISODES, Workload, suite_rng

with needs(__name__):
    from tqdm import tqdm

#: Bump when a cell's result would change for the same key (invalidates every cached cell).
FORMAT = 3  # 2: discrete_core_v1 workloads; 3: saved cells carry a checksum
CELL_DIR = RESULTS_DIR / "cells"
#: Per-episode statistics kept in a cell's result.
EPISODE_STATS = ("completion_rate", "completed", "arrived", "failed", "rejected", "node_utilization", "busy_node_steps",
                 "wasted_node_steps", "switches", "conflicts", "invalid_actions", "t")
_DRAWN_SEED = 20261129
_TRACE_SEED = 20261130
#: Most roots of one row × scenario played as one job (one batch): larger jobs batch more predictor calls,
#: smaller ones lose less to an interruption.
GROUP_ROOTS = 5


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
    trace: tuple[tuple[str, Any], ...] = ()  # a replayed job trace: sorted (name, value) pairs of layout, path, step_seconds

    @property
    def key(self) -> str:
        from benchmarks.agents import weights_id

        weights = weights_id(self.agent, self.seed)  # learned rows: which checkpoint (heuristic keys are unchanged)
        extra: list[Any] = [weights] if weights else []
        if self.bank_sha256 is not None:  # a bank file: its content, not only its path (built-in keys are unchanged)
            extra.append({"bank_sha256": self.bank_sha256})
        if self.trace:  # a trace file: its content too
            extra.append({"trace_sha256": self.replayed()[0]})
        if self.agent == "milp-slots":  # the stored K-slot ceilings it reads: an improved search recomputes it
            from benchmarks.ceiling_cells import slot_ceiling_digest

            extra.append({"slot_ceilings_sha256": slot_ceiling_digest(self)})
        text = json.dumps([FORMAT, self.fields()] + extra, sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    def fields(self) -> dict[str, Any]:
        """The cell's fields as keyed and saved with its result (``trace`` only when set, so the keys and
        cached results of cells without a trace are unchanged)."""
        out = dataclasses.asdict(self)
        if not self.trace:
            del out["trace"]
        return out

    def replayed(self):
        """(sha256, :class:`core_env.trace.Trace`) of the cell's trace file (read once per file content)."""
        from core_env.trace import trace_file

        options = dict(self.trace)
        return trace_file(options["path"], options["layout"], options["step_seconds"])

    @property
    def bank_sha256(self) -> str | None:
        """The sha256 of the bank file ``task_set`` names (None for a built-in task set)."""
        return bank_file(self.task_set).sha256 if is_bank_path(self.task_set) else None

    def config(self) -> EnvConfig:
        """The cell's EnvConfig; with a trace and no ``max_cycles`` override, ``max_cycles`` is raised to the
        trace's horizon (:func:`core_env.trace.trace_horizon`) so that long traces are not truncated."""
        from core_env.trace import trace_horizon

        overrides = dict(self.env)
        config = EnvConfig(task_set=self.task_set, load=self.load, **overrides)
        if self.trace and "max_cycles" not in overrides:
            config = dataclasses.replace(config, max_cycles=max(config.max_cycles, trace_horizon(self.replayed()[1], config.recipe)))
        return config

    def episode_generators(self) -> list[tuple[WorkloadGenerator, np.random.Generator | None]]:
        """Each episode's workload generator (:mod:`core_env.generators`) and the rng it draws with (None for
        a replay): a fixed scenario once; a trace replayed per episode; a bank file's eval split drawn by
        the suites' seeding scheme (at a named load on the suites' N) or by the cells' own; the committed
        suite where it fits the config; else the task set's eval curves drawn by the cells' own scheme
        (targets and deadlines from the train runs, as in the suites)."""
        config = self.config()
        own = generator_for(config)
        if own.fixed:
            return [(own, None)]
        if self.trace:
            return [(Given(workload), None) for workload in self.trace_workloads(config)]
        if config.bank_path is None and committed_suite_fits(self.task_set, self.load, config.n_nodes):
            return [(SuiteEpisode(self.task_set, self.load, self.root, e, config.n_nodes), None) for e in range(self.episodes)]
        name = config.task_set_name
        if config.bank_path is not None and suite_scheme(self.load, config.n_nodes):
            rngs = [suite_rng(name, self.load, self.root, e) for e in range(self.episodes)]
        else:
            tag = zlib.crc32(f"{name}|{self.load}|{config.n_nodes}".encode())
            rngs = [np.random.default_rng([_DRAWN_SEED, tag, self.root, e]) for e in range(self.episodes)]
        drawn = Drawn.from_config(config, bank=config.bank("eval"), reference=config.bank("train"))
        return [(drawn, rng) for rng in rngs]

    def workloads(self) -> list[Workload]:
        return [generator.workload(rng) for generator, rng in self.episode_generators()]

    def trace_record(self) -> dict[str, Any] | None:
        """The provenance of the cell's trace (path, sha256, layout, step_seconds), or None without one."""
        if not self.trace:
            return None
        options = dict(self.trace)
        return {"path": options["path"], "sha256": self.replayed()[0], "layout": options["layout"], "step_seconds": options["step_seconds"]}

    def trace_workloads(self, config: EnvConfig) -> list[Workload]:
        """The trace replayed once per episode: arrivals (and deadlines, targets, rates where given) from the
        trace, every missing field drawn on the eval split (train split as reference) by the generator
        ``[seed, crc32(trace sha256), root, episode]``."""
        from core_env.trace import trace_workload

        sha, trace = self.replayed()
        tag = zlib.crc32(sha.encode())
        bank, reference = config.bank("eval"), config.bank("train")
        return [trace_workload(trace, bank, np.random.default_rng([_TRACE_SEED, tag, self.root, e]), config.recipe, config.n_nodes, reference)
                for e in range(self.episodes)]


def bank_suite(task_set: str, load: str, roots: int = 10, episodes: int = SUITE_EPISODES) -> tuple[EnvConfig, list[Workload], list[tuple[int, int]]]:
    """A bank file's evaluation suite at a named load, as the cells draw it (:meth:`Cell.workloads`: the
    eval split, the suites' seeding scheme): (config, workloads, their (root, episode)), ``roots`` × ``episodes``."""
    cells = [Cell("edf", task_set, load, root=r, episodes=episodes) for r in range(roots)]
    return cells[0].config(), [w for cell in cells for w in cell.workloads()], [(r, e) for r in range(roots) for e in range(episodes)]


def run_cell(cell: Cell) -> dict[str, Any]:
    """Play the cell's episodes with its agent (one batch); the JSON-ready result."""
    return run_group([cell])[0]


def run_group(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """Play cells that differ only in their root as one batch (one agent, one simulator): the same
    per-episode results as cell by cell, with fewer and larger predictor calls."""
    from benchmarks.agents import make_agent, teacher_of
    from benchmarks.rollout import run_agent

    with needs(__name__):
        import torch

    torch.set_num_threads(1)  # tiny per-step ops: one thread is fastest, and parallel workers must not oversubscribe the cores
    start = time.perf_counter()
    first = cells[0]
    if any(dataclasses.replace(c, root=first.root) != first for c in cells):
        raise ValueError("a group's cells must differ only in their root")
    if first.agent in ("milp", "milp-slots"):  # the ceiling rows: stored or solved optima, not a rollout
        from benchmarks.ceiling_cells import ceiling_results, slot_ceiling_results

        return ceiling_results(cells) if first.agent == "milp" else slot_ceiling_results(cells)
    workloads = [cell.workloads() for cell in cells]
    flat = [w for group in workloads for w in group]
    teacher = teacher_of(first.agent, first.seed)  # learned rows: their per-step agreement with the teacher, on their own trajectories
    shadow = make_agent(teacher) if teacher else None
    stats, decision_s, decisions = run_agent(make_agent(first.agent, first.seed, first.task_set), flat, first.config(), timed=True, shadow=shadow)
    per_env_ms = 1e3 * decision_s / max(decisions * len(flat), 1)
    results, offset = [], 0
    for cell, group in zip(cells, workloads):
        episodes = [{key: stats[key][offset + i].item() for key in EPISODE_STATS} for i in range(len(group))]
        offset += len(group)
        means = {key: float(np.mean([e[key] for e in episodes])) for key in EPISODE_STATS}
        result = {"format": FORMAT, "key": cell.key, "cell": cell.fields(), "episodes": episodes, "mean": means,
                  "feasibility_bound": float(np.mean([w.feasibility_bound() for w in group])),
                  "decision_ms": per_env_ms, "wall_s": (time.perf_counter() - start) / len(cells)}
        if shadow is not None:
            rows = slice(offset - len(group), offset)
            result["teacher_agreement"] = {"teacher": teacher, **{key: float(np.nanmean(stats[key][rows])) for key in AGREEMENT}}
        results.append(result)
    return results


#: Per-step agreement of a learned row with its teacher (:class:`benchmarks.rollout.Agreement`), stored
#: per cell as ``teacher_agreement`` (means over its episodes).
AGREEMENT = ("same_tasks_served", "served_also_by_shadow")


def checksum(result: dict[str, Any]) -> str:
    """The sha256 of a cell result's canonical JSON: ``json.dumps`` of the result without its ``checksum``
    entry, ``sort_keys=True`` (what :meth:`CellStore.save` stores and :meth:`CellStore.load` verifies)."""
    body = {key: value for key, value in result.items() if key != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def expected_episodes(cell: Cell) -> int:
    """How many episodes a result of ``cell`` holds (``len(cell.workloads())``, from the cell's fields)."""
    return 1 if is_fixed_scenario(cell.task_set) else cell.episodes


def _number(value: Any) -> bool:
    return isinstance(value, (int, float))


#: Ranges an episode statistic of a cell result must lie in (a checksum can be recomputed after an edit;
#: these catch values no episode can produce): shares in [0, 1], counts and times finite and >= 0.
SHARES = ("completion_rate", "node_utilization", "gap")


def _out_of_range(episode: dict[str, Any]) -> str | None:
    for name, value in episode.items():
        if not _number(value):
            continue
        if not math.isfinite(value):
            return f"{name} = {value!r} is not finite"
        if value < 0 or (name in SHARES and value > 1):
            return f"{name} = {value!r} is outside {'[0, 1]' if name in SHARES else '[0, inf)'}"
    if _number(episode.get("completed")) and _number(episode.get("arrived")) and episode["completed"] > episode["arrived"]:
        return f"completed {episode['completed']!r} exceeds arrived {episode['arrived']!r}"
    return None


def result_problem(cell: Cell, result: Any, key: str | None = None) -> str | None:
    """Why ``result`` (as parsed from JSON, without ``checksum``) is not a complete, consistent result of
    ``cell``, or None when it is: format, key and cell fields must be the cell's, the episode list complete
    (:func:`expected_episodes`), every :data:`EPISODE_STATS` mean present and every mean equal to the mean
    of its episodes (to 1e-9 relative), and every episode statistic in its range (shares in [0, 1], the
    rest finite and >= 0, completed <= arrived). ``key``: ``cell.key`` if already known."""
    if not isinstance(result, dict):
        return f"not a JSON object ({type(result).__name__})"
    if result.get("format") != FORMAT:
        return f"format {result.get('format')!r}, expected {FORMAT}"
    key = cell.key if key is None else key
    if result.get("key") != key:
        return f"key {result.get('key')!r}, expected {key!r}"
    if result.get("cell") != json.loads(json.dumps(cell.fields(), default=list)):
        return f"cell fields {result.get('cell')!r} are not the cell's"
    episodes, means, expected = result.get("episodes"), result.get("mean"), expected_episodes(cell)
    if not isinstance(episodes, list) or len(episodes) != expected:
        return f"{len(episodes) if isinstance(episodes, list) else 'no'} episodes, expected {expected}"
    if not all(isinstance(e, dict) for e in episodes):
        return "an episode is not a JSON object"
    for e, episode in enumerate(episodes):
        problem = _out_of_range(episode)
        if problem:
            return f"episode {e}: {problem}"
    if not isinstance(means, dict) or not set(EPISODE_STATS) <= set(means):
        return f"means of {sorted(set(EPISODE_STATS) - set(means if isinstance(means, dict) else ()))} are missing"
    for name, mean in means.items():
        values = [e.get(name) for e in episodes]
        if not _number(mean) or not all(_number(v) for v in values):
            return f"mean or episode values of {name!r} are missing or not numbers"
        recomputed = float(np.mean(values))
        if not (math.isclose(mean, recomputed, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(mean) and math.isnan(recomputed))):
            return f"mean {name} = {mean!r} disagrees with its episodes ({recomputed!r})"
    return None


class CellStore:
    """Cell results as JSON files under ``directory``, each with its checksum (atomic writes; a file that
    is corrupt, truncated or inconsistent counts as missing)."""

    def __init__(self, directory: Path = CELL_DIR) -> None:
        self.directory = Path(directory)

    def path(self, cell: Cell) -> Path:
        return self.directory / f"{cell.key}.json"

    def load(self, cell: Cell) -> dict[str, Any] | None:
        """The cached result (without its ``checksum``), or None when it is missing or unreadable, its
        checksum does not verify, or it is not a complete, consistent result of this cell
        (:func:`result_problem`)."""
        key = cell.key
        try:
            result = json.loads((self.directory / f"{key}.json").read_text())
        except (OSError, ValueError):  # includes UnicodeDecodeError and JSONDecodeError
            return None
        if not isinstance(result, dict) or result.get("checksum") != checksum(result):
            return None
        result = {name: value for name, value in result.items() if name != "checksum"}
        return None if result_problem(cell, result, key) is not None else result

    def save(self, cell: Cell, result: dict[str, Any]) -> None:
        """Write ``result`` (JSON-ready) with its :func:`checksum` as the cell's file, atomically: a
        temporary file unique to this process and thread, renamed into place."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(cell)
        body = {name: value for name, value in result.items() if name != "checksum"}
        text = json.dumps({**body, "checksum": checksum(body)}, indent=0, sort_keys=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            temporary.write_text(text)
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise


def run_cells(cells: Iterable[Cell], store: CellStore | None = None, workers: int = 1, backend: str = "process",
              address: str | None = None, progress: bool = True, runner: Callable[[Cell], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Results of ``cells`` in order: cached ones loaded, the others computed and cached as they finish.

    Each computed result is checked (:func:`result_problem`) and saved as soon as its job finishes; on
    an interruption or error, finished results are saved, the workers are stopped at once and the
    exception propagates (see the module docstring).

    Args:
        cells: the cells (duplicates are computed once).
        store: the cache (default ``results/cells`` under the working directory).
        workers: parallel processes (``backend="process"``; 1 runs in this process).
        backend: ``"process"`` or ``"ray"`` (needs ``pip install -e ".[ray]"``).
        address: Ray cluster address (None starts or joins a local instance).
        progress: show a progress bar.
        runner: what computes one cell (tests substitute their own; with ``workers > 1`` it must be
            picklable); by default cells that differ only in their root run as one batch
            (:func:`run_group`), at most :data:`GROUP_ROOTS` roots per job.

    Raises:
        ValueError: a bad ``backend`` or ``workers``, or a computed result that is not a complete,
            consistent result of its cell (it is not saved).
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
    if runner is None:
        groups: dict[Cell, list[Cell]] = {}
        for cell in missing.values():
            groups.setdefault(dataclasses.replace(cell, root=0), []).append(cell)
        jobs = [group[i:i + GROUP_ROOTS] for group in groups.values() for i in range(0, len(group), GROUP_ROOTS)]
        work: Callable[[list[Cell]], list[dict[str, Any]]] = run_group
    else:
        jobs, work = [[cell] for cell in missing.values()], _PerCell(runner)
    bar = tqdm(total=len(missing), desc="cells", unit="cell", disable=not progress, leave=False)

    def finish(job: list[Cell], outputs: list[dict[str, Any]]) -> None:
        if not isinstance(outputs, list) or len(outputs) != len(job):
            raise ValueError(f"a job of {len(job)} cells returned {len(outputs) if isinstance(outputs, list) else type(outputs).__name__} results")
        for cell, output in zip(job, outputs):
            result = json.loads(json.dumps({k: v for k, v in output.items() if k != "checksum"}, sort_keys=True))  # as a later run will load it
            problem = result_problem(cell, result)
            if problem is not None:
                raise ValueError(f"the computed result of {cell} is not valid ({problem}); not saved")
            store.save(cell, result)
            if cell.key not in results:
                bar.update()
            results[cell.key] = result

    try:
        _compute(jobs, workers, backend, address, work, finish)
    finally:
        bar.close()
    return [results[cell.key] for cell in cells]


class _PerCell:
    """A per-cell runner as a job runner (picklable when the runner is)."""

    def __init__(self, runner: Callable[[Cell], dict[str, Any]]) -> None:
        self.runner = runner

    def __call__(self, job: list[Cell]) -> list[dict[str, Any]]:
        return [self.runner(cell) for cell in job]


Work = Callable[[list[Cell]], list[dict[str, Any]]]
Finish = Callable[[list[Cell], list[dict[str, Any]]], None]


def _compute(jobs: Sequence[list[Cell]], workers: int, backend: str, address: str | None, work: Work, finish: Finish) -> None:
    """Run ``jobs`` (lists of cells) with ``work``; call ``finish(job, results)`` in this process as each job finishes."""
    if not jobs:
        return
    if backend == "ray":
        _compute_ray(jobs, address, work, finish)
    elif workers == 1:
        for job in jobs:
            finish(job, work(job))
    else:
        _compute_pool(jobs, workers, work, finish)


def _compute_pool(jobs: Sequence[list[Cell]], workers: int, work: Work, finish: Finish) -> None:
    """Jobs on a process pool; on any exception (KeyboardInterrupt included) the finished jobs are
    delivered, the rest cancelled, the workers terminated, and the exception re-raised."""
    pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)), initializer=_worker_start, initargs=(os.getpid(),))
    undelivered: dict[Future, list[Cell]] = {}
    try:
        for job in jobs:
            undelivered[pool.submit(work, job)] = job
        pending = set(undelivered)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                finish(undelivered[future], future.result())
                del undelivered[future]
    except BaseException:
        for future in undelivered:
            future.cancel()
        try:
            _deliver_finished(undelivered, finish)
        finally:
            _stop_workers(pool)
        _deliver_finished(undelivered, finish)  # any that finished meanwhile
        raise
    pool.shutdown(wait=True)


def _deliver_finished(undelivered: dict[Future, list[Cell]], finish: Finish) -> None:
    """Deliver the jobs that finished successfully (while another exception is on its way: a failing
    delivery is skipped, the original exception matters more)."""
    for future, job in list(undelivered.items()):
        if future.done() and not future.cancelled() and future.exception() is None:
            try:
                finish(job, future.result())
            except Exception:
                continue
            del undelivered[future]


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's workers now (SIGTERM, SIGKILL after a second) and shut the pool down without waiting."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + 1.0
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join(1.0)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
#: Seconds between a worker's checks that the runner is still alive.
WATCHDOG_SECONDS = 0.5


def _worker_start(runner: int) -> None:
    """Pool initializer: ignore SIGINT (the runner stops its workers) and never outlive the runner (pid ``runner``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watchdog still stops this worker
    if not _alive(runner):  # it died before the death signal was armed
        os._exit(1)
    threading.Thread(target=_watch_runner, args=(runner, parent), name="cells-runner-watchdog", daemon=True).start()


def _alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) would terminate it there: rely on the parent check
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch_runner(runner: int, parent: int) -> None:
    """Exit this worker once its parent changes (the runner, or a fork server, died) or the runner is gone."""
    while os.getppid() == parent and _alive(runner):
        time.sleep(WATCHDOG_SECONDS)
    os._exit(1)


#: How many times a job lost with its Ray node or worker process is resubmitted before the run fails
#: (the Ray backend; see :func:`_compute_ray`).
NODE_RETRIES = 3
#: Seconds without a finished job after which the Ray backend checks that the cluster still has a CPU.
STALL_SECONDS = 10.0


class NodeLostWarning(RuntimeWarning):
    """Ray backend: a job's node or worker process died with the job in flight; its ``cells`` are resubmitted
    (none: the cluster has no CPU left and the jobs wait)."""

    def __init__(self, message: str, cells: Sequence[Cell] = ()) -> None:
        super().__init__(message)
        self.cells = tuple(cells)


def _run_job(work: Work, job: list[Cell]) -> list[dict[str, Any]]:
    """One job on a Ray worker: the Ray backend's remote function (a worker runs it as ``ray::_run_job``)."""
    return work(job)


def _compute_ray(jobs: Sequence[list[Cell]], address: str | None, work: Work, finish: Finish) -> None:
    """Jobs as Ray tasks on the cluster at ``address`` (None: start or join a local instance; a Ray
    already initialised in this process is used, and an ``address`` naming another cluster is an error).

    Node loss: a job whose node or worker process dies while it runs (``NodeDiedError``,
    ``WorkerCrashedError``, ``LocalRayletDiedError``, or its result lost with its node: ``ObjectLostError``)
    is resubmitted, at most :data:`NODE_RETRIES` times per job, each time with a :class:`NodeLostWarning`
    naming its cells; then the run fails with a RuntimeError. Ray's own retries are off (``max_retries=0``),
    so every resubmission is one of these. Any other error is never retried: a cell's own exception
    propagates as raised (as does Ray's OutOfMemoryError, a worker killed for memory). A job is finished (delivered, saved) exactly once, by this process, from the one
    attempt that returned. While no job finishes for :data:`STALL_SECONDS` and the cluster has no CPU left
    (every worker node lost), a NodeLostWarning says the jobs wait for a node to join. On any exception
    (KeyboardInterrupt included), finished jobs are delivered and the others cancelled, as with processes."""
    with needs(__name__, "ray"):
        import ray
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    elif address not in (None, "auto") and address != ray.get_runtime_context().gcs_address:
        raise ValueError(f"address={address!r}: this process is already connected to the Ray cluster at "
                         f"{ray.get_runtime_context().gcs_address} (ray.shutdown() first, or leave address=None)")
    try:
        _run_on_ray(ray, jobs, work, finish)
    finally:
        if started:
            ray.shutdown()


def _run_on_ray(ray, jobs: Sequence[list[Cell]], work: Work, finish: Finish) -> None:
    remote = ray.remote(max_retries=0, retry_exceptions=False)(_run_job)
    pending = {remote.remote(work, job): (job, 0) for job in jobs}  # ref -> (job, resubmissions so far)
    stalled = False
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=STALL_SECONDS)
            if not done:
                if not stalled and not ray.cluster_resources().get("CPU"):
                    warnings.warn(NodeLostWarning(f"the Ray cluster has no CPU left (its worker nodes were lost): {len(pending)} "
                                                  "job(s) wait for a node to join"), stacklevel=2)
                stalled = True
                continue
            stalled = False
            job, retries = pending.pop(done[0])
            try:
                outputs = ray.get(done[0])
            except Exception as error:
                if not _node_lost(ray, error):
                    raise  # the cell's own error: never retried
                if retries >= NODE_RETRIES:
                    raise RuntimeError(f"{_describe(job)} lost its Ray node or worker {retries + 1} times "
                                       f"(last: {type(error).__name__}); giving up") from error
                warnings.warn(NodeLostWarning(f"{_describe(job)} lost with its Ray node or worker ({type(error).__name__}): "
                                              f"resubmitted (retry {retries + 1} of {NODE_RETRIES})", job), stacklevel=2)
                pending[remote.remote(work, job)] = (job, retries + 1)
                continue
            finish(job, outputs)
    except BaseException:
        ready = ray.wait(list(pending), num_returns=len(pending), timeout=0)[0] if pending else []
        for ref in ready:
            try:
                finish(pending.pop(ref)[0], ray.get(ref, timeout=0))
            except Exception:
                continue
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:
                pass
        raise


def _node_lost(ray, error: BaseException) -> bool:
    """Whether ``error`` (from ``ray.get`` of a job) means the job's node or worker died, not the job itself."""
    e = ray.exceptions
    lost = (e.NodeDiedError, e.WorkerCrashedError, e.LocalRayletDiedError, e.ObjectLostError)
    return isinstance(error, lost) or (isinstance(error, e.RayTaskError) and isinstance(getattr(error, "cause", None), lost))


def _describe(job: list[Cell]) -> str:
    first = job[0]
    return (f"a job of {len(job)} cell(s) ({first.agent} seed {first.seed} on {first.task_set}/{first.load}"
            f"{' ' + str(dict(first.env)) if first.env else ''}, roots {[c.root for c in job]})")
