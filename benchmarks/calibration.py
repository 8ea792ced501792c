"""calibration: FIFO, EDF, the window-EDF probe, clairvoyant, the slot-relaxed MILP and the feasibility relaxation per task set and load.

Runs on every pre-generated evaluation suite (task sets id, rl_ood, vit_ood × loads train, x1.25, x1.5,
x2; 10 roots × 4 episodes each) and on the stress scenario, and prints completion % as mean ± sd over
the evaluation roots. This is the table that documents the choice of the training load and recipe
(heuristics in the 50s, the slot-relaxed MILP near 80 on id/train), that heavier loads lower everyone, and
that on stress FIFO = EDF = 0 while clairvoyant reaches the ceiling. ``milp`` is the stored offline
optimum (:mod:`benchmarks.ceilings`; unit speeds, slot limit relaxed); ``clairvoyant`` is a strong
heuristic, not a bound; ``bound`` is the independent-feasibility relaxation (ignores contention);
``window-edf``, ``target-edf`` and ``prior-edf`` are the leak probes (no curve values). The last column is EDF's distance to the ceiling,
the gap a curve-aware scheduler has to close. ``--task-set BANK.npz [--roots R] [--episodes E]`` runs
on a bank file of your own curves instead of the committed suites (every load, workloads drawn on its
eval split by the suites' seeding scheme; the MILP solved per episode). Results go to ``OUT/calibration.json`` (default ``results`` under the working directory).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

from benchmarks import add_bank_selection, add_out, bank_or_task_sets, markdown_table, write_results
from benchmarks.agents import make_agent
from benchmarks.cells import bank_suite
from benchmarks.quick import summarize
from benchmarks.rollout import run_agent
from core_env.config import LOADS, EnvConfig
from core_env.curves import is_bank_path
from core_env.extras import needs
from core_env.ceilings import suite_ceiling_rates, suite_slot_ceiling_rates
from core_env.generators import generator_for, suite_workloads
from core_env.suites import SUITE_EPISODES, SUITE_ROOTS, SUITE_TASK_SETS, suite_cells, suite_meta
from mara_agents.bounds import independent_feasibility_bounds, milp_ceiling

with needs(__name__):
    from tqdm import tqdm

AGENTS = ("fifo", "edf", "window-edf", "target-edf", "prior-edf", "clairvoyant")
COLUMNS = (*AGENTS, "milp-slots", "milp", "bound")


def _row(task_set: str, load: str, config: EnvConfig, workloads: list, cells: list, milp: np.ndarray, slots: np.ndarray | None = None) -> dict:
    row = {"task_set": task_set, "load": load}
    for name in AGENTS:  # prior-edf is fitted on the train workloads of the task set it plays (a bank file: its own)
        row[name] = summarize(run_agent(make_agent(name, task_set=config.bank_path or config.task_set), workloads, config)["completion_rate"], cells)
    row["milp-slots"] = None if slots is None else summarize(slots, cells)  # stored for the committed suites only
    row["milp"] = summarize(milp, cells)
    row["bound"] = summarize(independent_feasibility_bounds(workloads), cells)
    return row


def evaluate(task_sets: Sequence[str] = SUITE_TASK_SETS, loads: Sequence[str] = tuple(LOADS), roots: int = SUITE_ROOTS,
             episodes: int = SUITE_EPISODES) -> list[dict]:
    """One row per (task set, load), then the stress scenario: {column: {"mean", "sd"}} in %. A task set may
    be a bank file's path: ``roots`` × ``episodes`` workloads per load drawn on its eval split by the
    suites' seeding scheme (:func:`benchmarks.cells.bank_suite`), the MILP solved per episode."""
    rows = []
    for task_set, load in tqdm([(t, l) for t in task_sets for l in loads], desc="calibration", leave=False):
        if is_bank_path(task_set):
            config, workloads, cells = bank_suite(task_set, load, roots, episodes)
            milp = np.array([milp_ceiling(w, config.n_nodes).rate for w in workloads])
            rows.append({**_row(config.task_set_name, load, config, workloads, cells, milp), "bank": {"path": config.bank_path, "sha256": config.bank_sha256}})
            continue
        cells = suite_cells(task_set, load)
        config = EnvConfig(task_set=task_set, load=load, n_nodes=suite_meta(task_set, load)["n_nodes"])
        workloads = suite_workloads(task_set, load, cells, config.n_nodes)
        rows.append(_row(task_set, load, config, workloads, cells, suite_ceiling_rates(task_set, load, cells), suite_slot_ceiling_rates(task_set, load, cells)))
    config = EnvConfig(task_set="stress", n_nodes=4)
    stress = generator_for(config).workload()
    rows.append(_row(config.task_set_name, "-", config, [stress], [(0, 0)], np.array([milp_ceiling(stress, config.n_nodes).rate])))
    return rows


def table(rows: Sequence[dict]) -> str:
    def text(entry: dict | None) -> str:
        return "—" if entry is None else f"{entry['mean']:.1f} ± {entry['sd']:.1f}"

    body = [(r["task_set"], r["load"], *(text(r.get(c)) for c in COLUMNS),
             "—" if r.get("milp-slots") is None else f"{r['milp-slots']['mean'] - r['edf']['mean']:.1f}", f"{r['milp']['mean'] - r['edf']['mean']:.1f}")
            for r in rows]
    return markdown_table(("task set", "load", "FIFO", "EDF", "window-EDF (probe)", "target-EDF (probe)", "prior-EDF (probe)", "clairvoyant (heuristic)",
                           "milp-slots (K-slot optimum, best found)", "slot-relaxed MILP (upper bound)", "independent-feasibility relaxation",
                           "EDF → milp-slots gap (points)", "EDF → upper-bound gap (points)"), body)


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks calibration", description=__doc__.splitlines()[0])
    add_out(parser)
    add_bank_selection(parser)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = evaluate(bank_or_task_sets(parser, argparse.Namespace(task_sets=SUITE_TASK_SETS, **vars(args))), roots=args.roots, episodes=args.episodes)
    wall = time.perf_counter() - start
    print(table(rows))
    paths = write_results("calibration", {"suite": "calibration", "wall_s": wall, "rows": rows}, out=args.out)
    print(f"\nwall time {wall:.1f} s; wrote {', '.join(str(p) for p in paths)}")
    return 0
