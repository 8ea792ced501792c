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
    with pytest.raises(ValueError, match="unknown live task family 'cnn_mnist1d'"):
        build_task(TaskSpec("cnn_mnist1d", 0))
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
    assert sum(source.trained) == 2 * sum(int(np.sum(s)) for _, s, _ in got)  # two whole batches per service


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
