"""Issue 49's fault campaign on the live source (core_env.live): a refused or interrupted step never leaves a
task elsewhere than the engine believes, an answer never reaches another order, steps and close() are
bounded, the user task contract is checked, and the live tutorial runs on a machine whose cores are busy.

The fault tasks below are "module:factory" tasks of this module: worker processes import it (spawned
workers get this process's sys.path)."""

from __future__ import annotations

import _thread
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from core_env.config import EnvConfig
from core_env.live import LiveSource, TaskSpec, record_bank
from core_env.live.toy import ToyRegressionTask
from core_env.live.workers import NodeFailure, make_nodes, max_nodes
from core_env.sim import Simulator
from core_env.workload import Workload

pytestmark = pytest.mark.faults

TOY, STEPS = "core_env.live.toy:ToyRegressionTask", 40
ROOT = Path(__file__).resolve().parent.parent
RELEASE = threading.Event()  # lets an in-process HangTask go (a thread cannot be killed)


class NaNTask(ToyRegressionTask):
    """The toy run, but its 5th batch's loss is NaN (a user's task that diverged)."""

    def __init__(self, run_index: int) -> None:
        super().__init__(run_index, STEPS)

    def train(self, batches: int) -> np.ndarray:
        first, out = self.step, super().train(batches)
        out[(np.arange(first, first + len(out)) == 4)] = np.nan
        return out


class CtrlCTask(ToyRegressionTask):
    """The toy run, but its 2nd batch takes a second, and run 0 presses Ctrl-C then (SIGINT to the main process: from a
    worker process its parent, in process its own), so the interrupt always lands mid-step, as in a notebook."""

    def __init__(self, run_index: int) -> None:
        super().__init__(run_index, STEPS)
        self.run_index = run_index

    def train(self, batches: int) -> np.ndarray:
        if self.step <= 1 < self.step + batches:
            if self.run_index == 0:
                os.kill(os.getppid() if multiprocessing.parent_process() is not None else os.getpid(), signal.SIGINT)
            time.sleep(1.0)
        return super().train(batches)


class HangTask(ToyRegressionTask):
    """A task that blocks inside train from its batch ``FREE`` on (until RELEASE, at most a minute)."""

    FREE = 1

    def __init__(self, run_index: int) -> None:
        super().__init__(run_index, STEPS)

    def train(self, batches: int) -> np.ndarray:
        if self.step + batches > self.FREE:
            RELEASE.wait(60.0)
        return super().train(batches)


class HangAtOnceTask(HangTask):
    """Blocks from its first batch: under a wall-clock slice a busy machine may give a step a single batch."""

    FREE = 0


class ExtraLossesTask(ToyRegressionTask):
    """Breaks the contract: train(n) returns n + 3 losses."""

    def train(self, batches: int) -> np.ndarray:
        return np.concatenate([super().train(batches), np.ones(3)])


class EmptyTask(ToyRegressionTask):
    """Breaks the contract: train(n) returns no loss."""

    def train(self, batches: int) -> np.ndarray:
        return np.zeros(0)


def _bank():
    return record_bank("toy", [TaskSpec(TOY, i) for i in range(4)], steps=STEPS)


def _sim(bank, batches: float = 3.0) -> Simulator:
    """Eight toy tasks on two nodes, ``batches`` per node-step, targets no run reaches (they stay)."""
    arrival = np.array([0, 0, 0, 1, 2, 3, 4, 5])
    curve = np.arange(8) % len(bank)
    target = np.full(8, 1e-9)
    demand = np.array([bank.demand(int(c), float(t), batches) for c, t in zip(curve, target)])
    sim = Simulator(EnvConfig(n_nodes=2, n_slots=4, arrival_steps=6, max_cycles=30))
    sim.reset([Workload(bank, arrival, arrival + 8, target, np.full(8, batches), curve, demand, 6)])
    return sim


def _specs(family: str, which: tuple[int, ...]) -> list[TaskSpec]:
    """Runs 0-3: ``family`` for the runs in ``which``, the toy run otherwise."""
    return [TaskSpec(f"test_live_faults:{family}" if i in which else TOY, i) for i in range(4)]


BOTH = np.array([[1, 2]])  # node 0 serves slot 0 (task 0, run 0), node 1 slot 1 (task 1, run 1)


@pytest.fixture
def ctrl_c():
    """Ctrl-C raises KeyboardInterrupt in this process for the test, even where SIGINT was ignored (a background job)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _interrupt_after(seconds: float) -> threading.Timer:
    """Ctrl-C (a KeyboardInterrupt in the main thread, as in a notebook) after ``seconds``."""
    timer = threading.Timer(seconds, _thread.interrupt_main)
    timer.start()
    return timer


# --------------------------------------------------------------------------------------------------
# 1. Integrity: a refused or interrupted step


def test_a_nan_loss_refuses_the_step_and_the_source_takes_no_further_one():
    bank = _bank()
    sim, source = _sim(bank), LiveSource(_specs("NaNTask", (0,)), steps=STEPS)
    sim.step(BOTH, source=source)  # batches 0-2
    kept, t, progress = list(source.records), int(sim.t[0]), sim.progress.copy()
    with pytest.raises(ValueError, match=r"task 0 of env 0 \(run 'test_live_faults:NaNTask' #0\) reported a non-finite loss "
                                         r"\(nan at batch 2 of 3\) on node 0: .* this source takes no further step"):
        sim.step(BOTH, source=source)  # batches 3-5: the 5th is NaN
    assert int(sim.t[0]) == t and np.array_equal(sim.progress, progress)  # the engine undid it
    assert source.records == kept  # only the kept step's services
    with pytest.raises(NodeFailure, match=r"this live source failed before \(task 0 of env 0 .* non-finite loss"):
        sim.step(BOTH, source=source)  # the retry: before the fix, accepted with the task 3 batches ahead of the engine
    trained = {r["task"]: 0 for r in source.records}
    for r in source.records:
        trained[r["task"]] += r["trained"]
    assert trained == {0: 3, 1: 3} and sim.progress[0, :2].tolist() == [3.0, 3.0]  # records and engine agree
    source.close()


class _RefusesAfter:
    """Wraps a source and raises after it reported (as Ctrl-C landing after the source returned would)."""

    def __init__(self, inner):
        self.inner, self.armed = inner, False

    def report(self, sim, served):
        reports = self.inner.report(sim, served)
        if self.armed:
            raise KeyboardInterrupt
        return reports


def test_a_step_the_engine_undid_after_the_source_served_it_leaves_no_record_and_fails_the_source():
    bank = _bank()
    sim, source = _sim(bank), LiveSource(_specs("", ()), steps=STEPS)
    wrapped = _RefusesAfter(source)
    sim.step(BOTH, source=wrapped)
    kept = list(source.records)
    wrapped.armed = True
    with pytest.raises(KeyboardInterrupt):
        sim.step(BOTH, source=wrapped)
    assert len(source.records) == len(kept) + 2  # the source could not know yet
    with pytest.raises(NodeFailure, match=r"the engine undid step t = 1 of env 0 after this source had served it"):
        sim.step(BOTH, source=source)
    assert source.records == kept  # the undone step's services are gone
    with pytest.raises(NodeFailure, match="this live source failed before"):
        sim.step(BOTH, source=source)
    source.close()


def test_ctrl_c_mid_step_on_process_nodes_never_credits_an_answer_to_another_task(ctrl_c):
    bank = _bank()
    nodes = make_nodes(2, "process")
    try:
        sim, source = _sim(bank, batches=1.0), LiveSource(_specs("CtrlCTask", (0, 1)), steps=STEPS, nodes=nodes)
        sim.step(BOTH, source=source)  # batch 0 of tasks 0 and 1
        t = int(sim.t[0])
        with pytest.raises(KeyboardInterrupt):
            sim.step(BOTH, source=source)  # batch 1: Ctrl-C while both nodes train for a second, the answers unread
        assert int(sim.t[0]) == t
        with pytest.raises(NodeFailure, match=r"this live source failed before \(KeyboardInterrupt mid-step\)"):
            sim.step(BOTH, source=source)
        # a new source (a new episode) on the same pool: the old answers arrive first and must reach no one
        fresh, other = _sim(bank, batches=1.0), LiveSource(_specs("", ()), steps=STEPS, nodes=nodes)
        fresh.step(BOTH, source=other)
        # each task's own first batch; before the fix, the interrupted step's answers (batch 1 of the old tasks)
        assert [r["losses"] for r in other.records] == [bank.curve(0)[:1].tolist(), bank.curve(1)[:1].tolist()]
        handle = nodes.submit(0, "pid")
        assert isinstance(nodes.result(0, nodes.submit(0, "pid")), int)  # a later order's answer: the earlier is discarded
        with pytest.raises(ValueError, match=r"node 0: the answer to order \d+ \(pid\) was read or discarded before"):
            nodes.result(0, handle)
    finally:
        nodes.close()


def test_ctrl_c_mid_step_on_in_process_nodes_fails_the_source_and_the_pool(ctrl_c):
    bank = _bank()
    sim, source = _sim(bank, batches=1.0), LiveSource(_specs("CtrlCTask", (0,)), steps=STEPS)
    sim.step(BOTH, source=source)
    with pytest.raises(KeyboardInterrupt):
        sim.step(BOTH, source=source)  # task 0's batch 1: Ctrl-C while it trains for a second, in a thread that cannot be stopped
    assert int(sim.t[0]) == 1 and len(source.records) == 2
    assert source.nodes.failed == "node 0: interrupted during serve (it runs on in its thread)"
    with pytest.raises(NodeFailure, match=r"this live source failed before \(KeyboardInterrupt mid-step\)"):
        sim.step(BOTH, source=source)
    source.close()


def test_a_worker_found_dead_at_submit_fails_the_pool_and_a_new_source_on_it_gets_no_old_answer():
    bank = _bank()
    nodes = make_nodes(2, "process")
    try:
        sim, source = _sim(bank), LiveSource(_specs("", ()), steps=STEPS, nodes=nodes)
        sim.step(BOTH, source=source)
        os.kill(nodes.processes[1].pid, signal.SIGKILL)
        nodes.processes[1].join(10)
        with pytest.raises(NodeFailure, match=r"node 1: its worker process \(pid \d+\) died during serve"):
            sim.step(BOTH, source=source)  # node 0's order went out (its answer unread); node 1's pipe is broken
        assert nodes.failed is not None and "node 1" in nodes.failed
        fresh, other = _sim(bank), LiveSource(_specs("", ()), steps=STEPS, nodes=nodes)
        with pytest.raises(NodeFailure, match=r"this pool failed before \(node 1: its worker process"):
            fresh.step(BOTH, source=other)
        assert other.records == [] and int(fresh.t[0]) == 0
    finally:
        nodes.close()


# --------------------------------------------------------------------------------------------------
# 2. Bounded: a step's time limit, close(), pool sizes


def test_a_task_that_blocks_in_train_on_a_process_node_fails_the_step_naming_node_and_task():
    bank = _bank()
    nodes = make_nodes(2, "process")
    try:
        sim = _sim(bank)
        source = LiveSource(_specs("HangAtOnceTask", (1,)), steps=STEPS, nodes=nodes, slice_s=0.1, step_timeout_s=1.5)
        began = time.perf_counter()
        with pytest.raises(NodeFailure, match=r"node 1: no answer within the step's time limit \(step_timeout_s = 1.5 s\) while serving "
                                              r"task 1 of env 0 \(run 'test_live_faults:HangAtOnceTask' #1\)"):
            sim.step(BOTH, source=source)
        assert time.perf_counter() - began < 30 and int(sim.t[0]) == 0 and source.records == []
        assert nodes.failed is not None
        began = time.perf_counter()
        source.close()  # node 1 is still in train: killed after a short grace
        assert time.perf_counter() - began < 30 and not any(p.is_alive() for p in nodes.processes)
    finally:
        nodes.close()


def test_a_task_that_blocks_in_train_in_process_fails_the_step_and_its_thread_is_left_behind():
    bank = _bank()
    RELEASE.clear()
    try:
        sim, source = _sim(bank), LiveSource(_specs("HangTask", (1,)), steps=STEPS, step_timeout_s=1.0)
        began = time.perf_counter()
        with pytest.raises(NodeFailure, match=r"node 1: no answer within the step's time limit \(step_timeout_s = 1 s\) while serving "
                                              r"task 1 of env 0 \(run 'test_live_faults:HangTask' #1\)"):
            sim.step(BOTH, source=source)
        assert time.perf_counter() - began < 30 and int(sim.t[0]) == 0
        with pytest.raises(NodeFailure, match=r"this live source failed before \(node 1: no answer within"):
            sim.step(BOTH, source=source)
        with pytest.raises(NodeFailure, match="this pool failed before"):
            source.nodes.submit(0, "pid")
        source.close()
    finally:
        RELEASE.set()  # the thread that cannot be killed returns


def test_close_after_ctrl_c_on_a_hung_step_is_bounded(ctrl_c, monkeypatch):
    import core_env.live.source

    monkeypatch.setattr(core_env.live.source, "CLOSE_TIMEOUT_S", 1.0)  # (5 s by default)
    bank = _bank()
    nodes = make_nodes(2, "process")
    try:
        sim, source = _sim(bank, batches=1.0), LiveSource(_specs("HangTask", (0, 1)), steps=STEPS, nodes=nodes)  # the default limit: 60 s
        assert source.step_timeout_s == 60.0
        sim.step(BOTH, source=source)  # batch 0: the tasks live on the nodes
        timer = _interrupt_after(0.5)
        try:
            with pytest.raises(KeyboardInterrupt):
                sim.step(BOTH, source=source)  # batch 1 blocks on both nodes
        finally:
            timer.cancel()
        began = time.perf_counter()
        source.close(nodes=False)  # drops its tasks, behind the blocked train: before, it waited for the answer (a minute here)
        assert time.perf_counter() - began < 30 and nodes.failed.startswith("node 0: its worker gave no answer to drop within")
        began = time.perf_counter()
        nodes.close()  # the workers are still in train: killed after a short grace
        assert time.perf_counter() - began < 30 and not any(p.is_alive() for p in nodes.processes)
    finally:
        nodes.close()


def test_pool_sizes_and_step_limits_are_bounded_with_clear_errors():
    for backend in ("inprocess", "process", "ray"):
        with pytest.raises(ValueError, match=rf"n_nodes=1000000000: a '{backend}' pool has at most {max_nodes(backend)} workers"):
            make_nodes(10**9, backend)
    assert max_nodes("process") == min(1024, 8 * (os.cpu_count() or 1))
    with pytest.raises(ValueError, match=r"threads must be an int in \[1, 256\], got 1000000"):
        make_nodes(2, "inprocess", threads=10**6)
    for bad in (0, -1, float("nan"), 10**6, True, "5"):
        with pytest.raises(ValueError, match=r"step_timeout_s must be None \(the default limit\) or seconds in \(0, 86400\]"):
            LiveSource([TaskSpec(TOY, 0)], step_timeout_s=bad)
    nodes = make_nodes(1, "inprocess")
    assert LiveSource([TaskSpec(TOY, 0)], nodes=nodes, slice_s=30.0).step_timeout_s == 300.0  # 10 slices when longer than 60 s
    nodes.close()
    with pytest.raises(NodeFailure, match="this pool is closed"):
        nodes.submit(0, "pid")


# --------------------------------------------------------------------------------------------------
# 3. The user task contract


def test_a_task_returning_another_number_of_losses_is_refused_naming_it():
    bank = _bank()
    for family, got, offline in (("ExtraLossesTask", 6, 8), ("EmptyTask", 0, 0)):
        sim, source = _sim(bank), LiveSource(_specs(family, (1,)), steps=STEPS)
        with pytest.raises(NodeFailure, match=rf"node 1: serve failed on its worker: ValueError: task 'test_live_faults:{family}' #1: "
                                              rf"train\(3\) returned {got} losses \(shape \({got},\)\), expected 3: one per batch"):
            sim.step(BOTH, source=source)  # before: accepted (records inflated) / a raw KeyError
        assert source.records == [] and int(sim.t[0]) == 0
        source.close()
        with pytest.raises(ValueError, match=rf"task 'test_live_faults:{family}' #0: train\(5\) returned {offline} losses"):
            record_bank("bad", [TaskSpec(f"test_live_faults:{family}", 0)], steps=5)


def test_task_specs_and_record_bank_arguments_are_checked():
    with pytest.raises(TypeError, match=r"TaskSpec.family must be a str .*, got int 123"):
        TaskSpec(123, 0)
    with pytest.raises(TypeError, match=r"TaskSpec.run_index must be an int, got float 1.5"):
        TaskSpec(TOY, 1.5)
    with pytest.raises(TypeError, match=r"TaskSpec.run_index must be an int, got bool True"):
        TaskSpec(TOY, True)
    with pytest.raises(ValueError, match=r"TaskSpec.family must name a family"):
        TaskSpec("", 0)
    assert TaskSpec(TOY, np.int64(2)) == TaskSpec(TOY, 2) and type(TaskSpec(TOY, np.int64(2)).run_index) is int
    for steps in (2.5, 0, True, "3"):
        with pytest.raises(ValueError, match=rf"steps must be None \(each run's own length\) or an int >= 1, got {re.escape(repr(steps))}"):
            record_bank("toy", [TaskSpec(TOY, 0)], steps=steps)  # before: 2.5 trained 2
    with pytest.raises(TypeError, match=r"specs\[0\] must be a TaskSpec, got tuple"):
        record_bank("toy", [(TOY, 0)], steps=3)
    assert record_bank("toy", [TaskSpec(TOY, 0)], steps=3).curve(0).size == 3


# --------------------------------------------------------------------------------------------------
# Every live test passes on a busy machine: the tutorial's code path under two CPU hogs


def test_the_live_tutorials_code_runs_on_a_machine_whose_cores_are_busy(tmp_path):
    """docs/tutorials/run-your-training-live.md's steps 2, 3 and 5 (as tests/test_live.py runs them; fewer runs, a shorter
    episode and fewer spread draws, to stay quick) while two processes spin on the CPUs: before the fix calibrate() divided
    by zero on such a machine (a task's first build on a node can take longer than its slice, so it trains nothing)."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "tutorials" / "run-your-training-live.md").read_text(), re.S)
    (tmp_path / "my_runs.py").write_text(blocks[0])
    code = blocks[1] + blocks[2] + blocks[4] + blocks[5]
    for old, new in (("range(6)", "range(3)"), ("max_cycles=40", "max_cycles=20"), ("range(5)", "range(2)")):
        assert old in code
        code = code.replace(old, new)
    (tmp_path / "tutorial.py").write_text('if __name__ == "__main__":\n' + "\n".join("    " + line for line in code.splitlines()) + "\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        done = subprocess.run([sys.executable, "tutorial.py"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert done.returncode == 0, done.stderr[-3000:]
    rates = [float(line) for line in done.stdout.split()]  # live, calibrated, calibrated with spread, trace replay
    assert len(rates) == 4 and all(0.0 <= r <= 1.0 for r in rates)
    assert rates[3] == rates[0]  # the trace replay reproduces the live episode
    assert (tmp_path / "live_records.jsonl").read_text().count("\n") > 0
