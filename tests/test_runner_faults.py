"""Faults of the benchmark runner and of checkpoint loading: corrupt cell files, interruptions, orphaned
workers, unverified or mislabelled checkpoints."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.cells import EPISODE_STATS, FORMAT, Cell, CellStore, checksum, expected_episodes, run_cell, run_cells

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
MAT_DIR = ROOT / "mara_agents" / "checkpoints" / "mat"
VOLATILE = ("wall_s", "decision_ms")  # timings differ between two computations of one cell


def fake_result(cell: Cell) -> dict:
    """A complete, consistent result of ``cell`` without playing it."""
    episodes = [{name: float(i + 1) for name in EPISODE_STATS} for i in range(expected_episodes(cell))]
    return {"format": FORMAT, "key": cell.key, "cell": cell.fields(), "episodes": episodes,
            "mean": {name: float(np.mean([e[name] for e in episodes])) for name in EPISODE_STATS},
            "feasibility_bound": 1.0, "decision_ms": 0.0, "wall_s": 0.0}


class SleepyRunner:
    """A per-cell runner for worker processes: records its pid (a file ``PID-ROOT`` in ``pid_dir``),
    sleeps ``quick_s`` for roots below ``quick`` and ``slow_s`` for the others, fails on ``fail_root``."""

    def __init__(self, pid_dir: str, quick: int = 0, quick_s: float = 0.05, slow_s: float = 60.0, fail_root: int | None = None) -> None:
        self.pid_dir, self.quick, self.quick_s, self.slow_s, self.fail_root = pid_dir, quick, quick_s, slow_s, fail_root

    def __call__(self, cell: Cell) -> dict:
        Path(self.pid_dir, f"{os.getpid()}-{cell.root}").touch()
        if cell.root == self.fail_root:
            raise RuntimeError(f"cell root {cell.root} failed")
        time.sleep(self.quick_s if cell.root < self.quick else self.slow_s)
        return fake_result(cell)


# --------------------------------------------------------------------------------------------------
# Corrupt cell files


def strip(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in VOLATILE}


def test_no_single_bit_flip_of_a_saved_cell_is_accepted_with_a_changed_value(tmp_path):
    cell = Cell("edf", root=0, episodes=2)
    store = CellStore(tmp_path)
    original = run_cells([cell], store, progress=False)[0]
    assert store.load(cell) == original
    data = store.path(cell).read_bytes()
    positions = range(8 * len(data))  # every single-bit flip of the file (about 10,000)
    accepted = changed = 0
    for bit in positions:
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        store.path(cell).write_bytes(bytes(flipped))
        loaded = store.load(cell)
        if loaded is not None:
            accepted += 1
            changed += loaded != original
    assert len(positions) >= 500 and changed == 0, f"{changed} of {len(positions)} single-bit flips accepted with another value"
    assert accepted <= len(positions) // 20  # only flips that leave the parsed JSON as it was (e.g. 1e-05 -> 1E-05)


def _resave(store: CellStore, cell: Cell, edit) -> None:
    """Edit the saved result and store it again with a valid checksum (a consistent-looking file)."""
    result = json.loads(store.path(cell).read_text())
    edit(result)
    result["checksum"] = checksum(result)
    store.path(cell).write_text(json.dumps(result, sort_keys=True))


def test_truncated_inconsistent_or_unchecksummed_cells_are_rejected(tmp_path):
    cell = Cell("edf", root=1, episodes=3)
    store = CellStore(tmp_path)
    original = run_cells([cell], store, progress=False)[0]
    saved = store.path(cell).read_text()
    assert json.loads(saved)["checksum"] == checksum(json.loads(saved))
    edits = {
        "truncated episode list": lambda r: r.update(episodes=r["episodes"][:2]),
        "a mean that disagrees with the episodes": lambda r: r["mean"].update(completion_rate=r["mean"]["completion_rate"] + 0.002),
        "an episode changed, its mean not": lambda r: r["episodes"][0].update(completed=r["episodes"][0]["completed"] + 1),
        "an episode missing a statistic": lambda r: r["episodes"][0].pop("failed"),
        "another cell's fields": lambda r: r["cell"].update(root=2),
        "an older format": lambda r: r.update(format=FORMAT - 1),
    }
    for name, edit in edits.items():
        store.path(cell).write_text(saved)
        _resave(store, cell, edit)
        assert store.load(cell) is None, name
    store.path(cell).write_text(saved)
    assert store.load(cell) == original
    unchecksummed = json.loads(saved)
    del unchecksummed["checksum"]
    store.path(cell).write_text(json.dumps(unchecksummed))
    assert store.load(cell) is None
    # A stress cell holds one episode whatever its ``episodes`` field says.
    stress = Cell("edf", "stress", "stress", episodes=4)
    stress_store = CellStore(tmp_path / "stress")
    stress_store.save(stress, fake_result(stress))
    assert len(stress_store.load(stress)["episodes"]) == 1


def test_run_cells_recomputes_a_corrupt_cell(tmp_path):
    cell = Cell("edf", root=0, episodes=2)
    store = CellStore(tmp_path)
    original = run_cells([cell], store, progress=False)[0]
    text = store.path(cell).read_text()
    rate = json.dumps(original["mean"]["completion_rate"])
    assert rate in text
    store.path(cell).write_text(text.replace(rate, json.dumps(original["mean"]["completion_rate"] + 0.2)))  # the old silent +0.20
    calls = []
    again = run_cells([cell], store, runner=lambda c: calls.append(c) or run_cell(c), progress=False)[0]
    assert calls == [cell] and strip(again) == strip(original) and strip(store.load(cell)) == strip(original)


def test_an_invalid_computed_result_is_an_error_and_is_not_saved(tmp_path):
    cell = Cell("edf", root=0, episodes=2)
    store = CellStore(tmp_path)

    def truncated(c):
        result = fake_result(c)
        result["episodes"] = result["episodes"][:1]
        return result

    with pytest.raises(ValueError, match="1 episodes, expected 2"):
        run_cells([cell], store, runner=truncated, progress=False)
    assert not store.path(cell).exists()


def test_concurrent_saves_of_one_cell_never_collide(tmp_path):
    cell = Cell("edf", root=0, episodes=1)
    store = CellStore(tmp_path)
    result = fake_result(cell)
    errors = []

    def save_many():
        try:
            for _ in range(200):
                store.save(cell, result)
        except Exception as error:  # noqa: BLE001 - collected for the assertion
            errors.append(error)

    threads = [threading.Thread(target=save_many) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and store.load(cell) == json.loads(json.dumps(result))
    assert [p.name for p in tmp_path.iterdir()] == [store.path(cell).name]  # no temporary file left behind


# --------------------------------------------------------------------------------------------------
# Interruptions and orphaned workers

RUNNER_SCRIPT = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as at a terminal, even where this test's process ignores SIGINT (pytest-xdist's workers)
sys.path.insert(0, {tests!r})
from benchmarks.cells import Cell, CellStore, run_cells
from test_runner_faults import SleepyRunner
cells = [Cell("edf", root=r, episodes=1) for r in range({n})]
try:
    run_cells(cells, CellStore({store!r}), workers=2, runner=SleepyRunner({pids!r}, quick={quick}), progress=False)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def _start_runner(tmp_path: Path, n: int, quick: int) -> tuple[subprocess.Popen, Path, Path]:
    store, pids = tmp_path / "cells", tmp_path / "pids"
    pids.mkdir()
    script = RUNNER_SCRIPT.format(tests=str(TESTS), n=n, store=str(store), pids=str(pids), quick=quick)
    process = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return process, store, pids


def _wait_for(condition, timeout: float, what: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the runner exited ({process.returncode}) before {what}: {process.stderr.read()}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _roots_started(pids: Path) -> set[int]:
    return {int(p.name.split("-")[1]) for p in pids.iterdir()}


def _worker_pids(pids: Path) -> set[int]:
    return {int(p.name.split("-")[0]) for p in pids.iterdir()}


def _children(pid: int) -> set[int]:
    """Live processes whose parent is ``pid`` (from /proc)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.add(int(entry.name))
    return out


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped is not)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: set[int], timeout: float) -> set[int]:
    deadline = time.monotonic() + timeout
    while (alive := {p for p in pids if _running(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc (Linux)")


@needs_proc
def test_sigint_stops_the_runner_and_its_workers_at_once_and_keeps_finished_cells(tmp_path):
    process, store_dir, pids = _start_runner(tmp_path, n=6, quick=2)
    cells = [Cell("edf", root=r, episodes=1) for r in range(6)]
    store = CellStore(store_dir)
    try:
        _wait_for(lambda: all(store.load(c) is not None for c in cells[:2]), 60, "the quick cells", process)
        _wait_for(lambda: {2, 3} <= _roots_started(pids), 30, "the slow cells to start", process)
        workers = _children(process.pid) | _worker_pids(pids)
        assert len(_worker_pids(pids)) == 2
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        stop_s = time.monotonic() - started
        assert process.poll() is not None, "the runner did not stop within 30 s of SIGINT"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    out, err = process.communicate()
    print(f"runner stopped {stop_s:.2f} s after SIGINT")
    assert process.returncode == 130 and "interrupted" in out, err
    assert stop_s < 5.0, f"the runner took {stop_s:.1f} s to stop after SIGINT"
    assert all(store.load(c) is not None for c in cells[:2]), "cells the workers had finished were dropped"
    assert all(store.load(c) is None for c in cells[2:])
    assert _wait_gone(workers, 1.0) == set(), "worker processes outlived the interrupted runner"


@needs_proc
def _kill_and_collect(process: subprocess.Popen, workers: set[int]) -> set[int]:
    """SIGKILL the runner, wait up to 3 s for ``workers`` to go, kill any left over; returns the ones that outlived it."""
    process.kill()
    process.wait()
    left = _wait_gone(workers, 3.0)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def test_workers_die_with_a_killed_runner(tmp_path):
    process, _, pids = _start_runner(tmp_path, n=4, quick=0)
    workers: set[int] = set()
    try:
        _wait_for(lambda: len(_worker_pids(pids)) == 2, 60, "both workers to start a cell", process)
        workers = _worker_pids(pids) | _children(process.pid)
    finally:
        left = _kill_and_collect(process, workers)  # SIGKILL: the runner cleans up nothing
    assert left == set(), f"workers {sorted(left)} outlived the killed runner"


WATCHDOG_SCRIPT = """
import multiprocessing, os, sys, time
sys.platform = "portable"  # no prctl: only the watchdog thread
from benchmarks import cells

def worker(runner):
    cells._worker_start(runner)
    print(os.getpid(), flush=True)
    time.sleep(60)

child = multiprocessing.get_context("fork").Process(target=worker, args=(os.getpid(),))
child.start()
time.sleep(60)
"""


@needs_proc
def test_the_portable_watchdog_alone_stops_an_orphaned_worker():
    process = subprocess.Popen([sys.executable, "-c", WATCHDOG_SCRIPT], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    started: set[int] = set()
    try:
        worker = int(process.stdout.readline())
        started.add(worker)
        assert _running(worker)
    finally:
        left = _kill_and_collect(process, started)
    assert left == set(), "the watchdog did not stop the orphaned worker"


def test_a_failing_job_stops_the_pool_at_once_and_keeps_finished_cells(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    cells = [Cell("edf", root=r, episodes=1) for r in range(4)]
    store = CellStore(tmp_path / "cells")
    runner = SleepyRunner(str(pids), quick=1, quick_s=0.0, slow_s=30.0, fail_root=2)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="root 2 failed"):
        run_cells(cells, store, workers=2, runner=runner, progress=False)
    assert time.monotonic() - started < 10.0  # not the 30 s the running slow cell would take
    assert store.load(cells[0]) is not None and all(store.load(c) is None for c in cells[1:])


# --------------------------------------------------------------------------------------------------
# Checkpoints


def _copy_checkpoint(source: str, target: Path, manifest: bool = True) -> Path:
    shutil.copyfile(MAT_DIR / f"{source}.pt", target)
    if manifest:
        shutil.copyfile(MAT_DIR / f"{source}.json", target.with_suffix(".json"))
    return target


def test_shipped_checkpoints_load_with_their_expected_variant_and_seed():
    from mara_agents.mat.agent import MATAgent

    from benchmarks.agents import LEARNED_VARIANT

    for path in sorted(MAT_DIR.glob("*.pt")):
        row, seed = path.stem.rsplit("-seed", 1)
        variant = LEARNED_VARIANT[row]  # a teacher-free row (mara-pure) is its variant trained without a teacher
        agent = MATAgent.load(path, expect={"variant": variant, "seed": int(seed)})
        assert agent.manifest["variant"] == variant and agent.manifest["model_config"] == agent.config.to_dict()
        assert (agent.manifest.get("teacher") or None) is None if row.endswith("-pure") else agent.manifest.get("teacher")


def test_a_checkpoint_without_its_manifest_is_refused(tmp_path):
    from mara_agents.mat.agent import MATAgent, load_policy

    path = _copy_checkpoint("mara-seed0", tmp_path / "mara-seed0.pt", manifest=False)
    for load in (MATAgent.load, load_policy):
        with pytest.raises(ValueError, match=r"manifest .*mara-seed0\.json.* is missing"):
            load(path)
    path.with_suffix(".json").write_text("[1, 2")
    with pytest.raises(ValueError, match="not a JSON object"):
        MATAgent.load(path)


def test_another_variants_checkpoint_under_a_rows_name_is_refused(tmp_path):
    from mara_agents.mat.agent import MATAgent

    path = _copy_checkpoint("mara-wls-seed0", tmp_path / "mara-seed0.pt")  # weights and manifest copied over
    assert MATAgent.load(path).manifest["variant"] == "mara-wls"  # what it is, without expectations
    with pytest.raises(ValueError, match="variant is 'mara-wls', expected 'mara'"):
        MATAgent.load(path, expect={"variant": "mara", "seed": 0})
    other_seed = _copy_checkpoint("mara-seed1", tmp_path / "seed.pt")
    with pytest.raises(ValueError, match="seed is 1, expected 0"):
        MATAgent.load(other_seed, expect={"variant": "mara", "seed": 0})
    with pytest.raises(ValueError, match="manifest has no 'trainer'"):
        MATAgent.load(_copy_checkpoint("mara-seed0", tmp_path / "r.pt"), expect={"variant": "mara", "trainer": "ppo"})


def test_a_manifest_config_other_than_the_checkpoints_is_refused(tmp_path):
    from mara_agents.mat.agent import MATAgent

    path = _copy_checkpoint("mara-seed0", tmp_path / "mara-seed0.pt")
    manifest = json.loads(path.with_suffix(".json").read_text())
    manifest["model_config"] = {**manifest["model_config"], "predictor": "wls"}  # the sha256 still matches the weights
    path.with_suffix(".json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="model_config"):
        MATAgent.load(path, expect={"variant": "mara", "seed": 0})


def test_a_tampered_checkpoint_is_still_caught(tmp_path):
    from mara_agents.mat.agent import MATAgent

    path = _copy_checkpoint("mara-seed0", tmp_path / "mara-seed0.pt")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum mismatch"):
        MATAgent.load(path, expect={"variant": "mara", "seed": 0})


def test_other_loaders_refuse_a_missing_manifest(tmp_path):
    from mara_agents.predictors.flow_matching import DEFAULT_CHECKPOINT, load_model

    shutil.copyfile(DEFAULT_CHECKPOINT, tmp_path / "flow_matching.pt")
    with pytest.raises(ValueError, match="manifest .* is missing"):
        load_model(tmp_path / "flow_matching.pt")
    pytest.importorskip("tianshou", reason="Tianshou is in the 'agents' extra")
    from mara_agents.integrations import tianshou_ppo

    shutil.copyfile(tianshou_ppo.SHIPPED_CHECKPOINT, tmp_path / "policy.pt")
    with pytest.raises(ValueError, match="manifest .* is missing"):
        tianshou_ppo.load_agent(tmp_path)
    shutil.copyfile(tianshou_ppo.SHIPPED_CHECKPOINT.with_suffix(".json"), tmp_path / "policy.json")
    assert isinstance(tianshou_ppo.load_agent(tmp_path), tianshou_ppo.TianshouPPOAgent)
    assert hashlib.sha256((tmp_path / "policy.pt").read_bytes()).hexdigest() == json.loads((tmp_path / "policy.json").read_text())["sha256"]


def test_a_benchmark_row_refuses_another_variants_checkpoint_under_its_name(tmp_path, monkeypatch):
    """`mara-wls-seed0.pt` copied over `mara-seed0.pt` (with its manifest) was reported as "mara"."""
    from benchmarks import agents

    for suffix in (".pt", ".json"):
        shutil.copy(agents.checkpoint_path("mara-wls", 0).with_suffix(suffix), tmp_path / f"mara-seed0{suffix}")
    monkeypatch.setattr(agents, "CHECKPOINT_DIR", tmp_path)
    with pytest.raises(ValueError, match="variant"):
        agents.make_agent("mara", 0)
    (tmp_path / "mara-seed0.json").unlink()
    with pytest.raises(ValueError, match="manifest"):
        agents.make_agent("mara", 0)
