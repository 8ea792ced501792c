"""ceilings: the offline optima of every committed evaluation episode, stored with the suites.

``python -m benchmarks ceilings [--time-limit S] [--slot-time-limit S] [--only relaxed|slots|slot-bounds|slot-windows|slot-sets] [--task-sets ...] [--loads ...]``

1. **Slot-relaxed** (``milp`` row, an upper bound): :func:`mara_agents.bounds.milp_ceiling` (unit-speed
   nodes, K-slot limit dropped) per episode, into ``core_env/data/suites/ceilings.json``: per suite file,
   the sha256 of the file it was solved for, the node count, and per episode the best completions found,
   HiGHS's dual bound, the MIP gap and the solve time.
2. **K-slot** (``milp-slots`` row, the env's own rules): :func:`mara_agents.slot_ceiling.slot_ceiling`
   (OR-Tools CP-SAT, the ``ceilings`` extra) per episode, capped by the slot-relaxed bound, into
   ``slot_ceilings.json`` (per episode: ``completed``, the replayed value of the best schedule found;
   ``bound``, a proven upper bound; ``status`` ``optimal`` or ``interval``; the values of the greedy and the
   parking rule's schedules, the search's starts; the time limit and seconds) and the schedules themselves into ``slot_schedules.npz`` (one (S, 2)
   uint16 array of (step, task) services per episode, its sha256 in the JSON), so the stored value can be
   replayed in the env (tests/test_slot_ceiling.py does).

3. **LP bounds** (``--only slot-bounds``, :func:`tighten_slot_bounds`): the LP relaxation of the exact slot
   program (interior point, :func:`mara_agents.slot_milp.slot_lp`) for every stored K-slot interval:
   a proof below the slot-relaxed optimum where the slots bind, also where the search's branch and cut never
   finished its root (load x2); it lowers ``bound`` and stays through later searches. Each episode also records
   where the relaxation escapes the slot rule (:data:`LP_FIELDS`: contested arrivals and the fractional
   admissions among them, completion indicators and the fractional ones), which says why its bound sits near the
   slot-relaxed optimum at the heavy loads, and the program's version (``lp_program``,
   :data:`mara_agents.slot_milp.PROGRAM`): a bound solved with an older program is solved again (its rows cut less).
4. **Window search** (``--only slot-windows``, :func:`improve_slot_schedules`): from each stored K-slot interval's
   schedule, HiGHS re-solves one time window at a time with the rest fixed
   (:func:`mara_agents.slot_windows.slot_windows`); a schedule the simulator replays to more completions replaces
   the stored one. It raises ``completed`` where the whole program's search stalls (load x2).
5. **Set search** (``--only slot-sets``, ``improve_slot_schedules(search="sets")``): from the set of tasks each stored
   schedule completes, a local search over the parking rule's chosen task set (:func:`mara_agents.slot_sets.slot_sets`,
   the rule compiled); kept, like a window's, only when the simulator replays it to more completions. Stages 4 and 5
   search the episodes with the widest stored intervals first.

The three files' sha256 go into ``slot_manifest.json`` beside them, written with them (:func:`write_stored`;
Ctrl-C waits until a file and the manifest are both written).

Integrity: every read verifies the three files against their manifest and range-checks every entry of
both JSON files (:func:`core_env.ceilings.read_slot_ceilings`, :func:`~core_env.ceilings.read_ceilings`:
completed <= bound <= arrived, finite, >= 0); a file that fails is an error naming it (the command exits 2),
never overwritten or re-solved silently: restore it (``git checkout``) or delete it to solve again.

The ceilings are properties of the workloads, so they are solved once and committed; benchmarks read them
with :func:`core_env.ceilings.suite_ceilings` and :func:`core_env.ceilings.suite_slot_ceilings` (no
solver needed). The files are rewritten atomically after every episode, so an interrupted run resumes
where it stopped; episodes of a suite file whose checksum changed are solved again. A later run with a
larger ``--slot-time-limit`` searches again every K-slot episode not proven optimal that was searched for
less time, or searched before the MILP existed (no ``milp_seconds`` value), starting from its stored
schedule too (an episode searched from the parking rule's starts before skips them: its stored schedule is
their best or better) and capped by its stored bound, and keeps the best: stored values only improve. ``--workers W`` searches W episodes at once,
at most :func:`max_workers` (the CPUs this process may use: each search is CPU-bound and timed, so more workers
than CPUs would only shorten every search).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks import add_suite_selection
from core_env import npz
from core_env.config import LOADS, EnvConfig
from core_env.extras import needs
from core_env.ceilings import (CEILINGS_PATH, SLOT_CEILING_FIELDS, SLOT_CEILINGS_PATH, SLOT_SCHEDULES_PATH, ceilings_problem, read_ceilings,
                               read_slot_ceilings, read_slot_manifest, read_slot_schedules, schedule_key, slot_manifest_path, suite_ceilings)
from core_env.suites import SUITE_TASK_SETS, load_suite, suite_cells, suite_meta, suite_path, suite_sha256
from mara_agents.bounds import MILP_TIME_LIMIT, milp_ceiling
from mara_agents.slot_milp import PROGRAM

with needs(__name__):
    from tqdm import tqdm

#: Seconds of K-slot search per episode (parking starts, HiGHS's MILP, then CP-SAT): the training-load suites'
#: committed entries were searched with it; each entry stores its own ``time_limit``.
SLOT_TIME_LIMIT = 240.0


def max_workers() -> int:
    """The most K-slot searches at once (``--workers``): the CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _check_workers(workers: int) -> None:
    """ValueError unless ``workers`` is an int in [1, :func:`max_workers`]."""
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= max_workers():
        raise ValueError(f"workers must be an int in [1, {max_workers()}] (the CPUs this process may use), got {workers!r}")


def solve(task_sets: Sequence[str] = SUITE_TASK_SETS, loads: Sequence[str] = tuple(LOADS), time_limit: float = MILP_TIME_LIMIT) -> dict:
    """Fill ``ceilings.json`` for the given suites (resuming; a stored file that fails its checks raises
    ValueError, :func:`core_env.ceilings.read_ceilings`); returns its content."""
    store = read_ceilings(CEILINGS_PATH) if CEILINGS_PATH.exists() else {}
    for task_set in task_sets:
        for load in loads:
            name, sha, meta = suite_path(task_set, load).name, suite_sha256(task_set, load), suite_meta(task_set, load)
            entry = store.get(name)
            if entry is None or entry.get("sha256") != sha or entry.get("time_limit") != time_limit:
                entry = store[name] = {"sha256": sha, "n_nodes": meta["n_nodes"], "time_limit": time_limit, "slot_limit": "relaxed", "episodes": {}}
            for root, episode in tqdm(suite_cells(task_set, load), desc=f"MILP {task_set}/{load}", leave=False):
                key = f"{root}/{episode}"
                if key in entry["episodes"]:
                    continue
                c = milp_ceiling(load_suite(task_set, load, root, episode), meta["n_nodes"], time_limit)
                entry["episodes"][key] = {"completed": c.completed, "bound": c.bound, "arrived": c.arrived,
                                          "gap": c.gap, "seconds": round(c.seconds, 3), "status": c.status}
                write_stored({Path(CEILINGS_PATH): _json_bytes(store)})
    return store


def _sha(schedule: np.ndarray) -> str:
    if schedule.size and (schedule.min() < 0 or schedule.max() >= 2**16):
        raise ValueError("a K-slot schedule's steps and task indices must fit uint16 to be stored")
    return hashlib.sha256(np.ascontiguousarray(schedule, dtype=np.uint16).tobytes()).hexdigest()


def _solve_one(task_set: str, load: str, root: int, episode: int, n_nodes: int, n_slots: int, time_limit: float,
               upper_bound: float, hint: np.ndarray | None, cp_workers: int, parking: bool = True):
    from mara_agents.slot_ceiling import slot_ceiling

    return slot_ceiling(load_suite(task_set, load, root, episode), n_nodes, n_slots, time_limit, upper_bound=upper_bound,
                        hint=hint, workers=cp_workers, parking=parking)


class _Pool:
    """``run`` (default :func:`_solve_one`) over jobs, in this process (one worker) or in a process pool, yielding each job's
    tag and result as it ends."""

    def __init__(self, workers: int, run=_solve_one) -> None:
        from concurrent.futures import ProcessPoolExecutor

        self.run = run
        self.pool = ProcessPoolExecutor(max_workers=workers) if workers > 1 else None

    def __enter__(self) -> _Pool:
        return self

    def __exit__(self, *error) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)

    def results(self, jobs):
        from concurrent.futures import as_completed

        if self.pool is None:
            yield from ((tag, self.run(*args)) for tag, args in jobs)
            return
        futures = {self.pool.submit(self.run, *args): tag for tag, args in jobs}
        yield from ((futures[done], done.result()) for done in as_completed(futures))


def _relative_gap(completed: float, bound: float) -> float:
    """A stored K-slot interval's ``gap``: its width relative to its bound (at least 1)."""
    return (bound - completed) / max(bound, 1.0)


def _widest_first(job) -> float:
    """Sort key of a K-slot search job: episodes never searched first, then the widest stored intervals relative to
    their bound, so a run cut short has spent its time where the stored interval is widest."""
    (_, _, old), _ = job
    return -np.inf if old is None else -_relative_gap(old["completed"], old["bound"])


def _settled(old: dict | None, time_limit: float) -> bool:
    """Whether a stored K-slot episode needs no new search: proven optimal, or searched with every start and
    the MILP (``milp_seconds``) for at least ``time_limit``."""
    return old is not None and (old["status"] == "optimal" or (old["time_limit"] >= time_limit and "milp_seconds" in old))


#: What a window search records in an episode's entry (:func:`improve_slot_schedules`); a later search keeps it.
WINDOW_FIELDS = ("window_seconds", "window_time_limit", "windows_improved")
#: What a search over the parking rule's chosen task set records (``improve_slot_schedules(search="sets")``).
SET_FIELDS = ("sets_seconds", "sets_time_limit", "sets_improved")
#: The searches that raise the stored lower ends (``--only slot-windows``, ``--only slot-sets``): name → (module,
#: function, the fields it records: seconds, time limit, improvements).
LOWER_END_SEARCHES = {"windows": ("mara_agents.slot_windows", "slot_windows", WINDOW_FIELDS),
                      "sets": ("mara_agents.slot_sets", "slot_sets", SET_FIELDS)}
#: What an episode's entry records of the LP relaxation's optimum (:class:`mara_agents.slot_milp.SlotLp`'s counts).
LP_FIELDS = ("lp_contested", "lp_fractional_admissions", "lp_releases", "lp_fractional_releases")
#: What else an episode's entry keeps of its LP relaxation through a later search (the bound and its seconds are
#: written again by :func:`_lower_bound`).
LP_RECORD = ("lp_program", "lp_counts_time_limit")


def solve_slots(task_sets: Sequence[str] = SUITE_TASK_SETS, loads: Sequence[str] = tuple(LOADS), time_limit: float = SLOT_TIME_LIMIT,
                workers: int = 1) -> dict:
    """Fill ``slot_ceilings.json`` and ``slot_schedules.npz`` for the given suites (resuming, and improving
    episodes searched for less than ``time_limit`` or before the MILP existed); returns the JSON's content.
    ``workers`` episodes are searched at once (processes; CP-SAT then uses one thread each), at most
    :func:`max_workers`. Needs the slot-relaxed ceilings of the same suites (their bound caps the search).
    Stored files are read verified (a file that fails raises ValueError naming it) and written with their
    manifest (:func:`write_slot_files`). A stored episode's proven bound caps its new search (a longer search never
    loosens a proof, and stops when it reaches it)."""
    _check_workers(workers)
    store = read_slot_ceilings(SLOT_CEILINGS_PATH) if SLOT_CEILINGS_PATH.exists() else {}
    schedules = read_slot_schedules(SLOT_SCHEDULES_PATH) if SLOT_SCHEDULES_PATH.exists() else {}
    n_slots = EnvConfig().n_slots
    with _Pool(workers) as pool:
        for load in loads:  # every task set at the training load first: the rows most tables lead with
            for task_set in task_sets:
                name, sha, meta = suite_path(task_set, load).name, suite_sha256(task_set, load), suite_meta(task_set, load)
                relaxed = suite_ceilings(task_set, load)
                entry = store.get(name)
                if entry is None or entry.get("sha256") != sha or entry.get("n_slots") != n_slots:
                    entry = store[name] = {"sha256": sha, "n_nodes": meta["n_nodes"], "n_slots": n_slots, "episodes": {}}
                jobs = []
                for root, episode in suite_cells(task_set, load):
                    key, array_key = f"{root}/{episode}", schedule_key(task_set, load, root, episode)
                    old, stored = entry["episodes"].get(key), schedules.get(array_key)
                    valid = old is not None and stored is not None and old.get("schedule_sha256") == _sha(stored)
                    if valid and _settled(old, time_limit):
                        continue
                    parked_before = valid and "parked" in old  # searched from the parking rule already: its best is the hint
                    cap = min(relaxed[(root, episode)]["bound"], old["bound"]) if valid else relaxed[(root, episode)]["bound"]  # a proof stays
                    jobs.append(((key, array_key, old if valid else None),
                                 (task_set, load, root, episode, meta["n_nodes"], n_slots, time_limit, cap,
                                  stored.astype(np.int64) if valid else None, 1 if workers > 1 else 2, not parked_before)))
                jobs.sort(key=_widest_first)
                for (key, array_key, old), solved in tqdm(pool.results(jobs), total=len(jobs), desc=f"K-slot {task_set}/{load}", leave=False):
                    schedules[array_key] = solved.schedule.astype(np.uint16)
                    entry["episodes"][key] = {"completed": solved.completed, "bound": solved.bound, "arrived": solved.arrived, "gap": solved.gap,
                                              "status": solved.status, "greedy": solved.greedy,
                                              "parked": old["parked"] if old is not None and "parked" in old else solved.parked,
                                              "relaxed_bound": relaxed[tuple(map(int, key.split("/")))]["bound"], "time_limit": time_limit,
                                              "seconds": round(solved.seconds + (old["seconds"] if old else 0.0), 3),
                                              "milp_seconds": round(solved.milp_seconds, 3), "schedule_sha256": _sha(schedules[array_key])}
                    if old is not None:  # the records of a window search and of the LP relaxation stay with the episode
                        entry["episodes"][key].update({field: old[field] for field in (*WINDOW_FIELDS, *SET_FIELDS, *LP_FIELDS, *LP_RECORD) if field in old})
                    if old is not None and "lp_bound" in old:  # a proof already stored stays, whatever this search proved
                        _lower_bound(entry["episodes"][key], old["lp_bound"], old["lp_seconds"], old["lp_time_limit"])
                    write_slot_files(store, schedules)
    return store


def _bound_one(task_set: str, load: str, root: int, episode: int, n_nodes: int, n_slots: int, time_limit: float):
    from mara_agents.slot_milp import slot_lp

    return slot_lp(load_suite(task_set, load, root, episode), n_nodes, n_slots, time_limit)


def _lower_bound(episode: dict, lp_bound: float | None, seconds: float, time_limit: float, counts: Sequence[int] = (),
                 program: int | None = None) -> None:
    """Record an LP bound (None: not reached in ``time_limit``) in a stored K-slot episode, with ``counts`` (the
    :data:`LP_FIELDS`, when given), and lower its bound to it where it is smaller (gap and status follow). A stored
    LP bound is never replaced by a larger one, nor its seconds and time limit by a try that did not reach it
    (that try is kept as ``lp_counts_time_limit``: solved again for the counts only with more time). ``program``
    (:data:`mara_agents.slot_milp.PROGRAM`, when given) is stored as ``lp_program``; a newer one than the episode's
    drops the older program's counts first."""
    if program is not None and episode.get("lp_program", 1) != program:
        for field in (*LP_FIELDS, *LP_RECORD):
            episode.pop(field, None)
        episode["lp_program"] = program
    if lp_bound is None and "lp_bound" in episode:
        episode["lp_counts_time_limit"] = time_limit
        return
    episode.update(lp_seconds=round(seconds, 3), lp_time_limit=time_limit)
    if lp_bound is None:
        return
    episode.update(zip(LP_FIELDS, map(int, counts)))
    if lp_bound < episode["completed"]:
        raise RuntimeError(f"the LP bound {lp_bound} is below a replayed schedule's {episode['completed']} completions (a modelling error)")
    episode["lp_bound"] = min(lp_bound, episode.get("lp_bound", np.inf))
    if lp_bound < episode["bound"]:
        episode["bound"] = lp_bound
        episode["gap"] = _relative_gap(episode["completed"], lp_bound)
        episode["status"] = "optimal" if episode["completed"] >= lp_bound else "interval"


def _stored_suites(store: dict, task_sets: Sequence[str], loads: Sequence[str]):
    """(task_set, load, entry) of each selected suite's stored K-slot ceilings; ValueError naming the command to run
    when a suite has none for its committed file."""
    for load in loads:
        for task_set in task_sets:
            name = suite_path(task_set, load).name
            entry = store.get(name)
            if entry is None or entry.get("sha256") != suite_sha256(task_set, load):
                raise ValueError(f"{SLOT_CEILINGS_PATH} has no K-slot ceilings of the committed {name}; run "
                                 f"`python -m benchmarks ceilings --only slots --task-sets {task_set} --loads {load}` first")
            yield task_set, load, entry


def tighten_slot_bounds(task_sets: Sequence[str] = SUITE_TASK_SETS, loads: Sequence[str] = tuple(LOADS), time_limit: float = SLOT_TIME_LIMIT,
                        workers: int = 1) -> dict:
    """Lower the upper end of every stored K-slot interval of the given suites to the LP relaxation of the exact
    program (:func:`mara_agents.slot_milp.slot_lp`, at most ``time_limit`` seconds per episode; ``lp_bound``,
    ``lp_seconds``, ``lp_time_limit`` in the episode's entry), where the search's bound is the slot-relaxed optimum
    because HiGHS's branch and cut never finished its root (load x2) or never ran; the :data:`LP_FIELDS` record where
    the relaxation escapes the slot rule. Resumable: an episode with an LP bound and its counts, or tried with at
    least ``time_limit``, is skipped (an interval with a bound stored before the counts existed is solved again for them);
    stored schedules are not touched. Needs the K-slot ceilings of the suites (``--only slots`` first); returns
    the JSON's content."""
    _check_workers(workers)
    store = read_slot_ceilings(SLOT_CEILINGS_PATH)
    with _Pool(workers, _bound_one) as pool:
        for task_set, load, entry in _stored_suites(store, task_sets, loads):
            jobs = [(key, (task_set, load, *map(int, key.split("/")), entry["n_nodes"], entry["n_slots"], time_limit))
                    for key, episode in entry["episodes"].items()
                    if episode["status"] != "optimal" and _lp_missing(episode, time_limit)]
            for key, lp in tqdm(pool.results(jobs), total=len(jobs), desc=f"LP bound {task_set}/{load}", leave=False):
                _lower_bound(entry["episodes"][key], lp.bound, lp.seconds, time_limit,
                             (lp.contested, lp.fractional_admissions, lp.releases, lp.fractional_releases), PROGRAM)
                write_slot_files(store)
    return store


def _lp_missing(episode: dict, time_limit: float) -> bool:
    """Whether ``--only slot-bounds`` should solve an episode's LP relaxation: solved or tried with an older program
    than :data:`mara_agents.slot_milp.PROGRAM` (its rows cut less), no bound yet and not tried for ``time_limit``
    seconds, or a bound stored without the :data:`LP_FIELDS` and not tried for them that long."""
    if episode.get("lp_program", 1) < PROGRAM:
        return True
    if "lp_bound" in episode:
        return any(field not in episode for field in LP_FIELDS) and episode.get("lp_counts_time_limit", 0.0) < time_limit
    return episode.get("lp_time_limit", 0.0) < time_limit


def _lower_end_one(search: str, task_set: str, load: str, root: int, episode: int, n_nodes: int, n_slots: int, time_limit: float,
                   start: np.ndarray):
    import importlib

    module, function, _ = LOWER_END_SEARCHES[search]
    run = getattr(importlib.import_module(module), function)
    return run(load_suite(task_set, load, root, episode), n_nodes, n_slots, start, time_limit)


def improve_slot_schedules(task_sets: Sequence[str] = SUITE_TASK_SETS, loads: Sequence[str] = tuple(LOADS),
                           time_limit: float = SLOT_TIME_LIMIT, workers: int = 1, search: str = "windows") -> dict:
    """Raise the lower end of every stored K-slot interval of the given suites from its stored schedule by one of the
    :data:`LOWER_END_SEARCHES`, ``time_limit`` seconds per episode: ``windows`` re-solves one time window at a time
    (:func:`mara_agents.slot_windows.slot_windows`), ``sets`` searches the parking rule's chosen task set
    (:func:`mara_agents.slot_sets.slot_sets`). A schedule the simulator replays to more completions replaces the
    stored one (``completed``, ``gap``, ``status`` follow; the bound is untouched), and the search's fields (its
    seconds, time limit and improvements) record it. Resumable: an episode proven optimal, or searched so with at
    least ``time_limit``, is skipped. Needs the K-slot ceilings of the suites (``--only slots`` first); returns the
    JSON's content."""
    _check_workers(workers)
    if search not in LOWER_END_SEARCHES:
        raise ValueError(f"search must be one of {sorted(LOWER_END_SEARCHES)}, got {search!r}")
    seconds_field, limit_field, improved_field = LOWER_END_SEARCHES[search][2]
    store = read_slot_ceilings(SLOT_CEILINGS_PATH)
    schedules = read_slot_schedules(SLOT_SCHEDULES_PATH)
    with _Pool(workers, _lower_end_one) as pool:
        for task_set, load, entry in _stored_suites(store, task_sets, loads):
            jobs = [(key, (search, task_set, load, *map(int, key.split("/")), entry["n_nodes"], entry["n_slots"], time_limit,
                           schedules[schedule_key(task_set, load, *map(int, key.split("/")))].astype(np.int64)))
                    for key, episode in entry["episodes"].items()
                    if episode["status"] != "optimal" and episode.get(limit_field, 0.0) < time_limit]
            jobs.sort(key=lambda job: -_relative_gap(entry["episodes"][job[0]]["completed"], entry["episodes"][job[0]]["bound"]))
            for key, found in tqdm(pool.results(jobs), total=len(jobs), desc=f"{search} {task_set}/{load}", leave=False):
                episode = entry["episodes"][key]
                episode.update({seconds_field: round(found.seconds, 3), limit_field: time_limit, improved_field: found.improved},
                               seconds=round(episode["seconds"] + found.seconds, 3))
                if found.completed > episode["completed"]:
                    if found.completed > episode["bound"] + 1e-6:
                        raise RuntimeError(f"{task_set}/{load} {key}: a replayed schedule completes {found.completed}, above the proven "
                                           f"bound {episode['bound']} (a modelling error)")
                    array_key = schedule_key(task_set, load, *map(int, key.split("/")))
                    schedules[array_key] = found.schedule.astype(np.uint16)
                    episode.update(completed=found.completed, schedule_sha256=_sha(schedules[array_key]),
                                   gap=_relative_gap(found.completed, episode["bound"]))
                    episode["status"] = "optimal" if found.completed >= episode["bound"] else "interval"
                write_slot_files(store, schedules)
    return store


def write_slot_files(store: dict, schedules: dict[str, np.ndarray] | None = None) -> dict[str, str]:
    """Write the K-slot ceilings (``store``, as :func:`solve_slots` keeps it) and their schedules (unless None:
    unchanged, not rewritten) with their manifest (:func:`write_stored`). Returns the sha256 written per file name.

    Raises:
        ValueError: ``store`` fails the range checks every read makes (:func:`core_env.ceilings.ceilings_problem`); nothing is written.
    """
    problem = ceilings_problem(store, SLOT_CEILING_FIELDS)
    if problem is not None:
        raise ValueError(f"the K-slot ceilings to write are out of range ({problem}); nothing written")
    files = {Path(SLOT_CEILINGS_PATH): _json_bytes(store)}
    if schedules is not None:
        files[Path(SLOT_SCHEDULES_PATH)] = npz.npz_bytes(schedules)
    return write_stored(files)


def write_stored(files: dict[Path, bytes]) -> dict[str, str]:
    """Write stored ceilings files (path → bytes), each atomically, then their sha256 into the manifest
    beside them (other entries kept); Ctrl-C is held back until all are written (in the main thread), so
    the manifest always matches the files. Returns the sha256 written per file name."""
    digests = {path.name: hashlib.sha256(data).hexdigest() for path, data in files.items()}
    with npz.interrupts_held():
        for path, data in files.items():
            npz.write_atomic(path, data)
        for manifest_path in {slot_manifest_path(path) for path in files}:
            manifest = read_slot_manifest(manifest_path)
            manifest.update({path.name: digests[path.name] for path in files if slot_manifest_path(path) == manifest_path})
            npz.write_atomic(manifest_path, _json_bytes(manifest))
    return digests


def _json_bytes(value: dict) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True) + "\n").encode()


#: A K-slot episode counts as proven when its gap to the proven bound is at most this (issue 28's target share).
PROVEN_GAP = 0.005


#: A "gap closed" figure is exact when it moves by at most this many points between the two ends of the K-slot interval.
EXACT_FIGURE = 0.5


def figure_uncertainty(paper: dict, column: str, found: float, bound: float) -> dict[str, float]:
    """{row: how many points the row's share of the EDF → ``milp-slots`` gap closed moves between the two ends
    of the K-slot interval in ``column``}: 100 · (row − EDF) / (ceiling − EDF) with the ceiling at ``found``
    (the best schedules' mean completion %, what the tables use) and at ``bound`` (the proven bounds' mean), for
    every row of ``paper`` (a paper payload) with a gap-closed figure there (ceiling rows and EDF left out)."""
    table = paper.get("table", {})
    if column not in table.get("edf", {}) or found <= table["edf"][column]["mean"]:
        return {}
    base = table["edf"][column]["mean"]
    out = {}
    for row, columns in paper.get("gap_closed", {}).items():
        if column in columns and row not in ("edf", "milp", "milp-slots") and column in table.get(row, {}):
            mine = table[row][column]["mean"]
            out[row] = abs(100 * (mine - base) / (found - base) - 100 * (mine - base) / (bound - base))
    return out


def table(paper: dict | None = None) -> str:
    """The stored K-slot ceilings per suite file as Markdown (for docs/results.md): episodes, proven
    optimal, proven within 0.5 %, completion % of the best schedules found, of the proven bounds and of the
    slot-relaxed optimum, the interval's width, mean and worst gap, search seconds; given ``paper`` (the paper
    suite's payload), also the share of its rows' "gap closed" figures in each suite that are exact
    (:func:`figure_uncertainty` ≤ :data:`EXACT_FIGURE`) and the largest uncertainty of any of them."""
    from benchmarks.report import markdown_table

    store, relaxed = read_slot_ceilings(SLOT_CEILINGS_PATH), read_ceilings(CEILINGS_PATH)  # verified and range-checked: every % <= 100
    rows, worst_figure, figures = [], (0.0, None), [0, 0]
    for name in sorted(store, key=lambda n: (list(LOADS).index(n.split("__")[1].removesuffix(".npz")), n)):
        episodes = store[name]["episodes"]
        found = [100 * e["completed"] / max(e["arrived"], 1) for e in episodes.values()]
        bound = [100 * e["bound"] / max(e["arrived"], 1) for e in episodes.values()]
        upper = [100 * e["completed"] / max(e["arrived"], 1) for e in (_relaxed_entry(relaxed, name, key) for key in episodes)]
        gaps = [e["gap"] for e in episodes.values()]
        column = name.removesuffix(".npz").replace("__", "/")
        moved = figure_uncertainty(paper or {}, column, float(np.mean(found)), float(np.mean(bound)))
        exact = f"{sum(m <= EXACT_FIGURE for m in moved.values())} of {len(moved)}" if moved else "—"
        if moved:
            figures[0] += sum(m <= EXACT_FIGURE for m in moved.values())
            figures[1] += len(moved)
            row, most = max(moved.items(), key=lambda item: item[1])
            worst_figure = max(worst_figure, (most, f"{row} on {column}"), key=lambda item: item[0])
        rows.append((column, len(episodes), sum(e["status"] == "optimal" for e in episodes.values()),
                     sum(g <= PROVEN_GAP for g in gaps), f"{np.mean(found):.1f}", f"{np.mean(bound):.1f}", f"{np.mean(upper):.1f}",
                     f"{np.mean(bound) - np.mean(found):.2f}", f"{100 * np.mean(gaps):.1f}", f"{100 * max(gaps):.1f}", exact,
                     f"{sum(e['seconds'] for e in episodes.values()):.0f}"))
    every = [e for entry in store.values() for e in entry["episodes"].values()]
    limits = "; ".join(f"{limit:g} s" for limit in sorted({e["time_limit"] for e in every}))
    text = markdown_table(("suite", "episodes", "proven optimal", "gap ≤ 0.5 %", "milp-slots (best found) %", "proven bound %",
                           "slot-relaxed optimum %", "interval width (points)", "mean gap %", "worst gap %",
                           f"exact gap-closed figures (≤ {EXACT_FIGURE} points)", "search s"), rows)
    if figures[1]:
        text += (f"\n\n{figures[0]} of {figures[1]} \"gap closed\" figures of the paper rows are exact (they move by at most "
                 f"{EXACT_FIGURE} points between the best schedule found and the proven bound); the most uncertain moves by "
                 f"{worst_figure[0]:.1f} points ({worst_figure[1]}).")
    below = sum(e["bound"] < e["relaxed_bound"] - 1e-9 for e in every)
    by_lp = [e for e in every if "lp_bound" in e]
    lp_text = (f" ({sum(e['bound'] == e['lp_bound'] < e['relaxed_bound'] for e in by_lp)} of them by the LP relaxation of the exact "
               f"program alone, `--only slot-bounds`: {len(by_lp)} episodes, {np.median([e['lp_seconds'] for e in by_lp]):.0f} s median, "
               f"{np.mean([e['relaxed_bound'] - e['lp_bound'] for e in by_lp]):.1f} completions below the slot-relaxed optimum on average)"
               if by_lp else "")
    escapes = _lp_escapes(store)
    parked = [e for e in every if "parked" in e]
    starts = (f"{len(parked)} of {len(every)} episodes were searched from the parking rule's schedule too (`mara_agents/slot_hints.py`: the "
              "slot-relaxed optimum's tasks, each one's last service held back until a chosen arrival needs its slot, so that slots stay "
              f"full when hopeless tasks arrive): it starts {np.mean([e['parked'] - e['greedy'] for e in parked]):+.1f} completions from the "
              f"clairvoyant rule's schedule on average, and the search ends {np.mean([e['completed'] - e['greedy'] for e in parked]):+.1f} "
              "from it. " if parked else "")
    milp = [e for e in every if "milp_seconds" in e]
    proven = [e for e in milp if e["status"] == "optimal"]
    at_upper = sum(e["completed"] >= e["relaxed_bound"] - 1e-9 for e in proven)
    loads = sorted({name.removesuffix(".npz").split("__")[1] for name, entry in store.items()
                    if any("milp_seconds" in e for e in entry["episodes"].values())}, key=list(LOADS).index)
    exact = (f"{len(milp)} of {len(every)} episodes (load {', '.join(loads)}) were searched with the MILP of the env's exact slot rules "
             f"(`mara_agents/slot_milp.py`, HiGHS from the best start, then CP-SAT): it proved the K-slot optimum on {len(proven)} of them "
             f"(MILP {np.median([e['milp_seconds'] for e in milp]):.0f} s median per episode), and on {at_upper} of those {len(proven)} the "
             "K-slot optimum equals the slot-relaxed optimum: on those the slots cost the offline optimum nothing. " if milp else "")
    windowed = [e for e in every if "window_seconds" in e]
    windows = (f"{len(windowed)} episodes were searched one time window at a time from their stored schedule (`--only slot-windows`, "
               f"`mara_agents/slot_windows.py`; {np.median([e['window_seconds'] for e in windowed]):.0f} s median): "
               f"{sum(e['windows_improved'] > 0 for e in windowed)} of them improved. " if windowed else "")
    by_sets = [e for e in every if "sets_seconds" in e]
    sets = (f"{len(by_sets)} episodes were searched over the parking rule's chosen task set from their stored schedule (`--only slot-sets`, "
            f"`mara_agents/slot_sets.py`; {np.median([e['sets_seconds'] for e in by_sets]):.0f} s median): "
            f"{sum(e['sets_improved'] > 0 for e in by_sets)} of them improved. " if by_sets else "")
    target = store.get("id__train.npz", {}).get("episodes", {}).values()
    met = sum(e["gap"] <= PROVEN_GAP for e in target)
    verdict = (f"issue 28's target, on id/train: at least 95 % of its episodes, here {met} of {len(target)}, "
               f"{'met' if met >= 0.95 * len(target) else 'not met'}" if target else "issue 28's target is set on id/train, not stored here")
    return (text + f"\n\n{sum(e['gap'] <= PROVEN_GAP for e in every)} of {len(every)} episodes within {100 * PROVEN_GAP:.1f} % of their proven bound "
            f"({verdict}); searched {sum(e['seconds'] for e in every) / 60:.0f} min in all (time limits {limits} per episode, "
            f"summed over runs in the search s column). {starts}{exact}{windows}{sets}A bound below the slot-relaxed optimum was proven on {below} of "
            f"{len(every)} episodes{lp_text}; elsewhere the upper end of an interval is that optimum. {escapes}The episodes left as intervals were searched "
            "without the MILP or ran out of time in it; whether their optimum also sits at the upper end was not measured. For a row above "
            "EDF, the share of the gap closed against `milp-slots` can overstate its true share by up to the interval's width, most at the "
            "heavier loads; the share against `milp` is the lower end.")


def _lp_escapes(store: dict) -> str:
    """A sentence on where the LP relaxation escapes the slot rule, per load, pooled over the episodes that record
    its :data:`LP_FIELDS`; empty when none does."""
    per_load: dict[str, list[dict]] = {}
    for name, entry in store.items():
        recorded = [e for e in entry["episodes"].values() if all(field in e for field in LP_FIELDS) and e.get("lp_program", 1) == PROGRAM]
        per_load.setdefault(name.removesuffix(".npz").split("__")[1], []).extend(recorded)
    parts = []
    for load in sorted(per_load, key=list(LOADS).index):
        episodes = per_load[load]
        if episodes:
            admitted = [sum(e[field] for e in episodes) for field in ("lp_fractional_admissions", "lp_contested")]
            released = [sum(e[field] for e in episodes) for field in ("lp_fractional_releases", "lp_releases")]
            parts.append(f"at load {load} ({len(episodes)} episodes) {admitted[0]:,} of the {admitted[1]:,} arrivals that may meet every slot "
                         f"held ({100 * admitted[0] / max(1, admitted[1]):.0f} %) are admitted in part, and {released[0]:,} of its {released[1]:,} "
                         f"completion indicators ({100 * released[0] / max(1, released[1]):.0f} %) are fractional")
    if not parts:
        return ""
    return ("On the episodes whose interval `--only slot-bounds` solved with the rows that cut part-admitted arrivals and part-released "
            "slots (admission order, freed slot, completion lag: `mara_agents/slot_milp.py`), the LP optimum HiGHS returned (one optimal "
            "vertex of the relaxation) still meets the slot rows by fractions: " + "; ".join(parts) + ". A part-admitted task holds part of a slot, and a fractional "
            "completion releases part of a slot before its task is done. ")


def _relaxed_entry(relaxed: dict, name: str, key: str) -> dict:
    entry = relaxed.get(name, {}).get("episodes", {}).get(key)
    if entry is None:
        raise ValueError(f"{CEILINGS_PATH} has no slot-relaxed ceiling of {name} episode {key!r}, which {SLOT_CEILINGS_PATH} holds; "
                         "run `python -m benchmarks ceilings --only relaxed`")
    return entry


def _summary(store: dict, kind: str) -> None:
    for name in sorted(store):
        episodes = store[name]["episodes"].values()
        rate = 100 * sum(e["completed"] / max(e["arrived"], 1) for e in episodes) / max(len(episodes), 1)
        worst = max((e["gap"] for e in episodes), default=0.0)
        proven = sum(e["gap"] <= 0.005 for e in episodes)
        print(f"{kind:8s} {name:24s} {len(episodes):3d} episodes  {rate:5.1f} %  proven gap <= 0.5 % on {proven:3d}  worst gap {worst:.4f}  "
              f"{sum(e['seconds'] for e in episodes):7.1f} s")


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks ceilings", description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=MILP_TIME_LIMIT, help="HiGHS seconds per episode, slot-relaxed (default %(default)s)")
    parser.add_argument("--slot-time-limit", type=float, default=SLOT_TIME_LIMIT, help="seconds per episode, K-slot (default %(default)s)")
    parser.add_argument("--workers", type=int, default=1, help="K-slot episodes searched at once, in processes, at most the CPUs "
                        f"this process may use ({max_workers()} here; default %(default)s)")
    parser.add_argument("--only", choices=("relaxed", "slots", "slot-bounds", "slot-windows", "slot-sets"),
                        help="solve one of the two (default: both, relaxed first); slot-bounds: lower the stored K-slot intervals' upper "
                             "ends by the LP relaxation of the exact program (--slot-time-limit seconds each); slot-windows: raise their "
                             "lower ends by re-solving one time window at a time from the stored schedules (--slot-time-limit seconds each); slot-sets: "
                             "raise them by searching the parking rule's chosen task set from the stored schedules (--slot-time-limit seconds each)")
    add_suite_selection(parser)
    args = parser.parse_args(argv)
    for flag, value in (("--time-limit", args.time_limit), ("--slot-time-limit", args.slot_time_limit)):
        if not (math.isfinite(value) and 0 < value <= 3600):
            parser.error(f"{flag} must be in (0, 3600] seconds, got {value}")
    if not 1 <= args.workers <= max_workers():
        parser.error(f"--workers must be in [1, {max_workers()}] (the CPUs this process may use), got {args.workers}")
    start = time.perf_counter()
    try:
        if args.only == "slot-bounds":
            _summary(tighten_slot_bounds(args.task_sets, args.loads, args.slot_time_limit, args.workers), "K-slot")
        if args.only in ("slot-windows", "slot-sets"):
            _summary(improve_slot_schedules(args.task_sets, args.loads, args.slot_time_limit, args.workers, args.only[5:]), "K-slot")
        if args.only is None or args.only == "relaxed":
            _summary(solve(args.task_sets, args.loads, args.time_limit), "relaxed")
        if args.only is None or args.only == "slots":
            _summary(solve_slots(args.task_sets, args.loads, args.slot_time_limit, args.workers), "K-slot")
    except (ImportError, ValueError) as error:  # the solver extra missing; a stored file that fails its checks (named)
        parser.error(str(error))
    written = {"relaxed": [CEILINGS_PATH], "slots": [SLOT_CEILINGS_PATH, SLOT_SCHEDULES_PATH], "slot-bounds": [SLOT_CEILINGS_PATH],
                "slot-windows": [SLOT_CEILINGS_PATH, SLOT_SCHEDULES_PATH], "slot-sets": [SLOT_CEILINGS_PATH, SLOT_SCHEDULES_PATH]}.get(
        args.only, [CEILINGS_PATH, SLOT_CEILINGS_PATH, SLOT_SCHEDULES_PATH])
    print(f"wall time {time.perf_counter() - start:.1f} s; wrote {', '.join(map(str, [*written, slot_manifest_path(SLOT_CEILINGS_PATH)]))}")
    return 0
