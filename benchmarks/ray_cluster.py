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

``python -m benchmarks.ray_cluster --live [--episodes E] [--out FILE]`` is the live half (:func:`run_live`): the
live fidelity run (:func:`benchmarks.fidelity.run` with ``backend="ray"`` and the cluster's ``address``: one
Ray actor per worker node) plays episode by episode; once ``--kill-after-episodes`` episodes' cells are
written, the worker node of one actor is killed (:class:`NodeKiller`, as above). The run must raise
NodeFailure; a replacement node joins, the run is resumed with the same arguments, and every episode's cell
must be written exactly once over the two parts (the cells written before the kill read back, the rest
played by the resumed run) and every trace replay must equal its live episode. Writes a JSON summary
(default ``build/ray_cluster_live.json``; the fidelity outputs in ``build/ray_cluster_live/fidelity/``);
exits 1 if an episode was lost or played twice or a replay differs. The CI runs it at toy size.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import re
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from core_env.extras import needs
from benchmarks.cells import CellStore, NodeLostWarning, _run_job

DEFAULT_OUT = Path("build") / "ray_cluster.json"
LIVE_OUT = Path("build") / "ray_cluster_live.json"
#: CPUs of each worker node (a replacement node gets as many).
CPUS_PER_WORKER = 1
#: The live run's episodes per row (each its own root) by default, as the fidelity suite's; the node is killed after half.
LIVE_EPISODES = 20
#: A live node's (Ray actor's) process title.
ACTOR_TITLE = "ray::NodeWorker"
#: The full run's rows: fixed rules, a curve-reading heuristic and the learned rows' teacher (a torch predictor).
ROWS = ("fifo", "edf", "lara", "edf-admission:fm,min_reports=5")
#: A cell result's timing entries: the only ones that may differ between two runs of the same cell.
TIMINGS = ("wall_s", "decision_ms")
#: A Ray worker's process title while it runs a cell job.
JOB_TITLE = f"ray::{_run_job.__name__}"


@contextlib.contextmanager
def cluster(nodes: int, cpus: int = CPUS_PER_WORKER) -> Iterator[Any]:
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


def saved_cells(directory: Path, pattern: str = "*.json") -> int:
    """How many cell results ``directory`` holds (files named ``pattern``; default: benchmark cells)."""
    return sum(1 for _ in Path(directory).glob(pattern)) if Path(directory).is_dir() else 0


def _output_folder(out: Path, default: Path) -> Path:
    """The folder beside JSON file ``out`` that a run writes its outputs to. Raises ValueError if ``out`` is a folder."""
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"out: {out} is a folder; name the JSON file to write (default {default})")
    return out.with_suffix("")


def _check_rows(rows: Sequence[str]) -> None:
    """ValueError "rows: ..." (the agent factory's reason) for the first of ``rows`` that cannot be built."""
    from benchmarks.agents import make_agent

    for row in rows:
        try:
            make_agent(row)
        except (ValueError, FileNotFoundError) as error:
            raise ValueError(f"rows: {error}") from error


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
    _check_rows(rows)
    spec = SuiteSpec("paper", paper.rows, tuple(s for s in paper.scenarios if not scenarios or s.name in scenarios),
                     paper.roots if roots is None else roots, episodes, paper.seeds)
    runnable, missing = rows_to_run(spec, rows)
    if not runnable:
        raise ValueError(f"rows: none can run (missing checkpoints for {missing})")
    folder = _output_folder(out, DEFAULT_OUT)
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
    figures = {"ray_nodes": _nodes(workers), "rows": runnable, "missing_rows": plan["missing"],
               "scenarios": [s.name for s in spec.scenarios], "roots": spec.roots, "episodes": episodes, "cells": len(cells),
               "jobs_retried": len(lost), "cells_retried": sum(len(w.cells) for w in lost), "retried_cells": [c.key for w in lost for c in w.cells],
               "retries": [str(w) for w in lost], "killed": killed, "ray_command": payload["command"],
               "ray_wall_s": payload["wall_s"], "local_wall_s": local["wall_s"], "local_workers": local_workers,
               "comparison": compare(cells, ray_out, local_out), "commit": commit(), "machine": machine()}
    _write(out, figures)
    return figures


def _nodes(workers: int) -> dict[str, Any]:
    return {"head": "num_cpus=0", "workers": workers, "cpus_per_worker": CPUS_PER_WORKER}


def _write(out: Path, figures: dict[str, Any]) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(figures, indent=1) + "\n")


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



@contextlib.contextmanager
def counted_writes(module: Any, directory: Path) -> Iterator[Counter]:
    """Count, by file name, the files that ``module.write_atomic_bytes`` writes into ``directory`` while open (the
    counter it yields; ``module``'s function is restored on exit)."""
    write, folder, counts = module.write_atomic_bytes, Path(directory).resolve(), Counter()

    def counted(path: Path, data: bytes) -> Path:
        if Path(path).parent.resolve() == folder:
            counts[Path(path).name] += 1
        return write(path, data)

    module.write_atomic_bytes = counted
    try:
        yield counts
    finally:
        module.write_atomic_bytes = write


def live(out: Path = LIVE_OUT, nodes: int = 2, **options: Any) -> dict[str, Any]:
    """:func:`run_live` on a new cluster of ``nodes`` worker nodes (one live node, a Ray actor, on each); its
    arguments are checked before the cluster starts."""
    _plan_live(out, nodes, **{k: v for k, v in options.items() if k != "hard"})
    with cluster(nodes) as started:
        return run_live(started, out, **options)


def _plan_live(out: Path, n_nodes: int, episodes: int = LIVE_EPISODES, kill_after_episodes: int | None = None,
               rows: Sequence[str] | None = None, families: Sequence[str] | None = None, slice_s: float | None = None) -> dict[str, Any]:
    """The checked arguments of :func:`run_live`: where the fidelity outputs go, the rows and the episodes before the kill."""
    from benchmarks import fidelity
    from core_env.live import LIVE_FAMILIES

    folder = _output_folder(out, LIVE_OUT)
    fidelity.check_run(episodes, n_nodes, folder, "ray")
    kill = episodes // 2 if kill_after_episodes is None else kill_after_episodes
    if isinstance(kill, bool) or not isinstance(kill, int) or not 1 <= kill < episodes:
        raise ValueError(f"kill_after_episodes must be an int in [1, episodes - 1 = {episodes - 1}] (episodes written before the kill; "
                         f"the run must have one left to lose), got {kill!r}")
    rows = tuple(fidelity.ROWS if rows is None else rows)
    if not rows or len(set(rows)) != len(rows):
        raise ValueError(f"rows must be distinct rows, at least one, got {list(rows)}")
    _check_rows(rows)
    unknown = [f for f in families or () if f not in LIVE_FAMILIES]
    if families is not None and (not families or unknown):
        raise ValueError(f"families: unknown live task family(ies) {unknown}; choose from {', '.join(LIVE_FAMILIES)}")
    if slice_s is not None and not (isinstance(slice_s, (int, float)) and not isinstance(slice_s, bool) and 0.0 < slice_s < fidelity.MAX_SLICE_S):
        raise ValueError(f"slice_s must be seconds in (0, {fidelity.MAX_SLICE_S:g}), got {slice_s!r}")
    played = folder / "fidelity"
    if (played / "settings.json").exists() or saved_cells(played / "cells", "*.json.gz"):
        raise ValueError(f"out: {played} already holds a live run (resuming it would lose no node): use another --out or delete it")
    return {"folder": folder, "cells": played / "cells", "kill_after_episodes": kill, "rows": rows}


def run_live(started: Any, out: Path = LIVE_OUT, episodes: int = LIVE_EPISODES, kill_after_episodes: int | None = None,
             rows: Sequence[str] | None = None, families: Sequence[str] | None = None, slice_s: float | None = None,
             hard: bool = True) -> dict[str, Any]:
    """A live fidelity run on cluster ``started`` (one live node, a Ray actor, per worker node) that loses the
    worker node of one actor once ``kill_after_episodes`` (default half of ``episodes``) episodes' cells are
    written, then resumes (module docstring); returns its figures and writes them to ``out`` (a JSON file; the
    fidelity outputs in the folder beside it). ``rows`` default :data:`benchmarks.fidelity.ROWS`, ``families``
    :data:`benchmarks.fidelity.FAMILIES`, ``slice_s`` profiled; ``hard``: SIGKILL (else ``remove_node``).

    Raises:
        ValueError: a bad argument (named), or ``out``'s folder already holds a live run.
        RuntimeError: no node could be killed, or the run finished without raising NodeFailure.
    """
    with needs(__name__, "ray"):
        import ray
    from benchmarks import fidelity
    from benchmarks.report import commit, machine
    from core_env.live.workers import NodeFailure

    n_nodes = len(started.worker_nodes)
    plan = _plan_live(out, n_nodes, episodes, kill_after_episodes, rows, families, slice_s)
    folder, cells, kill, rows = (plan[k] for k in ("folder", "cells", "kill_after_episodes", "rows"))
    arguments = {"rows": list(rows), "episodes": episodes, "out": folder, "backend": "ray", "address": started.address,
                 "slice_s": slice_s, "families": families, "n_nodes": n_nodes}
    names = {fidelity.cell_path(cells, row, e).name: (row, e) for e in range(episodes) for row in rows}
    killer = NodeKiller(started, lambda: saved_cells(cells, "*.json.gz"), kill * len(rows), hard, ACTOR_TITLE)
    began = time.perf_counter()
    with counted_writes(fidelity, cells) as writes:
        killer.start()
        failure = failed_s = None
        try:
            fidelity.run(**arguments)
        except NodeFailure as error:
            failure, failed_s = str(error), time.perf_counter() - began
        finally:
            killer.done.set()
            killer.join()
        killed = killer.stop()
        if failure is None:
            raise RuntimeError(f"the live run finished without NodeFailure although node {killed['node_id'][:12]} was killed "
                               f"{killed['at_s']:.1f} s into it: give it more episodes after the kill")
        before = Counter(writes)
        ray.shutdown()  # as a new process would resume: a replacement node joins, and the run goes on where it stopped
        started.add_node(num_cpus=CPUS_PER_WORKER)
        started.wait_for_nodes()
        result = fidelity.run(**arguments)
    resumed = writes - before
    stored = {name: json.loads(gzip.decompress((cells / name).read_bytes())) for name in names}
    per_episode = {row: {"live": result["per_episode"][row]["live"], "trace": result["per_episode"][row]["trace"]} for row in rows}
    actor = re.match(r"node (\d+):", failure)

    def part(counts: Counter) -> dict[str, Any]:
        return {"cells": sum(counts.values()), "episodes": {row: sorted(e for name, (r, e) in names.items() if r == row and counts[name])
                                                            for row in rows}}

    checks = {"played_once": dict(writes) == dict.fromkeys(names, 1),
              "trace_equals_live": all(p["trace"] == p["live"] for p in per_episode.values()),
              "live_equals_cells": all(per_episode[row]["live"] == [stored[fidelity.cell_path(cells, row, e).name]["completion_rate"]
                                                                    for e in range(episodes)] for row in rows)}
    figures = {"ray_nodes": {**_nodes(n_nodes), "actors": n_nodes}, "rows": list(rows), "episodes": episodes, "cells": len(names),
               "families": result["families"], "runs_per_family": result["runs_per_family"], "slice_s": result["slice_s"],
               "kill_after_episodes": kill,
               "killed": {**killed, "actor": int(actor.group(1)) if actor else None, "episodes_written_before": killed["cells_saved_before"] // len(rows)},
               "node_failure": failure, "failed_wall_s": failed_s, "resumed_wall_s": result["wall_s"], "wall_s": time.perf_counter() - began,
               "failed_run": part(before), "resumed_run": part(resumed),
               "written_twice": sorted(name for name, count in writes.items() if count > 1),
               "never_written": sorted(name for name in names if not writes[name]), **checks, "ok": all(checks.values()),
               "completion": {r["row"]: {name: r[name] for name in ("live", "live_ci", "uncalibrated", "calibrated_means", "calibrated", "trace_equal")}
                              for r in result["rows"]},
               "per_episode": per_episode, "fidelity_command": _fidelity_command(arguments), "commit": commit(), "machine": machine()}
    _write(out, figures)
    return figures


def _fidelity_command(arguments: dict[str, Any]) -> str:
    """The ``python -m benchmarks fidelity`` command line of :func:`benchmarks.fidelity.run`'s ``arguments``."""
    words = ["python -m benchmarks fidelity", "--rows", *arguments["rows"], "--episodes", str(arguments["episodes"]),
             "--backend ray --address", arguments["address"], "--nodes", str(arguments["n_nodes"]), "--out", str(arguments["out"])]
    if arguments["slice_s"] is not None:
        words += ["--slice", f"{arguments['slice_s']:g}"]
    if arguments["families"] is not None:
        words += ["--families", *arguments["families"]]
    return " ".join(words)


def _spans(episodes: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0–2, 5``."""
    spans: list[list[int]] = []
    for e in sorted(episodes):
        if spans and e == spans[-1][1] + 1:
            spans[-1][1] = e
        else:
            spans.append([e, e])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans) or "none"


def table_live(figures: dict[str, Any]) -> str:
    """The Markdown table of a live run's ``figures`` (as :func:`run_live` writes them; docs/benchmarks.md quotes
    the committed run's, docs/results/ray_cluster_live.json, as a generated block)."""
    nodes, killed, rows = figures["ray_nodes"], figures["killed"], figures["rows"]

    def episodes(run: dict[str, Any]) -> str:
        return f"{run['cells']} cell(s), episode(s) {_spans({e for played in run['episodes'].values() for e in played})}"

    once = (f"yes: each of the {figures['cells']} cells written exactly once over the two parts" if figures["played_once"] else
            f"NO: written twice {figures['written_twice'] or 'none'}, never written {figures['never_written'] or 'none'}")
    trace = ", ".join(f"`{row}` {c['trace_equal']} of {figures['episodes']}" for row, c in figures["completion"].items())
    completion = "; ".join(f"`{row}` {100 * c['live']:.1f} % [{100 * c['live_ci'][0]:.1f}, {100 * c['live_ci'][1]:.1f}] live, "
                           f"{100 * c['calibrated']:.1f} % calibrated, {100 * c['uncalibrated']:.1f} % uncalibrated"
                           for row, c in figures["completion"].items())
    actor = "one live node" if killed["actor"] is None else f"live node {killed['actor']}"
    lines = ["| | |", "|---|---|",
             f"| Ray nodes | {nodes['workers'] + 1}: the head ({nodes['head']}) and {nodes['workers']} worker nodes of {nodes['cpus_per_worker']} CPU, "
             f"one live node (a Ray actor) on each |",
             f"| live run | {', '.join(f'`{r}`' for r in rows)} × {figures['episodes']} episodes (each its own root): {figures['cells']} cells; "
             f"{len(figures['families'])} task families × {figures['runs_per_family']} runs; slice {1000 * figures['slice_s']:.0f} ms |",
             f"| node killed | the worker node of {actor} ({'SIGKILL' if killed['hard'] else 'remove_node'}) {killed['at_s']:.1f} s into the run, "
             f"after {killed['episodes_written_before']} of {figures['episodes']} episodes were written |",
             f"| raised | `NodeFailure: {figures['node_failure']}` ({figures['failed_wall_s']:.1f} s into the run; {episodes(figures['failed_run'])} written) |",
             f"| resumed | after a replacement node joined: the {figures['failed_run']['cells']} cell(s) written before read back, "
             f"{episodes(figures['resumed_run'])} played; "
             f"{figures['resumed_wall_s']:.0f} s (with the replays) |",
             f"| every episode played once | {once} |",
             f"| trace replay = live | {trace} episodes |",
             f"| completion | {completion} |",
             f"| wall time | {figures['wall_s']:.0f} s in all, {figures['machine']['cpus']} CPUs, commit {figures['commit']} |"]
    return "\n".join(lines)


#: Options of one mode only: the paper suite run's, and the live run's (--live).
SUITE_ONLY = ("roots", "scenarios", "kill_after", "local_workers")
LIVE_ONLY = ("kill_after_episodes", "slice_s", "families")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray_cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--live", action="store_true", help="the live fidelity run instead of the paper suite's cells (module docstring)")
    parser.add_argument("--out", type=Path, default=None, help=f"the JSON summary (default {DEFAULT_OUT}, with --live {LIVE_OUT}; the runs' outputs beside it)")
    parser.add_argument("--nodes", type=int, default=None, help="worker nodes of one CPU each (>= 2; one is killed; default 3, with --live 2: "
                        "one live node on each)")
    parser.add_argument("--rows", nargs="+", default=None, help=f"rows (default: {' '.join(ROWS)}; with --live the fidelity suite's)")
    parser.add_argument("--episodes", type=int, default=None, help=f"episodes per root (default: all); with --live, live episodes per row "
                        f"(default {LIVE_EPISODES})")
    parser.add_argument("--roots", type=int, default=None, help="evaluation roots (default: the suite's 10)")
    parser.add_argument("--scenarios", nargs="+", default=None, help="only these paper columns (default: all 12)")
    parser.add_argument("--kill-after", type=float, default=None, help="share of the cells saved before a node is killed (default 0.5)")
    parser.add_argument("--local-workers", type=int, default=None, help="processes of the local run compared with (default 2)")
    parser.add_argument("--kill-after-episodes", type=int, default=None, help="with --live: episodes written before a node is killed "
                        "(default half of --episodes)")
    parser.add_argument("--slice", type=float, default=None, dest="slice_s", help="with --live: seconds per step (default: profiled)")
    parser.add_argument("--families", nargs="+", default=None, help="with --live: live task families (default: the fidelity suite's)")
    parser.add_argument("--graceful", action="store_true", help="stop the node with cluster.remove_node (SIGTERM) instead of SIGKILL")
    args = parser.parse_args(argv)
    wrong = [f"--{name.replace('_', '-').replace('slice-s', 'slice')}" for name in (SUITE_ONLY if args.live else LIVE_ONLY)
             if getattr(args, name) is not None]
    if wrong:
        parser.error(f"{', '.join(wrong)}: only for " + ("the paper suite's run (without --live)" if args.live else "--live"))
    nodes = args.nodes if args.nodes is not None else (2 if args.live else 3)
    if nodes < 2:
        parser.error(f"--nodes must be >= 2 (one is killed), got {nodes}")
    try:
        with needs(__name__, "ray"):
            import ray  # noqa: F401
    except ImportError as error:
        parser.error(str(error))
    try:
        return (_main_live if args.live else _main_suite)(args, nodes)
    except ValueError as error:
        parser.error(str(error))


def _main_suite(args: argparse.Namespace, nodes: int) -> int:
    out = args.out or DEFAULT_OUT
    figures = run(out, nodes, rows=args.rows or ROWS, roots=args.roots, episodes=args.episodes, scenarios=args.scenarios,
                  kill_after=0.5 if args.kill_after is None else args.kill_after, hard=not args.graceful,
                  local_workers=2 if args.local_workers is None else args.local_workers)
    comparison = figures["comparison"]
    print(f"{figures['cells']} cells on {nodes} Ray worker nodes; node {figures['killed']['node_id'][:12]} killed "
          f"{'hard' if figures['killed']['hard'] else 'gracefully'} at {figures['killed']['at_s']:.1f} s; "
          f"{figures['jobs_retried']} job(s) ({figures['cells_retried']} cells) retried; Ray run {figures['ray_wall_s']:.1f} s, "
          f"local {figures['local_wall_s']:.1f} s; results {'equal' if comparison['equal'] else 'DIFFERENT'} exactly")
    print(f"wrote {out}")
    return 0 if comparison["equal"] else 1


def _main_live(args: argparse.Namespace, nodes: int) -> int:
    out = args.out or LIVE_OUT
    figures = live(out, nodes, episodes=LIVE_EPISODES if args.episodes is None else args.episodes, kill_after_episodes=args.kill_after_episodes,
                   rows=args.rows, families=args.families, slice_s=args.slice_s, hard=not args.graceful)
    killed = figures["killed"]
    print(f"{figures['cells']} live cells on {nodes} Ray worker nodes; the node of live node {killed['actor']} killed "
          f"{'hard' if killed['hard'] else 'gracefully'} at {killed['at_s']:.1f} s, after {killed['episodes_written_before']} episodes; "
          f"NodeFailure at {figures['failed_wall_s']:.1f} s; resumed in {figures['resumed_wall_s']:.1f} s "
          f"({figures['failed_run']['cells']} cells kept, {figures['resumed_run']['cells']} played); every episode played once: "
          f"{'yes' if figures['played_once'] else 'NO'}; trace replays equal live: {'yes' if figures['trace_equals_live'] else 'NO'}")
    print(f"wrote {out}")
    return 0 if figures["ok"] else 1

if __name__ == "__main__":
    raise SystemExit(main())
