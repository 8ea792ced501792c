"""Live measurements replayed in the simulator (core_env.live.replay) and the calibration's spread."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from benchmarks.agents import make_agent
from benchmarks.rollout import run_agent
from core_env.config import EnvConfig
from core_env.curves import CurveBank
from core_env.generators import Drawn
from core_env.live.calibration import KINDS, SPREAD_POINTS, Calibration, calibrate, calibrated, service_kinds
from core_env.live.replay import SpreadSource, TraceSource
from core_env.recipe import TaskRecipe

CONFIG = EnvConfig(n_nodes=2, n_slots=4, arrival_steps=10, max_cycles=40, load=0.6,
                   recipe=TaskRecipe(budget_share=(0.3, 1.0), target_quantile=(0.4, 0.95), typical_run_steps=12.0, rate_spread=(1.0, 1.0),
                                     slack=(1.0, 2.5)))


def _bank() -> CurveBank:
    rng = np.random.default_rng(5)
    steps = np.arange(240)
    curves = [(2.0 + c) * np.exp(-steps / (40 + 15 * c)) + 0.1 + 0.02 * rng.standard_normal(240).clip(-2, 2) for c in range(6)]
    return CurveBank("replay", [np.maximum(curve, 0.05) for curve in curves], ["a", "a", "a", "b", "b", "b"])


def _workloads(episodes: int = 3):
    draw = Drawn.from_config(CONFIG, bank=_bank(), horizon=CONFIG.max_cycles)
    return [draw.workload(np.random.default_rng([11, e])) for e in range(episodes)]


def _calibration(low: float = 0.5, high: float = 1.5, cost: float = 0.2) -> Calibration:
    spread = tuple(np.linspace(low, high, SPREAD_POINTS).tolist())
    return Calibration({"a": 20.0, "b": 25.0}, (1.0, 0.8), cost, 100, 10, dict.fromkeys(KINDS, spread))


class _Recording:
    """A source that records what another reports, as a live source's records."""

    def __init__(self, inner):
        self.inner, self.records = inner, []

    def report(self, sim, served):
        reports = self.inner.report(sim, served)
        for j in range(len(served.env)):
            self.records.append({"episode": 0, "env": int(served.env[j]), "t": int(sim.t[served.env[j]]), "node": int(served.node[j]),
                                 "task": int(served.task[j]), "trained": float(reports.batches[j])})
        return reports


def test_a_spread_of_ones_is_the_calibrated_simulator_itself():
    families = ["a", "a", "a", "b", "b", "b"]
    for workload in _workloads():
        replay, config = calibrated(workload, families, _calibration(1.0, 1.0), CONFIG)
        plain = run_agent(make_agent("edf"), [replay], config)
        drawn = run_agent(make_agent("edf"), [replay], config, task_source=SpreadSource(_calibration(1.0, 1.0), 0))
        for key in ("completion_rate", "completed", "failed", "rejected"):
            assert drawn[key].tolist() == plain[key].tolist()


def test_spread_draws_are_seeded_and_vary_the_services():
    families = ["a", "a", "a", "b", "b", "b"]
    replay, config = calibrated(_workloads(1)[0], families, _calibration(), CONFIG)

    def played(seed):
        source = _Recording(SpreadSource(_calibration(), seed))
        run_agent(make_agent("edf"), [replay], config, task_source=source)
        return [r["trained"] for r in source.records]

    first, again, other = played([3, 0]), played([3, 0]), played([3, 1])
    assert first == again and first != other
    modelled = {20.0, 16.0, 25.0, 20.0 * 0.8 * 0.8, 25.0 * 0.8, 25.0 * 0.8 * 0.8, 20.0 * 0.8, 25.0 * 0.8 * 0.8}
    assert len(set(first) - modelled) > len(first) // 2  # services vary around the model, not at it
    assert 0.5 * 0.8 * 0.8 * 20.0 - 1e-9 <= min(first) and max(first) <= 1.5 * 25.0 + 1e-9


def test_a_trace_replays_a_recorded_episode_exactly_and_refuses_another_agents_choices():
    families = ["a", "a", "a", "b", "b", "b"]
    for workload in _workloads():
        replay, config = calibrated(workload, families, _calibration(), CONFIG)
        recorded = _Recording(SpreadSource(_calibration(), [9]))
        live = run_agent(make_agent("lara"), [replay], config, task_source=recorded)
        traced = run_agent(make_agent("lara"), [replay], config, task_source=TraceSource(recorded.records))
        for key in ("completion_rate", "completed", "failed", "rejected"):
            assert traced[key].tolist() == live[key].tolist()
    with pytest.raises(ValueError, match="left the recorded episode"):
        run_agent(make_agent("fifo"), [replay], config, task_source=TraceSource(recorded.records[:3]))
    with pytest.raises(ValueError, match=r"one episode's records, got episodes \[0, 1\]"):
        TraceSource(recorded.records[:1] + [dict(recorded.records[1], episode=1)])


def test_calibrate_measures_the_spread_of_each_kind_of_service():
    def service(t, node, task, trained):
        return {"t": t, "env": 0, "node": node, "task": task, "trained": trained, "family": "a"}

    episode = [service(0, 0, 0, 8), service(0, 1, 1, 12), service(1, 0, 0, 12), service(1, 1, 1, 8),
               service(3, 1, 1, 6), service(4, 0, 1, 3)]  # task 1 back after a pause, then moved: two switched services
    assert service_kinds(episode) == ["first", "first", "plain", "plain", "switched", "switched"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing degenerate: no warning
        fit = calibrate([episode], n_nodes=2)
    assert fit.rates == {"a": 10.0} and fit.curve_rates == {} and fit.speeds == (1.0, 1.0)
    assert fit.switch_cost == pytest.approx(1 - 4.5 / 10)
    assert all(len(fit.spread[kind]) == SPREAD_POINTS for kind in KINDS)
    # two services of a step that differ are spread (the step's mean is the machine's); a service alone at its step is the path's
    assert (fit.spread["first"][0], fit.spread["first"][-1]) == pytest.approx((0.8, 1.2)) and np.median(fit.spread["plain"]) == pytest.approx(1.0)
    assert fit.spread["switched"][0] == fit.spread["switched"][-1] == pytest.approx(1.0)
    assert len(fit.paths) == 1 and fit.paths[0][:2] == (1.0, 1.0) and fit.paths[0][3] == pytest.approx(6 / 4.5, abs=1e-4)
    assert fit.paths[0][2] == fit.paths[0][1]  # a step without a service carries the last value
    with pytest.raises(ValueError, match=r"no measured spread for \['first', 'plain', 'switched'\]"):
        SpreadSource(dataclasses.replace(fit, spread={}), 0)


@pytest.mark.faults
def test_calibrate_survives_switched_services_that_all_trained_nothing():
    # a busy machine: both switched services of the episode trained 0 batches in their slices (issue 49: a ZeroDivisionError)
    def service(t, node, task, trained):
        return {"t": t, "env": 0, "node": node, "task": task, "trained": trained, "family": "a"}

    episode = [service(0, 0, 0, 8), service(0, 1, 1, 12), service(1, 0, 0, 12), service(1, 1, 1, 8),
               service(3, 1, 1, 0), service(4, 0, 1, 0)]
    with pytest.warns(UserWarning, match=r"every 'switched' service \(2\) trained 0 batches .* left out of the machine's speed paths"):
        fit = calibrate([episode], n_nodes=2)
    assert fit.rates == {"a": 10.0} and fit.switched == 2
    assert fit.spread["switched"][0] == fit.spread["switched"][-1] == 0.0  # what was measured: nothing trained
    assert fit.paths[0][:2] == (1.0, 1.0)  # the path comes from the services that trained


def test_calibrate_measures_each_run_and_the_machines_slow_steps_apart_from_the_spread():
    # runs (curves) 0 and 1 of one family train 10 and 20 a slice; at step 2 the machine is 20% slower on both nodes
    def service(t, node, task, curve, trained):
        return {"t": t, "env": 0, "node": node, "task": task, "curve": curve, "trained": trained, "family": "a"}

    episode = [service(t, 0, 0, 0, 10 * f) for t, f in enumerate((1, 1, 0.8, 1))] + [service(t, 1, 1, 1, 20 * f) for t, f in enumerate((1, 1, 0.8, 1))]
    episode.sort(key=lambda r: r["t"])
    fit = calibrate([episode], n_nodes=2)
    assert fit.curve_rates == pytest.approx({0: 9.5, 1: 19.0}) and fit.rates == pytest.approx({"a": 14.25})
    assert fit.speeds == pytest.approx((1.0, 1.0)) and fit.rate(1, "a") == fit.curve_rates[1] and fit.rate(7, "a") == fit.rates["a"]
    path = fit.paths[0]
    assert path[2] / path[1] == pytest.approx(0.8, abs=1e-3) and path[3] == path[1]
    for kind in ("first", "plain"):  # nothing is left around run x node x machine
        assert fit.spread[kind][-1] - fit.spread[kind][0] == pytest.approx(0.0, abs=1e-3)


def test_spread_source_plays_each_episode_on_a_recorded_machine_path():
    families = ["a", "a", "a", "b", "b", "b"]
    slow = dataclasses.replace(_calibration(1.0, 1.0), paths=((0.5,) * 5,))  # half speed throughout (and past the path's end)
    replay, config = calibrated(_workloads(1)[0], families, slow, CONFIG)
    plain, halved = _Recording(SpreadSource(_calibration(1.0, 1.0), 0)), _Recording(SpreadSource(slow, 0))
    run_agent(make_agent("fifo"), [replay], config, task_source=plain)
    run_agent(make_agent("fifo"), [replay], config, task_source=halved)
    first = min(r["t"] for r in plain.records)  # until a task finishes, both play the same services
    before = {(r["t"], r["node"], r["task"]): r["trained"] for r in plain.records if r["t"] <= first + 1}
    after = {(r["t"], r["node"], r["task"]): r["trained"] for r in halved.records if r["t"] <= first + 1}
    assert before and before.keys() == after.keys() and all(after[k] == pytest.approx(0.5 * before[k]) for k in before)
    assert max(r["t"] for r in halved.records) >= 5 and all(r["trained"] > 0 for r in halved.records)


@pytest.mark.faults
def test_calibrate_leaves_out_a_run_whose_services_all_trained_nothing_with_a_warning():
    def service(t, node, task, curve, trained):
        return {"t": t, "env": 0, "node": node, "task": task, "curve": curve, "trained": trained, "family": "a"}

    # run 1 trained nothing on node 1 (a busy machine); run 2 trained 4 there and 8 on node 0
    episode = [service(0, 0, 0, 0, 8), service(0, 1, 1, 1, 0), service(1, 0, 0, 0, 8), service(1, 1, 1, 1, 0),
               service(2, 0, 3, 2, 8), service(2, 1, 2, 2, 4)]
    with pytest.warns(UserWarning, match=r"run\(s\) \[\(1, 'a'\)\] .* trained 0 batches in every unswitched service"):
        fit = calibrate([episode], n_nodes=2)
    assert fit.curve_rates[1] == 0.0  # what was measured
    # node 1's speed from run 2 alone (4 / 6), not with a made-up 1.0 for each of run 1's services
    assert fit.speeds == pytest.approx(((1 + 1 + 8 / 6) / 3, 4 / 6))
