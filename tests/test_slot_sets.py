"""The search over the parking rule's chosen task set (mara_agents/slot_sets.py): its compiled rule is the rule of
mara_agents/slot_hints.py, and the schedules it returns are played by the simulator."""

import numpy as np
import pytest

from core_env.suites import load_suite
from mara_agents.slot_ceiling import replay
from mara_agents.slot_hints import greedy_schedule, parked_schedule
from mara_agents.slot_sets import parked_play, slot_sets


@pytest.mark.parametrize(("task_set", "load", "nodes", "slots"), [("id", "x2", 4, 16), ("rl_ood", "train", 4, 16), ("vit_ood", "x1.5", 2, 5)])
def test_the_compiled_rule_serves_what_the_parking_rule_serves(task_set, load, nodes, slots):
    workload = load_suite(task_set, load, 0, 1)
    rng = np.random.default_rng(3)
    for share in (0.2, 0.6, 1.0):
        chosen = rng.random(len(workload)) < share
        schedule, completed = parked_play(workload, nodes, slots, chosen)
        assert np.array_equal(schedule, parked_schedule(workload, nodes, slots, np.flatnonzero(chosen)))
        assert completed == replay(workload, schedule, nodes, slots)["completed"]
        rushed = chosen & (rng.random(len(workload)) < 0.3)  # rushing changes the order, never the rules: it replays
        schedule, completed = parked_play(workload, nodes, slots, chosen, rushed)
        assert completed == replay(workload, schedule, nodes, slots)["completed"]


def test_the_set_search_climbs_above_the_greedy_rule_and_its_schedule_replays():
    workload = load_suite("id", "x2", 0, 0)
    start = greedy_schedule(workload, 4, 16)
    before = replay(workload, start, 4, 16)["completed"]
    parked_play(workload, 4, 16, np.ones(len(workload), bool))  # compiled before the search's clock starts
    found = slot_sets(workload, 4, 16, start, 3.0)
    assert found.completed > before and found.improved == found.completed - before and found.moves > 0
    assert replay(workload, found.schedule, 4, 16)["completed"] == found.completed
    again = slot_sets(workload, 4, 16, found.schedule, 1.0)  # never below its start
    assert again.completed >= found.completed


def test_the_set_search_refuses_bad_input():
    workload = load_suite("id", "train", 0, 0)
    start = greedy_schedule(workload, 4, 16)
    for limit in (0, -1.0, float("inf"), True, "5"):
        with pytest.raises(ValueError, match="time_limit"):
            slot_sets(workload, 4, 16, start, limit)
    with pytest.raises(ValueError, match="n_slots"):
        slot_sets(workload, 4, 0, start, 1.0)
    with pytest.raises(ValueError, match="chosen must be one bool per task"):
        parked_play(workload, 4, 16, np.ones(3, bool))
    with pytest.raises(ValueError, match="rushed must be one bool per task"):
        parked_play(workload, 4, 16, np.ones(len(workload), bool), np.ones(2, bool))
    with pytest.raises(ValueError, match="holds no slot|start"):
        slot_sets(workload, 4, 16, np.array([[0, len(workload) - 1]]), 1.0)
