"""calibration: FIFO, EDF, clairvoyant and the independent-feasibility bound per task set and load.

Runs on every pre-generated evaluation suite (task sets id, rl_ood, vit_ood × loads train, x1.25, x1.5,
x2; 5 roots × 4 episodes each) and prints completion % as mean ± sd over the evaluation roots. This is
the table that documents the choice of the training load (EDF well below the bound on id/train) and
that heavier loads lower everyone. Results go to ``benchmarks/results/calibration.json``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from tqdm import tqdm

from benchmarks import markdown_table, write_results
from benchmarks.quick import summarize
from benchmarks.rollout import run_agent
from core_env.config import LOADS, EnvConfig
from core_env.workload import SUITE_EPISODES, SUITE_ROOTS, SUITE_TASK_SETS, load_suite
from mara_agents.bounds import independent_feasibility_bounds
from mara_agents.heuristics import HEURISTICS

AGENTS = ("fifo", "edf", "clairvoyant")


def evaluate(task_sets: Sequence[str] = SUITE_TASK_SETS, loads: Sequence[str] = tuple(LOADS)) -> list[dict]:
    """One row per (task set, load): {agent or "bound": {"mean", "sd"}} in %."""
    cells = [(r, e) for r in range(SUITE_ROOTS) for e in range(SUITE_EPISODES)]
    rows = []
    for task_set, load in tqdm([(t, l) for t in task_sets for l in loads], desc="calibration", leave=False):
        workloads = [load_suite(task_set, load, r, e) for r, e in cells]
        config = EnvConfig(task_set=task_set, load=load)
        row = {"task_set": task_set, "load": load}
        for name in AGENTS:
            row[name] = summarize(run_agent(HEURISTICS[name](), workloads, config)["completion_rate"], cells)
        row["bound"] = summarize(independent_feasibility_bounds(workloads), cells)
        rows.append(row)
    return rows


def table(rows: Sequence[dict]) -> str:
    columns = (*AGENTS, "bound")
    body = [(r["task_set"], r["load"], *(f"{r[c]['mean']:.1f} ± {r[c]['sd']:.1f}" for c in columns)) for r in rows]
    return markdown_table(("task set", "load", *columns), body)


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks calibration", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    start = time.perf_counter()
    rows = evaluate()
    wall = time.perf_counter() - start
    print(table(rows))
    paths = write_results("calibration", {"suite": "calibration", "wall_s": wall, "rows": rows})
    print(f"\nwall time {wall:.1f} s; wrote {', '.join(str(p) for p in paths)}")
    return 0
