"""quick: heuristics and learning-aware allocators on the `id` evaluation suite at the training load and on the stress scenario.

Completion on id/train is the mean ± sd over the evaluation roots of each root's mean over its
episodes. Three ceiling rows close the table: ``milp-slots``, the K-slot optimum under the env's own
rules (the best schedule found, replayed in the env; stored with the committed suites, so id/train only),
the MILP offline optimum with the K-slot limit dropped (stored with the suites; unit speeds; an upper bound
above the env's own optimum, issue 28) and the independent-feasibility relaxation (ignores contention), summarised
the same way. ``clairvoyant`` and the ``:oracle`` rows know the hidden demand: strong heuristics, not
bounds. ``window-edf`` is a leak probe (no curve values). Learned rows run the shipped checkpoints,
labelled with the environment version they were trained on. The last two columns are the share of the EDF →
ceiling gap a row closes on id/train, 100 · (row − EDF) / (ceiling − EDF), against ``milp-slots`` and against
the slot-relaxed MILP: the true share against the env's optimum lies between them. ``--rows`` chooses the rows
(shipped or third-party ``module.path:attr``; default: every row of :data:`AGENTS`). ``--task-set BANK.npz`` replaces id/train
with ``NAME/train`` on a bank file of your own curves (eval split, drawn by the suites' seeding scheme:
the episodes of ``python -m core_env.suites generate --task-set BANK.npz``; the MILP is solved per episode).
``--trace TRACE.csv [--trace-layout L] [--step-seconds S]`` replaces it with ``TRACE/NAME``: the trace
replayed on the task set (``--task-set``, default id), each root's episodes drawing the missing fields
as the suites' trace cells do (:meth:`benchmarks.cells.Cell.trace_workloads`); the MILP is solved. Results go to ``OUT/quick.json`` (summary, per-episode records,
environment version and suite checksums) and ``OUT/quick.csv`` (per episode); OUT defaults to
``results`` under the working directory and nothing is written elsewhere.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import add_out, add_trace, markdown_table, write_results
from benchmarks.cells import Cell
from benchmarks.rollout import run_agent
from core_env.config import EnvConfig
from core_env.extras import needs
from core_env.ceilings import suite_ceiling_rates, suite_slot_ceiling_rates
from core_env.generators import generator_for, suite_workloads
from core_env.suites import SUITE_EPISODES, SUITE_ROOTS
from core_env.workload import Workload
from mara_agents.bounds import independent_feasibility_bounds, milp_ceiling
from benchmarks.agents import QUICK_ROWS, make_agent

with needs(__name__):
    from tqdm import tqdm

AGENTS = QUICK_ROWS
BOUND = "independent-feasibility relaxation"
MILP = "slot-relaxed MILP (upper bound)"
#: Printed after the table: what a newcomer runs next.
NEXT_STEPS = ("\nNext: put your own agent beside these rows with `python -m benchmarks quick --rows edf my_module:MyAgent` "
              "(docs/tutorials/evaluate-your-agent.md); every table of the paper, with paired statistics: docs/results.md "
              "(`python -m benchmarks paper` and the other suites, `python -m benchmarks --help`); the tests: `make test`.")
#: The K-slot ceiling row (stored for the committed suites: id/train only here).
SLOTS = "milp-slots (K-slot optimum, best found)"
EPISODE_COLUMNS = ("completion_rate", "completed", "arrived", "failed", "rejected", "node_utilization", "wasted_node_steps", "conflicts", "invalid_actions")


def main_cells(roots: int, episodes: int, task_set: str | None = None, trace: tuple[tuple[str, Any], ...] = ()) -> list[Cell]:
    """The benchmark cells (one per root, row ``edf``) whose workloads make the first scenario: ``task_set``
    (a bank file, or with a trace a built-in name too; default id) at the training load, replaying ``trace``
    (:attr:`benchmarks.cells.Cell.trace`) if given."""
    return [Cell("edf", task_set or "id", "train", root=r, episodes=episodes, trace=trace) for r in range(roots)]


def scenarios(roots: int = SUITE_ROOTS, episodes: int = SUITE_EPISODES, task_set: str | None = None,
              trace: tuple[tuple[str, Any], ...] = ()) -> dict[str, tuple[EnvConfig, list[Workload], list[tuple[int, int]]]]:
    """Each scenario's config, workloads and the (evaluation root, episode) of every workload (the first
    scenario is id/train, ``NAME/train`` on the bank file ``task_set``, or ``TRACE/NAME`` replaying
    ``trace``: the cells' workloads, :meth:`benchmarks.cells.Cell.workloads`)."""
    cells = [(r, e) for r in range(roots) for e in range(episodes)]
    if task_set is not None or trace:
        roots_cells = main_cells(roots, episodes, task_set, trace)
        config = roots_cells[0].config()
        workloads = [w for cell in roots_cells for w in cell.workloads()]
        name = f"{Path(dict(trace)['path']).stem}/{config.task_set_name}" if trace else f"{config.task_set_name}/train"
        first = (name, (config, workloads, cells))
    else:
        config = EnvConfig()
        first = ("id/train", (config, suite_workloads("id", "train", cells, config.n_nodes), cells))
    stress = EnvConfig(task_set="stress", n_nodes=config.n_nodes)
    return {first[0]: first[1], "stress": (stress, [generator_for(stress).workload()], [(0, 0)])}


def root_rates(rates: np.ndarray, cells: Sequence[tuple[int, int]]) -> np.ndarray:
    """Per evaluation root (sorted), the mean of ``rates`` over its episodes, in %."""
    roots = np.array([root for root, _ in cells])
    return np.array([rates[roots == r].mean() for r in np.unique(roots)]) * 100.0


def summarize(rates: np.ndarray, cells: Sequence[tuple[int, int]]) -> dict[str, float]:
    """Mean and sample sd (0 for one root) over roots of the per-root mean of ``rates``, in %."""
    per_root = root_rates(rates, cells)
    return {"mean": float(per_root.mean()), "sd": float(per_root.std(ddof=1)) if per_root.size > 1 else 0.0}


def evaluate(agents: Sequence[str] = AGENTS, roots: int = SUITE_ROOTS, episodes: int = SUITE_EPISODES, seed: int = 0,
             task_set: str | None = None, trace: tuple[tuple[str, Any], ...] = ()) -> dict[str, Any]:
    """Run ``agents`` (rows of :func:`benchmarks.agents.make_agent`; ``random`` seeded with ``seed``) on every scenario
    (``task_set``: a bank file in place of id; ``trace``: a replayed job trace; see :func:`scenarios`).

    Returns:
        ``{"summary": {row: {scenario: {"mean", "sd"}}}, "episodes": [per-episode records]}`` with a row
        per agent plus the slot-relaxed MILP and the independent-feasibility relaxation; completion in %.
    """
    summary: dict[str, dict[str, dict[str, float]]] = {}
    records: list[dict[str, Any]] = []
    cases = scenarios(roots, episodes, task_set, trace)
    main = next(iter(cases))
    bounds = {scenario: independent_feasibility_bounds(workloads) for scenario, (_, workloads, _) in cases.items()}
    # rows differ a hundredfold in cost (a learned row with its predictor vs a rule), so no ETA is shown:
    # the row being computed and the time so far
    bar = tqdm(agents, desc="quick", leave=False, bar_format="{desc}: row {n_fmt}/{total_fmt} [{elapsed} so far]{postfix}")
    for name in bar:
        bar.set_postfix_str(f"computing {name}")
        agent = make_agent(name, seed, task_set or "id")
        summary[name] = {}
        for scenario, (config, workloads, cells) in cases.items():
            stats = run_agent(agent, workloads, config)
            summary[name][scenario] = summarize(stats["completion_rate"], cells)
            for i, (root, episode) in enumerate(cells):
                record = {"agent": name, "scenario": scenario, "root": root, "episode": episode}
                record.update({key: stats[key][i].item() for key in EPISODE_COLUMNS})
                record["feasibility_bound"] = float(bounds[scenario][i])
                records.append(record)
    stored = task_set is None and not trace  # id/train: the committed suite, whose ceilings are stored
    milp = {scenario: suite_ceiling_rates("id", "train", cells) if stored and scenario == main
            else np.array([milp_ceiling(w, config.n_nodes).rate for w in workloads]) for scenario, (config, workloads, cells) in cases.items()}
    if stored:
        summary[SLOTS] = {main: summarize(suite_slot_ceiling_rates("id", "train", cases[main][2]), cases[main][2])}
    summary[MILP] = {scenario: summarize(milp[scenario], cells) for scenario, (_, _, cells) in cases.items()}
    summary[BOUND] = {scenario: summarize(bounds[scenario], cells) for scenario, (_, _, cells) in cases.items()}
    return {"summary": summary, "episodes": records}


def table(summary: dict[str, dict[str, dict[str, float]]], roots: int) -> str:
    from benchmarks.report import row_label

    main, *others = summary[MILP]  # id/train, or NAME/train on a bank file; then the stress scenario
    edf = summary["edf"][main]["mean"] if "edf" in summary else None

    def closed(cells: dict[str, dict[str, float]], ceiling_row: str) -> str:
        ceiling = summary[ceiling_row][main]["mean"] if ceiling_row in summary else None
        return "—" if edf is None or ceiling is None or ceiling <= edf else f"{100 * (cells[main]['mean'] - edf) / (ceiling - edf):+.0f}"

    rows = [(row_label(row) if row not in (SLOTS, MILP, BOUND) else row, f"{cells[main]['mean']:.1f} ± {cells[main]['sd']:.1f}",
             *(f"{cells[other]['mean']:.1f}" if other in cells else "—" for other in others), closed(cells, SLOTS), closed(cells, MILP))
            for row, cells in summary.items()]
    return markdown_table(("agent", f"{main} completion % (mean ± sd, {roots} roots)", *(f"{other} completion %" for other in others),
                           f"EDF → milp-slots gap closed on {main}, %", f"EDF → slot-relaxed MILP gap closed on {main}, %"), rows)


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks quick", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of the random agent")
    parser.add_argument("--rows", nargs="+", default=list(AGENTS), help="rows, shipped or third-party module.path:attr (default: all shipped quick rows)")
    parser.add_argument("--roots", type=int, default=SUITE_ROOTS, help=f"evaluation roots (default {SUITE_ROOTS})")
    parser.add_argument("--episodes", type=int, default=SUITE_EPISODES, help=f"episodes per root (default {SUITE_EPISODES})")
    parser.add_argument("--task-set", default=None, metavar="BANK.npz",
                        help="a bank file of your own curves in place of id (NAME/train); with --trace, the task set it replays on")
    add_trace(parser)
    add_out(parser)
    args = parser.parse_args(argv)
    from benchmarks.paper import specs, trace_scenarios
    from benchmarks.report import commit
    from core_env.suites import suite_meta, suite_sha256

    start = time.perf_counter()
    if not 1 <= args.roots <= SUITE_ROOTS or not 1 <= args.episodes <= SUITE_EPISODES:
        parser.error(f"--roots must be in 1..{SUITE_ROOTS} and --episodes in 1..{SUITE_EPISODES}")
    banks, traces, trace = {}, {}, ()
    try:
        if args.trace is not None:
            (scenario,) = trace_scenarios(specs()["diagnostics"], args.trace, args.trace_layout, args.step_seconds, args.task_set or "id")
            trace = scenario.trace
        config = main_cells(1, 1, args.task_set, trace)[0].config()
    except ValueError as exc:
        parser.error(str(exc))
    if config.bank_path is not None:
        banks = {config.task_set_name: {"path": config.bank_path, "sha256": config.bank_sha256}}
    if trace:
        traces = {scenario.name: {**main_cells(1, 1, args.task_set, trace)[0].trace_record(), "max_cycles": config.max_cycles}}
    drawn = bool(banks or traces)
    result = evaluate(list(dict.fromkeys(args.rows)), roots=args.roots, episodes=args.episodes, seed=args.seed, task_set=args.task_set, trace=trace)
    wall = time.perf_counter() - start
    print(table(result["summary"], args.roots))
    payload = {"suite": "quick", "command": "python -m benchmarks quick " + " ".join(argv), "commit": commit(), "env_version": suite_meta("id", "train")["env"],
               "suite_sha256": {} if drawn else {"id/train": suite_sha256("id", "train")}, "banks": banks, "traces": traces,
               "recipe": (config.recipe.as_dict() if drawn else suite_meta("id", "train")["recipe"]), "wall_s": wall, "roots": args.roots, "episodes_per_root": args.episodes, **result}
    paths = write_results("quick", payload, result["episodes"], out=args.out)
    print(f"\nwall time {wall:.1f} s; wrote {', '.join(str(p) for p in paths)}")
    print(NEXT_STEPS)
    return 0
