"""The paper's tables as cell-based suites: paper (Table 2), stress (Table 3), diagnostics (Table 4),
shaping (Table 5), falsifier and scale.

Each suite is a list of :class:`~benchmarks.cells.Cell` (agent rows × training seeds × scenarios ×
evaluation roots), run through the on-disk cell cache, then summarised at the level of the
**evaluation root** (:mod:`benchmarks.stats`): a learned row's training seeds are averaged within each
root, completion % is the mean ± sd over roots, and the spread over seeds is reported on its own.
Differences are paired by root: mean, t-based 95% CI over roots, exact sign-flip p. Each learned (or
third-party) row is also compared with the best row that neither learns nor knows the demand
(:func:`best_fixed_row`), teacher included.

Every completion table carries the two ceiling rows (:mod:`benchmarks.ceiling_cells`): ``milp-slots``,
the K-slot optimum under the env's own rules (the best schedule found, replayed in the env, with a proven
bound; stored for the committed suites only), and ``milp``, the slot-relaxed optimum, an upper bound (not
run where node speeds or a switching cost make it inexact); the leak probes; and the share of the EDF →
ceiling gap each row closes, 100 · (row − EDF) / (ceiling − EDF), twice: against ``milp-slots``
(``gap_closed``) and against ``milp`` (``gap_closed_bound``). Where the K-slot search did not prove its
optimum, the true K-slot optimum lies between the two ceilings, so a row's true share lies between the two
figures.

Learned rows (MARA and its variants) need their shipped checkpoints; a row whose checkpoint is missing
is left out and listed under ``missing`` in the outputs rather than failing the suite.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.agents import LEARNED_SEEDS, available, is_external, is_learned, is_trained, knows_demand
from benchmarks.ceiling_cells import CEILING_ROWS, MILP, MILP_SLOTS, has_exact_ceiling, has_stored_slot_ceiling
from benchmarks.cells import AGREEMENT, Cell
from benchmarks.stats import paired_difference, root_means, seed_spread
from core_env.generators import is_fixed_scenario
from core_env.workload import SUITE_ROOTS

BOUND = "bound"
TASK_SETS = ("id", "rl_ood", "vit_ood")
HEAVY_LOADS = ("x1.25", "x1.5", "x2")

#: The allocator the learned rows were warm-started from (``--teacher`` of the shipped checkpoints).
TEACHER = "edf-admission:fm,min_reports=5"
#: The same rule on the PFN predictor (issue 27; ``min_reports`` chosen on train workloads by
#: ``python -m benchmarks.tuning --predictor pfn``), the teacher of ``mara-pfn``.
PFN_TEACHER = "edf-admission:pfn,min_reports=1"
#: The index rule on fm+pfn reading the curve-free prior for tasks with no report (issue 48, item 1).
PRIOR_INDEX = "index:fm+pfn,deadline_pct=0,explore=0,prior=1"
PAPER_ROWS = ("fifo", "edf", "window-edf", "target-edf", "prior-edf", "edf-admission", TEACHER, PFN_TEACHER, "llf", "slaq", "las", "lara", "lara-fm",
              "lara:pfn", "laira", "laira:pfn", "ppo-tianshou", "ppo-tianshou-fm", "ppo-sb3", "ppo-torchrl", "ppo-rllib", "mappo-benchmarl", "mat", "mara-wls", "mara-sparse", "mara", "mara-pfn",
              # issue 48: the posterior allocators (settings chosen on train workloads) and MARA on the posterior (its
              # teacher-free run, mara-post-pure, is in the shaping suite, at the training load)
              "index:fm+pfn,deadline_pct=0,explore=2", "plan:fm+pfn,samples=64,explore=3", "index:pfn,deadline_pct=0,explore=2",
              "plan:pfn,samples=16,explore=2", "index:fm,deadline_pct=0,explore=3", "plan:fm,samples=64,explore=3", "mara-post",
              # the index rule with the curve-free prior for tasks with no report (explore=0, chosen on train workloads)
              PRIOR_INDEX, "index:pfn,deadline_pct=0,explore=0,prior=1",
              "index:oracle,deadline_pct=50,explore=0", "plan:oracle,samples=16,explore=0", "clairvoyant", MILP_SLOTS, MILP)
#: Leak probes (no loss values seen): a curve-aware row's own margin is the one beyond the better probe.
PROBES = ("window-edf", "target-edf", "prior-edf")
#: Curve-aware fixed rows paired with the best probe (learned and third-party rows are too).
CURVE_AWARE = ("lara", "lara-fm", TEACHER, "lara:pfn", "laira:pfn", PFN_TEACHER, "index:fm+pfn,deadline_pct=0,explore=2", "index:pfn,deadline_pct=0,explore=2",
               PRIOR_INDEX)
#: Rows that read no loss value at all (the probes included): every other row that neither knows the demand
#: nor is the ceiling reads the curves (its margin over the best probe is what curve reading adds).
CURVE_FREE = ("random", "fifo", "edf", "las", *PROBES)
#: A task set measures curve reading only where the best probe stays this many points below the best curve-aware row.
PROBE_MARGIN = 5.0
#: The baseline of the "share of the EDF → ceiling gap closed" column.
GAP_BASE = "edf"
#: The differences every suite reports where both rows ran: (row A, row B), A − B.
DIFFERENCES = (("mara", "lara"), ("mara", "lara-fm"), ("mara", TEACHER), ("mara", "mara-wls"), ("mara", "mara-sparse"), ("lara", "edf"),
               ("mara-pure", "mara-sparse-pure"), ("mara", "mara-pure"),
               ("lara-fm", "lara"),  # FM − WLS inside MAT (mara − mara-wls) and inside one heuristic (LARA)
               (PFN_TEACHER, TEACHER), ("lara:pfn", "lara-fm"), ("laira:pfn", "laira"),  # PFN − FM inside each rule (issue 27)
               ("mara-pfn", "mara"), ("mara-pfn", PFN_TEACHER),
               ("ppo-tianshou", "edf"), ("ppo-tianshou-fm", "edf"), ("ppo-tianshou-fm", "ppo-tianshou"),  # third-party PPO vs EDF (issue 30)
               ("ppo-sb3", "edf"), ("ppo-torchrl", "edf"), ("ppo-rllib", "edf"), ("mappo-benchmarl", "edf"),  # five libraries, one per-slot network
               ("ppo-sb3", "ppo-tianshou"), ("ppo-torchrl", "ppo-tianshou"), ("ppo-rllib", "ppo-tianshou"), ("mappo-benchmarl", "ppo-tianshou"),
               # issue 48: the index rule against the best realizable row before it, the same predictor's median rule, and LARA-FM;
               # MARA on the posterior against its teacher (the plain index rule on PFN), its teacher-free run and MARA-PFN
               ("index:fm+pfn,deadline_pct=0,explore=2", "ppo-tianshou-fm"), ("index:fm+pfn,deadline_pct=0,explore=2", "lara-fm"),
               ("index:pfn,deadline_pct=0,explore=2", PFN_TEACHER), ("index:fm,deadline_pct=0,explore=3", TEACHER),
               ("mara-post", "index:pfn,deadline_pct=0,explore=2"), ("mara-post", "mara-post-pure"), ("mara-post", "mara-pfn"),
               # the curve-free prior for unreported tasks against the same rule exploring them first
               (PRIOR_INDEX, "index:fm+pfn,deadline_pct=0,explore=2"), (PRIOR_INDEX, "ppo-tianshou-fm"))
#: Rows built on the PFN predictor (issue 27) and their completion targets: (reference row, scenario, least
#: mean difference in points, whether the 95% CI must lie above 0). "Not below the FM rule on id" is read
#: strictly: a mean difference of at least 0.
PFN_ROWS = (PFN_TEACHER, "lara:pfn", "laira:pfn", "mara-pfn")
PFN_TARGETS = ((TEACHER, "average/train", 3.0, True), ("lara-fm", "vit_ood/train", 3.0, False), (TEACHER, "id/train", 0.0, False))
#: The allocators that decide on the whole posterior (issue 48), each on the settings chosen on train workloads
#: (docs/results/tuning/index-*.json, plan-*.json, oracle-posterior.json), and MARA on the posterior.
POST_TEACHER = "index:pfn,deadline_pct=0,explore=2"
POSTERIOR_ROWS = (PRIOR_INDEX, "index:pfn,deadline_pct=0,explore=0,prior=1", "index:fm+pfn,deadline_pct=0,explore=2", "plan:fm+pfn,samples=64,explore=3", POST_TEACHER, "plan:pfn,samples=16,explore=2",
                  "index:fm,deadline_pct=0,explore=3", "plan:fm,samples=64,explore=3", "mara-post", "mara-post-pure")
POSTERIOR_ORACLE_ROWS = ("index:oracle,deadline_pct=50,explore=0", "plan:oracle,samples=16,explore=0")
#: Issue 48's completion targets of the posterior rows: against the best realizable row before them
#: (ppo-tianshou-fm): ≥ +3 averaged with the CI above 0, and not below it on any task set or heavier load.
POSTERIOR_TARGETS = (("ppo-tianshou-fm", "average/train", 3.0, True), *(("ppo-tianshou-fm", f"{t}/train", 0.0, False) for t in TASK_SETS),
                     *(("ppo-tianshou-fm", f"average/{load}", 0.0, False) for load in HEAVY_LOADS))
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
    trace: tuple[tuple[str, Any], ...] = ()  # a replayed job trace (Cell.trace); () for none


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
        if row == MILP:
            return (0,) if has_exact_ceiling(scenario.env) else ()
        if row == MILP_SLOTS:
            return (0,) if has_stored_slot_ceiling(scenario.task_set, scenario.load, scenario.env, scenario.trace) else ()
        if not is_learned(row):
            return (0,)
        return self.seeds if scenario.seeds is None else tuple(s for s in scenario.seeds if s in self.seeds)

    def cells(self, rows: Sequence[str] | None = None) -> list[Cell]:
        out = []
        for row in rows or self.rows:
            for scenario in self.scenarios:
                for seed in self.seeds_of(row, scenario):
                    for root in range(1 if is_fixed_scenario(scenario.task_set) else self.roots):
                        extra = {} if self.episodes is None else {"episodes": self.episodes}
                        out.append(Cell(row, scenario.task_set, scenario.load, root, seed, scenario.env, trace=scenario.trace, **extra))
        return out


def specs() -> dict[str, SuiteSpec]:
    """Every cell-based suite."""
    train = tuple(Scenario(f"{t}/train", t) for t in TASK_SETS)
    heavy = tuple(Scenario(f"{t}/{load}", t, load, seeds=HEAVY_SEEDS) for load in HEAVY_LOADS for t in TASK_SETS)
    id_train = (Scenario("id/train"),)
    core = ("edf", "window-edf", "target-edf", "prior-edf", "lara", "lara-fm", TEACHER, PFN_TEACHER, "laira", "mara-wls", "mara", "clairvoyant", MILP_SLOTS, MILP)
    return {
        "paper": SuiteSpec("paper", PAPER_ROWS, train + heavy),
        "stress": SuiteSpec("stress", PAPER_ROWS, (Scenario("stress", "stress"),)),
        "diagnostics": SuiteSpec("diagnostics", PAPER_ROWS, id_train),
        "shaping": SuiteSpec("shaping", ("edf", "window-edf", "target-edf", "prior-edf", "mara", "mara-sparse", "mara-pure", "mara-sparse-pure",
                                         "mara-post", "mara-post-pure", MILP_SLOTS, MILP), train),
        "falsifier": SuiteSpec("falsifier", core, id_train + (Scenario("id/train, speeds + switch cost", env=FALSIFIER_ENV),)),
        "scale": SuiteSpec("scale", core, id_train + tuple(Scenario(f"id, {name}", "id", load, env, seeds=HEAVY_SEEDS) for name, (env, load) in SCALE_ENVS.items())),
    }


def bank_scenarios(spec: SuiteSpec, task_set: str) -> tuple[Scenario, ...]:
    """The suite's scenarios on a bank file instead of the built-in task sets.

    Every scenario on a built-in task set (``id``, ``rl_ood``, ``vit_ood``) becomes one on the bank, named
    by the bank's manifest name in place of the task set (``id/train`` -> ``BANK/train``, ``rl_ood/x2`` ->
    ``BANK/x2``, ``id, N=8`` -> ``BANK, N=8``), with the same load, overrides and seeds; scenarios that
    differ only in their task set collapse into one, and ``stress`` (a constructed scenario with no
    curves to replace) is dropped. ``task_set`` is stored resolved (absolute), so cells cached under
    ``OUT/cells`` are found again from any working directory; their keys include the file's sha256.

    Raises:
        ValueError: ``task_set`` is not a readable bank file, or the suite has no scenario on a task set.
    """
    from core_env.curves import bank_file

    verified = bank_file(task_set)
    out: dict[tuple[Any, Any], Scenario] = {}
    for s in spec.scenarios:
        if s.task_set not in TASK_SETS:
            continue
        name = verified.name + s.name[len(s.task_set):] if s.name.startswith(s.task_set) else f"{verified.name}: {s.name}"
        out.setdefault((s.load, s.env), dataclasses.replace(s, name=name, task_set=verified.path))
    if not out:
        raise ValueError(f"suite {spec.name} has no scenario on a task set (only {[s.name for s in spec.scenarios]}): it cannot run on a bank file")
    return tuple(out.values())


def for_task_set(spec: SuiteSpec, task_set: str) -> SuiteSpec:
    """``spec`` with its scenarios on the bank file ``task_set`` (:func:`bank_scenarios`); without the
    ``milp-slots`` row, whose ceilings are stored for the committed suites only."""
    return dataclasses.replace(spec, rows=tuple(r for r in spec.rows if r != MILP_SLOTS), scenarios=bank_scenarios(spec, task_set))


def trace_scenarios(spec: SuiteSpec, trace: str, layout: str = "generic", step_seconds: float | None = None,
                    task_set: str = "id") -> tuple[Scenario, ...]:
    """The suite's scenarios replaying a job trace (:mod:`core_env.trace`) on one task set.

    A trace fixes the arrivals, so the suite's loads do not apply: every scenario on a built-in task set
    becomes one on ``task_set`` (a built-in name or a bank file) replaying the trace, with the same
    overrides and seeds, named ``TRACE/TASK_SET`` plus the scenario's overrides part (``id/train`` ->
    ``philly/id``, ``id, N=8`` -> ``philly/id, N=8``; TRACE is the file's stem); scenarios that differ only
    in their task set or load collapse into one, and ``stress`` is dropped. Paths are stored resolved.

    Raises:
        ValueError: the trace or ``task_set`` cannot be read (naming the file and line), or the suite has
            no scenario on a task set.
    """
    from pathlib import Path

    from core_env.config import EnvConfig
    from core_env.trace import trace_file

    path = Path(trace).expanduser().resolve()
    trace_file(path, layout, step_seconds)  # read now: a bad trace fails before any cell runs
    config = EnvConfig(task_set=task_set)
    resolved = config.bank_path or task_set
    replay = (("layout", layout), ("path", str(path)), ("step_seconds", step_seconds))
    out: dict[Any, Scenario] = {}
    for s in spec.scenarios:
        if s.task_set not in TASK_SETS:
            continue
        rest = s.name[len(s.task_set):] if s.name.startswith(s.task_set) else f": {s.name}"
        rest = rest[len(f"/{s.load}"):] if rest.startswith(f"/{s.load}") else rest
        name = f"{path.stem}/{config.task_set_name}{rest}"
        out.setdefault(s.env, dataclasses.replace(s, name=name, task_set=resolved, load="train", trace=replay))
    if not out:
        raise ValueError(f"suite {spec.name} has no scenario on a task set (only {[s.name for s in spec.scenarios]}): it cannot replay a trace")
    return tuple(out.values())


def for_trace(spec: SuiteSpec, trace: str, layout: str = "generic", step_seconds: float | None = None, task_set: str = "id") -> SuiteSpec:
    """``spec`` with its scenarios replaying the trace file ``trace`` on ``task_set`` (:func:`trace_scenarios`);
    without the ``milp-slots`` row (stored for the committed suites only)."""
    return dataclasses.replace(spec, rows=tuple(r for r in spec.rows if r != MILP_SLOTS),
                               scenarios=trace_scenarios(spec, trace, layout, step_seconds, task_set))


# ---------------------------------------------------------------------------------------------- summaries
def _pairs(results: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[tuple[int, int], dict[str, Any]]]:
    """(row, scenario name) -> {(seed, root): result}."""
    out: dict[tuple[str, str], dict[tuple[int, int], dict[str, Any]]] = {}
    for result, scenario in results:
        cell = result["cell"]
        out.setdefault((cell["agent"], scenario), {})[(cell["seed"], cell["root"])] = result
    return out


def _scenario_key(task_set: str, load: Any, env: Any, trace: Any = ()) -> str:
    return json.dumps([task_set, load, [list(pair) for pair in env], [list(pair) for pair in trace]], default=list)


def summarize(spec: SuiteSpec, results: Sequence[dict[str, Any]], rows: Sequence[str], compare: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """Per-row summaries (root level), the bound, the gap closed, diagnostics and the paired differences of
    one suite's results (any subset of the suite's cells: each result is matched to its scenario by its cell)."""
    names = {_scenario_key(s.task_set, s.load, s.env, s.trace): s.name for s in spec.scenarios}
    pairs = [(r, names[_scenario_key(r["cell"]["task_set"], r["cell"]["load"], r["cell"]["env"], r["cell"].get("trace", ()))]) for r in results]
    by = _pairs(pairs)
    values = {key: {k: 100 * r["mean"]["completion_rate"] for k, r in cells.items()} for key, cells in by.items()}
    bounds = {key: {k: 100 * r["feasibility_bound"] for k, r in cells.items()} for key, cells in by.items()}
    for load in dict.fromkeys(s.load for s in spec.scenarios):  # average/LOAD: equal weight on the three task sets, per (seed, root)
        group = [s.name for s in spec.scenarios if s.load == load and not s.env and s.task_set in TASK_SETS]
        if len(group) == len(TASK_SETS):
            for row in rows:
                for source in (values, bounds):
                    keys = set.intersection(*(set(source.get((row, g), {})) for g in group))
                    if keys:
                        source[(row, f"average/{load}")] = {k: float(np.mean([source[(row, g)][k] for g in group])) for k in sorted(keys)}
    columns = list(dict.fromkeys([s.name for s in spec.scenarios] + [name for _, name in values]))
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        table[row] = {}
        for column in columns:
            if values.get((row, column)):
                table[row][column] = _spread(np.array(list(root_means(values[(row, column)]).values())))
                if is_learned(row) and len({seed for seed, _ in values[(row, column)]}) > 1:
                    table[row][column]["seeds"] = seed_spread(values[(row, column)])
    bound = {}
    for column in columns:
        per_root: dict[int, float] = {}
        for row in rows:
            per_root.update(root_means(bounds.get((row, column), {})))
        if per_root:
            bound[column] = _spread(np.array(list(per_root.values())))
    diagnostics: dict[str, dict[str, float]] = {}
    for row in rows:
        first = by.get((row, spec.scenarios[0].name), {})
        if first and row not in CEILING_ROWS:
            diagnostics[row] = {key: float(np.mean([r["mean"][key] for r in first.values()])) for key in
                                ("node_utilization", "wasted_node_steps", "switches", "conflicts", "invalid_actions")}
            diagnostics[row]["decision_ms"] = float(np.mean([r["decision_ms"] for r in first.values()]))
            agreed = [r["teacher_agreement"] for r in first.values() if "teacher_agreement" in r]
            if agreed:
                diagnostics[row]["teacher"] = agreed[0]["teacher"]
                for key in AGREEMENT:
                    diagnostics[row][key] = float(np.mean([a[key] for a in agreed]))
    return {"table": table, "bound": bound, "gap_closed": gap_closed(values, rows, columns),
            "gap_closed_bound": gap_closed(values, rows, columns, MILP), "diagnostics": diagnostics,
            "differences": differences(columns, values, rows, table, compare), "probe_margins": probe_margins(table, columns),
            "pfn_targets": pfn_targets(values, rows), "posterior_targets": row_targets(values, rows, POSTERIOR_ROWS, POSTERIOR_TARGETS)}


def row_targets(values, rows: Sequence[str], target_rows: Sequence[str], targets) -> list[dict[str, Any]]:
    """Each of ``target_rows`` against each of ``targets`` ((reference, scenario, least mean difference, CI
    above 0)) where both rows ran: the paired difference by root and whether the target is met. Every row
    is listed: picking the best one on these roots would favour it, so the page shows them all."""
    out = []
    for row in target_rows:
        for reference, column, least, above_zero in targets:
            if row in rows and reference in rows:
                a, b = paired_by_root(values, row, reference, column)
                if a.size >= 2:
                    d = paired_difference(a, b)
                    out.append({"row": row, "reference": reference, "scenario": column, "least": least, "ci_above_zero": above_zero, **d,
                                "met": bool(d["mean"] >= least and (not above_zero or d["ci_low"] > 0))})
    return out


def pfn_targets(values, rows: Sequence[str]) -> list[dict[str, Any]]:
    """:func:`row_targets` of :data:`PFN_ROWS` (issue 27)."""
    return row_targets(values, rows, PFN_ROWS, PFN_TARGETS)


def probe_margins(table: dict[str, dict[str, dict[str, Any]]], columns: Sequence[str]) -> dict[str, dict[str, Any]]:
    """{column: best probe, best curve-aware row (not curve-free, not told the demand, not the ceiling), their
    mean completions, the margin and whether it is at least :data:`PROBE_MARGIN`} where both ran."""
    out = {}
    for column in columns:
        probe = best_probe(table, column)
        aware = [(cells[column]["mean"], row) for row, cells in table.items()
                 if column in cells and row not in CURVE_FREE and not knows_demand(row) and row not in CEILING_ROWS]
        if probe is None or not aware:
            continue
        best, row = max(aware)
        margin = best - table[probe][column]["mean"]
        out[column] = {"probe": probe, "probe_mean": table[probe][column]["mean"], "curve_aware": row, "curve_aware_mean": best,
                       "margin": margin, "measures_curve_reading": bool(margin >= PROBE_MARGIN)}
    return out


def gap_closed(values, rows: Sequence[str], columns: Sequence[str], ceiling_row: str = MILP_SLOTS) -> dict[str, dict[str, float]]:
    """{row: {column: 100 · (row − EDF) / (ceiling − EDF)}} on the roots the row, EDF and the ceiling row
    (``milp-slots`` by default) all ran (seeds averaged within a root), where the ceiling is above EDF."""
    out: dict[str, dict[str, float]] = {}
    for column in columns:
        base, ceiling = root_means(values.get((GAP_BASE, column), {})), root_means(values.get((ceiling_row, column), {}))
        for row in rows:
            mine = root_means(values.get((row, column), {}))
            roots = sorted(set(mine) & set(base) & set(ceiling))
            if roots:
                b, c, m = (float(np.mean([series[r] for r in roots])) for series in (base, ceiling, mine))
                if c > b:
                    out.setdefault(row, {})[column] = 100 * (m - b) / (c - b)
    return out


def _spread(values: np.ndarray) -> dict[str, float]:
    """Mean, sample sd (0 for one value) and count."""
    return {"mean": float(values.mean()), "sd": float(values.std(ddof=1)) if values.size > 1 else 0.0, "n": int(values.size)}


def is_fixed(row: str) -> bool:
    """A row that neither learns nor knows the hidden demand (nor is the ceiling): a candidate best baseline."""
    return not (is_trained(row) or knows_demand(row) or is_external(row) or row in CEILING_ROWS)


def best_fixed_row(table: dict[str, dict[str, dict[str, Any]]], column: str) -> str | None:
    """The fixed row (:func:`is_fixed`) with the highest mean completion in ``column``."""
    candidates = [(cells[column]["mean"], row) for row, cells in table.items() if is_fixed(row) and column in cells]
    return max(candidates)[1] if candidates else None


def best_probe(table: dict[str, dict[str, dict[str, Any]]], column: str) -> str | None:
    """The leak probe (:data:`PROBES`) with the highest mean completion in ``column``."""
    candidates = [(table[row][column]["mean"], row) for row in PROBES if column in table.get(row, {})]
    return max(candidates)[1] if candidates else None


def paired_by_root(values, row_a: str, row_b: str, column: str) -> tuple[np.ndarray, np.ndarray]:
    """Completion % of A and B on the roots both ran, each row's training seeds averaged within a root."""
    a, b = root_means(values.get((row_a, column), {})), root_means(values.get((row_b, column), {}))
    roots = sorted(set(a) & set(b))
    return np.array([a[r] for r in roots]), np.array([b[r] for r in roots])


def differences(columns: Sequence[str], values, rows: Sequence[str], table, compare: Sequence[tuple[str, str]] = ()) -> list[dict[str, Any]]:
    """The paired differences of :data:`DIFFERENCES` and ``compare``, plus each learned or third-party row
    against the best fixed row."""
    wanted = [(a, b) for a, b in dict.fromkeys([*DIFFERENCES, *compare]) if a in rows and b in rows]
    out = []
    for column in columns:
        best = best_fixed_row(table, column)
        probe = best_probe(table, column)
        extra = [(row, best) for row in rows if best is not None and (is_trained(row) or is_external(row))]
        probed = [(row, probe) for row in rows if probe is not None and row != probe
                  and (is_trained(row) or is_external(row) or row in CURVE_AWARE)]
        for row_a, row_b in dict.fromkeys([*wanted, *extra, *probed]):  # one difference per pair (the best fixed row can be the probe)
            a, b = paired_by_root(values, row_a, row_b, column)
            if a.size >= 2:
                out.append({"a": row_a, "b": row_b, "scenario": column, "best_fixed": row_b == best and not is_fixed(row_a),
                            "best_probe": row_b == probe, **paired_difference(a, b)})
    return out


def rows_to_run(spec: SuiteSpec, rows: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """(rows that can run, learned rows left out for lack of checkpoints)."""
    wanted = list(rows or spec.rows)
    return [r for r in wanted if available(r)], [r for r in wanted if not available(r)]
