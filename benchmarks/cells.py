"""Benchmark cells run and cached: :func:`run_cells`, in this process, in parallel processes or on a Ray cluster.

The cell is :class:`~benchmarks.cell.Cell` (identity, key, workloads), its result and the cache
:class:`~benchmarks.cell_store.CellStore` (format, checksums, checks), one job's computation
:func:`~benchmarks.cell_play.run_group` (a rollout, or a row's registered runner); this module runs the
jobs and re-exports those names. A run loads the cells it finds valid and computes only the missing or
corrupt ones, in parallel processes (``workers``) or on a Ray cluster (``backend="ray"``, the optional
``ray`` extra; ``address`` picks the cluster; a job lost with its Ray node or worker is resubmitted, at
most :data:`NODE_RETRIES` times, with a :class:`NodeLostWarning`: :func:`_compute_ray`). Cells that differ
only in their root run as one batch, in jobs of at most :data:`GROUP_ROOTS` roots.

Interruption: results are saved as each job finishes. On Ctrl-C (KeyboardInterrupt) or any other
exception in the runner, finished results are saved, pending jobs are cancelled and the worker
processes are terminated at once (killed if they do not stop within about a second); then the exception
propagates. Workers never outlive the runner, even under ``kill -9``: on Linux each worker asks the
kernel for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``), and everywhere a watchdog thread
in each worker exits the worker within about half a second of the runner's death. Workers ignore
SIGINT: a terminal's Ctrl-C reaches the whole process group and the runner stops them itself.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from benchmarks.cell import Cell, bank_suite
from benchmarks.cell_play import AGREEMENT, ROW_RUNNERS, RowRunner, run_cell, run_group
from benchmarks.cell_store import CELL_DIR, EPISODE_STATS, FORMAT, SHARES, CellStore, cell_result, checksum, expected_episodes, result_problem
from core_env.extras import needs

with needs(__name__):
    from tqdm import tqdm

__all__ = ["AGREEMENT", "CELL_DIR", "EPISODE_STATS", "FORMAT", "GROUP_ROOTS", "NODE_RETRIES", "ROW_RUNNERS", "SHARES", "STALL_SECONDS",
           "Cell", "CellStore", "NodeLostWarning", "RowRunner", "bank_suite", "cell_result", "checksum", "expected_episodes", "result_problem",
           "run_cell", "run_cells", "run_group"]

#: Most roots of one row × scenario played as one job (one batch): larger jobs batch more predictor calls,
#: smaller ones lose less to an interruption.
GROUP_ROOTS = 5


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
