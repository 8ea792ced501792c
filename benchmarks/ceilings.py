"""ceilings: the MILP offline optimum of every committed evaluation episode, stored with the suites.

``python -m benchmarks ceilings [--time-limit S] [--task-sets ...] [--loads ...]`` solves
:func:`mara_agents.bounds.milp_ceiling` (unit-speed nodes, slot limit relaxed) for each episode of
each committed suite file and writes ``core_env/data/suites/ceilings.json``: per suite file, the sha256
of the file it was solved for, the node count, and per episode the best completions found, HiGHS's
dual bound, the MIP gap and the solve time. The ceiling is a property of the workload, so it is solved
once and committed; benchmarks read it with :func:`core_env.workload.suite_ceilings` (no scipy needed).
The file is rewritten atomically after every episode, so an interrupted run resumes where it stopped;
episodes of a suite file whose checksum changed are solved again.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

from tqdm import tqdm

from benchmarks import add_suite_selection, write_atomic
from core_env.config import LOADS
from core_env.workload import CEILINGS_PATH, SUITE_TASK_SETS, load_suite, suite_cells, suite_meta, suite_path, suite_sha256
from mara_agents.bounds import MILP_TIME_LIMIT, milp_ceiling


def _read() -> dict:
    return json.loads(CEILINGS_PATH.read_text()) if CEILINGS_PATH.exists() else {}


def solve(task_sets: Sequence[str] = SUITE_TASK_SETS, loads: Sequence[str] = tuple(LOADS), time_limit: float = MILP_TIME_LIMIT) -> dict:
    """Fill ``ceilings.json`` for the given suites (resuming); returns its content."""
    store = _read()
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
                write_atomic(CEILINGS_PATH, json.dumps(store, indent=1, sort_keys=True) + "\n")
    return store


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks ceilings", description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=MILP_TIME_LIMIT, help="seconds per episode (default %(default)s)")
    add_suite_selection(parser)
    args = parser.parse_args(argv)
    if not args.time_limit > 0:
        parser.error(f"--time-limit must be > 0, got {args.time_limit}")
    start = time.perf_counter()
    store = solve(args.task_sets, args.loads, args.time_limit)
    for name in sorted(store):
        episodes = store[name]["episodes"].values()
        rate = 100 * sum(e["completed"] / max(e["arrived"], 1) for e in episodes) / max(len(episodes), 1)
        worst = max((e["gap"] for e in episodes), default=0.0)
        print(f"{name:24s} {len(episodes):3d} episodes  milp {rate:5.1f} %  worst gap {worst:.4f}  {sum(e['seconds'] for e in episodes):7.1f} s")
    print(f"wall time {time.perf_counter() - start:.1f} s; wrote {CEILINGS_PATH}")
    return 0
