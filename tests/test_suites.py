"""Pre-generated evaluation suites, workload generation, and the constructed stress scenario."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from conftest import act, parallel_on, tiny_workload

from core_env.curves import CurveBank
from core_env import discrete_core_v1
from core_env.config import LOADS
from core_env.curves import bank_for
from core_env.ceilings import SLOT_SCHEDULES_PATH, suite_ceilings
from core_env.generators import stress_workload
from core_env.suites import SUITE_DIR, SUITE_EPISODES, SUITE_MANIFEST, SUITE_ROOTS, SUITE_TASK_SETS, generate_suite, load_suite, suite_meta
from core_env.workload import draw_workload
from core_env.recipe import DEFAULT_RECIPE, FamilyReference, TaskRecipe, quantize

#: len() and sha256 prefix of the workload of ``parallel_env().reset(seed=0)`` (v1 recipe, N = 4, id).
SEEDED_TASKS, SEEDED_DIGEST = 210, "804a4aa9541763b9"

TABLE_FIELDS = ("arrival", "deadline", "target", "batches_per_step", "curve", "demand", "episode_offsets")


@pytest.mark.parametrize("task_set", SUITE_TASK_SETS)
@pytest.mark.parametrize("load", list(LOADS))
def test_suite_regenerates_the_same_decoded_task_table_from_its_seed(task_set, load):
    # Decoded tables, not zip bytes: integers exactly, floats exactly after the recipe's quantization
    # (the generator quantizes every float that passes through exp, so no SIMD path can change them).
    fresh = generate_suite(task_set, load)
    committed = np.load(SUITE_DIR / f"{task_set}__{load}.npz", allow_pickle=False)
    for name in TABLE_FIELDS:
        assert fresh[name].dtype == committed[name].dtype and np.array_equal(fresh[name], committed[name]), name
    for name in ("target", "batches_per_step"):
        assert np.array_equal(quantize(fresh[name]), fresh[name])  # on the documented grid
    assert json.loads(fresh["meta"].tobytes()) == json.loads(committed["meta"].tobytes())


def test_quantize_keeps_twelve_significant_bits_exactly():
    x = np.array([1.0, 1.0 + 2.0**-13, 1.0 + 3 * 2.0**-13, 3e-7, 123456.789])
    q = quantize(x)
    assert q[0] == 1.0 and q[1] in (1.0, 1.0 + 2.0**-12) and q[2] == 1.0 + 2 * 2.0**-12
    assert np.all(np.abs(q / x - 1) <= 2.0**-12) and np.array_equal(quantize(q), q)


def test_seeded_reset_draws_the_same_workload_on_every_machine():
    # A digest of the decoded table of reset(seed=0): integers and quantized floats (exact on any CPU).
    env = discrete_core_v1.parallel_env()
    env.reset(seed=0)
    w = env.episode.workload
    digest = hashlib.sha256()
    for name in ("arrival", "deadline", "curve"):
        digest.update(np.ascontiguousarray(getattr(w, name), dtype="<i8").tobytes())
    for name in ("target", "batches_per_step", "demand"):
        digest.update(np.ascontiguousarray(getattr(w, name), dtype="<f8").tobytes())
    assert len(w) == SEEDED_TASKS and digest.hexdigest()[:16] == SEEDED_DIGEST


def test_manifest_lists_exactly_one_file_per_task_set_and_load():
    manifest = json.loads(SUITE_MANIFEST.read_text())
    expected = {f"{t}__{load}.npz" for t in SUITE_TASK_SETS for load in LOADS}
    assert set(manifest) == expected
    assert {p.name for p in SUITE_DIR.glob("*.npz")} == expected | {SLOT_SCHEDULES_PATH.name}  # and the K-slot ceilings' schedules


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
    env = discrete_core_v1.parallel_env(task_set="vit_ood", load="x1.25")
    env.reset(options={"suite": "eval", "root": 3, "episode": 2})
    expected = load_suite("vit_ood", "x1.25", 3, 2)
    for name in ("arrival", "deadline", "target", "batches_per_step", "curve", "demand"):
        assert np.array_equal(getattr(env.episode.workload, name), getattr(expected, name))


def test_seeded_workloads_are_drawn_from_train_curves():
    env = discrete_core_v1.parallel_env(task_set="rl_ood", arrival_steps=100)
    env.reset(seed=0)
    assert env.episode.workload.bank is bank_for("rl_ood", "train")


def test_drawn_workload_is_consistent_with_its_recipe():
    bank = bank_for("id", "train")
    w = draw_workload(bank, 0.1, 400, np.random.default_rng(0), n_nodes=4)
    assert 100 < len(w) < 220  # Binomial(4, 0.1) arrivals per step over 400 steps: 160 expected
    assert np.all(np.diff(w.arrival) >= 0) and np.all(w.deadline > w.arrival)
    assert np.bincount(w.arrival).max() >= 2  # several tasks can arrive in one step
    for i in range(0, len(w), 17):  # the hidden demand is the node-steps until the reported loss hits the target
        assert w.demand[i] == bank.demand(int(w.curve[i]), float(w.target[i]), float(w.batches_per_step[i]))
    assert 0.05 < np.mean(~np.isfinite(w.demand)) < 0.4  # some targets are unreachable by the particular run
    feasible = w.independently_feasible
    assert 0.5 < feasible.mean() < 1.0
    assert w.feasibility_bound() == feasible.mean()
    # the window is the budgeted share of a typical run times a slack: never longer than slack_hi · typical_run_steps
    assert w.window.max() <= np.ceil(DEFAULT_RECIPE.slack[1] * DEFAULT_RECIPE.typical_run_steps)


def test_the_deadline_does_not_depend_on_the_tasks_own_curve_or_rate():
    # Same seed, two banks whose curves differ: arrivals, windows and budget draws coincide; only the
    # emergent demand (and the curve-specific parts) change. The deadline is set before the run is seen.
    bank = bank_for("id", "train")
    reversed_bank = CurveBank("reversed", [bank.curve(i)[::-1] for i in range(len(bank))], bank.family.tolist(), bank.flags)
    a = draw_workload(bank, 0.1, 300, np.random.default_rng(5), reference=bank)
    b = draw_workload(reversed_bank, 0.1, 300, np.random.default_rng(5), reference=bank)
    assert np.array_equal(a.arrival, b.arrival) and np.array_equal(a.deadline, b.deadline)
    assert np.array_equal(a.target, b.target) and np.array_equal(a.batches_per_step, b.batches_per_step)
    assert not np.array_equal(a.demand, b.demand)


def test_loads_are_intensities_per_node_so_arrivals_scale_with_the_cluster():
    bank = bank_for("id", "train")
    small = np.mean([len(draw_workload(bank, LOADS["train"], 500, np.random.default_rng([1, e]), n_nodes=4)) for e in range(4)])
    large = np.mean([len(draw_workload(bank, LOADS["train"], 500, np.random.default_rng([1, e]), n_nodes=32)) for e in range(4)])
    assert small == pytest.approx(500 * 4 * LOADS["train"], rel=0.1)
    assert large == pytest.approx(8 * small, rel=0.1)
    env = discrete_core_v1.parallel_env(n_nodes=16, n_slots=64)
    env.reset(seed=3)
    assert len(env.episode.workload) == pytest.approx(500 * 16 * LOADS["train"], rel=0.15)


def test_family_reference_targets_come_from_the_reference_runs_best_reports():
    bank = bank_for("rl_ood", "train")
    reference = FamilyReference(bank)
    family = "rl_cartpole"
    easy, hard = reference.target(family, 0.5, 0.9), reference.target(family, 0.5, 0.2)
    assert hard <= easy
    runs = np.flatnonzero(bank.family == family)
    step = int(np.ceil(0.5 * DEFAULT_RECIPE.typical_run_steps))
    best = [bank.reported_losses(int(i), reference.rate[family], steps=step).min() for i in runs]
    assert np.mean(np.array(best) <= easy) >= 0.9 - 1 / runs.size  # a share q of reference runs got there (interpolated quantile)
    with pytest.raises(ValueError, match="no reference runs of family 'charlm'"):
        reference.target("charlm", 0.5, 0.5)
    rng = np.random.default_rng(2)  # the batched targets equal the one-by-one ones exactly
    family = bank.family[rng.integers(0, len(bank), 600)]
    share, level = rng.uniform(0.15, 1.0, 600), rng.uniform(0.4, 0.95, 600)
    assert np.array_equal(reference.targets(family, share, level), [reference.target(f, u, q) for f, u, q in zip(family, share, level)])


@pytest.mark.parametrize("bad, match", [({"budget_share": (0.0, 1.0)}, "budget_share"), ({"slack": (3.0, 1.0)}, "slack"),
                                        ({"target_quantile": (0.5, 1.5)}, "target_quantile"), ({"typical_run_steps": 0}, "typical_run_steps"),
                                        ({"rate_spread": "wide"}, "rate_spread")])
def test_bad_recipes_raise_naming_the_field(bad, match):
    with pytest.raises(ValueError, match=match):
        TaskRecipe(**bad)


@pytest.mark.parametrize("task_set", SUITE_TASK_SETS)
def test_stored_milp_ceilings_cover_every_committed_episode(task_set):
    for load in LOADS:
        ceilings = suite_ceilings(task_set, load)
        meta = suite_meta(task_set, load)
        assert len(ceilings) == meta["roots"] * meta["episodes"]
        for (root, episode), c in ceilings.items():
            workload = load_suite(task_set, load, root, episode)
            assert c["arrived"] == len(workload) and c["completed"] <= c["bound"] + 1e-9
            assert c["completed"] <= int(workload.independently_feasible.sum())


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
    env = discrete_core_v1.parallel_env(task_set="stress", n_nodes=4, n_slots=16, reward="sparse")
    env.reset(seed=0)
    sim = env.episode.sim
    while env.agents:  # serve the learners (curve 0), earliest deadline first
        slots = [k for k in np.argsort(sim.deadline[0], kind="stable") if sim.active[0, k] and sim.curve[0, k] == 0]
        actions = {f"node_{i}": int(slots[i]) + 1 if i < len(slots) else 0 for i in range(4)}
        _, _, terms, _, infos = env.step(actions)
    assert all(terms.values()) and infos["node_0"]["completion_rate"] == pytest.approx(0.65)
