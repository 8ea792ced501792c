"""leakage: does a workload give each task's hidden demand away? A leak audit as a benchmark suite.

For every task set and load of the committed evaluation suites it reports:

* ``spearman_demand_window``: Spearman correlation of hidden demand and deadline window, over tasks
  with finite demand;
* ``edf``: plain EDF;
* ``window_edf``: the leak probe :class:`mara_agents.heuristics.WindowEDF`, which sees no curve value:
  EDF with admission, remaining demand guessed as ``c · window − k``; ``c`` is refitted here on seeded
  *train* workloads of the task set at the training load (grid :data:`FACTORS`), never on suites;
* ``oracle_admission``: ``edf-admission:oracle`` (EDF with admission on the exact demand);
* ``clairvoyant``: EDF among the tasks that can still finish (a strong heuristic, not a bound);
* ``milp``: the stored MILP offline optimum (:mod:`benchmarks.ceilings`; unit speeds, slots relaxed);
* ``bound``: the independent-feasibility relaxation (ignores contention).

Completion in %, mean over evaluation roots of each root's mean over its episodes (sd over roots
beside it). The workload hides the demand when, at the training load on ``id``,
``window_edf − edf <= 3`` (the deadline alone does not schedule well) and ``oracle_admission −
window_edf >= 10`` (knowing the demand is worth a lot). Writes ``OUT/leakage.json`` (default
``results`` under the working directory).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks import add_bank_selection, add_out, add_suite_selection, bank_or_task_sets, markdown_table, write_results
from benchmarks.cells import bank_suite
from benchmarks.quick import root_rates, summarize
from benchmarks.stats import paired_difference
from benchmarks.rollout import run_agent
from core_env.config import LOADS, EnvConfig
from core_env.curves import bank_for, is_bank_path
from core_env.extras import needs
from core_env.ceilings import suite_ceiling_rates, suite_ceilings
from core_env.generators import Drawn, suite_workloads
from core_env.recipe import DEFAULT_RECIPE
from core_env.suites import SUITE_EPISODES, SUITE_ROOTS, SUITE_TASK_SETS, suite_cells, suite_meta
from mara_agents.allocators import make_allocator
from mara_agents.bounds import independent_feasibility_bounds, milp_ceiling
from mara_agents.heuristics import EDF, Clairvoyant, WindowEDF

with needs(__name__):
    from scipy.stats import spearmanr
    from tqdm import tqdm

#: Factors tried when fitting the window probe on train workloads.
FACTORS = tuple(round(0.1 * i, 1) for i in range(1, 16))
FIT_EPISODES = 12
FIT_SEED = 20261201
COLUMNS = ("spearman_demand_window", "edf", "window_edf", "oracle_admission", "clairvoyant", "milp", "bound")
#: The two criteria on id at the training load (points of completion).
MAX_PROBE_GAIN, MIN_ORACLE_GAIN = 3.0, 10.0


def fit_factor(task_set: str, n_nodes: int, episodes: int = FIT_EPISODES) -> tuple[float, dict[float, float]]:
    """The window factor with the best mean completion on seeded train workloads at the training load
    (the train split, for a bank file too)."""
    bank = bank_for(task_set, "train")
    drawn = Drawn(bank, LOADS["train"], 500, DEFAULT_RECIPE, n_nodes)
    workloads = [drawn.workload(np.random.default_rng([FIT_SEED, e])) for e in range(episodes)]
    config = EnvConfig(task_set=task_set, n_nodes=n_nodes)
    scores = {c: float(100 * run_agent(WindowEDF(c), workloads, config)["completion_rate"].mean()) for c in FACTORS}
    return max(scores, key=lambda c: (scores[c], -c)), scores


def audit(task_set: str, load: str, factor: float, roots: int = SUITE_ROOTS, episodes: int = SUITE_EPISODES) -> dict[str, Any]:
    """One row of the audit (module docstring) on a committed suite, or on a bank file's eval split drawn
    by the suites' seeding scheme (``roots`` × ``episodes``; the MILP solved per episode)."""
    if is_bank_path(task_set):
        config, workloads, cells = bank_suite(task_set, load, roots, episodes)
        ceilings = [milp_ceiling(w, config.n_nodes) for w in workloads]
        milp, milp_gap = np.array([c.rate for c in ceilings]), max(c.gap for c in ceilings)
    else:
        meta, cells = suite_meta(task_set, load), suite_cells(task_set, load)
        config = EnvConfig(task_set=task_set, load=load, n_nodes=meta["n_nodes"])
        workloads = suite_workloads(task_set, load, cells, config.n_nodes)
        milp, milp_gap = suite_ceiling_rates(task_set, load, cells), max(c["gap"] for c in suite_ceilings(task_set, load).values())
    demand = np.concatenate([w.demand for w in workloads])
    window = np.concatenate([w.window for w in workloads])
    finite = np.isfinite(demand)
    row: dict[str, Any] = {"task_set": config.task_set_name, "load": load, **_bank_record(config), "window_factor": factor, "tasks": int(demand.size),
                           "finite_demand_share": float(finite.mean()),
                           "spearman_demand_window": float(spearmanr(demand[finite], window[finite]).statistic)}
    agents = {"edf": EDF(), "window_edf": WindowEDF(factor), "oracle_admission": make_allocator("edf-admission:oracle"), "clairvoyant": Clairvoyant()}
    row["per_root"] = {}
    for name, agent in agents.items():
        rates = run_agent(agent, workloads, config)["completion_rate"]
        row[name], row["per_root"][name] = summarize(rates, cells), root_rates(rates, cells).tolist()
    row["milp"], row["milp_max_gap"] = summarize(milp, cells), milp_gap
    row["bound"] = summarize(independent_feasibility_bounds(workloads), cells)
    return row


def _bank_record(config: EnvConfig) -> dict[str, Any]:
    """``{"bank": {"path", "sha256"}}`` for a config on a bank file, else ``{}``."""
    return {"bank": {"path": config.bank_path, "sha256": config.bank_sha256}} if config.bank_path is not None else {}


def evaluate(task_sets: Sequence[str] = SUITE_TASK_SETS, loads: Sequence[str] = tuple(LOADS), roots: int = SUITE_ROOTS,
             episodes: int = SUITE_EPISODES, fit_episodes: int = FIT_EPISODES) -> dict[str, Any]:
    """Fit the probe per task set, audit every (task set, load); criteria on id/train. A task set may be a
    bank file's path (fit on its train split; ``roots`` × ``episodes`` drawn on its eval split)."""
    factors, fits, rows = {}, {}, []
    for task_set in tqdm(task_sets, desc="leakage", leave=False):
        name = EnvConfig(task_set=task_set).task_set_name
        n_nodes = EnvConfig().n_nodes if is_bank_path(task_set) else suite_meta(task_set, "train")["n_nodes"]
        factors[name], fits[name] = fit_factor(task_set, n_nodes, fit_episodes)
        rows += [audit(task_set, load, factors[name], roots, episodes) for load in loads]
    train = {r["task_set"]: {c: (r[c] if c == "spearman_demand_window" else r[c]["mean"]) for c in COLUMNS} for r in rows if r["load"] == "train"}
    result: dict[str, Any] = {"suite": "leakage", "train_load": train, "rows": rows, "window_factor": factors, "factor_fit": fits}
    if "id" in train:
        probe_gain = train["id"]["window_edf"] - train["id"]["edf"]
        oracle_gain = train["id"]["oracle_admission"] - train["id"]["window_edf"]
        roots = next(r["per_root"] for r in rows if r["task_set"] == "id" and r["load"] == "train")
        result["criteria"] = {"window_edf_minus_edf": probe_gain, "oracle_admission_minus_window_edf": oracle_gain,
                              "hides_demand": bool(probe_gain <= MAX_PROBE_GAIN and oracle_gain >= MIN_ORACLE_GAIN),
                              # paired by evaluation root: mean, t-based 95% CI, exact sign-flip p
                              "window_edf_minus_edf_by_root": paired_difference(roots["window_edf"], roots["edf"]),
                              "oracle_admission_minus_window_edf_by_root": paired_difference(roots["oracle_admission"], roots["window_edf"])}
    return result


def table(rows: Sequence[dict[str, Any]]) -> str:
    body = [(r["task_set"], r["load"], f"{r['spearman_demand_window']:.2f}",
             *(f"{r[c]['mean']:.1f} ± {r[c]['sd']:.1f}" for c in COLUMNS[1:])) for r in rows]
    return markdown_table(("task set", "load", "Spearman(demand, window)", "EDF", "window-EDF (probe)", "EDF + oracle admission",
                           "clairvoyant (heuristic)", "slot-relaxed MILP (upper bound)", "independent-feasibility relaxation"), body)


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks leakage", description=__doc__.splitlines()[0])
    add_out(parser)
    add_suite_selection(parser)
    add_bank_selection(parser)
    parser.add_argument("--fit-episodes", type=int, default=FIT_EPISODES, help=f"train workloads the probe's factor is fitted on (default {FIT_EPISODES})")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    result = evaluate(bank_or_task_sets(parser, args), args.loads, args.roots, args.episodes, args.fit_episodes)
    result["wall_s"] = time.perf_counter() - start
    print(table(result["rows"]))
    print("\nwindow factor fitted on train workloads: " + ", ".join(f"{t} {c}" for t, c in result["window_factor"].items()))
    if "criteria" in result:
        c = result["criteria"]
        probe = c["window_edf_minus_edf_by_root"]
        print(f"id/train: window_edf - edf = {c['window_edf_minus_edf']:+.1f} [{probe['ci_low']:+.1f}, {probe['ci_high']:+.1f}] "
              f"p = {probe['p_value']:.4f} by root (<= {MAX_PROBE_GAIN}), "
              f"oracle_admission - window_edf = {c['oracle_admission_minus_window_edf']:+.1f} (>= {MIN_ORACLE_GAIN}): "
              f"{'the workload hides the demand' if c['hides_demand'] else 'LEAK: the deadline window gives the demand away'}")
    paths = write_results("leakage", result, out=args.out)
    print(f"\nwall time {result['wall_s']:.1f} s; wrote {', '.join(str(p) for p in paths)}")
    return 0
