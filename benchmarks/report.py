"""Run a cell-based suite (:mod:`benchmarks.paper`) and write its outputs: JSON, CSV, Markdown, PNG.

``python -m benchmarks SUITE [--workers W] [--backend process|ray] [--address A] [--rows R ...]
[--roots R] [--episodes E] [--task-set BANK.npz] [--trace TRACE.csv [--trace-layout L] [--step-seconds S]]
[--out DIR]`` for SUITE in paper, stress, diagnostics, shaping, falsifier, scale. ``--task-set`` runs the
suite's scenarios on a bank file of your own curves (:func:`benchmarks.paper.bank_scenarios`; every suite
but ``stress``). ``--trace`` replays a CSV job trace on the task set (``--task-set``, a bank file or a
built-in name, default ``id``; :func:`benchmarks.paper.trace_scenarios`): columns ``TRACE/TASK_SET``, root
``r`` episode ``e`` the trace with its missing fields drawn by the generator ``[seed, crc32(trace sha256),
r, e]``, ``max_cycles`` raised to the trace's horizon. Outputs go to ``DIR/SUITE/``
(default ``results/SUITE/`` under the working directory; nothing is written elsewhere): ``SUITE.json`` (summary,
differences, missing rows, command, commit, environment version, the sha256 of every committed suite
file used, each bank file's path and sha256, each trace's path, sha256, layout and step_seconds, each scenario's task recipe, each row's identity,
machine, wall time),
``SUITE.csv`` (one line per episode), ``SUITE.md`` (the tables) and the suite's figures, each written
atomically after every cell has run (a failed run leaves the previous outputs as they were). Cells are
cached under ``DIR/cells/``, so rerunning after an interruption computes only what is missing.

``--rows`` accepts shipped rows and third-party ``module.path:attr`` rows (:mod:`benchmarks.agents`).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS_DIR, add_trace, figure_png, markdown_table, write_atomic, write_atomic_bytes
from benchmarks.agents import is_external, trained_on, weights_id
from benchmarks.ceiling_cells import MILP, MILP_SLOTS
from benchmarks.cells import EPISODE_STATS, CellStore, run_cells
from benchmarks.paper import BOUND, PROBE_MARGIN, SuiteSpec, for_task_set, for_trace, rows_to_run, specs, summarize
from core_env.config import EnvConfig
from core_env.extras import needs
from core_env.generators import suite_workloads
from core_env.vector import DiscreteCoREVectorEnv
from mara_agents.rollout import agent_policy, play


def machine() -> dict[str, Any]:
    return {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()}


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance(spec: SuiteSpec, rows: Sequence[str]) -> dict[str, Any]:
    """What makes two users' numbers comparable: env version, suite files' sha256, each row's identity, the
    task recipe of each scenario (None for a fixed scenario, which builds its own tasks), for scenarios on a
    bank file the file's name, path and sha256, and for scenarios replaying a trace its path, sha256, layout,
    step_seconds and the episodes' ``max_cycles``."""
    from benchmarks.cells import Cell
    from core_env.config import LOADS
    from core_env.generators import committed_suite_fits, is_fixed_scenario
    from core_env.workload import SUITE_TASK_SETS, suite_meta, suite_sha256

    suites, banks, recipes, traces = {}, {}, {}, {}
    for s in spec.scenarios:
        suite = not s.trace and s.task_set in SUITE_TASK_SETS and isinstance(s.load, str) and s.load in LOADS
        if suite and f"{s.task_set}/{s.load}" not in suites:
            suites[f"{s.task_set}/{s.load}"] = suite_sha256(s.task_set, s.load)
        cell = Cell("edf", s.task_set, s.load, env=s.env, trace=s.trace)
        config = cell.config()
        if config.bank_path is not None:
            banks[config.task_set_name] = {"path": config.bank_path, "sha256": config.bank_sha256}
        if s.trace:
            traces[s.name] = {**cell.trace_record(), "max_cycles": config.max_cycles}
        committed = not s.trace and committed_suite_fits(s.task_set, s.load, config.n_nodes)
        recipes[s.name] = suite_meta(s.task_set, s.load)["recipe"] if committed else (None if is_fixed_scenario(s.task_set) else config.recipe.as_dict())
    env = suite_meta(SUITE_TASK_SETS[0], "train")["env"]
    agents = {row: {"weights_or_source_sha256": weights_id(row), **({"trained_on": trained_on(row)} if trained_on(row) else {})} for row in rows}
    return {"env_version": env, "suite_sha256": suites, "banks": banks, "traces": traces, "recipe": recipes, "agents": agents}


def run_suite(spec: SuiteSpec, out: Path = RESULTS_DIR, rows: Sequence[str] | None = None, workers: int = 1, backend: str = "process",
              address: str | None = None, progress: bool = True, argv: Sequence[str] = (), cached_only: bool = False,
              compare: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """Run (or resume) one suite and write its outputs; returns the JSON payload. With ``cached_only``,
    summarise the cells already computed and list the others as not computed. ``compare``: extra
    (row A, row B) differences to report."""
    start = time.perf_counter()
    rows, missing = rows_to_run(spec, rows)
    if not rows:
        raise ValueError(f"suite {spec.name}: no row can run (missing checkpoints for {missing})")
    cells = spec.cells(rows)
    store = CellStore(out / "cells")
    not_computed = []
    if cached_only:
        not_computed = sorted({f"{c.agent} on {c.task_set}/{c.load}{' ' + str(dict(c.env)) if c.env else ''} seed {c.seed}" for c in cells if store.load(c) is None})
        cells = [c for c in cells if store.load(c) is not None]
        if not cells:
            raise ValueError(f"suite {spec.name}: --cached-only found no cached cell under {store.directory}")
    results = run_cells(cells, store, workers=workers, backend=backend, address=address, progress=progress)
    summary = summarize(spec, results, rows, compare)
    payload = {"suite": spec.name, "command": "python -m benchmarks " + " ".join([spec.name, *argv]), "commit": commit(), "machine": machine(),
               **provenance(spec, rows), "wall_s": time.perf_counter() - start, "cells": len(cells), "rows": rows, "missing": missing,
               "not_computed": not_computed, "scenarios": [s.name for s in spec.scenarios], "roots": spec.roots, **summary}
    directory = out / spec.name
    pictures = figures(spec, payload, results)
    payload["figures"] = [str(directory / name) for name in pictures]
    texts = {f"{spec.name}.json": json.dumps(payload, indent=1) + "\n", f"{spec.name}.csv": _csv(results), f"{spec.name}.md": tables(payload) + "\n"}
    for name, data in pictures.items():  # every output is rendered before the first is replaced
        write_atomic_bytes(directory / name, data)
    for name, text in texts.items():
        write_atomic(directory / name, text)
    return payload


def _csv(results: Sequence[dict[str, Any]]) -> str:
    fields = ["agent", "seed", "task_set", "load", "env", "root", "episode", *EPISODE_STATS]
    handle = io.StringIO(newline="")
    writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    for result in results:
        cell = result["cell"]
        for i, episode in enumerate(result["episodes"]):
            writer.writerow({"agent": cell["agent"], "seed": cell["seed"], "task_set": cell["task_set"], "load": cell["load"],
                             "env": json.dumps(cell["env"]), "root": cell["root"], "episode": i, **episode})
    return handle.getvalue()


def _cell_text(entry: dict[str, Any]) -> str:
    text = f"{entry['mean']:.1f} ± {entry['sd']:.1f}" if entry["n"] > 1 else f"{entry['mean']:.1f}"
    if "seeds" in entry:
        text += f" (seeds ±{entry['seeds']['sd']:.1f})"
    return text


def row_label(row: str) -> str:
    """A row's name in the tables: learned rows say which environment version trained them."""
    version = trained_on(row)
    if version:
        return f"{row} ({version}-trained)"
    if row == MILP:
        return f"{MILP} (slot-relaxed optimum: upper bound)"
    if row == MILP_SLOTS:
        return f"{MILP_SLOTS} (K-slot optimum: best schedule found, replayed)"
    return f"{row} (third-party)" if is_external(row) else row


def pfn_targets_table(payload: dict[str, Any], key: str = "pfn_targets") -> str:
    """The ``pfn_targets`` (or another ``key``'s targets) of a suite's payload (:func:`benchmarks.paper.row_targets`) as Markdown."""
    def target(t: dict[str, Any]) -> str:
        return f"≥ {t['least']:+.0f}" + (", CI above 0" if t["ci_above_zero"] else "")

    return markdown_table(("row − reference", "scenario", "mean", "95% CI", "p", "target", "met"),
                          [(f"{t['row']} − {t['reference']}", t["scenario"], f"{t['mean']:+.1f}", f"[{t['ci_low']:+.1f}, {t['ci_high']:+.1f}]",
                            f"{t['p_value']:.4f}", target(t), "met" if t["met"] else "MISSED") for t in payload[key]])


def fixed_scenarios(payload: dict[str, Any]) -> list[str]:
    """The payload's scenarios that play one fixed workload once (:func:`core_env.generators.is_fixed_scenario`):
    those :func:`provenance` records without a task recipe (every other scenario, a committed suite, a draw or
    a trace, has one)."""
    recipes = payload.get("recipe", {})
    return [name for name in payload["scenarios"] if name in recipes and recipes[name] is None]


def tables(payload: dict[str, Any]) -> str:
    """The suite's Markdown tables: completion (with the slot-relaxed MILP upper bound, the independent-feasibility
    bound and the share of the EDF → upper-bound gap closed), diagnostics (diagnostics suite), differences."""
    every = list(dict.fromkeys(c for cells in payload["table"].values() for c in cells))
    heavy = [c for c in every if c.startswith("average/")]
    columns = [c for c in every if "/x" not in c or not heavy]  # without averages (a bank file's scenarios) every column is in the main table
    gap = payload.get("gap_closed", {})

    def completion(columns: list[str]) -> str:
        rows = [(row_label(row), *(_cell_text(cells[c]) if c in cells else "—" for c in columns)) for row, cells in payload["table"].items()]
        rows.append((f"independent-feasibility {BOUND} (relaxation)", *(_cell_text(payload["bound"][c]) if c in payload["bound"] else "—" for c in columns)))
        return markdown_table(("agent", *columns), rows)

    def closed(columns: list[str], shares: dict[str, dict[str, float]]) -> str:
        rows = [(row_label(row), *(f"{shares[row][c]:+.0f}" if c in shares.get(row, {}) else "—" for c in columns)) for row in payload["table"]]
        return markdown_table(("agent", *columns), rows)

    fixed = fixed_scenarios(payload)
    one = len(fixed) == 1 and fixed == payload["scenarios"]
    over = f"the {fixed[0]} scenario's one fixed workload" if one else f"{payload['roots']} evaluation roots"
    text = [f"Completion % (mean ± sd over {over}; a learned row's training seeds are averaged within each root, "
            f"their spread in brackets); `{payload['command']}`, commit {payload['commit']}, {payload.get('env_version', '?')}", "", completion(columns)]
    if len(heavy) > 1:
        text += ["", "Heavier loads (equal-weight average of id, rl_ood, vit_ood; per task set in the JSON and CSV):", "", completion(heavy)]
    if gap or payload.get("gap_closed_bound"):
        both = list(dict.fromkeys(columns + (heavy if len(heavy) > 1 else [])))
        text += ["", "Share of the EDF → ceiling gap closed, % = 100 · (row − EDF) / (ceiling − EDF), against `milp-slots` (the best K-slot "
                 "schedule found) and, below it, against `milp` (the slot-relaxed upper bound). Where the K-slot search did not prove its optimum "
                 "(`gap` in the JSON), the env's optimum lies between the two ceilings and a row's true share between the two figures (issue 28):", ""]
        if gap:
            text += ["Against `milp-slots`:", "", closed(both, gap), ""]
        if payload.get("gap_closed_bound"):
            text += ["Against `milp` (slot-relaxed upper bound):", "", closed(both, payload["gap_closed_bound"])]
        slots = payload["table"].get(MILP_SLOTS, {})
        if slots and any(c not in slots for c in columns):
            text += ["", "`milp-slots` is stored for the committed suites only (— elsewhere, where only the share against `milp` is given)."]
    if MILP in payload["table"] and any(c not in payload["table"][MILP] for c in columns):
        text += ["", "`milp` is not run where node speeds or a switching cost make it inexact (—)."]
    if payload["suite"] == "diagnostics":
        diag = payload["diagnostics"]
        text += ["", f"Diagnostics on {columns[0]} (per episode, mean over cells):", "",
                 markdown_table(("agent", "node utilization", "node-steps wasted on failed tasks", "switches", "conflicts", "decision ms per env-step (batched)",
                                 "steps serving the teacher's task set, %", "served tasks the teacher also serves, %"),
                                [(row, f"{d['node_utilization']:.3f}", f"{d['wasted_node_steps']:.1f}", f"{d['switches']:.1f}", f"{d['conflicts']:.1f}",
                                  f"{d['decision_ms']:.2f}", *_agreement(d)) for row, d in diag.items()])]
        if any("teacher" in d for d in diag.values()):
            text += ["", "Teacher agreement (learned rows): at every step of the learned agent's own episodes its teacher "
                     f"({', '.join(sorted({d['teacher'] for d in diag.values() if 'teacher' in d}))}) is shown the same observation; "
                     "the first share counts the steps (with a task to serve) where both would serve the same set of slots, "
                     "the second the slots the learned agent serves that the teacher would serve too."]
    margins = {c: m for c, m in payload.get("probe_margins", {}).items() if c in columns}
    if margins:
        text += ["", f"Leak-probe check: the best row that reads no loss value against the best curve-aware row (a task set measures "
                 f"curve reading only where the margin is at least {PROBE_MARGIN:.0f} points):", "",
                 markdown_table(("scenario", "best probe", "best curve-aware row", "margin, points", "measures curve reading"),
                                [(c, f"{m['probe']} {m['probe_mean']:.1f}", f"{m['curve_aware']} {m['curve_aware_mean']:.1f}", f"{m['margin']:+.1f}",
                                  "yes" if m["measures_curve_reading"] else "**no**: a probe that sees no curve comes within "
                                  f"{PROBE_MARGIN:.0f} points") for c, m in margins.items()])]
    if payload.get("pfn_targets"):
        text += ["", "Completion targets of the rows built on the PFN predictor (issue 27; paired by root, t-based 95% CI):", "",
                 pfn_targets_table(payload)]
    if payload.get("posterior_targets"):
        text += ["", "Completion targets of the rows that decide on the whole posterior (issue 48; every such row is listed, not the "
                 "best one picked on these roots; paired by root, t-based 95% CI):", "", pfn_targets_table(payload, "posterior_targets")]
    if payload["differences"]:
        text += ["", "Paired differences by evaluation root (percentage points; seeds averaged within a root; t-based 95% CI over roots; "
                 "exact sign-flip p; ★ = against the best row that neither learns nor knows the demand; ◆ = against the better leak probe):", "",
                 markdown_table(("difference", "scenario", "mean", "95% CI", "p", "roots"),
                                [(f"{d['a']} − {d['b']}{' ★' if d.get('best_fixed') else ''}{' ◆' if d.get('best_probe') else ''}", d["scenario"], f"{d['mean']:+.1f}",
                                  f"[{d['ci_low']:+.1f}, {d['ci_high']:+.1f}]", f"{d['p_value']:.4f}", d["n"]) for d in payload["differences"]])]
    if payload["missing"]:
        text += ["", f"Left out (no shipped checkpoint): {', '.join(payload['missing'])}."]
    if payload.get("not_computed"):
        text += ["", f"Not computed in this run (`--cached-only`; {len(payload['not_computed'])} row × scenario × seed combinations): "
                 + "; ".join(payload["not_computed"]) + "."]
    text += ["", f"{payload['cells']} cells; wall time {payload['wall_s']:.0f} s on {payload['machine']['cpus']} CPUs ({payload['machine']['processor']})."]
    return "\n".join(text)


def _agreement(d: dict[str, Any]) -> tuple[str, str]:
    if "teacher" not in d:
        return "—", "—"
    return f"{100 * d['same_tasks_served']:.1f}", f"{100 * d['served_also_by_shadow']:.1f}"


def figures(spec: SuiteSpec, payload: dict[str, Any], results: Sequence[dict[str, Any]]) -> dict[str, bytes]:
    """{file name: PNG}: completion by agent and scenario with error bars (every suite); completion vs load
    and a Gantt chart (paper). Needs matplotlib (the ``plot`` extra, part of ``bench``)."""
    with needs(__name__):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    paths = {}
    table = payload["table"]
    names = [s.name for s in spec.scenarios if "/x" not in s.name][:4]
    paths[f"{spec.name}_completion.png"] = _completion_figure(spec.name, table, names, plt)
    loads = [c.split("/", 1)[1] for c in next(iter(table.values())) if c.startswith("average/")]
    if len(loads) > 1:
        paths[f"{spec.name}_load.png"] = _load_figure(table, loads, plt)
    gantt_rows = [row for row in GANTT_ROWS if row in table]
    if spec.name == "paper" and gantt_rows and any(s.task_set == "id" for s in spec.scenarios):  # the chart draws an `id` episode
        paths["paper_gantt.png"] = gantt_figure(gantt_rows, plt)
    return paths


#: Bar colours of the completion figures by kind of row (legend label, colour).
ROW_KINDS = {"ceiling": ("ceiling / upper bound (offline, knows the demand)", "#9e9e9e"), "oracle": ("told the demand (heuristic)", "#cfcfcf"),
             "probe": ("leak probe (no loss values)", "#f0a04b"), "learned": ("learned (trained policy)", "#3b75af"),
             "external": ("third-party", "#8c6bb1"), "rule": ("fixed rule", "#5aa469")}


def _row_kind(row: str) -> str:
    from benchmarks.agents import is_trained, knows_demand
    from benchmarks.ceiling_cells import CEILING_ROWS
    from benchmarks.paper import PROBES

    if row in CEILING_ROWS:
        return "ceiling"
    if knows_demand(row):
        return "oracle"
    if row in PROBES:
        return "probe"
    if is_external(row):
        return "external"
    return "learned" if is_trained(row) else "rule"


def _completion_figure(name: str, table: dict[str, dict[str, Any]], scenarios: list[str], plt) -> bytes:
    """One horizontal-bar panel per scenario (at most four), every row labelled and coloured by its kind,
    rows sorted by the first scenario's mean (the same order in every panel), the value printed at each bar."""
    with needs(__name__):
        from matplotlib.patches import Patch

    empty = {"mean": np.nan, "sd": 0.0}
    rows = sorted(table, key=lambda r: (np.nan_to_num(table[r].get(scenarios[0], empty)["mean"], nan=-1.0), r)) if scenarios else list(table)
    height = max(3.2, 1.3 + 0.27 * len(rows))
    fig, axes = plt.subplots(1, max(len(scenarios), 1), figsize=(2.4 + 3.3 * max(len(scenarios), 1), height), sharey=True, squeeze=False)
    colours = [ROW_KINDS[_row_kind(r)][1] for r in rows]
    for ax, scenario in zip(axes[0], scenarios):
        means = np.array([table[r].get(scenario, empty)["mean"] for r in rows], dtype=float)
        sds = np.array([table[r].get(scenario, empty)["sd"] for r in rows], dtype=float)
        ax.barh(range(len(rows)), np.nan_to_num(means), xerr=sds, color=colours, capsize=2, error_kw={"elinewidth": 0.8})
        for y, (mean, sd) in enumerate(zip(means, sds)):
            ax.text(1 if np.isnan(mean) else mean + sd + 1.5, y, "—" if np.isnan(mean) else f"{mean:.1f}", va="center", fontsize=7)
        ax.set_title(scenario, fontsize=9)
        ax.set_xlim(0, 100)
        ax.set_xlabel("completion %", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="x", labelsize=7)
    axes[0][0].set_yticks(range(len(rows)), [row_label(r) for r in rows], fontsize=7)
    kinds = list(dict.fromkeys(_row_kind(r) for r in rows))
    fig.legend(handles=[Patch(color=ROW_KINDS[k][1], label=ROW_KINDS[k][0]) for k in ROW_KINDS if k in kinds], loc="lower center",
               ncol=3 if len(scenarios) > 1 else 2, fontsize=7, frameon=False)
    fig.suptitle(f"{name}: completion % by row (mean ± sd over evaluation roots; sorted by {scenarios[0] if scenarios else 'row'})", fontsize=9)
    fig.tight_layout(rect=(0, 0.5 / height, 1, 1 - 0.3 / height))
    data = figure_png(fig, dpi=110)
    plt.close(fig)
    return data


#: Rows whose node assignments the paper suite draws for one episode.
GANTT_ROWS = ("lara", "mara")


def node_trace(row: str, seed: int = 0, task_set: str = "id", load: str = "train", root: int = 0, episode: int = 0) -> tuple[np.ndarray, float]:
    """(N, T) the workload task each node served at each step of one evaluation episode (−1 idle), and
    the episode's completion rate."""
    from benchmarks.agents import make_agent

    config = EnvConfig(task_set=task_set, load=load)
    envs, agent = DiscreteCoREVectorEnv(1, autoreset_mode="disabled", config=config), make_agent(row, seed)
    policy, trace = agent_policy(agent, envs), []

    def act(observation: np.ndarray, mask: np.ndarray) -> np.ndarray:
        actions = policy(observation, mask)
        tasks = np.array([envs.slot_task(0, k) for k in range(envs.batch.K)])
        trace.append(np.where(actions[0] > 0, tasks[np.maximum(actions[0] - 1, 0)], -1))
        return actions

    played = play(envs, act, suite_workloads(task_set, load, [(root, episode)], config.n_nodes))
    return np.array(trace).T, float(played.infos["completion_rate"][0])


def gantt_figure(rows: Sequence[str], plt) -> bytes:
    """Node Gantt charts of one `id` evaluation episode (root 0, episode 0), one panel per row."""
    fig, axes = plt.subplots(len(rows), 1, figsize=(10, 1.2 + 1.1 * len(rows)), squeeze=False)
    cmap = plt.get_cmap("tab20")
    for ax, row in zip(axes[:, 0], rows):
        trace, completion = node_trace(row)
        colours = np.ones(trace.shape + (3,))
        busy = trace >= 0
        colours[busy] = cmap(trace[busy] % 20)[:, :3]
        ax.imshow(colours, aspect="auto", interpolation="nearest", origin="lower")
        ax.set_yticks(range(trace.shape[0]), [f"node {i}" for i in range(trace.shape[0])])
        ax.set_title(f"{row}: completion {100 * completion:.1f}% (colour = task, white = idle)", fontsize=9)
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    data = figure_png(fig, dpi=110)
    plt.close(fig)
    return data


#: The panels of the completion-vs-load figure: (title, row kinds of :func:`_row_kind`, curve-free or not).
LOAD_PANELS = (("rules that read no loss value, and leak probes", ("rule", "probe"), True),
               ("rules that read the learning curves", ("rule",), False),
               ("trained policies (learned, third-party)", ("learned", "external"), None))


def _load_figure(table: dict[str, Any], loads: list[str], plt) -> bytes:
    """Completion (average over task sets) against load: one panel per kind of row (:data:`LOAD_PANELS`), the
    ceilings and demand-told rows in grey in every panel, EDF as a black dashed reference."""
    from benchmarks.paper import CURVE_FREE, GAP_BASE

    drawn = {row: cells for row, cells in table.items() if all(f"average/{load}" in cells for load in loads)}
    fig, axes = plt.subplots(1, len(LOAD_PANELS), figsize=(13.5, 5.8), sharey=True, squeeze=False)
    palette = plt.get_cmap("tab10").colors
    refs = [row for row in drawn if _row_kind(row) in ("ceiling", "oracle")]

    def line(ax, row: str, label: str | None = None, **style):
        cells = drawn[row]
        return ax.errorbar(loads, [cells[f"average/{load}"]["mean"] for load in loads], yerr=[cells[f"average/{load}"]["sd"] for load in loads],
                           marker="o", markersize=3, capsize=2, label=label, **style)

    for ax, (title, kinds, curve_free) in zip(axes[0], LOAD_PANELS):
        rows = [row for row in drawn if _row_kind(row) in kinds and row != GAP_BASE and (curve_free is None or (row in CURVE_FREE) == curve_free)]
        for i, row in enumerate(rows):
            line(ax, row, row, color=palette[i % len(palette)], linestyle="-" if i < len(palette) else "--")
        shared = [line(ax, row, row_label(row), color=("0.45", "0.6", "0.75")[j % 3], linestyle=(":", "-.", "--")[j % 3], linewidth=1)
                  for j, row in enumerate(refs)]
        if GAP_BASE in drawn:
            shared.append(line(ax, GAP_BASE, f"{GAP_BASE} (reference)", color="black", linestyle="--", linewidth=1.2))
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("load", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.legend(handles=ax.containers[:len(rows)], fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    axes[0][0].set_ylabel("completion % (average of task sets)", fontsize=8)
    if shared:
        fig.legend(handles=shared, loc="lower center", ncol=len(shared), fontsize=7, frameon=False, title="in every panel", title_fontsize=7)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    data = figure_png(fig, dpi=110)
    plt.close(fig)
    return data


def main_for(name: str):
    """The ``main(argv)`` of suite ``name``."""
    def main(argv: Sequence[str] = ()) -> int:
        spec = specs()[name]
        parser = argparse.ArgumentParser(prog=f"python -m benchmarks {name}", description=f"Run the {name} suite (cached per cell; resumable).")
        parser.add_argument("--workers", type=int, default=1, help="parallel processes (default 1)")
        parser.add_argument("--backend", choices=("process", "ray"), default="process", help="where cells run (ray: pip install -e '.[ray]')")
        parser.add_argument("--address", default=None, help="Ray cluster address (default: a local instance)")
        parser.add_argument("--rows", nargs="+", default=None, help=f"agent rows, shipped or third-party module.path:attr (default: {' '.join(spec.rows)})")
        parser.add_argument("--scenarios", nargs="+", default=None, help=f"only these columns (default: {'; '.join(s.name for s in spec.scenarios)})")
        parser.add_argument("--roots", type=int, default=spec.roots, help=f"evaluation roots (default {spec.roots})")
        parser.add_argument("--seeds", type=int, nargs="+", default=list(spec.seeds), help="training seeds of learned rows (default 0 1 2)")
        parser.add_argument("--episodes", type=int, default=None, help="episodes per root (default: all of the suite file's)")
        parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="output directory (cells are cached in OUT/cells)")
        parser.add_argument("--cached-only", action="store_true", help="summarise the cached cells only; list the rest as not computed")
        parser.add_argument("--task-set", default=None, metavar="BANK.npz",
                            help="run the suite's scenarios on a bank file (python -m core_env.curves import ...) instead of the built-in "
                                 "task sets: columns BANK/train (and the suite's heavier loads), eval runs drawn by the suites' seeding scheme; "
                                 "with --trace, the task set the trace replays on (a bank file or a built-in name; default id)")
        add_trace(parser)
        args = parser.parse_args(argv)
        try:
            if args.trace is not None:
                spec = for_trace(spec, args.trace, args.trace_layout, args.step_seconds, args.task_set or "id")
            elif args.task_set is not None:
                spec = for_task_set(spec, args.task_set)
        except ValueError as exc:
            parser.error(str(exc))
        scenarios = spec.scenarios
        if args.scenarios:
            unknown = sorted(set(args.scenarios) - {s.name for s in scenarios})
            if unknown:
                parser.error(f"unknown scenarios {unknown}; {spec.name} has {[s.name for s in scenarios]}")
            scenarios = tuple(s for s in scenarios if s.name in args.scenarios)
        run_spec = SuiteSpec(spec.name, spec.rows, scenarios, args.roots, args.episodes, tuple(args.seeds))
        payload = run_suite(run_spec, args.out, args.rows, args.workers, args.backend, args.address, argv=argv, cached_only=args.cached_only)
        print(tables(payload))
        print(f"\nwrote {args.out / name}/ ({', '.join(Path(p).name for p in payload['figures'])})")
        return 0

    return main


if __name__ == "__main__":
    sys.exit(main_for(sys.argv[1])(sys.argv[2:]))
