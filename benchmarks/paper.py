"""The paper's tables as cell-based suites: paper (Table 2), stress (Table 3), diagnostics (Table 4),
shaping (Table 5), falsifier and scale.

Each suite is a list of :class:`~benchmarks.cells.Cell` (agent rows × training seeds × scenarios ×
evaluation roots), run through the on-disk cell cache, then summarised: completion % per row and
scenario as mean ± sd over cells (5 roots, × 3 training seeds for learned rows), and the differences
that matter as paired bootstrap 95% CIs with sign-flip permutation p-values, paired by root (and
seed: a learned row's (seed, root) cell is paired with the other row's cell of the same root, and of
the same seed when both are learned).

Learned rows (MARA and its variants) need their shipped checkpoints; a row whose checkpoint is missing
is left out and listed under ``missing`` in the outputs rather than failing the suite.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.agents import LEARNED_SEEDS, available, is_learned
from benchmarks.cells import Cell
from benchmarks.stats import paired_difference
from core_env.workload import SUITE_ROOTS

BOUND = "bound"
TASK_SETS = ("id", "rl_ood", "vit_ood")
HEAVY_LOADS = ("x1.25", "x1.5", "x2")

#: The allocator the learned rows were warm-started from (``--teacher`` of the shipped checkpoints).
TEACHER = "edf-admission:fm,min_reports=5"
PAPER_ROWS = ("fifo", "edf", "edf-admission", TEACHER, "llf", "slaq", "las", "lara", "lara-fm", "laira", "ppo-tianshou", "mat", "mara-wls",
              "mara-sparse", "mara", "clairvoyant")
#: The differences every suite reports where both rows ran: (row A, row B), A − B.
DIFFERENCES = (("mara", "lara"), ("mara", "lara-fm"), ("mara", TEACHER), ("mara", "mara-wls"), ("mara", "mara-sparse"), ("lara", "edf"))
#: Learned rows' training seeds on the heavier loads and the scale scenarios (a compute budget: the
#: flow-matching features cost most where many tasks run; the training load uses all three seeds).
HEAVY_SEEDS = (0,)
#: Falsifier scenario: heterogeneous node speeds and a switching cost (zero-shot for learned agents).
FALSIFIER_ENV = (("node_speeds", (0.5, 0.75, 1.25, 1.5)), ("switch_cost", 0.2))
#: Scale scenarios: more nodes and slots at the training load (an intensity per node: the same pressure at any N).
SCALE_ENVS = {"N=8": ((("n_nodes", 8), ("n_slots", 32)), "train"), "N=16": ((("n_nodes", 16), ("n_slots", 64)), "train")}


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A named column of a table: a task set, a load and environment overrides."""

    name: str
    task_set: str = "id"
    load: str | float = "train"
    env: tuple[tuple[str, Any], ...] = ()
    seeds: tuple[int, ...] | None = None  # learned rows' training seeds here (None: the suite's; (): not run)


@dataclasses.dataclass(frozen=True)
class SuiteSpec:
    """What a suite runs: rows × scenarios × roots (× seeds for learned rows)."""

    name: str
    rows: tuple[str, ...]
    scenarios: tuple[Scenario, ...]
    roots: int = SUITE_ROOTS
    episodes: int | None = None  # None: the suite files' episodes per root
    seeds: tuple[int, ...] = LEARNED_SEEDS  # training seeds of learned rows

    def seeds_of(self, row: str, scenario: Scenario) -> tuple[int, ...]:
        """The training seeds a row runs on a scenario ((0,) for rows that are not learned)."""
        if not is_learned(row):
            return (0,)
        return self.seeds if scenario.seeds is None else tuple(s for s in scenario.seeds if s in self.seeds)

    def cells(self, rows: Sequence[str] | None = None) -> list[Cell]:
        out = []
        for row in rows or self.rows:
            for scenario in self.scenarios:
                for seed in self.seeds_of(row, scenario):
                    for root in range(1 if scenario.task_set == "stress" else self.roots):
                        extra = {} if self.episodes is None else {"episodes": self.episodes}
                        out.append(Cell(row, scenario.task_set, scenario.load, root, seed, scenario.env, **extra))
        return out


def specs() -> dict[str, SuiteSpec]:
    """Every cell-based suite."""
    train = tuple(Scenario(f"{t}/train", t) for t in TASK_SETS)
    heavy = tuple(Scenario(f"{t}/{load}", t, load, seeds=HEAVY_SEEDS) for load in HEAVY_LOADS for t in TASK_SETS)
    id_train = (Scenario("id/train"),)
    core = ("edf", "lara", "lara-fm", TEACHER, "laira", "mara-wls", "mara", "clairvoyant")
    return {
        "paper": SuiteSpec("paper", PAPER_ROWS, train + heavy),
        "stress": SuiteSpec("stress", PAPER_ROWS, (Scenario("stress", "stress"),)),
        "diagnostics": SuiteSpec("diagnostics", PAPER_ROWS, id_train),
        "shaping": SuiteSpec("shaping", ("mara", "mara-sparse"), train),
        "falsifier": SuiteSpec("falsifier", core, id_train + (Scenario("id/train, speeds + switch cost", env=FALSIFIER_ENV),)),
        "scale": SuiteSpec("scale", core, id_train + tuple(Scenario(f"id, {name}", "id", load, env, seeds=HEAVY_SEEDS) for name, (env, load) in SCALE_ENVS.items())),
    }


# ---------------------------------------------------------------------------------------------- summaries
def _pairs(results: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[tuple[int, int], dict[str, Any]]]:
    """(row, scenario name) -> {(seed, root): result}."""
    out: dict[tuple[str, str], dict[tuple[int, int], dict[str, Any]]] = {}
    for result, scenario in results:
        cell = result["cell"]
        out.setdefault((cell["agent"], scenario), {})[(cell["seed"], cell["root"])] = result
    return out


def _scenario_key(task_set: str, load: Any, env: Any) -> str:
    return json.dumps([task_set, load, [list(pair) for pair in env]], default=list)


def summarize(spec: SuiteSpec, results: Sequence[dict[str, Any]], rows: Sequence[str]) -> dict[str, Any]:
    """Per-row summaries, the bound, diagnostics and the paired differences of one suite's results
    (any subset of the suite's cells: each result is matched to its scenario by its cell)."""
    names = {_scenario_key(s.task_set, s.load, s.env): s.name for s in spec.scenarios}
    pairs = [(r, names[_scenario_key(r["cell"]["task_set"], r["cell"]["load"], r["cell"]["env"])]) for r in results]
    by = _pairs(pairs)
    table: dict[str, dict[str, dict[str, float]]] = {}
    diagnostics: dict[str, dict[str, float]] = {}
    for row in rows:
        table[row] = {}
        for scenario in spec.scenarios:
            cells = by.get((row, scenario.name), {})
            if cells:
                table[row][scenario.name] = _spread(np.array([100 * r["mean"]["completion_rate"] for r in cells.values()]))
        first = by.get((row, spec.scenarios[0].name), {})
        if first:
            diagnostics[row] = {key: float(np.mean([r["mean"][key] for r in first.values()])) for key in
                                ("node_utilization", "wasted_node_steps", "switches", "conflicts", "invalid_actions")}
            diagnostics[row]["decision_ms"] = float(np.mean([r["decision_ms"] for r in first.values()]))
    bound = {}
    for scenario in spec.scenarios:
        per_root = {}
        for row in rows:
            per_root.update({root: 100 * r["feasibility_bound"] for (_, root), r in by.get((row, scenario.name), {}).items()})
        if per_root:
            bound[scenario.name] = _spread(np.array(list(per_root.values())))
    _add_averages(table, bound, spec, by, rows)
    return {"table": table, "bound": bound, "diagnostics": diagnostics, "differences": differences(spec, by, rows)}


def _add_averages(table, bound, spec: SuiteSpec, by, rows) -> None:
    """``average/LOAD``: the equal-weight average over the three task sets at each load where the suite ran
    all three (without environment overrides), computed per (seed, root) cell."""
    for load in dict.fromkeys(s.load for s in spec.scenarios):
        group = [s for s in spec.scenarios if s.load == load and not s.env and s.task_set in TASK_SETS]
        if len(group) != len(TASK_SETS):
            continue
        for row in rows:
            keys = set.intersection(*(set(by.get((row, s.name), {})) for s in group))
            rates = np.array([np.mean([100 * by[(row, s.name)][k]["mean"]["completion_rate"] for s in group]) for k in sorted(keys)])
            if rates.size:
                table[row][f"average/{load}"] = _spread(rates)
        roots = set.intersection(*({k[1] for k in by.get((rows[0], s.name), {})} for s in group))
        values = np.array([np.mean([100 * next(r for k, r in by[(rows[0], s.name)].items() if k[1] == root)["feasibility_bound"] for s in group])
                           for root in sorted(roots)])
        if values.size:
            bound[f"average/{load}"] = _spread(values)


def _spread(values: np.ndarray) -> dict[str, float]:
    """Mean, sample sd (0 for one value) and count."""
    return {"mean": float(values.mean()), "sd": float(values.std(ddof=1)) if values.size > 1 else 0.0, "n": int(values.size)}


def paired_values(by, row_a: str, row_b: str, scenario: str) -> tuple[np.ndarray, np.ndarray]:
    """Completion % of A and B on matching cells: same root, and same seed when both rows are learned."""
    a_cells, b_cells = by.get((row_a, scenario), {}), by.get((row_b, scenario), {})
    a, b = [], []
    for (seed, root), result in sorted(a_cells.items()):
        match = b_cells.get((seed, root)) or (b_cells.get((0, root)) if not is_learned(row_b) else None)
        if match is not None:
            a.append(100 * result["mean"]["completion_rate"])
            b.append(100 * match["mean"]["completion_rate"])
    return np.array(a), np.array(b)


def differences(spec: SuiteSpec, by, rows: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for row_a, row_b in DIFFERENCES:
        if row_a not in rows or row_b not in rows:
            continue
        for scenario in spec.scenarios:
            a, b = paired_values(by, row_a, row_b, scenario.name)
            if a.size >= 2:
                out.append({"a": row_a, "b": row_b, "scenario": scenario.name, **paired_difference(a, b)})
    return out


def rows_to_run(spec: SuiteSpec, rows: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """(rows that can run, learned rows left out for lack of checkpoints)."""
    wanted = list(rows or spec.rows)
    return [r for r in wanted if available(r)], [r for r in wanted if not available(r)]
