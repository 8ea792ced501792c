"""Live tasks (core_env.live): real training runs trained in pieces resume exactly from their state, and a
tiny live episode through the task-source seam plays as its recorded curves do in the simulator."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from core_env.config import EnvConfig  # noqa: E402
from core_env.live import CorpusMLPTask, LiveSource, TaskSpec, build_task, record_bank  # noqa: E402
from core_env.sim import Simulator  # noqa: E402
from core_env.workload import Workload  # noqa: E402

STEPS = 30


def test_a_live_run_trained_in_pieces_across_nodes_gives_the_corpus_runs_losses():
    from core_env.curves.runs import common as C
    from core_env.curves.runs import mlp

    expected = mlp.run("mlp_wine", C.RunSeeds("mlp_wine", 3), STEPS)["losses"]
    task, losses = CorpusMLPTask("mlp_wine", 3, steps=STEPS), []
    for piece in (1, 7, 0, 12, 10):
        losses += task.train(piece).tolist()
        moved = CorpusMLPTask("mlp_wine", 3, steps=STEPS)  # another node: a fresh process would build it the same way
        moved.load_state_dict(task.state_dict())
        task = moved
    assert losses == expected  # bit for bit: the same seeds, data order, schedule and optimizer state
    assert task.finished and task.train(3).tolist() == [task.plateau()] * 3  # past its length: the plateau


def test_build_task_names_bad_input():
    with pytest.raises(ValueError, match="unknown live task family 'no_such_family'"):
        build_task(TaskSpec("no_such_family", 0))
    with pytest.raises(ValueError, match="run_index must be an int >= 0, got -1"):
        build_task(TaskSpec("mlp_wine", -1))
    with pytest.raises(TypeError, match="test_live:not_a_task returned int, not a LiveTask"):
        build_task(TaskSpec("test_live:not_a_task", 0))
    assert isinstance(build_task(TaskSpec("test_live:ConstantTask", 2)), ConstantTask)


def not_a_task(run_index: int) -> int:
    return run_index


class ConstantTask:
    """A user's own live task: reports ``run_index`` for every batch."""

    def __init__(self, run_index: int) -> None:
        self.value = float(run_index)

    def train(self, batches: int) -> np.ndarray:
        return np.full(batches, self.value)

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


def _workload(bank) -> Workload:
    """Six tasks on the four recorded runs, two batches per node-step, targets the runs reach mid-way."""
    arrival = np.array([0, 0, 1, 3, 4, 6])
    curve = np.array([0, 1, 2, 3, 0, 2])
    target = np.array([bank.curve(c)[: STEPS // 2].mean() for c in curve])
    bps = np.full(6, 2.0)
    demand = np.array([bank.demand(int(c), float(t), 2.0) for c, t in zip(curve, target)])
    return Workload(bank, arrival, arrival + 9, target, bps, curve, demand, 8)


def _play(sim: Simulator, source=None) -> list[tuple]:
    trajectory = []
    while not sim.done[0]:
        active = np.flatnonzero(sim.active[0])[: sim.N]  # the lowest active slots, one per node
        actions = np.zeros((1, sim.N), np.int64)
        actions[0, : active.size] = active + 1
        outcome = sim.step(actions, source=source)
        trajectory.append((outcome.completed.tolist(), outcome.served.tolist(), outcome.reported.copy()))
    return trajectory


def test_a_tiny_live_episode_plays_as_its_recorded_curves_do_in_simulation():
    specs = [TaskSpec("mlp_wine", i) for i in range(4)]
    bank = record_bank("live_wine", specs, steps=STEPS)
    workload = _workload(bank)
    config = EnvConfig(n_nodes=2, n_slots=3, arrival_steps=8, max_cycles=40)
    simulated, live = Simulator(config), Simulator(config)
    simulated.reset([workload])
    live.reset([workload])
    source = LiveSource(specs, steps=STEPS)
    expected, got = _play(simulated), _play(live, source)
    assert len(expected) == len(got) and sum(sum(c) for c, _, _ in got) > 0
    for (c1, s1, r1), (c2, s2, r2) in zip(expected, got):
        assert c1 == c2 and s1 == s2
        np.testing.assert_allclose(r1, r2, rtol=1e-12, atol=0)  # interval means of the same losses, summed two ways
    assert simulated.statistics_of(0) == live.statistics_of(0)
    assert source.trained == 2 * sum(int(np.sum(s)) for _, s, _ in got)  # two whole batches per service


def test_a_live_source_refuses_a_task_beyond_its_runs():
    specs = [TaskSpec("mlp_wine", 0)]
    bank = record_bank("one", specs, steps=5)
    workload = Workload(bank, np.array([0]), np.array([5]), np.array([1e-9]), np.array([1.0]), np.array([0]), np.array([np.inf]), 1)
    sim = Simulator(EnvConfig(n_nodes=1, n_slots=1, arrival_steps=1, max_cycles=10))
    sim.reset([workload])
    with pytest.raises(ValueError, match="task 0 of env 0 is on curve 0, but the source has 0 runs"):
        source = LiveSource(specs)
        source.specs = []  # as if the source were built for another bank
        sim.step(np.array([[1]]), source=source)
    assert int(sim.t[0]) == 0  # the refused step changed nothing


# --------------------------------------------------------------------------------------------------
# Worker nodes: processes (and Ray, in the extra venv)

TOY = "core_env.live.toy:ToyRegressionTask"
TOY_STEPS = 40


def _toy_workload(bank, batches: float = 3.0, unreachable: bool = False) -> Workload:
    """Eight toy tasks on two nodes: targets each run reaches at a third of its length (with
    ``unreachable``, every other task's target is below anything its run reports: it stays to its deadline)."""
    arrival = np.array([0, 0, 0, 1, 2, 3, 4, 5])
    curve = np.arange(8) % len(bank)
    target = np.array([bank.curve(int(c))[TOY_STEPS // 3] * (1e-6 if unreachable and i % 2 else 1.0) for i, c in enumerate(curve)])
    demand = np.array([bank.demand(int(c), float(t), batches) for c, t in zip(curve, target)])
    return Workload(bank, arrival, arrival + 8, target, np.full(8, batches), curve, demand, 6)


def _toy(n_runs: int = 6):
    specs = [TaskSpec(TOY, i) for i in range(n_runs)]
    return specs, record_bank("toy", specs, steps=TOY_STEPS)


def test_edf_plays_the_same_episode_on_worker_processes_as_in_simulation():
    from core_env import discrete_core_v1
    from core_env.live.workers import make_nodes
    from mara_agents import PettingZooPolicy
    from mara_agents.heuristics.edf import EDF

    specs, bank = _toy()
    workload = _toy_workload(bank)
    source = LiveSource(specs, steps=TOY_STEPS, nodes=make_nodes(2, "process"))
    config = {"n_nodes": 2, "n_slots": 4, "arrival_steps": 6, "max_cycles": 30}
    episodes = []
    try:
        for env in (discrete_core_v1.parallel_env(**config), discrete_core_v1.parallel_env(task_source=source, **config)):
            policy, steps = PettingZooPolicy(EDF()), []
            observations, infos = env.reset(options={"workload": workload})
            while env.agents:
                observations, rewards, _, _, infos = env.step(policy(observations, infos))
                steps.append((rewards, {a: {k: v for k, v in i.items()} for a, i in infos.items()}))
            episodes.append((steps, env.episode.statistics()))
    finally:
        source.close()
    (simulated, stats), (live, live_stats) = episodes
    assert live_stats == stats and stats["completed"] > 0 and len(live) == len(simulated)
    for (rewards, infos), (expected_rewards, expected_infos) in zip(live, simulated):  # equal up to the sum's rounding
        assert rewards == pytest.approx(expected_rewards, rel=1e-12, abs=1e-15) and infos.keys() == expected_infos.keys()
        for agent, info in infos.items():
            assert info.keys() == expected_infos[agent].keys()
            for key, value in info.items():
                np.testing.assert_allclose(np.asarray(value, float), np.asarray(expected_infos[agent][key], float), rtol=1e-12, atol=1e-15)
    assert any(record["moved"] for record in source.records)  # tasks changed nodes: their state moved between processes


def test_wall_clock_slices_train_what_the_nodes_manage_and_that_is_the_progress():
    from core_env.live.workers import make_nodes

    specs, bank = _toy()
    sim = Simulator(EnvConfig(n_nodes=2, n_slots=4, arrival_steps=6, max_cycles=30))
    sim.reset([_toy_workload(bank, unreachable=True)])
    source = LiveSource(specs, steps=TOY_STEPS, nodes=make_nodes(2, "process"), slice_s=0.02)
    try:
        step = 0
        while not sim.done[0]:
            actions = np.zeros((1, 2), np.int64)
            active = np.flatnonzero(sim.active[0])
            actions[0, : min(2, active.size)] = (active[:2][::-1] if step % 2 else active[:2]) + 1  # swap nodes: tasks move
            before = len(source.records)
            sim.step(actions, source=source)
            for record in source.records[before:]:
                assert sim.arrays.batches[0, record["node"]] == record["trained"] == len(record["losses"])
            step += 1
    finally:
        source.close()
    records = source.records
    first = {}
    for r in records:
        first.setdefault(r["task"], r)
    assert all(r["trained"] >= 1 and not r["moved"] for r in first.values())  # a first service builds the task and trains
    assert sum(r["trained"] for r in records) > 2 * len(records)  # a 20 ms slice holds many toy batches
    moved = [r for r in records if r["moved"]]
    assert moved and all(r["move_s"] > 0 for r in moved)
    assert sim.statistics_of(0)["completed"] > 0
    steps = source.steps_log  # one row per step with a service
    assert [s["t"] for s in steps] == sorted({r["t"] for r in records}) and steps[0]["between_s"] is None
    assert all(s["serve_s"] > 0 and s["between_s"] >= 0 for s in steps[1:])  # toy runs end well within a slice


def test_a_worker_killed_mid_episode_fails_the_step_clearly_and_changes_nothing():
    import os
    import signal

    from core_env.live.workers import NodeFailure, make_nodes

    specs, bank = _toy()
    sim = Simulator(EnvConfig(n_nodes=2, n_slots=4, arrival_steps=6, max_cycles=30))
    sim.reset([_toy_workload(bank)])
    nodes = make_nodes(2, "process")
    source = LiveSource(specs, steps=TOY_STEPS, nodes=nodes)
    try:
        sim.step(np.array([[1, 2]]), source=source)
        t, progress = int(sim.t[0]), sim.progress.copy()
        os.kill(nodes.processes[1].pid, signal.SIGKILL)
        with pytest.raises(NodeFailure, match=r"node 1: its worker process \(pid \d+\) died during serve"):
            sim.step(np.array([[1, 2]]), source=source)
        assert int(sim.t[0]) == t and np.array_equal(sim.progress, progress)  # the failed step was undone
    finally:
        source.close()


def test_a_reset_to_the_same_workload_starts_every_task_afresh():
    specs, bank = _toy()
    workload = _toy_workload(bank)
    sim = Simulator(EnvConfig(n_nodes=2, n_slots=4, arrival_steps=6, max_cycles=30))
    source = LiveSource(specs, steps=TOY_STEPS)
    firsts = []
    for _ in range(2):
        sim.reset([workload])  # the same Workload object twice
        for _ in range(3):
            sim.step(np.array([[1, 2]]), source=source)
        firsts.append([r["losses"] for r in source.records if r["episode"] == len(firsts)])
    assert firsts[0] == firsts[1] and len(firsts[0]) == 6  # the second episode's tasks did not resume the first's
    other = Simulator(EnvConfig(n_nodes=2, n_slots=4, arrival_steps=6, max_cycles=30))
    other.reset([workload])  # a new simulator (a new env) with the same source: afresh too
    other.step(np.array([[1, 2]]), source=source)
    assert [r["losses"] for r in source.records[-2:]] == firsts[0][:2] and source.records[-1]["episode"] == 2
    source.close()


def test_after_a_failure_the_source_takes_no_further_step_and_a_lost_task_is_never_restarted():
    from core_env.live.workers import NodeFailure, NodeWorker

    specs, bank = _toy()
    sim = Simulator(EnvConfig(n_nodes=2, n_slots=4, arrival_steps=6, max_cycles=30))
    sim.reset([_toy_workload(bank)])
    source = LiveSource(specs, steps=TOY_STEPS)
    sim.step(np.array([[1, 2]]), source=source)
    source.nodes.workers[1].tasks.clear()  # node 1 lost what it held (as a restarted worker would)
    with pytest.raises(NodeFailure, match="node 1: .*should live on node 1 but does not"):
        sim.step(np.array([[1, 2]]), source=source)
    with pytest.raises(NodeFailure, match="this live source failed before"):
        sim.step(np.array([[1, 2]]), source=source)
    worker = NodeWorker(0, None)
    with pytest.raises(RuntimeError, match="should live on node 0 but does not"):
        worker.serve("k", specs[0], TOY_STEPS, None, 1, None, False)
    assert worker.serve("k", specs[0], TOY_STEPS, None, 1, None, True)["losses"].size == 1  # a first service builds it
    source.close()


def test_bad_live_arguments_are_named():
    from core_env.live.workers import make_nodes

    with pytest.raises(ValueError, match="unknown backend 'gpu'"):
        make_nodes(2, "gpu")
    with pytest.raises(ValueError, match="address= names a Ray cluster; it needs backend='ray'"):
        make_nodes(2, "process", address="10.0.0.1:6379")
    with pytest.raises(ValueError, match="n_nodes must be an int >= 1, got 0"):
        make_nodes(0, "inprocess")
    with pytest.raises(ValueError, match=r"slice_s must be None \(planned batches\) or seconds in \(0, 3600\), got -1"):
        LiveSource([TaskSpec(TOY, 0)], slice_s=-1)
    with pytest.raises(TypeError, match="specs\\[1\\] must be a TaskSpec, got str"):
        LiveSource([TaskSpec(TOY, 0), "mlp_wine"])
    with pytest.raises(ValueError, match="specs\\[0\\]: unknown live task family 'no_such_family'"):
        LiveSource([TaskSpec("no_such_family", 0)])
    with pytest.raises(ValueError, match="steps must be None .* got 2.5"):
        LiveSource([TaskSpec(TOY, 0)], steps=2.5)
    with pytest.raises(ValueError, match="slice_s needs nodes that train at once"):
        LiveSource([TaskSpec(TOY, 0)], slice_s=0.1)
    with pytest.raises(TypeError, match="task_source must be a TaskSource .* got str"):
        from core_env import discrete_core_v1

        discrete_core_v1.parallel_env(task_source="live")


RAY_EPISODE = """
import json
import numpy as np
from core_env.config import EnvConfig
from core_env.live import LiveSource, TaskSpec, record_bank
from core_env.live.workers import make_nodes
from core_env.sim import Simulator
from core_env.workload import Workload
TOY, TOY_STEPS = {toy!r}, {steps}
{functions}

specs, bank = _toy()
out = {{}}
for backend in ("inprocess", "ray"):
    sim = Simulator(EnvConfig(n_nodes=2, n_slots=4, arrival_steps=6, max_cycles=30))
    sim.reset([_toy_workload(bank, unreachable=True)])
    source = LiveSource(specs, steps=TOY_STEPS, nodes=make_nodes(2, backend))
    step = 0
    while not sim.done[0]:
        active = np.flatnonzero(sim.active[0])
        actions = np.zeros((1, 2), np.int64)
        actions[0, : min(2, active.size)] = (active[:2][::-1] if step % 2 else active[:2]) + 1  # swap nodes: tasks move
        sim.step(actions, source=source)
        step += 1
    out[backend] = {{"stats": sim.statistics_of(0), "losses": [r["losses"] for r in source.records],
                    "moved": sum(r["moved"] for r in source.records)}}
    source.close()
print(json.dumps(out))
"""


def test_a_live_episode_on_local_ray_actors_equals_the_in_process_one(tmp_path):
    import inspect
    import json
    import subprocess

    from test_integrations import ROOT, _extra_python

    import sys

    with_ray = [p for p in (sys.executable, _extra_python()) if p is not None and not subprocess.run([str(p), "-c", "import ray"], capture_output=True).returncode]
    if not with_ray:
        pytest.skip("Ray is installed neither here (the dev extra) nor in build/rllib-venv")
    python = with_ray[0]
    script = tmp_path / "ray_episode.py"
    functions = inspect.getsource(_toy_workload) + "\n" + inspect.getsource(_toy)  # the same episode, without pytest
    script.write_text(RAY_EPISODE.format(toy=TOY, steps=TOY_STEPS, functions=functions))
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}
    done = subprocess.run([str(python), str(script)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["ray"] == out["inprocess"] and out["ray"]["moved"] > 0 and out["ray"]["stats"]["completed"] > 0


def test_the_live_tutorials_code_runs(tmp_path):
    """docs/tutorials/run-your-training-live.md: its task module, then its steps 2, 3 and 5 (both blocks) as one script."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    blocks = re.findall(r"```python\n(.*?)```", (root / "docs" / "tutorials" / "run-your-training-live.md").read_text(), re.S)
    assert len(blocks) == 6
    (tmp_path / "my_runs.py").write_text(blocks[0])
    main = "\n".join("    " + line for line in (blocks[1] + blocks[2] + blocks[4] + blocks[5]).splitlines())
    (tmp_path / "tutorial.py").write_text('if __name__ == "__main__":\n' + main + "\n")   # as the page says
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{root}"}
    done = subprocess.run([sys.executable, "tutorial.py"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rates = [float(line) for line in done.stdout.split()]  # live, calibrated, calibrated with spread, trace replay
    assert len(rates) == 4 and all(0.0 <= r <= 1.0 for r in rates)
    assert rates[3] == rates[0]  # the live episode replayed with each service's live batches: its live completion rate
    assert (tmp_path / "live_records.jsonl").read_text().count("\n") > 0
