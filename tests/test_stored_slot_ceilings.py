"""The stored K-slot ceilings of the committed suites (``python -m benchmarks ceilings``): every stored
schedule achieves its stored value in the env, and per episode clairvoyant ≤ K-slot ≤ slot-relaxed."""

from __future__ import annotations

import numpy as np
import pytest

from core_env.config import LOADS, EnvConfig
from core_env.ceilings import read_slot_schedules, schedule_key, suite_ceilings, suite_slot_ceilings
from core_env.suites import SUITE_TASK_SETS, load_suite, suite_cells
from mara_agents.slot_ceiling import OPTIMAL, replay

SUITES = [(t, load) for load in LOADS for t in SUITE_TASK_SETS]


@pytest.fixture(scope="module")
def schedules() -> dict[str, np.ndarray]:
    return read_slot_schedules()  # verified against slot_manifest.json


@pytest.mark.parametrize(("task_set", "load"), SUITES)
def test_every_stored_schedule_achieves_its_stored_value_within_the_stored_bounds(task_set, load, schedules):
    import hashlib

    stored, relaxed = suite_slot_ceilings(task_set, load), suite_ceilings(task_set, load)
    n_slots = EnvConfig().n_slots
    for root, episode in suite_cells(task_set, load):
        entry, schedule = stored[(root, episode)], schedules[schedule_key(task_set, load, root, episode)]
        assert entry["schedule_sha256"] == hashlib.sha256(np.ascontiguousarray(schedule, np.uint16).tobytes()).hexdigest()
        played = replay(load_suite(task_set, load, root, episode), schedule.astype(np.int64), 4, n_slots)
        assert played["completed"] == entry["completed"] and played["arrived"] == entry["arrived"]
        assert max(entry["greedy"], entry.get("parked", 0)) <= entry["completed"] <= entry["bound"] <= relaxed[(root, episode)]["bound"]
        assert entry["completed"] <= relaxed[(root, episode)]["completed"]  # the relaxed optimum (proven) is above any K-slot schedule
        assert (entry["status"] == OPTIMAL) == (entry["completed"] == entry["bound"])
        assert entry["gap"] == pytest.approx((entry["bound"] - entry["completed"]) / max(entry["bound"], 1.0))


@pytest.mark.parametrize("load", ["train", "x2"])
def test_the_k_slot_ceiling_is_at_least_the_clairvoyant_row_on_every_episode(load):
    from benchmarks.agents import make_agent
    from benchmarks.rollout import run_agent

    for task_set in SUITE_TASK_SETS:
        cells = suite_cells(task_set, load)
        played = run_agent(make_agent("clairvoyant"), [load_suite(task_set, load, r, e) for r, e in cells], EnvConfig(task_set=task_set, load=load))
        stored = suite_slot_ceilings(task_set, load)
        assert all(stored[c]["completed"] >= int(done) for c, done in zip(cells, played["completed"]))


def test_the_published_ceilings_table_counts_what_is_stored():
    from benchmarks.ceilings import PROVEN_GAP, table

    text = table()
    every = []
    for task_set, load in SUITES:
        stored = list(suite_slot_ceilings(task_set, load).values())
        every += stored
        row = next(line for line in text.splitlines() if line.startswith(f"| {task_set}/{load} |")).split("|")
        assert int(row[2]) == len(stored) and int(row[3]) == sum(e["status"] == OPTIMAL for e in stored)
        assert int(row[4]) == sum(e["gap"] <= PROVEN_GAP for e in stored)
    assert f"{sum(e['gap'] <= PROVEN_GAP for e in every)} of {len(every)} episodes within" in text


def test_a_cached_milp_slots_cell_is_recomputed_when_the_stored_ceilings_improve(monkeypatch):
    import core_env.workload as workload
    from benchmarks.cells import Cell

    cell, other = Cell("milp-slots", "id", "train", 0), Cell("edf", "id", "train", 0)
    before, edf_before, root1_before = cell.key, other.key, Cell("milp-slots", "id", "train", 1).key
    stored = workload.suite_slot_ceilings("id", "train")
    improved = {k: ({**v, "completed": v["completed"] + 1} if k == (0, 1) else v) for k, v in stored.items()}
    monkeypatch.setattr(workload, "suite_slot_ceilings", lambda task_set, load: improved)
    assert cell.key != before  # root 0's entries changed
    assert Cell("milp-slots", "id", "train", 1).key == root1_before  # root 1's entries did not change
    assert other.key == edf_before  # other rows keep their keys
