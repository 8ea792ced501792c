"""Node loss on a real multi-node Ray cluster (issue 49, deliverable 6), at toy size.

One ``ray.cluster_utils.Cluster`` for the module (:func:`benchmarks.ray_cluster.cluster`: a head with no CPU and
two worker nodes of one CPU each; a killed node is replaced before the next test): (a) the paper suite's cells
through the Ray backend with a worker node killed while a job runs on it equal a local run's exactly; (b) a
live fidelity run on Ray actors whose node is killed raises NodeFailure, and resuming plays every episode once;
and the Ray backend's retries are bounded and never retry a cell's own error. ``python -m benchmarks.ray_cluster``
is the full-size run of (a), ``python -m benchmarks.ray_cluster --live`` of (b) (the same functions:
:func:`~benchmarks.ray_cluster.run_on`, :func:`~benchmarks.ray_cluster.run_live`; docs/benchmarks.md).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import warnings
from collections import Counter
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")

from benchmarks import ray_cluster  # noqa: E402
from conftest import small_fidelity  # noqa: E402
from benchmarks.cells import Cell, CellStore, NodeLostWarning, run_cells  # noqa: E402

pytestmark = pytest.mark.faults
WORKERS = 2


@pytest.fixture(scope="module")
def started():
    ray.shutdown()  # a connection an earlier test left open (a no-op without one)
    with ray_cluster.cluster(WORKERS) as cluster:
        yield cluster


@pytest.fixture
def cluster(started):
    """The module's cluster with :data:`WORKERS` live worker nodes (a node killed by an earlier test replaced),
    and no Ray connection left open in this process afterwards."""
    while len(started.worker_nodes) < WORKERS:
        started.add_node(num_cpus=1)
    started.wait_for_nodes()
    try:
        yield started
    finally:
        ray.shutdown()


def test_the_paper_suites_cells_survive_a_killed_node_and_equal_a_local_run(cluster, tmp_path, monkeypatch):
    saves = Counter()
    save = CellStore.save

    def counted(store, cell, result):
        saves[(store.directory.parent.name, cell.key)] += 1
        save(store, cell, result)

    monkeypatch.setattr(CellStore, "save", counted)
    figures = ray_cluster.run_on(cluster, tmp_path / "run.json", rows=("edf",), roots=2, episodes=1, kill_after=0.0, hard=False, local_workers=1)
    assert json.loads((tmp_path / "run.json").read_text()) == figures
    assert figures["cells"] == 24 and figures["ray_nodes"]["workers"] == WORKERS  # 12 scenarios x 2 roots, jobs of 2 roots
    assert figures["killed"]["node_id"] not in {node.node_id for node in cluster.worker_nodes}  # a worker node is gone
    assert figures["jobs_retried"] >= 1 and figures["cells_retried"] == 2 * figures["jobs_retried"]
    assert all("NodeDiedError" in text or "WorkerCrashedError" in text for text in figures["retries"])
    assert figures["comparison"] == {"cells": 24, "differing_cells": [], "csv_equal": True, "tables_equal": True, "equal": True}
    # nothing lost, nothing counted twice: every cell saved exactly once by each run, the retried ones included
    assert sorted(saves.values()) == [1] * 48 and {run for run, _ in saves} == {"ray", "local"}
    assert set(figures["retried_cells"]) <= {key for run, key in saves if run == "ray"}
    assert "--backend ray --address " + cluster.address in figures["ray_command"]


# Cells whose runner fails on the worker: these functions travel by value (the workers cannot import this file).
def _note(path: str) -> None:
    with open(path, "a") as handle:
        handle.write("x")


def _raises(path: str, cell: Cell) -> dict:
    _note(path)
    raise ValueError(f"a bad cell {cell.root}")


def _crashes(path: str, cell: Cell) -> dict:
    _note(path)
    os._exit(1)


def test_a_cells_own_error_is_never_retried_and_a_crashing_worker_is_retried_a_bounded_number_of_times(cluster, tmp_path, monkeypatch):
    import functools
    import sys

    from benchmarks import cells

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        attempts = tmp_path / "raised"
        with pytest.raises(ValueError, match="a bad cell 0"):
            run_cells([Cell("edf", root=0)], CellStore(tmp_path / "a"), backend="ray", address=cluster.address, progress=False,
                      runner=functools.partial(_raises, str(attempts)))
        assert attempts.read_text() == "x"  # once: a cell's own error is not retried
        monkeypatch.setattr(cells, "NODE_RETRIES", 1)
        attempts = tmp_path / "crashed"
        with warnings.catch_warnings(record=True) as caught, pytest.raises(RuntimeError, match=r"lost its Ray node or worker 2 times \(last: WorkerCrashedError\)"):
            warnings.simplefilter("always", NodeLostWarning)
            run_cells([Cell("edf", root=0)], CellStore(tmp_path / "b"), backend="ray", address=cluster.address, progress=False,
                      runner=functools.partial(_crashes, str(attempts)))
        assert attempts.read_text() == "xx"  # the first try and one retry, then the run fails
        assert [str(w.message).endswith("(retry 1 of 1)") for w in caught if issubclass(w.category, NodeLostWarning)] == [True]
        assert not list((tmp_path / "a").glob("*.json")) and not list((tmp_path / "b").glob("*.json"))
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_the_ray_backend_refuses_an_address_other_than_the_running_clusters(cluster, tmp_path):
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    with pytest.raises(ValueError, match=r"address='10\.9\.8\.7:6379': this process is already connected to the Ray cluster at"):
        run_cells([Cell("edf", root=0, episodes=1)], CellStore(tmp_path), backend="ray", address="10.9.8.7:6379", progress=False)


def test_a_live_fidelity_run_whose_node_is_killed_raises_node_failure_and_resumes_playing_every_episode_once(cluster, tmp_path, monkeypatch):
    fidelity = small_fidelity(monkeypatch)
    monkeypatch.setattr(fidelity, "SPREAD_DRAWS", 1)  # the replays are not what this test is about
    banks, record = {}, fidelity.record_bank

    def recorded_once(name, runs, **options):  # the same offline recording for the resumed run (deterministic; saves its time)
        key = repr((name, runs, options))
        if key not in banks:
            banks[key] = record(name, runs, **options)
        return banks[key]

    monkeypatch.setattr(fidelity, "record_bank", recorded_once)
    written = Counter()  # counted here too, independently of the run's own count
    write = fidelity.write_atomic_bytes

    def counted(path, data):
        written[Path(path).name] += 1
        return write(path, data)

    monkeypatch.setattr(fidelity, "write_atomic_bytes", counted)
    names = [f"edf__{e}.json.gz" for e in range(3)]
    # the node of one of the two actors dies once episode 0 is written, while episode 1 or 2 plays (0.1 s slices:
    # about 3 s of play left, which the kill takes a fraction of); the run raises, a node joins, the run resumes
    figures = ray_cluster.run_live(cluster, tmp_path / "live.json", episodes=3, kill_after_episodes=1, rows=("edf",), slice_s=0.1, hard=False)
    assert json.loads((tmp_path / "live.json").read_text()) == figures
    failure = re.fullmatch(r"node ([01]): its Ray actor died during \w+; .*", figures["node_failure"], re.S)
    assert failure and figures["killed"]["actor"] == int(failure.group(1)) and figures["killed"]["episodes_written_before"] >= 1
    assert figures["killed"]["node_id"] not in {node.node_id for node in cluster.worker_nodes} and len(cluster.worker_nodes) == WORKERS
    kept = figures["failed_run"]["episodes"]["edf"]
    assert kept in ([0], [0, 1]) and figures["resumed_run"]["episodes"]["edf"] == [e for e in range(3) if e not in kept]
    assert written == dict.fromkeys(names, 1)  # every episode played (and written) once: the kept ones read back
    assert figures["played_once"] and figures["trace_equals_live"] and figures["live_equals_cells"] and figures["ok"]
    played = [json.loads(gzip.decompress((tmp_path / "live" / "fidelity" / "cells" / name).read_bytes())) for name in names]
    assert [cell["episode"] for cell in played] == [0, 1, 2]
    assert figures["per_episode"]["edf"]["live"] == [cell["completion_rate"] for cell in played] == figures["per_episode"]["edf"]["trace"]
    assert figures["completion"]["edf"]["trace_equal"] == 3 and figures["slice_s"] == 0.1
    assert "| every episode played once | yes: each of the 3 cells written exactly once over the two parts |" in ray_cluster.table_live(figures)


def test_the_live_runs_arguments_are_checked_before_a_cluster_starts(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"kill_after_episodes must be an int in \[1, episodes - 1 = 2\].*got 3"):
        ray_cluster.live(tmp_path / "a.json", 2, episodes=3, kill_after_episodes=3, rows=("edf",))
    with pytest.raises(ValueError, match=r"episodes \(--episodes\) must be an int in \[2, "):
        ray_cluster.live(tmp_path / "a.json", 2, episodes=1, rows=("edf",))
    with pytest.raises(ValueError, match="out: .* is a folder"):
        ray_cluster.live(tmp_path, 2, episodes=3, rows=("edf",))
    (tmp_path / "a" / "fidelity").mkdir(parents=True)
    (tmp_path / "a" / "fidelity" / "settings.json").write_text("{}")
    with pytest.raises(ValueError, match="already holds a live run"):
        ray_cluster.live(tmp_path / "a.json", 2, episodes=3, rows=("edf",))
    with pytest.raises(ValueError, match="rows must be distinct"):
        ray_cluster.live(tmp_path / "b.json", 2, episodes=3, rows=("edf", "edf"))
    for argv, message in ((["--live", "--roots", "2"], "--roots: only for the paper suite's run"),
                          (["--slice", "0.1"], "--slice: only for --live"),
                          (["--live", "--nodes", "1"], "--nodes must be >= 2"),
                          (["--live", "--episodes", "3", "--kill-after-episodes", "0", "--rows", "edf"], "kill_after_episodes must be")):
        with pytest.raises(SystemExit) as exit:
            ray_cluster.main(argv)
        assert exit.value.code == 2 and message in capsys.readouterr().err


def test_jobs_wait_with_a_warning_while_no_worker_node_is_left_and_finish_when_one_joins(cluster, tmp_path, monkeypatch):
    import threading
    import time

    from benchmarks import cells

    monkeypatch.setattr(cells, "STALL_SECONDS", 0.2)
    for node in list(cluster.worker_nodes):
        cluster.remove_node(node)
    out = []
    with warnings.catch_warnings(record=True) as caught:  # records the runner thread's warnings too
        warnings.simplefilter("always", NodeLostWarning)
        runner = threading.Thread(target=lambda: out.extend(run_cells([Cell("edf", root=0, episodes=1)], CellStore(tmp_path / "ray"), backend="ray",
                                                                      address=cluster.address, progress=False)), daemon=True)
        runner.start()
        deadline = time.monotonic() + 30
        while not caught and runner.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        notes = [str(w.message) for w in caught]
        cluster.add_node(num_cpus=1)  # a node joins (Cluster.add_node works in the main thread only)
        runner.join(60)
    assert not runner.is_alive() and len(out) == 1
    assert notes == ["the Ray cluster has no CPU left (its worker nodes were lost): 1 job(s) wait for a node to join"]
    [local] = run_cells([Cell("edf", root=0, episodes=1)], CellStore(tmp_path / "local"), progress=False)
    assert ray_cluster.without_timings(out[0]) == ray_cluster.without_timings(local)
