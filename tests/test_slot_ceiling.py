"""The K-slot ceiling: exact against an exhaustive search through the simulator where the slots bind, its
schedule achieves its value when replayed in the env, and the stored ceilings of the committed suites hold
what they claim (replayed schedules, clairvoyant ≤ K-slot ≤ slot-relaxed)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_ceilings import unit_tasks

from core_env.config import EnvConfig
from core_env.sim import Simulator
from core_env.workload import Workload
from mara_agents.bounds import milp_ceiling, milp_chosen
from mara_agents.slot_ceiling import INTERVAL, OPTIMAL, greedy_schedule, parked_schedule, replay, slot_ceiling

pytest.importorskip("ortools", reason="the K-slot ceiling's search needs the `ceilings` extra (installed by `make setup`)")


def exhaustive(workload: Workload, n_nodes: int, n_slots: int) -> int:
    """Most completions over every action sequence, each played through the simulator itself (states met
    twice, same step and same slot contents and progress, are expanded once). Tiny instances only."""
    config = EnvConfig(n_nodes=n_nodes, n_slots=n_slots, arrival_steps=workload.arrival_steps, max_cycles=int(workload.deadline.max()) + 1)

    def play(prefix: tuple) -> Simulator:
        sim = Simulator(config)
        sim.reset([workload])
        for actions in prefix:
            sim.step(np.array([actions], np.int64))
        return sim

    best: dict[tuple, int] = {}

    def search(prefix: tuple) -> int:
        sim = play(prefix)
        done_now = int(sim.stats["completed"][0])
        if sim.done[0]:
            return done_now
        key = (int(sim.t[0]), tuple(sim.task[0].tolist()), tuple(sim.steps[0].tolist()), tuple(sim.active[0].tolist()))
        if key not in best:
            live = [k + 1 for k in np.flatnonzero(sim.active[0])]
            choices = set()
            for size in range(min(n_nodes, len(live)) + 1):
                for chosen in itertools.combinations(live, size):
                    choices.add(tuple(chosen) + (0,) * (n_nodes - size))
            best[key] = max(search(prefix + (c,)) for c in sorted(choices)) - done_now
        return done_now + best[key]

    return search(())


def test_the_slot_limit_turns_away_arrivals_and_the_ceiling_follows():
    # one node; all four arrive at 0. L needs 3 steps before 3, S1..S3 one step each before 4.
    workload = unit_tasks((0, 3, 3), (0, 4, 1), (0, 4, 1), (0, 4, 1))
    # K = 1: L takes the only slot, the rest are rejected; K = 2: L and S1 (both finish); K = 4: the three S
    for n_slots, expected in ((1, 1), (2, 2), (4, 3)):
        ceiling = slot_ceiling(workload, 1, n_slots)
        assert ceiling.completed == expected and ceiling.gap == 0
        assert replay(workload, ceiling.schedule, 1, n_slots)["completed"] == expected
    assert milp_ceiling(workload, 1).completed == 3  # the slot-relaxed MILP is only an upper bound at K < 4


def test_an_optimal_schedule_can_hold_a_slot_to_turn_away_a_hopeless_task():
    # K = 1, one node. A (needs 2, window [0, 4)) and then H at 2, which can never finish (needs 5 in a
    # window of 3), and C at 3 (needs 1 by 5). Finishing A at step 1 frees the slot for H, which blocks C:
    # 1 completion. Serving A at steps 0 and 2 keeps the slot full when H arrives, so H is rejected,
    # and A's slot is free for C at 3: 2 completions. The MILP must find the second.
    workload = unit_tasks((0, 4, 2), (2, 5, 5), (3, 5, 1))
    ceiling = slot_ceiling(workload, 1, 1)
    assert ceiling.completed == 2 == exhaustive(workload, 1, 1)
    played = replay(workload, ceiling.schedule, 1, 1)
    assert played["completed"] == 2 and played["rejected"] == 1


def test_parking_the_last_service_turns_away_the_hopeless_task():
    # the instance above: the greedy (clairvoyant) rule finishes A at once and loses C; parking A's last
    # service until C's arrival needs the slot keeps it full when H arrives
    workload = unit_tasks((0, 4, 2), (2, 5, 5), (3, 5, 1))
    assert sorted(milp_chosen(workload, 1).tolist()) == [0, 2]
    assert replay(workload, greedy_schedule(workload, 1, 1), 1, 1)["completed"] == 1
    parked = parked_schedule(workload, 1, 1, [0, 2])
    assert parked.tolist() == [[0, 0], [2, 0], [4, 2]]  # C, one service short from arrival, is parked too
    assert replay(workload, parked, 1, 1)["completed"] == 2


def test_a_preference_picks_among_the_optimal_task_sets_never_a_smaller_one():
    # one node: A and B both need step 0, C needs step 1 (or 2); any optimum completes two tasks
    workload = unit_tasks((0, 1, 1), (0, 1, 1), (1, 3, 1))
    assert sorted(milp_chosen(workload, 1, prefer=np.array([1.0, 0.0, 0.0])).tolist()) == [0, 2]
    assert sorted(milp_chosen(workload, 1, prefer=np.array([0.0, 1.0, 0.0])).tolist()) == [1, 2]
    assert len(milp_chosen(workload, 1, prefer=np.array([0.0, 0.0, -100.0]))) == 2  # C is never traded away


def test_parked_schedules_finish_every_parked_task_before_its_deadline():
    # many chosen tasks one service short with the same deadline: the rule serves them early enough
    workload = unit_tasks(*[(0, 6, 2)] * 6)
    parked = parked_schedule(workload, 2, 6, range(6))
    assert replay(workload, parked, 2, 6)["completed"] == 6


def test_parking_starts_the_search_well_above_the_greedy_rule_on_a_committed_episode():
    from core_env.workload import load_suite

    workload = load_suite("id", "train", 0, 1)
    chosen = milp_chosen(workload, 4)
    greedy = replay(workload, greedy_schedule(workload, 4, 16), 4, 16)["completed"]
    parked = replay(workload, parked_schedule(workload, 4, 16, chosen), 4, 16)["completed"]
    assert (len(chosen), greedy, parked) == (166, 147, 162)  # the slot-relaxed optimum, the two rules (module docstring)


def small_instances(stream: int, count: int = 24):
    """``count`` seeded tiny episodes (4–7 tasks, 1–2 nodes, 1–2 slots): (tasks, workload, nodes, slots)."""
    for seed in range(count):
        rng = np.random.default_rng([stream, seed])
        n_nodes, n_slots = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        tasks = []
        for _ in range(int(rng.integers(4, 8))):
            a = int(rng.integers(0, 5))
            tasks.append((a, a + int(rng.integers(1, 6)), int(rng.integers(1, 5))))
        tasks.sort(key=lambda t: t[0])
        yield tasks, unit_tasks(*tasks), n_nodes, n_slots


def test_slot_ceiling_equals_exhaustive_search_through_the_simulator():
    binding = 0
    for seed, (tasks, workload, n_nodes, n_slots) in enumerate(small_instances(28)):
        ceiling = slot_ceiling(workload, n_nodes, n_slots, workers=1)
        assert ceiling.gap == 0 and ceiling.status == OPTIMAL
        assert ceiling.completed == exhaustive(workload, n_nodes, n_slots), (seed, tasks, n_nodes, n_slots)
        assert replay(workload, ceiling.schedule, n_nodes, n_slots)["completed"] == ceiling.completed
        relaxed = milp_ceiling(workload, n_nodes).completed
        assert ceiling.completed <= relaxed
        binding += ceiling.completed < relaxed
    assert binding >= 8  # the slot limit binds in many of these instances (14 of 24 when written)


def test_a_search_resumed_from_its_stored_schedule_skips_the_parking_starts_and_keeps_the_optimum():
    for tasks, workload, n_nodes, n_slots in small_instances(29, count=8):
        first = slot_ceiling(workload, n_nodes, n_slots, workers=1)
        again = slot_ceiling(workload, n_nodes, n_slots, workers=1, hint=first.schedule, parking=False)
        assert again.completed == first.completed and again.status == OPTIMAL, tasks
        assert again.parked == replay(workload, first.schedule, n_nodes, n_slots)["completed"]  # the hint's value stands for the starts
    with pytest.raises(ValueError, match="parking=False needs a hint"):
        slot_ceiling(workload, n_nodes, n_slots, parking=False)


def test_replay_refuses_a_schedule_the_env_cannot_play():
    workload = unit_tasks((0, 3, 1), (0, 3, 1))
    with pytest.raises(ValueError, match="task 1 at step 0, but it holds no slot"):
        replay(workload, np.array([[0, 1]]), 1, 1)  # K = 1: task 1 was rejected
    with pytest.raises(ValueError, match="more than 1 nodes"):
        replay(workload, np.array([[0, 0], [0, 1]]), 1, 2)


@pytest.mark.parametrize(("nodes", "slots", "message"), [(0, 1, "n_nodes"), (1, 0, "n_slots"), (1, True, "n_slots"), (1.5, 2, "n_nodes")])
def test_bad_counts_raise(nodes, slots, message):
    with pytest.raises(ValueError, match=message):
        slot_ceiling(unit_tasks((0, 2, 1)), nodes, slots)


@pytest.mark.parametrize(("limit", "message"), [(0, "time_limit"), (float("nan"), "time_limit"), ("5", "time_limit")])
def test_bad_time_limits_raise(limit, message):
    with pytest.raises(ValueError, match=message):
        slot_ceiling(unit_tasks((0, 2, 1)), 1, 1, limit)


def _truncated(task_set: str, load: str, root: int, episode: int, steps: int) -> Workload:
    """The tasks of a committed episode arriving before ``steps``."""
    import dataclasses

    from core_env.workload import load_suite

    w = load_suite(task_set, load, root, episode)
    keep = w.arrival < steps
    fields = ("arrival", "deadline", "target", "batches_per_step", "curve", "demand")
    return dataclasses.replace(w, **{f: getattr(w, f)[keep] for f in fields}, arrival_steps=steps)


def test_the_greedy_start_is_the_clairvoyant_row_schedule():
    from benchmarks.agents import make_agent
    from benchmarks.rollout import run_agent
    from core_env.workload import load_suite

    workloads = [load_suite("vit_ood", "x2", 0, e) for e in range(2)] + [_truncated("vit_ood", "train", 1, 0, 150)]
    played = run_agent(make_agent("clairvoyant"), workloads, EnvConfig(n_nodes=4))
    greedy = [replay(w, greedy_schedule(w, 4, 16), 4, 16)["completed"] for w in workloads]
    assert greedy == played["completed"].astype(int).tolist()


def test_the_search_improves_on_the_greedy_start_and_never_claims_more_than_it_replays():
    # a committed episode cut to its first 160 steps of arrivals (59 tasks): the clairvoyant start completes
    # 46, the slot-relaxed optimum 47; the search finds a K-slot schedule completing 47, optimal (it meets the cap)
    workload = _truncated("id", "train", 0, 1, 160)
    relaxed = milp_ceiling(workload, 4)
    ceiling = slot_ceiling(workload, 4, 16, 30.0, upper_bound=relaxed.bound, workers=1)
    assert ceiling.greedy == 46 and relaxed.completed == 47
    assert ceiling.completed == ceiling.bound == 47 and ceiling.status == OPTIMAL
    assert replay(workload, ceiling.schedule, 4, 16)["completed"] == ceiling.completed
    assert ceiling.status == (OPTIMAL if ceiling.completed == ceiling.bound else INTERVAL)
    again = slot_ceiling(workload, 4, 16, 1.0, upper_bound=relaxed.bound, hint=ceiling.schedule, workers=1)
    assert again.completed >= ceiling.completed  # a stored schedule given as the hint is never lost
