"""The MILP ceiling: exact on hand-made and brute-forced instances, never below a simulated schedule."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from conftest import tiny_workload

from benchmarks.rollout import run_agent
from core_env.config import EnvConfig
from core_env.curves import CurveBank
from core_env.generators import stress_workload
from core_env.suites import load_suite
from core_env.workload import Workload, draw_workload
from mara_agents.bounds import independent_feasibility_bound, milp_ceiling
from mara_agents.heuristics import Clairvoyant

#: A learner whose reported loss at unit rate after m node-steps is 1/(1 + m): target 1/(1 + n) needs n.
LEARNER = CurveBank("learner", [1.0 / (1.0 + np.arange(1, 65))], ["learner"])


def unit_tasks(*tasks: tuple[int, int, int]) -> Workload:
    """(arrival, deadline, demand) tasks on the learner at one batch per node-step."""
    rows = [(a, d, 1.0 / (1.0 + n) + 1e-12, 1.0) for a, d, n in tasks]
    workload = tiny_workload(rows, arrival_steps=max(a for a, _, _ in tasks) + 1, bank=LEARNER)
    assert list(workload.demand) == [n for _, _, n in tasks]
    return workload


def test_milp_finds_the_known_optimum_where_clairvoyant_edf_falls_short():
    # One node. L needs every step of [0, 3); S1..S3 need one step each before 4. Serving L (the earliest
    # deadline, feasible at t = 0) completes L and one S: 2. Skipping L completes the three S: 3.
    workload = unit_tasks((0, 3, 3), (0, 4, 1), (0, 4, 1), (0, 4, 1))
    ceiling = milp_ceiling(workload, n_nodes=1)
    assert ceiling.completed == 3 and ceiling.gap == 0 and ceiling.rate == pytest.approx(0.75)
    config = EnvConfig(task_set=LEARNER, n_nodes=1, n_slots=4, reward="sparse")
    assert run_agent(Clairvoyant(), [workload], config)["completed"][0] == 2


def brute_force(workload: Workload, n_nodes: int) -> int:
    """Most completions over every schedule (tiny instances only)."""
    arrival, deadline, demand = workload.arrival.tolist(), workload.deadline.tolist(), workload.demand.tolist()
    horizon = max(deadline)

    @functools.lru_cache(maxsize=None)
    def best(t: int, left: tuple[int, ...]) -> int:
        if t == horizon:
            return 0
        live = [k for k in range(len(left)) if left[k] > 0 and arrival[k] <= t < deadline[k]]
        top = 0
        for size in range(min(n_nodes, len(live)) + 1):
            for chosen in itertools.combinations(live, size):
                after = list(left)
                done = 0
                for k in chosen:
                    after[k] -= 1
                    done += after[k] == 0
                top = max(top, done + best(t + 1, tuple(after)))
        return top

    return best(0, tuple(int(n) if np.isfinite(n) else 10**6 for n in demand))


@pytest.mark.parametrize("seed", range(12))
def test_milp_equals_brute_force_on_tiny_random_instances(seed):
    rng = np.random.default_rng(seed)
    n_nodes = int(rng.integers(1, 3))
    tasks = []
    for _ in range(int(rng.integers(3, 7))):
        a = int(rng.integers(0, 4))
        tasks.append((a, a + int(rng.integers(1, 5)), int(rng.integers(1, 5))))
    tasks.sort()
    workload = unit_tasks(*tasks)
    assert milp_ceiling(workload, n_nodes).completed == brute_force(workload, n_nodes)


@pytest.mark.parametrize("seed", range(3))
def test_milp_is_at_least_clairvoyant_on_small_episodes(seed):
    from core_env.curves import bank_for

    workload = draw_workload(bank_for("id", "eval"), 0.15, 60, np.random.default_rng([9, seed]), n_nodes=2,
                             reference=bank_for("id", "train"))
    config = EnvConfig(n_nodes=2, n_slots=64, arrival_steps=60)
    clairvoyant = run_agent(Clairvoyant(), [workload], config)["completed"][0]
    ceiling = milp_ceiling(workload, 2)
    assert ceiling.gap == 0 and ceiling.completed >= clairvoyant
    assert ceiling.completed <= workload.independently_feasible.sum()


def test_milp_on_a_committed_episode_matches_its_stored_value():
    from core_env.ceilings import suite_ceilings

    stored = suite_ceilings("id", "train")[(0, 0)]
    ceiling = milp_ceiling(load_suite("id", "train", 0, 0), 4)
    assert ceiling.completed == stored["completed"] and ceiling.arrived == stored["arrived"]


def test_stress_ceiling_is_65_percent():
    assert milp_ceiling(stress_workload(4), 4).rate == pytest.approx(0.65)


def test_bad_node_counts_raise():
    with pytest.raises(ValueError, match="n_nodes must be an int >= 1"):
        milp_ceiling(stress_workload(4), 0)


def test_independent_feasibility_relaxation_grants_the_fastest_node():
    workload = unit_tasks((0, 3, 4), (0, 4, 4))  # the first needs 4 unit steps in a window of 3
    assert independent_feasibility_bound(workload) == 0.5
    assert independent_feasibility_bound(workload, speeds=(1.0, 2.0)) == 1.0  # at speed 2 it needs 3 (interval means)


def test_ceilings_run_resumes_after_an_interruption_and_the_reader_checks_checksums(tmp_path, monkeypatch):
    import json

    from benchmarks import ceilings
    from core_env import ceilings as wl
    from mara_agents.bounds import Ceiling

    path = tmp_path / "ceilings.json"  # its manifest beside it, written with it
    monkeypatch.setattr(ceilings, "CEILINGS_PATH", path)
    monkeypatch.setattr(wl, "CEILINGS_PATH", path)
    solved = []

    def fake(workload, n_nodes, time_limit):
        if len(solved) == 5:
            raise KeyboardInterrupt  # the run is stopped after 5 episodes
        solved.append(len(workload))
        return Ceiling(1, 1.0, len(workload), 0.0, 0.0, "fake")

    monkeypatch.setattr(ceilings, "milp_ceiling", fake)
    with pytest.raises(KeyboardInterrupt):
        ceilings.solve(["id"], ["train"])
    assert len(json.loads(path.read_text())["id__train.npz"]["episodes"]) == 5  # every finished episode kept
    with pytest.raises(ValueError, match="lack root 1 episode 1"):
        wl.suite_ceilings("id", "train")
    solved.clear()
    monkeypatch.setattr(ceilings, "milp_ceiling", lambda w, n, t: (solved.append(1), Ceiling(1, 1.0, len(w), 0.0, 0.0, "fake"))[1])
    ceilings.solve(["id"], ["train"])
    assert len(solved) == 35  # only the episodes left
    assert len(wl.suite_ceilings("id", "train")) == 40
    store = json.loads(path.read_text())
    store["id__train.npz"]["sha256"] = "0" * 64  # solved for another version of the suite file
    ceilings.write_stored({path: json.dumps(store).encode()})
    with pytest.raises(ValueError, match="another version of the file"):
        wl.suite_ceilings("id", "train")


def test_slot_ceilings_run_resumes_and_a_longer_run_starts_from_the_stored_schedules(tmp_path, monkeypatch):
    import json

    import numpy as np

    from benchmarks import ceilings
    from core_env import ceilings as wl
    from mara_agents import slot_ceiling as sc

    paths = {"SLOT_CEILINGS_PATH": tmp_path / "slot_ceilings.json", "SLOT_SCHEDULES_PATH": tmp_path / "slot_schedules.npz"}
    for name, path in paths.items():
        monkeypatch.setattr(ceilings, name, path)
        monkeypatch.setattr(wl, name, path)
    calls, stop_after, caps = [], [3], []

    def fake(workload, n_nodes, n_slots, time_limit, upper_bound=None, hint=None, workers=2, parking=True):
        if stop_after and len(calls) == stop_after[0]:
            raise KeyboardInterrupt  # stopped after 3 episodes
        caps.append(upper_bound)
        calls.append((time_limit, None if hint is None else hint.tolist(), parking))
        schedule = np.array([[0, 0]]) if hint is None else np.vstack([hint, [[1, 0]]])
        return sc.SlotCeiling(len(schedule), float(upper_bound), len(workload), 0.0, 1.0, sc.INTERVAL, schedule, 0, 0)

    monkeypatch.setattr(sc, "slot_ceiling", fake)
    with pytest.raises(KeyboardInterrupt):
        ceilings.solve_slots(["id"], ["train"], 5.0)
    assert len(json.loads(paths["SLOT_CEILINGS_PATH"].read_text())["id__train.npz"]["episodes"]) == 3
    with pytest.raises(ValueError, match="K-slot ceilings of id__train.npz lack root 0 episode 3"):
        wl.suite_slot_ceilings("id", "train")
    calls.clear()
    stop_after.clear()
    ceilings.solve_slots(["id"], ["train"], 5.0)
    assert len(calls) == 37 and all(hint is None and parking for _, hint, parking in calls)  # only the episodes left, from every start
    assert len(wl.suite_slot_ceilings("id", "train")) == 40
    calls.clear()
    ceilings.solve_slots(["id"], ["train"], 5.0)
    assert calls == []  # every episode searched for this long already
    ceilings.solve_slots(["id"], ["train"], 20.0)  # longer: every episode again, from its stored schedule
    # searched from the parking rule before: its best is the hint, the parking starts are not solved again
    assert len(calls) == 40 and all(limit == 20.0 and hint == [[0, 0]] and not parking for limit, hint, parking in calls)
    stored = wl.suite_slot_ceilings("id", "train")[(0, 0)]
    assert stored["completed"] == 2 and stored["time_limit"] == 20.0 and stored["seconds"] == 2.0
    store = wl.read_slot_ceilings()
    del store["id__train.npz"]["episodes"]["0/1"]["milp_seconds"]  # searched before the MILP existed
    relaxed = store["id__train.npz"]["episodes"]["0/1"]["relaxed_bound"]
    assert relaxed > 3.0 and store["id__train.npz"]["episodes"]["0/1"]["bound"] == relaxed  # searched so far under the relaxed optimum
    store["id__train.npz"]["episodes"]["0/1"]["bound"] = 3.0  # as if an earlier search had proven 3
    ceilings.write_slot_files(store, wl.read_slot_schedules())  # with its manifest (a hand edit fails the checksum)
    calls.clear()
    ceilings.solve_slots(["id"], ["train"], 20.0)
    assert len(calls) == 1 and calls[0][1] is not None  # only that episode, again from its stored schedule
    assert caps[-1] == 3.0 and wl.suite_slot_ceilings("id", "train")[(0, 1)]["bound"] == 3.0  # the proof caps it, and stays


def _stored_intervals(tmp_path, monkeypatch, stage) -> None:
    """Point the K-slot files at ``tmp_path``, check that ``stage`` names the missing file, then store id/train's 40
    episodes as intervals: 1 completion by the schedule [[0, 0]], the slot-relaxed optimum as the bound."""
    import numpy as np

    from benchmarks import ceilings
    from core_env import ceilings as wl
    from mara_agents import slot_ceiling as sc

    paths = {"SLOT_CEILINGS_PATH": tmp_path / "slot_ceilings.json", "SLOT_SCHEDULES_PATH": tmp_path / "slot_schedules.npz"}
    for name, path in paths.items():
        monkeypatch.setattr(ceilings, name, path)
        monkeypatch.setattr(wl, name, path)
    with pytest.raises(ValueError, match="slot_ceilings.json"):  # nothing stored yet: the file is named
        stage(["id"], ["train"], 5.0)

    def search(workload, n_nodes, n_slots, time_limit, upper_bound=None, hint=None, workers=2, parking=True):
        return sc.SlotCeiling(1, float(upper_bound), len(workload), 0.0, 1.0, sc.INTERVAL, np.array([[0, 0]]), 0, 0)

    monkeypatch.setattr(sc, "slot_ceiling", search)
    ceilings.solve_slots(["id"], ["train"], 5.0)


def test_lp_bounds_lower_the_stored_intervals_resume_and_survive_a_later_search(tmp_path, monkeypatch):
    from benchmarks import ceilings
    from core_env import ceilings as wl
    from mara_agents import slot_milp

    _stored_intervals(tmp_path, monkeypatch, ceilings.tighten_slot_bounds)
    calls = []

    def lp(workload, n_nodes, n_slots, time_limit):
        calls.append(time_limit)
        bound = None if len(calls) == 2 else 1.0 if len(calls) == 3 else 3.0 if len(calls) > 99 else 2.0  # not reached once; the schedule's value once
        counts = (0, 0, 0, 0) if bound is None else (1, 1, 1, 1) if len(calls) == 1 else (9, 0, 9, 0)
        return slot_milp.SlotLp(bound, 3.0, *counts)

    monkeypatch.setattr(slot_milp, "slot_lp", lp)
    ceilings.tighten_slot_bounds(["id"], ["train"], 5.0)
    assert len(calls) == 40
    stored = wl.suite_slot_ceilings("id", "train")  # verified on read: the manifest was written with the file
    assert stored[(0, 0)]["bound"] == 2.0 and stored[(0, 0)]["lp_bound"] == 2.0 and stored[(0, 0)]["gap"] == 0.5
    assert [stored[(0, 0)][field] for field in ceilings.LP_FIELDS] == [1, 1, 1, 1]  # where the relaxation escapes the slots
    assert "lp_bound" not in stored[(0, 1)] and stored[(0, 1)]["bound"] == stored[(0, 1)]["relaxed_bound"]  # not reached: kept
    assert not any(field in stored[(0, 1)] for field in ceilings.LP_FIELDS)
    assert stored[(0, 2)]["bound"] == 1.0 and stored[(0, 2)]["status"] == "optimal"  # meets the schedule: proven
    text = ceilings.table()  # pooled over episodes (1 of 1 + 38 x 0 of 9), not a mean of per-episode shares (2.6 %)
    assert "at load train (39 episodes) 1 of the 343 arrivals that may meet every slot held (0 %) are admitted in part" in text
    assert "1 of its 343 completion indicators (0 %) are fractional" in text
    calls.clear()
    ceilings.tighten_slot_bounds(["id"], ["train"], 5.0)
    assert calls == []  # every episode has its LP bound, or was tried this long
    ceilings.tighten_slot_bounds(["id"], ["train"], 10.0)
    assert len(calls) == 1  # the one not reached, with more time
    store = wl.read_slot_ceilings()  # a bound stored before the counts existed: solved again for them
    for field in ceilings.LP_FIELDS:
        store["id__train.npz"]["episodes"]["0/3"].pop(field)
    ceilings.write_slot_files(store)
    calls[:] = [0]  # the next try does not reach the bound: the stored proof and its time limit stay
    ceilings.tighten_slot_bounds(["id"], ["train"], 10.0)
    again = wl.suite_slot_ceilings("id", "train")[(0, 3)]
    assert len(calls) == 2 and again["lp_bound"] == 2.0 and again["lp_time_limit"] == 5.0 and again["lp_counts_time_limit"] == 10.0
    ceilings.tighten_slot_bounds(["id"], ["train"], 10.0)
    assert len(calls) == 2  # tried this long for the counts: not again
    calls[:] = [0] * 99  # the next try reaches a larger bound (3): the counts are recorded, the smaller proof kept
    ceilings.tighten_slot_bounds(["id"], ["train"], 12.0)
    again = wl.suite_slot_ceilings("id", "train")[(0, 3)]
    assert len(calls) == 100 and again["lp_contested"] == 9 and again["lp_bound"] == again["bound"] == 2.0
    ceilings.solve_slots(["id"], ["train"], 20.0)  # a longer search whose own bound is the relaxed one
    stored = wl.suite_slot_ceilings("id", "train")
    assert stored[(0, 0)]["bound"] == 2.0 and stored[(0, 0)]["time_limit"] == 20.0  # the LP proof stays
    assert [stored[(0, 0)][field] for field in ceilings.LP_FIELDS] == [1, 1, 1, 1]  # and so do its counts
    assert stored[(0, 0)]["lp_program"] == slot_milp.PROGRAM  # and the program they were solved with
    store = wl.read_slot_ceilings()  # a bound solved with an older program (fewer rows): solved again
    store["id__train.npz"]["episodes"]["0/0"]["lp_program"] = slot_milp.PROGRAM - 1
    ceilings.write_slot_files(store)
    calls[:] = [0] * 99  # the next try reaches 3 with counts (9, 0, 9, 0): the counts are the new program's, the proof 2 stays
    ceilings.tighten_slot_bounds(["id"], ["train"], 12.0)
    again = wl.suite_slot_ceilings("id", "train")[(0, 0)]
    assert len(calls) == 100 and again["lp_program"] == slot_milp.PROGRAM and again["lp_contested"] == 9 and again["bound"] == 2.0

    monkeypatch.setattr(slot_milp, "slot_lp", lambda *args: slot_milp.SlotLp(0.0, 1.0, 0, 0, 0, 0))
    store = wl.read_slot_ceilings()
    store["id__train.npz"]["episodes"]["0/3"].pop("lp_bound", None)
    store["id__train.npz"]["episodes"]["0/3"]["lp_time_limit"] = 0.0
    ceilings.write_slot_files(store, wl.read_slot_schedules())
    with pytest.raises(RuntimeError, match="below a replayed schedule"):
        ceilings.tighten_slot_bounds(["id"], ["train"], 5.0)


@pytest.mark.parametrize("search", ["windows", "sets"])
def test_lower_end_searches_raise_stored_lower_ends_resume_and_refuse_a_value_above_the_bound(tmp_path, monkeypatch, search):
    import importlib

    import numpy as np

    from benchmarks import ceilings
    from core_env import ceilings as wl

    module_name, function, (seconds_field, limit_field, improved_field) = ceilings.LOWER_END_SEARCHES[search]
    module = importlib.import_module(module_name)
    result = {"windows": module.__dict__.get("SlotWindows"), "sets": module.__dict__.get("SlotSets")}[search]

    def improve(task_sets, loads, time_limit):
        return ceilings.improve_slot_schedules(task_sets, loads, time_limit, search=search)

    _stored_intervals(tmp_path, monkeypatch, improve)
    bounds = {key: e["bound"] for key, e in wl.suite_slot_ceilings("id", "train").items()}
    calls = []

    def run(workload, n_nodes, n_slots, start, time_limit):
        calls.append(start.tolist())
        better = len(calls) == 1  # the first episode gains one completion; the others none
        return result(np.array([[0, 0], [1, 0]]) if better else start, 2 if better else 1, 9, int(better), 4.0)

    monkeypatch.setattr(module, function, run)
    improve(["id"], ["train"], 5.0)
    assert len(calls) == 40 and calls[0] == [[0, 0]]  # every interval, from its stored schedule
    stored = wl.suite_slot_ceilings("id", "train")  # verified on read: the manifest was written with both files
    first = stored[(0, 0)]
    assert first["completed"] == 2 and first[improved_field] == 1 and first[limit_field] == 5.0
    assert first["gap"] == pytest.approx((bounds[(0, 0)] - 2) / bounds[(0, 0)]) and first["bound"] == bounds[(0, 0)]
    assert first["seconds"] == pytest.approx(1.0 + 4.0)
    assert wl.read_slot_schedules()[wl.schedule_key("id", "train", 0, 0)].tolist() == [[0, 0], [1, 0]]
    assert stored[(0, 1)]["completed"] == 1 and stored[(0, 1)][improved_field] == 0
    calls.clear()
    improve(["id"], ["train"], 5.0)
    assert calls == []  # resumed: every episode searched this long
    ceilings.solve_slots(["id"], ["train"], 20.0)  # a longer search from the stored schedules keeps the search's record
    again = wl.suite_slot_ceilings("id", "train")[(0, 0)]
    assert again["time_limit"] == 20.0 and (again[limit_field], again[improved_field], again[seconds_field]) == (5.0, 1, 4.0)
    improve(["id"], ["train"], 5.0)
    assert calls == []  # so the search is not repeated for it either
    monkeypatch.setattr(module, function, lambda workload, n_nodes, n_slots, start, time_limit: result(start, 10**6, 1, 1, 1.0))
    with pytest.raises(RuntimeError, match="above the proven bound"):
        improve(["id"], ["train"], 10.0)
    with pytest.raises(ValueError, match="search must be one of"):
        ceilings.improve_slot_schedules(["id"], ["train"], 10.0, search="anneal")


def test_a_longer_slot_search_takes_the_widest_intervals_first(tmp_path, monkeypatch):
    from benchmarks import ceilings
    from core_env import ceilings as wl
    from mara_agents import slot_ceiling as sc

    _stored_intervals(tmp_path, monkeypatch, ceilings.tighten_slot_bounds)
    store = wl.read_slot_ceilings()  # three episodes proven within a few completions; the rest stay as wide as stored
    narrow = {"0/0": 1.5, "0/1": 1.0, "0/2": 2.0}
    for key, bound in narrow.items():
        store["id__train.npz"]["episodes"][key].update(bound=bound, status=sc.OPTIMAL if bound == 1.0 else sc.INTERVAL)
    ceilings.write_slot_files(store)
    gaps = {key: (e["bound"] - 1.0) / e["bound"] for key, e in store["id__train.npz"]["episodes"].items()}
    order = []

    def search(workload, n_nodes, n_slots, time_limit, upper_bound=None, hint=None, workers=2, parking=True):
        order.append(float(upper_bound))  # the cap is the stored bound: it names the episode's interval
        return sc.SlotCeiling(1, float(upper_bound), len(workload), 0.0, 1.0, sc.INTERVAL, np.array([[0, 0]]), 0, 0)

    monkeypatch.setattr(sc, "slot_ceiling", search)
    ceilings.solve_slots(["id"], ["train"], 20.0)
    assert len(order) == 39  # 0/1 is proven (bound 1 = its schedule's 1): settled
    searched = [(bound - 1.0) / bound for bound in order]
    assert searched == sorted(searched, reverse=True) and searched[-2:] == [gaps["0/2"], gaps["0/0"]]  # the narrow two last
    assert searched[0] == max(gaps.values())
