"""Node loss on a real multi-node Ray cluster (issue 49): ``python -m benchmarks.ray_cluster [--out FILE] ...``.

Starts a Ray cluster of several nodes on this machine (:func:`cluster`: ``ray.cluster_utils.Cluster``, a head
with no CPU, so that every cell runs on a worker node, and ``--nodes`` worker nodes of one CPU each), runs the
paper suite's cells through the Ray backend as ``python -m benchmarks paper --backend ray --address ADDRESS``
does (:func:`benchmarks.report.run_suite`), and kills one worker node while a cell job runs on it
(:class:`NodeKiller`: once ``--kill-after`` of the cells are saved, the first worker node seen running a job;
by default its worker processes and then its raylet are SIGKILLed, as when a machine fails; ``--graceful``:
``cluster.remove_node`` stops it, SIGTERM first). The jobs lost with the node are resubmitted by the Ray
backend (:func:`benchmarks.cells._compute_ray`, each with a :class:`~benchmarks.cells.NodeLostWarning`).
The same cells then run on local processes, and :func:`compare` checks that the two runs' results are
equal exactly (every cell's result but its timings, the suite's CSV and tables).

Writes a JSON summary (default ``build/ray_cluster.json``): nodes, cells, which node was killed when,
jobs and cells retried, wall times, and the comparison; the suites' outputs and cells go beside it
(``build/ray_cluster/{ray,local}/``). docs/benchmarks.md shows the full run's figures. The CI runs a toy
size of the same (tests/test_ray_cluster.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from core_env.extras import needs
from benchmarks.cells import CellStore, NodeLostWarning, _run_job

DEFAULT_OUT = Path("build") / "ray_cluster.json"
#: The full run's rows: fixed rules, a curve-reading heuristic and the learned rows' teacher (a torch predictor).
ROWS = ("fifo", "edf", "lara", "edf-admission:fm,min_reports=5")
#: A cell result's timing entries: the only ones that may differ between two runs of the same cell.
TIMINGS = ("wall_s", "decision_ms")
#: A Ray worker's process title while it runs a cell job.
JOB_TITLE = f"ray::{_run_job.__name__}"


@contextlib.contextmanager
def cluster(nodes: int, cpus: int = 1) -> Iterator[Any]:
    """A Ray cluster on this machine: a head with no CPU and ``nodes`` worker nodes of ``cpus`` CPUs each;
    every node (and this process's connection to Ray, if any) is shut down on exit. It is joined only by its
    ``address``: the machine's ``ray_current_cluster`` file, which ``ray.cluster_utils`` points at it (so that
    a plain ``ray.init()`` in any other process on the machine would join it), is kept as it was."""
    with needs(__name__, "ray"):
        import ray
        from ray.cluster_utils import Cluster

    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 2:
        raise ValueError(f"nodes must be an int >= 2 (one is killed), got {nodes!r}")
    if ray.is_initialized():
        raise ValueError("Ray is already initialised in this process: ray.shutdown() before starting a test cluster")
    with _address_file_kept():
        started = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(nodes):
            started.add_node(num_cpus=cpus)
        started.wait_for_nodes()
        yield started
    finally:
        ray.shutdown()
        with _address_file_kept():
            started.shutdown()


@contextlib.contextmanager
def _address_file_kept() -> Iterator[None]:
    """Leave Ray's ``ray_current_cluster`` file (``RAY_TMPDIR``, ``TMPDIR`` or /tmp, then ``ray/``) as it was before."""
    with needs(__name__, "ray"):
        from ray._common.utils import get_ray_address_file

    path = Path(get_ray_address_file(None))
    before = path.read_bytes() if path.exists() else None
    try:
        yield
    finally:
        if before is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(before)


def raylet_pid(node: Any) -> int:
    return node.all_processes["raylet"][0].process.pid


def busy_nodes(started: Any, title: str = JOB_TITLE) -> list[Any]:
    """The worker nodes of ``started`` with a worker process titled ``title...`` now (a child of their raylet;
    default: running a cell job)."""
    with needs(__name__, "ray"):
        import psutil

    out = []
    for node in list(started.worker_nodes):
        try:
            children = psutil.Process(raylet_pid(node)).children()
        except psutil.Error:
            continue
        for child in children:
            try:
                running = " ".join(child.cmdline())
            except psutil.Error:
                continue
            if running.startswith(title):
                out.append(node)
                break
    return out


def kill_node(started: Any, node: Any, hard: bool) -> None:
    """Remove worker node ``node``; ``hard``: SIGKILL its processes (its workers first), as a failed machine."""
    with needs(__name__, "ray"):
        import psutil

    if hard:
        try:
            workers = psutil.Process(raylet_pid(node)).children(recursive=True)
        except psutil.Error:
            workers = []
        for worker in workers:
            with contextlib.suppress(psutil.Error):
                worker.kill()
    started.remove_node(node, allow_graceful=not hard)


class NodeKiller(threading.Thread):
    """Kills the first worker node seen with a worker titled ``title...`` (default: running a cell job) once
    ``progress()`` (cells saved; polled every ``poll`` seconds) reaches ``after``; ``killed`` then says which node, when (seconds after :meth:`start`,
    cells saved by then) and how; ``error`` any failure."""

    def __init__(self, started: Any, progress: Callable[[], int], after: float, hard: bool = False, title: str = JOB_TITLE,
                 poll: float = 0.02) -> None:
        super().__init__(name="node-killer", daemon=True)
        self.started, self.progress, self.after, self.hard, self.title, self.poll = started, progress, after, hard, title, poll
        self.done = threading.Event()
        self.killed: dict[str, Any] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        began = time.perf_counter()
        try:
            while not self.done.is_set():
                saved = self.progress()
                busy = busy_nodes(self.started, self.title) if saved >= self.after else []
                if busy:
                    node = busy[0]
                    at = time.perf_counter() - began
                    kill_node(self.started, node, self.hard)
                    self.killed = {"node_id": node.node_id, "at_s": at, "cells_saved_before": saved, "hard": self.hard}
                    return
                self.done.wait(self.poll)
        except BaseException as error:  # reported by whoever joins
            self.error = error

    def stop(self) -> dict[str, Any]:
        """Stop waiting; the kill's record. Raises RuntimeError when no node was killed or the kill failed."""
        self.done.set()
        self.join()
        if self.error is not None:
            raise RuntimeError(f"killing a node failed: {self.error!r}") from self.error
        if self.killed is None:
            raise RuntimeError("no worker node was killed: no job was seen running once the kill was due")
        return self.killed


def saved_cells(directory: Path) -> int:
    """How many cell results ``directory`` holds."""
    return sum(1 for _ in Path(directory).glob("*.json")) if Path(directory).is_dir() else 0


def without_timings(result: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in result.items() if key not in TIMINGS}


def compare(cells: Sequence[Any], ray_out: Path, local_out: Path, suite: str = "paper") -> dict[str, Any]:
    """Whether two runs of ``cells`` (outputs under ``ray_out`` and ``local_out``) agree exactly: every cell's
    stored result but its :data:`TIMINGS`, the suite's CSV (every episode) and its JSON tables."""
    a, b = CellStore(Path(ray_out) / "cells"), CellStore(Path(local_out) / "cells")
    differing = [cell.key for cell in cells if a.load(cell) is None or b.load(cell) is None
                 or without_timings(a.load(cell)) != without_timings(b.load(cell))]
    csv = [(Path(out) / suite / f"{suite}.csv").read_text() for out in (ray_out, local_out)]
    payloads = [json.loads((Path(out) / suite / f"{suite}.json").read_text()) for out in (ray_out, local_out)]
    tables = ("table", "bound", "gap_closed", "gap_closed_bound", "differences")
    return {"cells": len(cells), "differing_cells": differing, "csv_equal": csv[0] == csv[1],
            "tables_equal": all(payloads[0][t] == payloads[1][t] for t in tables),
            "equal": not differing and csv[0] == csv[1] and all(payloads[0][t] == payloads[1][t] for t in tables)}


def run(out: Path = DEFAULT_OUT, nodes: int = 3, **options: Any) -> dict[str, Any]:
    """The run of the module docstring on a new cluster of ``nodes`` worker nodes (:func:`run_on`; its
    arguments are checked before the cluster starts)."""
    _plan(out, **{k: v for k, v in options.items() if k in ("rows", "roots", "episodes", "scenarios", "kill_after", "local_workers")})
    with cluster(nodes) as started:
        return run_on(started, out, **options)


def _plan(out: Path, rows: Sequence[str] = ROWS, roots: int | None = None, episodes: int | None = None,
          scenarios: Sequence[str] | None = None, kill_after: float = 0.5, local_workers: int = 2) -> dict[str, Any]:
    """The checked arguments of :func:`run_on`: the suite spec, its rows and cells, and where the outputs go."""
    from benchmarks.agents import make_agent
    from benchmarks.paper import SuiteSpec, rows_to_run, specs

    if not 0.0 <= kill_after < 1.0:
        raise ValueError(f"kill_after must be a share of the cells in [0, 1), got {kill_after!r}")
    for name, value in (("roots", roots), ("episodes", episodes), ("local_workers", local_workers)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    paper = specs()["paper"]
    unknown = sorted(set(scenarios or ()) - {s.name for s in paper.scenarios})
    if unknown:
        raise ValueError(f"scenarios: unknown {unknown}; the paper suite has {[s.name for s in paper.scenarios]}")
    for row in rows:
        try:
            make_agent(row)
        except (ValueError, FileNotFoundError) as error:
            raise ValueError(f"rows: {error}") from error
    spec = SuiteSpec("paper", paper.rows, tuple(s for s in paper.scenarios if not scenarios or s.name in scenarios),
                     paper.roots if roots is None else roots, episodes, paper.seeds)
    runnable, missing = rows_to_run(spec, rows)
    if not runnable:
        raise ValueError(f"rows: none can run (missing checkpoints for {missing})")
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"out: {out} is a folder; name the JSON file to write (default {DEFAULT_OUT})")
    folder = out.with_suffix("")
    if saved_cells(folder / "ray" / "cells") or saved_cells(folder / "local" / "cells"):
        raise ValueError(f"out: {folder} already holds cells (a resumed run computes nothing): use another --out or delete it")
    argv = ["--rows", *runnable, "--roots", str(spec.roots)] + (["--episodes", str(episodes)] if episodes else []) \
        + (["--scenarios", *scenarios] if scenarios else [])
    return {"spec": spec, "rows": runnable, "missing": missing, "cells": spec.cells(runnable), "ray_out": folder / "ray",
            "local_out": folder / "local", "argv": argv}


def run_on(started: Any, out: Path = DEFAULT_OUT, rows: Sequence[str] = ROWS, roots: int | None = None, episodes: int | None = None,
           scenarios: Sequence[str] | None = None, kill_after: float = 0.5, hard: bool = True, local_workers: int = 2) -> dict[str, Any]:
    """The paper suite's cells on cluster ``started`` with one worker node killed, then locally (module
    docstring); returns its figures and writes them to ``out`` (a JSON file).

    Raises:
        ValueError: a bad argument (named), or ``out``'s folder already holds cells (a resumed run would
            lose no node).
        RuntimeError: no node could be killed while a job ran on it.
    """
    from benchmarks.report import commit, machine, run_suite

    plan = _plan(out, rows, roots, episodes, scenarios, kill_after, local_workers)
    spec, runnable, cells, ray_out, local_out, argv = (plan[k] for k in ("spec", "rows", "cells", "ray_out", "local_out", "argv"))
    workers = len(started.worker_nodes)
    killer = NodeKiller(started, lambda: saved_cells(ray_out / "cells"), kill_after * len(cells), hard)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NodeLostWarning)
        killer.start()
        try:
            payload = run_suite(spec, ray_out, runnable, backend="ray", address=started.address, progress=False,
                                argv=[*argv, "--backend", "ray", "--address", started.address, "--out", str(ray_out)])
        finally:
            killer.done.set()
            killer.join()
    killed = killer.stop()
    lost = [w.message for w in caught if isinstance(w.message, NodeLostWarning)]
    local = run_suite(spec, local_out, runnable, workers=local_workers, progress=False,
                      argv=[*argv, "--workers", str(local_workers), "--out", str(local_out)])
    figures = {"ray_nodes": {"head": "num_cpus=0", "workers": workers, "cpus_per_worker": 1}, "rows": runnable, "missing_rows": plan["missing"],
               "scenarios": [s.name for s in spec.scenarios], "roots": spec.roots, "episodes": episodes, "cells": len(cells),
               "jobs_retried": len(lost), "cells_retried": sum(len(w.cells) for w in lost), "retried_cells": [c.key for w in lost for c in w.cells],
               "retries": [str(w) for w in lost], "killed": killed, "ray_command": payload["command"],
               "ray_wall_s": payload["wall_s"], "local_wall_s": local["wall_s"], "local_workers": local_workers,
               "comparison": compare(cells, ray_out, local_out), "commit": commit(), "machine": machine()}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(figures, indent=1) + "\n")
    return figures


def table(figures: dict[str, Any]) -> str:
    """The Markdown table of a run's ``figures`` (as :func:`run_on` writes them; docs/benchmarks.md quotes the
    committed run's, docs/results/ray_cluster.json, as a generated block)."""
    nodes, killed, comparison = figures["ray_nodes"], figures["killed"], figures["comparison"]
    rows = ", ".join(f"`{r}`" for r in figures["rows"])
    per_root = f" × {figures['episodes']} episode(s)" if figures["episodes"] else " × every episode"
    same = ("equal to the local run's exactly: every cell's results (only `wall_s` and `decision_ms` differ), `paper.csv` "
            "byte for byte, and the tables of `paper.json`") if comparison["equal"] else \
        f"DIFFER from the local run's: {len(comparison['differing_cells'])} cell(s), csv equal {comparison['csv_equal']}, tables equal {comparison['tables_equal']}"
    lines = ["| | |", "|---|---|",
             f"| Ray nodes | {nodes['workers'] + 1}: the head ({nodes['head']}) and {nodes['workers']} worker nodes of {nodes['cpus_per_worker']} CPU |",
             f"| cells | {figures['cells']}: {rows} × {len(figures['scenarios'])} paper columns × {figures['roots']} roots{per_root} |",
             f"| node killed | one worker node ({'SIGKILL' if killed['hard'] else 'remove_node'}) {killed['at_s']:.1f} s into the Ray run, "
             f"after {killed['cells_saved_before']} of {figures['cells']} cells were saved |",
             f"| retried | {figures['jobs_retried']} job(s), {figures['cells_retried']} cell(s): " + ("; ".join(figures["retries"]) or "none") + " |",
             f"| wall time | {figures['ray_wall_s']:.0f} s on the cluster, {figures['local_wall_s']:.0f} s on {figures['local_workers']} local processes |",
             f"| results | {same} |"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray_cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the JSON summary (default {DEFAULT_OUT}; the runs' outputs beside it)")
    parser.add_argument("--nodes", type=int, default=3, help="worker nodes of one CPU each (>= 2; one is killed; default 3)")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), help=f"paper rows (default: {' '.join(ROWS)})")
    parser.add_argument("--roots", type=int, default=None, help="evaluation roots (default: the suite's 10)")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per root (default: all)")
    parser.add_argument("--scenarios", nargs="+", default=None, help="only these paper columns (default: all 12)")
    parser.add_argument("--kill-after", type=float, default=0.5, help="share of the cells saved before a node is killed (default 0.5)")
    parser.add_argument("--graceful", action="store_true", help="stop the node with cluster.remove_node (SIGTERM) instead of SIGKILL")
    parser.add_argument("--local-workers", type=int, default=2, help="processes of the local run compared with (default 2)")
    args = parser.parse_args(argv)
    if args.nodes < 2:
        parser.error(f"--nodes must be >= 2 (one is killed), got {args.nodes}")
    try:
        with needs(__name__, "ray"):
            import ray  # noqa: F401
    except ImportError as error:
        parser.error(str(error))
    try:
        figures = run(args.out, args.nodes, rows=args.rows, roots=args.roots, episodes=args.episodes, scenarios=args.scenarios,
                      kill_after=args.kill_after, hard=not args.graceful, local_workers=args.local_workers)
    except ValueError as error:
        parser.error(str(error))
    comparison = figures["comparison"]
    print(f"{figures['cells']} cells on {args.nodes} Ray worker nodes; node {figures['killed']['node_id'][:12]} killed "
          f"{'hard' if figures['killed']['hard'] else 'gracefully'} at {figures['killed']['at_s']:.1f} s; "
          f"{figures['jobs_retried']} job(s) ({figures['cells_retried']} cells) retried; Ray run {figures['ray_wall_s']:.1f} s, "
          f"local {figures['local_wall_s']:.1f} s; results {'equal' if comparison['equal'] else 'DIFFERENT'} exactly")
    print(f"wrote {args.out}")
    return 0 if comparison["equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
