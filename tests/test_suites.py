"""Pre-generated evaluation suites, workload generation, and the constructed stress scenario."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from conftest import act, parallel_on, tiny_workload

from core_env import discrete_core_v0
from core_env.config import LOADS
from core_env.curves import bank_for
from core_env.workload import (
    SUITE_DIR,
    SUITE_EPISODES,
    SUITE_MANIFEST,
    SUITE_ROOTS,
    SUITE_TASK_SETS,
    draw_workload,
    generate_suite,
    load_suite,
    stress_workload,
    write_npz,  # re-exported from core_env.npz
)

#: One (task set, load) pair per task set, covering every load across the set (regeneration is the slow part).
REGENERATED = [("id", "train"), ("rl_ood", "x1.25"), ("vit_ood", "x2"), ("id", "x1.5")]


@pytest.mark.parametrize("task_set, load", REGENERATED)
def test_suite_regenerates_byte_identical_from_its_seed(tmp_path, task_set, load):
    name = f"{task_set}__{load}.npz"
    digest = write_npz(tmp_path / name, generate_suite(task_set, load))
    committed = (SUITE_DIR / name).read_bytes()
    assert (tmp_path / name).read_bytes() == committed
    assert digest == hashlib.sha256(committed).hexdigest() == json.loads(SUITE_MANIFEST.read_text())[name]


def test_manifest_lists_exactly_one_file_per_task_set_and_load():
    manifest = json.loads(SUITE_MANIFEST.read_text())
    expected = {f"{t}__{load}.npz" for t in SUITE_TASK_SETS for load in LOADS}
    assert set(manifest) == expected
    assert {p.name for p in SUITE_DIR.glob("*.npz")} == expected


@pytest.mark.parametrize("task_set", SUITE_TASK_SETS)
def test_suite_workloads_use_eval_curves_and_differ_between_roots(task_set):
    workloads = [load_suite(task_set, "train", root, episode) for root in range(SUITE_ROOTS) for episode in (0, SUITE_EPISODES - 1)]
    eval_bank = bank_for(task_set, "eval")
    assert all(w.bank is eval_bank and w.arrival_steps == 500 and len(w) > 50 for w in workloads)
    signatures = {(len(w), float(w.target.sum())) for w in workloads}
    assert len(signatures) == len(workloads)
    heavy = load_suite(task_set, "x2", 0, 0)
    assert len(heavy) > len(workloads[0])  # roughly twice the arrivals


@pytest.mark.parametrize("task_set", SUITE_TASK_SETS)
def test_train_and_eval_curve_banks_share_no_curve(task_set):
    # constant curves (e.g. an Acrobot run that never swings up: loss 1.0 at every update) can come out
    # identical from different runs; the split is by run, so only informative curves must differ
    def hashes(bank):
        return {hashlib.sha256(bank.curve(i).tobytes()).hexdigest() for i in range(len(bank)) if np.ptp(bank.curve(i)) > 0}

    assert not hashes(bank_for(task_set, "train")) & hashes(bank_for(task_set, "eval"))


def test_suite_replay_through_reset_options_uses_the_configs_task_set_and_load_by_default():
    env = discrete_core_v0.parallel_env(task_set="vit_ood", load="x1.25")
    env.reset(options={"suite": "eval", "root": 3, "episode": 2})
    expected = load_suite("vit_ood", "x1.25", 3, 2)
    for name in ("arrival", "deadline", "target", "batches_per_step", "curve", "demand"):
        assert np.array_equal(getattr(env.episode.workload, name), getattr(expected, name))


def test_seeded_workloads_are_drawn_from_train_curves():
    env = discrete_core_v0.parallel_env(task_set="rl_ood", arrival_steps=100)
    env.reset(seed=0)
    assert env.episode.workload.bank is bank_for("rl_ood", "train")


def test_drawn_workload_is_consistent_with_its_recipe():
    bank = bank_for("id", "train")
    w = draw_workload(bank, 0.5, 400, np.random.default_rng(0))
    assert 150 < len(w) < 250  # Bernoulli(0.5) arrivals over 400 steps
    assert np.all(np.diff(w.arrival) >= 0) and np.all(w.deadline > w.arrival)
    for i in range(0, len(w), 17):  # the hidden demand is the node-steps until the reported loss hits the target
        assert w.demand[i] == bank.demand(int(w.curve[i]), float(w.target[i]), float(w.batches_per_step[i]))
    feasible = w.independently_feasible
    assert 0.3 < feasible.mean() < 1.0  # some tasks are infeasible by construction
    assert w.feasibility_bound() == feasible.mean()


@pytest.mark.parametrize("feasible", [True, False])
def test_a_task_served_every_step_completes_after_exactly_its_hidden_demand(feasible):
    workload = load_suite("id", "train", 0, 0)
    i = int(np.flatnonzero(workload.independently_feasible == feasible)[0])
    task = (0, int(workload.window[i]), workload.target[i], workload.batches_per_step[i], workload.curve[i])
    env, _, _ = parallel_on(tiny_workload([task], bank=workload.bank), n_nodes=1, n_slots=1, reward="sparse")
    steps = 0
    while env.agents:
        _, _, _, _, infos = act(env, 1)
        steps += 1
    assert infos["node_0"]["completed"] == int(feasible)
    assert steps == (workload.demand[i] if feasible else workload.window[i])


def test_stress_scenario_bound_is_65_percent_and_a_clairvoyant_schedule_reaches_it():
    w = stress_workload(4)
    assert len(w) == 20 and w.feasibility_bound() == pytest.approx(0.65)
    env = discrete_core_v0.parallel_env(task_set="stress", n_nodes=4, n_slots=16, reward="sparse")
    env.reset(seed=0)
    sim = env.episode.sim
    while env.agents:  # serve the learners (curve 0), earliest deadline first
        slots = [k for k in np.argsort(sim.deadline[0], kind="stable") if sim.active[0, k] and sim.curve[0, k] == 0]
        actions = {f"node_{i}": int(slots[i]) + 1 if i < len(slots) else 0 for i in range(4)}
        _, _, terms, _, infos = env.step(actions)
    assert all(terms.values()) and infos["node_0"]["completion_rate"] == pytest.approx(0.65)
