"""The K-slot MILP (HiGHS): exact on small episodes where the slot limit binds, its schedules playable,
every schedule the env can play a feasible point of the program (so HiGHS's bound is a valid one)."""

from __future__ import annotations

import numpy as np
import pytest
from test_ceilings import unit_tasks
from test_slot_ceiling import _truncated, exhaustive, small_instances

from mara_agents.bounds import milp_ceiling, milp_chosen
from mara_agents.slot_ceiling import greedy_schedule, parked_schedule, replay

pytest.importorskip("highspy", reason="the K-slot MILP needs the `ceilings` extra (installed by `make setup`)")

from mara_agents.slot_milp import _Program, slot_milp  # noqa: E402


def _feasible(program: _Program, value: np.ndarray) -> bool:
    """``value`` meets every row, bound and integrality of ``program``."""
    activity = program.matrix @ value
    rows_ok = np.all(activity >= np.array(program.rows.lower) - 1e-9) and np.all(activity <= np.array(program.rows.upper) + 1e-9)
    bounds_ok = np.all(value >= program.lower - 1e-9) and np.all(value <= program.upper + 1e-9)
    return bool(rows_ok and bounds_ok and np.all(value[program.integer] == np.round(value[program.integer])))


def test_the_milp_keeps_a_slot_full_to_turn_away_a_hopeless_task():
    # K = 1, one node (tests/test_slot_ceiling.py): finishing A at once admits H, which never finishes and blocks C
    workload = unit_tasks((0, 4, 2), (2, 5, 5), (3, 5, 1))
    exact = slot_milp(workload, 1, 1, 10.0)
    assert (exact.claimed, exact.bound, exact.optimal) == (2, 2.0, True)
    assert replay(workload, exact.schedule, 1, 1)["completed"] == 2


def test_slot_milp_equals_exhaustive_search_where_the_slot_limit_binds():
    binding = 0
    for seed, (tasks, workload, n_nodes, n_slots) in enumerate(small_instances(29)):
        exact = slot_milp(workload, n_nodes, n_slots, 10.0)
        truth = exhaustive(workload, n_nodes, n_slots)
        assert exact.optimal and exact.claimed == exact.bound == truth, (seed, tasks, n_nodes, n_slots)
        assert replay(workload, exact.schedule, n_nodes, n_slots)["completed"] == truth
        binding += truth < milp_ceiling(workload, n_nodes).completed
    assert binding >= 8  # the slot limit binds in many of these instances


def test_every_playable_schedule_is_a_feasible_point_with_its_replayed_value():
    # a committed episode cut to its first 160 steps of arrivals: the greedy and parked rules' schedules,
    # written as the program's variables, meet every row, and the objective counts what the env completes
    workload = _truncated("id", "train", 0, 1, 160)
    program = _Program(workload, 4, 16)
    for schedule in (greedy_schedule(workload, 4, 16), parked_schedule(workload, 4, 16, milp_chosen(workload, 4))):
        value = program.values(schedule)
        assert _feasible(program, value)
        assert program.cost @ value == replay(workload, schedule, 4, 16)["completed"]
    # and a point the env cannot reach is not: admitting an arrival that found every slot full
    value = program.values(greedy_schedule(workload, 4, 16))
    rejected = np.flatnonzero(value[program.adm] == 0)
    assert rejected.size > 0
    value[program.adm[rejected[0]]] = 1.0
    assert not _feasible(program, value)


def test_a_start_is_kept_and_the_bound_never_falls_below_the_value():
    workload = _truncated("id", "train", 0, 1, 160)
    parked = parked_schedule(workload, 4, 16, milp_chosen(workload, 4))
    start = replay(workload, parked, 4, 16)["completed"]
    exact = slot_milp(workload, 4, 16, 30.0, upper_bound=milp_ceiling(workload, 4).bound, start=parked)
    achieved = replay(workload, exact.schedule, 4, 16)["completed"]
    assert exact.claimed == achieved >= start
    assert achieved <= exact.bound <= 47  # the slot-relaxed optimum caps the bound
    assert exact.optimal == (achieved == exact.bound)


@pytest.mark.parametrize(("nodes", "slots", "limit", "message"),
                         [(0, 1, 1.0, "n_nodes"), (1, True, 1.0, "n_slots"), (1, 1, 0.0, "time_limit"), (1, 1, float("inf"), "time_limit"),
                          (1, 1, "5", "time_limit")])
def test_bad_input_raises(nodes, slots, limit, message):
    with pytest.raises(ValueError, match=message):
        slot_milp(unit_tasks((0, 2, 1)), nodes, slots, limit)


def test_the_lp_bound_holds_and_the_slots_can_lower_it_below_the_relaxed_optimum():
    from mara_agents.slot_milp import slot_lp

    below = 0
    for seed, (tasks, workload, n_nodes, n_slots) in enumerate(small_instances(29)):
        lp = slot_lp(workload, n_nodes, n_slots, 10.0)
        bound, seconds = lp.bound, lp.seconds
        truth = exhaustive(workload, n_nodes, n_slots)
        assert bound is not None and bound == int(bound) and seconds >= 0
        assert truth <= bound <= np.sum(workload.deadline - workload.arrival >= 1), (seed, tasks)
        below += bound < milp_ceiling(workload, n_nodes).completed
    assert below >= 1  # where a slot is held, the relaxation of the exact rules already sees it


def test_the_lp_counts_where_it_escapes_the_slot_rule():
    from mara_agents.slot_milp import SlotLp, slot_lp

    from mara_agents.slot_hints import needed

    for tasks, workload, n_nodes, n_slots in small_instances(29):
        lp = slot_lp(workload, n_nodes, n_slots, 10.0)
        arrival, deadline, need = workload.arrival, workload.deadline, needed(workload)
        contested = sum(np.count_nonzero(deadline[:i] > arrival[i]) >= n_slots for i in range(len(workload)))
        steps = np.unique(arrival)  # a completion indicator per task that can finish and per arrival step after its least finish
        releases = sum(np.count_nonzero((steps >= a + n) & (steps < d)) for a, d, n in zip(arrival, deadline, need) if n <= d - a)
        assert (lp.contested, lp.releases) == (contested, releases), tasks
        assert 0 <= lp.fractional_admissions <= lp.contested and 0 <= lp.fractional_releases <= lp.releases, tasks
        assert lp.bound is not None
    hopeless = unit_tasks((0, 1, 2), (0, 1, 2))  # no task can finish: nothing to solve, the contested arrival still counted
    assert slot_lp(hopeless, 1, 1, 5.0) == SlotLp(0.0, 0.0, 1, 0, 0, 0)


def test_the_admission_rows_hold_on_playable_schedules_and_cut_the_lp(monkeypatch):
    # a committed x2 episode cut to its first 80 steps of arrivals: with every slot held most of the time, the LP
    # without the admission-order and freed-slot rows admits arrivals by 1/K fractions; the rows cut that off
    from mara_agents.slot_milp import slot_lp

    workload = _truncated("id", "x2", 0, 3, 80)
    program = _Program(workload, 4, 16)
    reached = []
    for schedule in (greedy_schedule(workload, 4, 16), parked_schedule(workload, 4, 16, milp_chosen(workload, 4))):
        assert _feasible(program, program.values(schedule))
        reached.append(replay(workload, schedule, 4, 16)["completed"])
    monkeypatch.setattr(_Program, "_lag_rows", lambda self: None)  # the admission rows alone
    with_rows = slot_lp(workload, 4, 16, 30.0)
    monkeypatch.setattr(_Program, "_admission_rows", lambda self: None)
    without = slot_lp(workload, 4, 16, 30.0)
    assert max(reached) <= with_rows.bound < without.bound
    assert with_rows.fractional_admissions < without.fractional_admissions


def test_a_completion_lag_row_cuts_a_slot_released_in_part_by_a_task_far_from_done(monkeypatch):
    # A (demand 4, window [0, 10)) served half a node per step over [0, 8); arrivals at 5, 6, 7 give it release
    # indicators there. The slot rows allow f_{A,t} = s_{A,t} / 4 (0.625, 0.75, 0.875: part of A's slot released
    # while it still needs 1.5 services); completing before 6 or 7 needs 3 or 2 services before 5, so the lag row
    # s_{A,5} >= 4 f_5 + 3 (f_6 - f_5) + 2 (f_7 - f_6) = 3.125 > 2.5 cuts the point off
    workload = unit_tasks((0, 10, 4), (5, 9, 9), (6, 9, 9), (7, 9, 9))
    point = {}
    for with_lag in (True, False):
        if not with_lag:
            monkeypatch.setattr(_Program, "_lag_rows", lambda self: None)
        program = _Program(workload, 1, 4)
        value = np.zeros(program.n_vars)
        value[program.adm] = 1.0
        value[program.z[0]] = 1.0
        value[program.x[0][:8]] = 0.5
        for t in (5, 6, 7):
            value[program.s[0][t]], value[program.f[0][t]] = 0.5 * t, 0.5 * t / 4
        program.integer[:] = False  # the LP relaxation's point
        point[with_lag] = _feasible(program, value)
    assert point == {True: False, False: True}


@pytest.mark.parametrize(("nodes", "slots", "limit", "message"), [(0, 1, 1.0, "n_nodes"), (1, 1, float("nan"), "time_limit")])
def test_the_lp_bound_rejects_bad_input(nodes, slots, limit, message):
    from mara_agents.slot_milp import slot_lp

    with pytest.raises(ValueError, match=message):
        slot_lp(unit_tasks((0, 2, 1)), nodes, slots, limit)


def test_the_window_search_reaches_the_optimum_from_a_poor_start_and_only_keeps_replayed_gains():
    from mara_agents.slot_windows import slot_windows

    improved = 0
    for seed, (tasks, workload, n_nodes, n_slots) in enumerate(small_instances(12)):
        start = np.zeros((0, 2), np.int64)  # serve nobody: 0 completions
        found = slot_windows(workload, n_nodes, n_slots, start, 20.0, window=2, window_seconds=2.0)
        truth = exhaustive(workload, n_nodes, n_slots)
        assert replay(workload, found.schedule, n_nodes, n_slots)["completed"] == found.completed <= truth, (seed, tasks)
        assert found.windows >= 1 and found.improved <= found.windows
        improved += found.completed == truth > 0
    assert improved >= 8  # windows of 2 steps that double on a pass without gains reach the optimum on most


def test_the_window_search_improves_a_committed_episode_from_the_clairvoyant_rule():
    from mara_agents.slot_windows import slot_windows

    workload = _truncated("id", "train", 0, 1, 160)
    greedy = greedy_schedule(workload, 4, 16)
    before = replay(workload, greedy, 4, 16)["completed"]
    found = slot_windows(workload, 4, 16, greedy, 30.0, window=20, window_seconds=5.0)
    assert found.completed > before and found.improved >= 1
    assert replay(workload, found.schedule, 4, 16)["completed"] == found.completed <= slot_milp(workload, 4, 16, 30.0).bound


def test_a_fractional_solution_is_read_as_at_most_n_services_per_step_those_with_the_largest_x():
    # x is continuous: 4 node-steps spread as 0.8 over 5 tasks at one step must not become 5 services
    workload = unit_tasks(*[(0, 3, 1)] * 5)
    program = _Program(workload, 4, 16)
    value = np.zeros(program.n_vars)
    for j, share in zip(range(5), (0.8, 0.8, 0.9, 0.7, 0.8)):
        value[program.x[j][0]] = share
    schedule = program.schedule(value)
    assert schedule.tolist() == [[0, 0], [0, 1], [0, 2], [0, 4]]  # the 0.7 dropped, ties in task order
    assert replay(workload, schedule, 4, 16)["completed"] == 4


def test_the_window_search_drops_a_candidate_the_simulator_refuses(monkeypatch):
    import mara_agents.slot_windows as windows

    workload = _truncated("id", "train", 0, 1, 160)
    greedy = greedy_schedule(workload, 4, 16)
    before = replay(workload, greedy, 4, 16)["completed"]
    calls = {"n": 0}

    def refusing(workload, schedule, n_nodes, n_slots):  # the start replays; every candidate is refused
        calls["n"] += 1
        if calls["n"] > 1:
            raise ValueError("the schedule serves 5 tasks at step 3, more than 4 nodes")
        return replay(workload, schedule, n_nodes, n_slots)

    monkeypatch.setattr("mara_agents.slot_ceiling.replay", refusing)
    monkeypatch.setattr(windows, "replay", refusing)
    found = windows.slot_windows(workload, 4, 16, greedy, 10.0, window=20, window_seconds=2.0)
    assert calls["n"] > 1 and found.improved == 0 and found.completed == before
    np.testing.assert_array_equal(found.schedule, greedy)


@pytest.mark.parametrize(("kwargs", "message"), [({"window": 1}, "window must be"), ({"window": 2.5}, "window must be"),
                                                 ({"window_seconds": 0.0}, "window_seconds"), ({"time_limit": float("nan")}, "time_limit")])
def test_the_window_search_rejects_bad_input(kwargs, message):
    from mara_agents.slot_windows import slot_windows

    arguments = {"time_limit": 1.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        slot_windows(unit_tasks((0, 2, 1)), 1, 1, np.zeros((0, 2), np.int64), **arguments)
