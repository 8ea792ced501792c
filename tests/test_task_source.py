"""The task-source seam (core_env.task_source): a step whose reports come from a source outside the
compiled code runs the same rules as the fused compiled step. The curve bank behind the seam gives the
same episodes bit for bit; another source's reports drive completions; a failing source leaves the state
as it was; bad reports are refused naming the source."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from core_env import features
from core_env.config import make_config
from core_env.sim import Simulator
from core_env.task_source import CurveSource, Reports, Served, served_of
from core_env.generators import generator_for
from test_properties import PROPERTY_SETTINGS, configs, random_actions


def _pair(config: dict, seed: int, batch: int = 3) -> tuple[Simulator, Simulator]:
    cfg = make_config(**config)
    workloads = [generator_for(cfg).workload(np.random.default_rng(seed + b)) for b in range(batch)]
    sims = Simulator(cfg, batch), Simulator(cfg, batch)
    for sim in sims:
        sim.reset(workloads)
    return sims


def _two_waiting(config: dict, seed: int) -> Simulator:
    """One env idled until slots 0 and 1 hold tasks that have not been served."""
    sim, _ = _pair({"load": 1.0, **config}, seed, batch=1)
    while not sim.active[0, :2].all():
        sim.step(np.zeros((1, sim.N), np.int64))
    assert (sim.steps[0] == 0).all()
    return sim


def _state(sim: Simulator) -> list[np.ndarray]:
    return [np.array(getattr(sim.arrays, name), copy=True) for name in sim.arrays._fields if name not in ("cum", "slope")]


def _actions(sim: Simulator, rng: np.random.Generator, p_valid: float) -> np.ndarray:
    masks = sim.action_choices
    return np.stack([random_actions(rng, sim.N, sim.K, masks[b], p_valid) for b in range(sim.B)]).astype(np.int64)


@PROPERTY_SETTINGS
@given(config=configs(), seed=st.integers(0, 2**16), policy_seed=st.integers(0, 2**16), p_valid=st.floats(0, 1))
def test_the_curve_source_behind_the_seam_gives_the_fused_steps_episodes_bit_for_bit(config, seed, policy_seed, p_valid):
    fused, seam = _pair(config, seed)
    rng = np.random.default_rng(policy_seed)
    source = CurveSource()
    while not fused.done.all():
        actions = _actions(fused, rng, p_valid)
        a, b = fused.step(actions), seam.step(actions.copy(), source=source)
        for name in ("completed", "failed", "rejected", "conflicts", "invalid", "switched", "served", "reported", "terminated", "truncated"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert all(np.array_equal(x, y) for x, y in zip(_state(fused), _state(seam)))
        assert np.array_equal(features.state(fused, config["history"]), features.state(seam, config["history"]))
    assert seam.done.all()


def test_served_names_each_serving_node_its_task_and_its_batches():
    sim = _two_waiting({"n_nodes": 3, "n_slots": 4, "switch_cost": 0.5, "node_speeds": [1.0, 2.0, 0.5]}, seed=3)
    seen = []

    class Spy:
        def report(self, sim, served):
            seen.append(served)
            return np.full(len(served.env), 1e9)  # never reaches a target

    sim.step(np.array([[1, 2, 0]]), source=Spy())
    first = seen[0]
    assert first.env.tolist() == [0, 0] and first.node.tolist() == [0, 1] and first.slot.tolist() == [0, 1]
    assert first.task.tolist() == sim.task[0, :2].tolist()
    assert np.allclose(first.batches, sim.batches_per_step[0, :2] * [1.0, 2.0]) and first.progress.tolist() == [0.0, 0.0]
    sim.step(np.array([[2, 1, 0]]), source=Spy())  # the tasks trade nodes: both services are switches
    second = seen[1]
    assert np.allclose(second.batches, sim.batches_per_step[0, [1, 0]] * np.array([1.0, 2.0]) * 0.5)
    assert np.allclose(second.progress, first.batches[::-1])
    assert sim.stats["switches"][0] == 2 and sim.last_loss[0, 0] == 1e9


def test_a_sources_reports_decide_the_completions():
    sim = _two_waiting({"n_nodes": 2, "n_slots": 4}, seed=1)

    class Solved:
        """Every served task reports a loss of 0: it reaches any target at its first service."""

        def report(self, sim, served):
            return np.zeros(len(served.env))

    tasks = sim.task[0, :2].tolist()
    outcome = sim.step(np.array([[1, 2]]), source=Solved())
    assert outcome.completed.tolist() == [2] and sim.stats["completed"][0] == 2
    assert tasks[0] not in sim.task[0].tolist() and tasks[1] not in sim.task[0].tolist()


@pytest.mark.parametrize("report, error, match", [
    (lambda sim, served: np.zeros(len(served.env) + 1), ValueError, r"Bad\.report returned loss of shape \(3,\), expected \(2,\)"),
    (lambda sim, served: np.array([0.5, np.nan]), ValueError, r"Bad\.report returned loss nan for task \d+ of env 0: loss must be finite"),
    (lambda sim, served: Reports(np.ones(2), np.array([1.0, -1.0])), ValueError,
     r"Bad\.report returned batches -1\.0 for task \d+ of env 0: batches must be finite and >= 0"),
    (lambda sim, served: Reports(np.ones(2), np.ones(3)), ValueError, r"returned batches of shape \(3,\), expected \(2,\)"),
    (lambda sim, served: 1 / 0, ZeroDivisionError, "division"),
])
def test_a_failing_or_bad_source_leaves_the_state_as_it_was(report, error, match):
    sim = _two_waiting({"n_nodes": 2, "n_slots": 4, "reward": "shaped"}, seed=2)
    sim.step(np.array([[1, 0]]))
    before, last = _state(sim), sim.outcome()
    Bad = type("Bad", (), {"report": lambda self, sim, served: report(sim, served)})
    with pytest.raises(error, match=match):
        sim.step(np.array([[1, 2]]), source=Bad())
    assert all(np.array_equal(x, y) for x, y in zip(_state(sim), before))
    assert np.array_equal(sim.outcome().served, last.served) and np.array_equal(sim.outcome().reported, last.reported)


def test_the_batches_a_source_reports_are_the_tasks_progress():
    sim = _two_waiting({"n_nodes": 2, "n_slots": 4}, seed=1)
    planned = sim.arrays.batches.copy()

    class Slices:
        """A live source on wall-clock slices: node 0 trained 3.0 batches, node 1 none (its slice went on moving state)."""

        def report(self, sim, served):
            return Reports(np.full(len(served.env), 9.0), np.where(served.node == 0, 3.0, 0.0))

    slots = [0, 1]
    before = sim.progress[0, slots].copy()
    sim.step(np.array([[1, 2]]), source=Slices())
    assert sim.progress[0, slots].tolist() == [before[0] + 3.0, before[1]]
    assert sim.arrays.batches[0].tolist() == [3.0, 0.0] and not np.array_equal(planned, sim.arrays.batches)


def test_a_source_must_have_a_report_method():
    sim, _ = _pair({"n_nodes": 2, "n_slots": 4}, seed=2, batch=1)
    t = int(sim.t[0])
    with pytest.raises(TypeError, match="source must be a TaskSource .* got int"):
        sim.step(np.array([[1, 0]]), source=3)
    assert int(sim.t[0]) == t


def test_served_of_is_empty_when_every_node_idles():
    sim, _ = _pair({"n_nodes": 2, "n_slots": 4}, seed=2, batch=1)
    sim.step(np.array([[0, 0]]), source=CurveSource())
    assert isinstance(served_of(sim), Served) and len(served_of(sim).env) == 0
