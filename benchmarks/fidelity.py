"""fidelity: the schedulers live on worker nodes and in the simulator, on the same workloads (issue 32).

Every other number of this project replays recorded curves at a fixed compute rate, with free preemption
and migration. Here the same schedulers run **live**: each task is a real training run (corpus MLP runs,
:mod:`core_env.live`) on the worker process of the node serving it; a step is a wall-clock slice, so real
throughput, contention, node heterogeneity and the time to move a task's state between nodes decide what
each task achieves. The same workloads then play in the simulator twice:

- **uncalibrated** — as configured without measurements: every task at its family's nominal rate
  (``run length / typical_run_steps`` batches per step), equal node speeds, no switching cost. The
  slice is sized so that a node, profiled alone before the run, trains the nominal rate of the median
  family in one slice (``slice_s`` in the output);
- **calibrated** — per-run rates, node speeds and the switching cost measured from the live services
  (:mod:`core_env.live.calibration`: only what nodes trained in their slices, never a completion), each
  episode on a recorded path of the machine's speed (slow steps come in runs and slow every node at once)
  and each service's batches drawn from the spread left around them (:class:`core_env.live.replay.SpreadSource`,
  :data:`SPREAD_DRAWS` seeded draws per episode, averaged within the episode); the same model with means
  only (every service its mean, the machine at its mean speed) is shown beside it.

A **trace replay** checks the engine itself: each live episode replayed in the simulator with every
service training exactly the batches it trained live (:class:`core_env.live.replay.TraceSource`). Where it
equals live, everything but the batches per service (rules, curves, observations, agents) is faithful, and
the calibrated simulator's distance from live is its service model's.

Workloads: seeded draws (one per episode; each episode is its own evaluation root) on the recorded bank
of the live runs (:func:`core_env.live.record_bank`: the same runs trained offline, deterministically) by
the task recipe :data:`RECIPE`. Rows: EDF, LARA-FM, the best admission rule (EDF admission on the flow-
matching predictor) and MARA (the shipped seed-0 checkpoint). The output reports per row live vs
simulated completion with t-based 95% CIs over episodes and paired live − simulated differences, whether
the calibrated simulator lies within :data:`TARGET_POINTS` points of live, the rank agreement of the rows
(Kendall's tau), the measured throughput spread and migration cost, and the calibration. Each live
episode's cell and per-service records are written as they finish (``OUT/fidelity/cells``), so an
interrupted run resumes (with the slice and backend it started with; another one is an error);
``OUT/fidelity/fidelity.json`` and ``fidelity.png`` at the end. The calibrated replay of each episode
uses a fit that leaves that episode out (the fit over all episodes is the one shown).

Stored results are verified on resume. Each cell carries its key (:func:`cell_key`: row, episode, the row's
weights, the workload's sha256, slice, backend, nodes, runs, :data:`CELL_FORMAT`) and the sha256 of its
content (:func:`benchmarks.cells.checksum`, as benchmark cells); the commit that played it is kept beside
them. A cell that is unreadable (truncated, a flipped bit), fails its checksum (an edit) or has another key
is played again, with a line saying why (:func:`read_cell`). ``settings.json`` (the slice, backend, nodes,
families and profile the cells were played with) is checked field by field; missing while cells exist, or
malformed, it is an error naming it (exit 2), never a silent new profile. Counts are bounded:
``--episodes`` at most :data:`MAX_EPISODES`, ``--nodes`` at most :data:`MAX_NODES`.

Live numbers depend on the machine: on a 2-core machine the two worker processes and the scheduler share
the cores (contention is part of what is measured). ``--backend ray`` runs the nodes as Ray actors
(``--address`` an existing cluster; the default a local ``ray.init()``). docs/fidelity.md explains the page.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import json
import math
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import add_out, markdown_table, save_figure, write_atomic, write_atomic_bytes, write_results
from benchmarks.cells import checksum
from benchmarks.rollout import run_agent
from benchmarks.stats import paired_difference, t_interval
from core_env.config import EnvConfig
from core_env.curves.runs import FAMILIES as CORPUS_FAMILIES
from core_env.extras import needs
from core_env.generators import Drawn
from core_env.live import LIVE_FAMILIES, LiveSource, TaskSpec, record_bank
from core_env.live.calibration import calibrate, calibrated
from core_env.live.replay import LeftTheRecord, SpreadSource, TraceSource
from core_env.live.workers import BACKENDS, make_nodes, max_nodes
from core_env.recipe import TaskRecipe
from core_env.workload import Workload

with needs(__name__):
    from tqdm import tqdm

#: The default live task families (corpus MLP runs; ``--families`` any of LIVE_FAMILIES) and runs of each.
FAMILIES = ("mlp_wine", "mlp_breast_cancer", "mlp_digits", "mlp_synth")
RUNS_PER_FAMILY = 3
#: Every run's length in batches; None: each family's corpus length (the recorded curves are the corpus's own).
RUN_STEPS: int | None = None
#: Short tasks: a whole run is 12 node-steps at the nominal rate; one rate per family (no spread).
RECIPE = TaskRecipe(budget_share=(0.3, 1.0), target_quantile=(0.4, 0.95), typical_run_steps=12.0, rate_spread=(1.0, 1.0), slack=(1.0, 2.5))
#: Two nodes, four slots, arrivals over 10 steps at 0.4 tasks per node and step; episodes of 40 steps.
CONFIG = EnvConfig(n_nodes=2, n_slots=4, arrival_steps=10, max_cycles=40, load=0.4, recipe=RECIPE)
ROWS = ("edf", "lara-fm", "edf-admission:fm,min_reports=5", "mara")
EPISODES = 20
SEED = 20261204
#: The calibrated simulator should lie within this many completion points of live, per row.
TARGET_POINTS = 3.0
#: Seconds each family trains alone on one worker to measure its throughput before the run.
PROFILE_SECONDS = 0.5
#: Seeded draws of the calibrated simulator with spread per episode (averaged within the episode: one root).
SPREAD_DRAWS = 10
#: Bump when a live cell's content would change for the same key (every stored cell is then played again).
CELL_FORMAT = 2  # 2: cells carry their key and checksum
#: Most live episodes per row: the default 20 take about 15 minutes on 2 cores, so 1,000 take about 12 hours
#: (more: resume the same ``--out`` with a larger ``--episodes``; played episodes are kept).
MAX_EPISODES = 1000
#: Most worker nodes: each is a process (or Ray actor) holding torch and the tasks it serves, two slots per node.
MAX_NODES = 64
#: The longest a warm-up or profiling order may take (a run's first build: imports, datasets; then
#: :data:`PROFILE_SECONDS` of training) before the node is declared failed (NodeFailure naming it).
ORDER_TIMEOUT_S = 600.0
#: Worker backends a live run can use, and the longest slice a live source accepts (seconds).
LIVE_BACKENDS = tuple(sorted(set(BACKENDS) - {"inprocess"}))
MAX_SLICE_S = 3600.0


def specs(families: Sequence[str] | None = None) -> list[TaskSpec]:
    return [TaskSpec(family, run) for family in (families or FAMILIES) for run in range(RUNS_PER_FAMILY)]


def config_for(n_nodes: int) -> EnvConfig:
    """:data:`CONFIG` with ``n_nodes`` nodes and two slots per node (the load is per node: the same pressure)."""
    return dataclasses.replace(CONFIG, n_nodes=n_nodes, n_slots=2 * n_nodes)


def run_steps(family: str) -> int:
    return RUN_STEPS if RUN_STEPS is not None else CORPUS_FAMILIES[family].steps


def workloads(bank, episodes: int, config: EnvConfig = CONFIG) -> list[Workload]:
    """One seeded draw per episode (its own evaluation root) on the recorded bank."""
    draw = Drawn.from_config(config, bank=bank, horizon=config.max_cycles)
    return [draw.workload(np.random.default_rng([SEED, episode])) for episode in range(episodes)]


def nominal_rate(family: str, config: EnvConfig = CONFIG) -> float:
    """Batches per step a task of ``family`` gets in the uncalibrated simulator (its run over typical_run_steps)."""
    return run_steps(family) / config.recipe.typical_run_steps


def warm_up(nodes, families: Sequence[str]) -> None:
    """Every worker builds a run of every family once (imports, datasets), so no live service pays for it."""
    for family in families:
        key = ("warm-up", family)
        orders = [nodes.submit(n, "serve", key, TaskSpec(family, 0), RUN_STEPS, None, 1, None, True) for n in range(len(nodes))]
        for n, order in enumerate(orders):
            nodes.result(n, order, timeout=ORDER_TIMEOUT_S)
            nodes.result(n, nodes.submit(n, "drop", [key]), timeout=ORDER_TIMEOUT_S)


def profile(nodes, families: Sequence[str], seconds: float | None = None) -> dict[str, float]:
    """Training batches per second of a run of each family alone on worker 0 (after :func:`warm_up`)."""
    out = {}
    for family in families:
        key = ("profile", family)
        result = nodes.result(0, nodes.submit(0, "serve", key, TaskSpec(family, 0), RUN_STEPS, None, None, seconds or PROFILE_SECONDS, True),
                              timeout=ORDER_TIMEOUT_S)
        nodes.result(0, nodes.submit(0, "drop", [key]), timeout=ORDER_TIMEOUT_S)
        out[family] = result["losses"].size / result["train_s"]
    return out


def _rate_ci(values: np.ndarray) -> list[float]:
    return [float(v) for v in t_interval(np.asarray(values, float))]


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Kendall's tau-b of two orderings of the rows (1: the same ranking; None for fewer than 2 rows)."""
    with needs(__name__):
        from scipy.stats import kendalltau

    return float(kendalltau(a, b).statistic) if len(a) >= 2 else None


def workload_sha256(workload: Workload) -> str:
    """The sha256 (20 hex digits) of a workload's tasks and curves: what a live cell was played on."""
    digest = hashlib.sha256(f"{workload.bank.fingerprint}|{workload.arrival_steps}".encode())
    for name in ("arrival", "deadline", "target", "batches_per_step", "curve"):
        digest.update(np.ascontiguousarray(getattr(workload, name)).tobytes())
    return digest.hexdigest()[:20]


def cell_key(row: str, episode: int, workload: Workload, settings: dict[str, Any], runs: Sequence[TaskSpec]) -> dict[str, Any]:
    """What identifies a live cell (stored in it; a stored cell with another key is played again): the cell
    format, row, episode, the row's weights (:func:`benchmarks.agents.weights_id`), the workload's sha256,
    slice, backend, nodes, runs and run length. The commit is kept beside it, not in it: a commit that changes
    none of these keeps the cells (bump :data:`CELL_FORMAT` when live play itself changes)."""
    from benchmarks.agents import weights_id

    return {"format": CELL_FORMAT, "row": row, "episode": episode, "weights": weights_id(row), "workload": workload_sha256(workload),
            "slice_s": settings["slice_s"], "backend": settings["backend"], "n_nodes": settings["n_nodes"],
            "runs": [[spec.family, spec.run_index] for spec in runs], "run_steps": RUN_STEPS}


def cell_path(cells: Path, row: str, episode: int) -> Path:
    return cells / f"{row.replace(':', '_').replace(',', '_').replace('=', '')}__{episode}.json.gz"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def cell_problem(cell: Any, key: dict[str, Any]) -> str | None:
    """Why a stored live cell (as parsed) is not a verified cell of ``key``, or None: its checksum, its key,
    and the fields the suite reads (completion rate in [0, 1], records and steps lists, wall time >= 0)."""
    if not isinstance(cell, dict):
        return f"is not a JSON object (a {type(cell).__name__})"
    if "checksum" not in cell:
        return "has no checksum (written before cells carried one)"
    if cell["checksum"] != checksum(cell):
        return "fails its checksum (edited or corrupted)"
    stored = cell.get("key") if isinstance(cell.get("key"), dict) else {}
    if stored != key:
        return f"was played as another cell ({', '.join(sorted(k for k in key.keys() | stored.keys() if stored.get(k) != key.get(k)))} differ)"
    if cell.get("row") != key["row"] or cell.get("episode") != key["episode"]:
        return f"holds row {cell.get('row')!r} episode {cell.get('episode')!r}, not its key's"
    if not (_number(cell.get("completion_rate")) and 0.0 <= cell["completion_rate"] <= 1.0):
        return f"has completion_rate {cell.get('completion_rate')!r}, not in [0, 1]"
    if not (_number(cell.get("wall_s")) and cell["wall_s"] >= 0):
        return f"has wall_s {cell.get('wall_s')!r}, not seconds >= 0"
    if not isinstance(cell.get("records"), list) or not all(isinstance(r, dict) for r in cell["records"]) or not isinstance(cell.get("steps"), list):
        return "has records or steps that are not lists of objects"
    return None


def read_cell(path: Path, key: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(the stored cell at ``path`` without its checksum, None) if it verifies (:func:`cell_problem`), (None, why)
    if it does not or cannot be read, (None, None) if there is none."""
    if not path.exists():
        return None, None
    try:
        cell = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, EOFError, zlib.error, ValueError) as exc:  # truncated, a flipped bit, not UTF-8 or JSON
        return None, f"is unreadable ({type(exc).__name__}: {exc})"
    problem = cell_problem(cell, json.loads(json.dumps(key)))
    return (None, problem) if problem else ({name: value for name, value in cell.items() if name != "checksum"}, None)


def save_cell(path: Path, cell: dict[str, Any]) -> dict[str, Any]:
    """Write ``cell`` gzipped with its checksum (atomically); returns it as :func:`read_cell` will."""
    body = json.loads(json.dumps({name: value for name, value in cell.items() if name != "checksum"}))
    write_atomic_bytes(path, gzip.compress((json.dumps({**body, "checksum": checksum(body)}) + "\n").encode(), mtime=0))
    return body


def live_cell(row: str, episode: int, workload: Workload, settings: dict[str, Any], nodes, cells: Path,
              runs: Sequence[TaskSpec], config: EnvConfig) -> dict[str, Any]:
    """One live episode of ``row``: read back if its stored cell verifies (:func:`read_cell`), else played
    (saying why a stored one is not used) and stored."""
    path, key = cell_path(cells, row, episode), cell_key(row, episode, workload, settings, runs)
    stored, problem = read_cell(path, key)
    if stored is not None:
        return stored
    if problem:
        tqdm.write(f"fidelity: the cell {path} {problem}: playing it again")
    from benchmarks.report import commit

    cell = play_cell(row, workload, settings["slice_s"], nodes, runs, config)
    return save_cell(path, {"row": row, "episode": episode, **cell, "key": key, "commit": commit()})


def play_cell(row: str, workload: Workload, slice_s: float, nodes, runs: Sequence[TaskSpec], config: EnvConfig) -> dict[str, Any]:
    """Play one live episode of ``row``: its completion rate, wall time, per-service records and steps."""
    from benchmarks.agents import make_agent

    source = LiveSource(runs, steps=RUN_STEPS, nodes=nodes, slice_s=slice_s)
    began = time.perf_counter()
    stats = run_agent(make_agent(row), [workload], config, task_source=source)
    cell = {"completion_rate": float(stats["completion_rate"][0]), "wall_s": time.perf_counter() - began,
            "records": source.records, "steps": source.steps_log}
    source.close(nodes=False)
    return cell


def simulated(rows: Sequence[str], plays: list[Workload], config: EnvConfig, source=None) -> dict[str, np.ndarray]:
    """Each row's completion rate per workload in the simulator; ``source(row)`` a task source per row (default: the curves)."""
    from benchmarks.agents import make_agent

    return {row: np.asarray(run_agent(make_agent(row), plays, config, task_source=None if source is None else source(row))["completion_rate"], float)
            for row in rows}


def traced(cell: dict[str, Any], workload: Workload, config: EnvConfig) -> float | None:
    """The trace replay of one live cell (module docstring): its completion rate, or None where the agent left the record."""
    try:
        return float(simulated([cell["row"]], [workload], config, lambda row: TraceSource(cell["records"]))[cell["row"]][0])
    except LeftTheRecord:
        return None


#: The simulated variants compared with live, in the table's order.
VARIANTS = ("uncalibrated", "calibrated_means", "calibrated")


def summarize(rows: Sequence[str], live: dict[str, np.ndarray], simulations: dict[str, dict[str, np.ndarray]]) -> list[dict[str, Any]]:
    """Per row: live and each simulated variant (:data:`VARIANTS`) with CIs, and the paired live − variant differences."""
    out = []
    for row in rows:
        entry = {"row": row, "live": float(live[row].mean()), "live_ci": _rate_ci(live[row])}
        for name, sim in ((name, simulations[name][row]) for name in VARIANTS):
            entry[name] = float(sim.mean())
            entry[f"{name}_ci"] = _rate_ci(sim)
            entry[f"live_minus_{name}"] = paired_difference(live[row], sim)
        entry["within_target"] = abs(entry["live"] - entry["calibrated"]) * 100 <= TARGET_POINTS
        out.append(entry)
    return out


def measured(cells: list[dict[str, Any]], slice_s: float) -> dict[str, Any]:
    """Throughput spread, each row's throughput relative to all (a machine whose speed drifts shows here), and migration cost."""
    records = [r for cell in cells for r in cell["records"]]
    moved = [r for r in records if r["moved"]]
    by_family = {}
    for family in sorted({r["family"] for r in records}):
        trained = np.array([r["trained"] for r in records if r["family"] == family and not r["moved"] and not r.get("finished", False)], float)
        if trained.size:
            by_family[family] = {"mean": float(trained.mean()), "cv": float(trained.std() / trained.mean()) if trained.mean() else 0.0}
    plain = [(cell["row"], r) for cell in cells for r in cell["records"] if not r["moved"] and not r.get("finished", False)]
    family_mean = {f: np.mean([r["trained"] for _, r in plain if r["family"] == f]) for f in {r["family"] for _, r in plain}}
    rows = dict.fromkeys(row for row, _ in plain)
    speed = {row: float(np.mean([r["trained"] / family_mean[r["family"]] for name, r in plain if name == row])) for row in rows}
    return {"services": len(records), "moves": len(moved), "batches_per_slice": by_family, "row_throughput": speed,
            "move_s_mean": float(np.mean([r["move_s"] + r["load_s"] for r in moved])) if moved else 0.0,
            "move_share_of_slice": float(np.mean([(r["move_s"] + r["load_s"]) / slice_s for r in moved])) if moved else 0.0}


def table(result: dict[str, Any]) -> str:
    """The page's table: per row, live and simulated completion (%), and live − calibrated."""
    def pct(x: float, ci: Sequence[float]) -> str:
        return f"{100 * x:.1f} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"

    def trace(r: dict[str, Any]) -> str:
        episodes = len(result["per_episode"][r["row"]]["live"])
        return f"{r['trace_equal']} of {episodes}" + (f" ({r['trace_left']} left the record)" if r["trace_left"] else "")

    lines = [markdown_table(("row", "live", "simulated, uncalibrated", "calibrated, means only", "calibrated, with spread",
                             "live − calibrated with spread (points)", f"within {TARGET_POINTS:g}", "trace replay = live (episodes)"),
                            [(r["row"], pct(r["live"], r["live_ci"]), *(pct(r[name], r[f"{name}_ci"]) for name in VARIANTS),
                              f"{100 * r['live_minus_calibrated']['mean']:+.1f} [{100 * r['live_minus_calibrated']['ci_low']:+.1f}, "
                              f"{100 * r['live_minus_calibrated']['ci_high']:+.1f}]", "yes" if r["within_target"] else "no", trace(r))
                             for r in result["rows"]])]
    c, m = result["calibration"], result["measured"]
    lines.append("")
    lines.append(verdict(result))
    lines.append("")
    lines.append(f"{result['episodes']} episodes (each its own root) on N = {result['config']['n_nodes']} {result['backend']} workers, "
                 f"slice {1000 * result['slice_s']:.1f} ms; rank agreement (Kendall's tau) live vs uncalibrated "
                 f"{_tau(result['rank_tau']['uncalibrated'])}, vs calibrated with means only {_tau(result['rank_tau']['calibrated_means'])}, "
                 f"with spread {_tau(result['rank_tau']['calibrated'])} ({result['spread_draws']} draws per episode). "
                 f"Calibrated: node speeds {', '.join(f'{s:.2f}' for s in c['speeds'])}, switch cost {c['switch_cost']:.2f} "
                 f"({c['switched']} of {c['services']} services switched); {m['moves']} moves cost {1000 * m['move_s_mean']:.1f} ms "
                 f"({100 * m['move_share_of_slice']:.0f}% of a slice) on average. Batches per unmoved service relative to its "
                 f"family's mean, by row: {', '.join(f'{row} {v:.2f}' for row, v in m['row_throughput'].items())}. Wall time {result['wall_s'] / 60:.1f} min for the last invocation "
                 f"({result['live_wall_s'] / 60:.1f} min of live play over all cells), "
                 f"{result['machine']['cpus']} CPUs, commit {result['commit']}.")
    return "\n".join(lines)


def verdict(result: dict[str, Any]) -> str:
    """The issue's targets in one sentence: rows within the target, CI width, and the two rankings."""
    rows = result["rows"]
    met = [r["row"] for r in rows if r["within_target"]]
    half = [100 * (r["live_minus_calibrated"]["ci_high"] - r["live_minus_calibrated"]["ci_low"]) / 2 for r in rows]

    def order(key: str) -> str:
        return " > ".join(r["row"] for r in sorted(rows, key=lambda r: -r[key]))

    same = order("live") == order("calibrated")
    return (f"**Target**: the calibrated simulator (with spread) within {TARGET_POINTS:g} points of live for {len(met)} of {len(rows)} rows"
            f"{' (' + ', '.join(met) + ')' if met else ''}; the paired CIs' half-widths are {min(half):.1f}–{max(half):.1f} points, "
            f"{'wider' if min(half) > TARGET_POINTS else 'not all wider'} than the target. **Ranking** "
            f"{'the same' if same else 'not the same'} live ({order('live')}) and calibrated ({order('calibrated')}).")


def _tau(value: float | None) -> str:
    return "n/a (one row)" if value is None else f"{value:+.2f}"


def figure(result: dict[str, Any], path: Path) -> Path:
    with needs(__name__):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(9, 4))
    x = np.arange(len(rows))
    bars = (("live", "tab:red", "live"), ("uncalibrated", "tab:gray", "simulated (uncalibrated)"),
            ("calibrated_means", "lightsteelblue", "simulated (calibrated, means only)"), ("calibrated", "tab:blue", "simulated (calibrated, with spread)"))
    for i, (name, color, label) in enumerate(bars):
        means = np.array([100 * r[name] for r in rows])
        ci = np.array([[100 * r[f"{name}_ci"][0] for r in rows], [100 * r[f"{name}_ci"][1] for r in rows]])
        ax.bar(x + (i - 1.5) * 0.2, means, 0.2, yerr=np.abs(ci - means), capsize=3, color=color, label=label)
    ax.set_xticks(x, [r["row"].replace("edf-admission:fm,min_reports=5", "edf-admission (fm)") for r in rows])
    ax.set_ylabel("completion rate (%), 95% CI over episodes")
    ax.set_title(f"Live vs simulated: N = {result['config']['n_nodes']} {result['backend']} workers, slice {1000 * result['slice_s']:.0f} ms")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_ylim(0, 100)
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)


def settings_problem(settings: dict[str, Any]) -> str | None:
    """Why stored settings are out of range, or None: slice in (0, :data:`MAX_SLICE_S`), a live backend,
    known families, 1..:data:`MAX_NODES` nodes, a profile of finite rates >= 0."""
    slice_s, backend, families = settings.get("slice_s"), settings.get("backend"), settings.get("families")
    nodes, profile = settings.get("n_nodes"), settings.get("profile_batches_per_s")
    if not (_number(slice_s) and 0.0 < slice_s < MAX_SLICE_S):
        return f"slice_s = {slice_s!r} is not seconds in (0, {MAX_SLICE_S:g})"
    if backend not in LIVE_BACKENDS:
        return f"backend = {backend!r} is not one of {list(LIVE_BACKENDS)}"
    if not (isinstance(families, list) and families and all(isinstance(f, str) and f in LIVE_FAMILIES for f in families)):
        return f"families = {families!r} is not a list of live task families"
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        return f"n_nodes = {nodes!r} is not an int in [1, {MAX_NODES}]"
    if not (isinstance(profile, dict) and all(_number(v) and v >= 0 for v in profile.values())):
        return f"profile_batches_per_s = {profile!r} is not an object of batches per second >= 0"
    return None


def read_settings(out: Path) -> dict[str, Any] | None:
    """The settings the cells in ``out`` (``OUT/fidelity``) were played with (``settings.json``, checked by
    :func:`settings_problem`), or None where there are neither settings nor cells.

    Raises:
        ValueError: naming ``settings.json``: missing while cells exist (they would be replayed with a new
            profile's slice), not a JSON object, or a field out of range.
    """
    out = Path(out)
    path = out / "settings.json"
    if not path.exists():
        cells = list((out / "cells").glob("*.json.gz")) if (out / "cells").is_dir() else []
        if cells:
            raise ValueError(f"{path} is missing, but {len(cells)} cell(s) in {out / 'cells'} were played with the settings it held: "
                             f"restore it, or delete {out} (or use another --out) to start over")
        return None
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not readable JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: not a JSON object (a {type(raw).__name__})")
    settings = {"families": list(FAMILIES), "n_nodes": 2, **raw}  # the defaults of runs that did not record them
    problem = settings_problem(settings)
    if problem:
        raise ValueError(f"{path}: {problem}; restore it, or delete {out} (or use another --out) to start over")
    return settings


def resumed_settings(out: Path, backend: str, slice_s: float | None, families: Sequence[str] | None = None, n_nodes: int = 2) -> dict[str, Any] | None:
    """The settings of the cells already in ``out`` (``OUT/fidelity``; :func:`read_settings`), or None.

    Raises:
        ValueError: :func:`read_settings`'s, or they were played with another backend, slice, task families
            or number of nodes than asked for.
    """
    settings = read_settings(out)
    if settings is None:
        return None
    for name, given in (("slice_s", slice_s), ("backend", backend), ("families", list(families or FAMILIES)), ("n_nodes", n_nodes)):
        if given is not None and given != settings[name]:
            raise ValueError(f"{out} holds cells played with {name}={settings[name]!r}, not {given!r}: "
                             "use another --out, or delete it to start over")
    return settings


def check_run(episodes: Any, n_nodes: Any, out: Path, backend: str = "process") -> None:
    """Raises ValueError unless ``episodes`` is an int in [2, :data:`MAX_EPISODES`], ``n_nodes`` one in
    [1, :data:`MAX_NODES`] that a pool on ``backend`` can hold (:func:`core_env.live.workers.max_nodes`), and
    ``out``, ``out/fidelity`` and its ``cells`` are directories or absent."""
    most = min(MAX_NODES, max_nodes(backend)) if backend in BACKENDS else MAX_NODES
    for name, value, low, high, why in (("episodes (--episodes)", episodes, 2, MAX_EPISODES, "a CI needs two roots; about 12 h at the top"),
                                         ("n_nodes (--nodes)", n_nodes, 1, most, f"each node is a {backend} worker")):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name} must be an int in [{low}, {high:,}] ({why}), got {value!r}")
    for path in (Path(out), Path(out) / "fidelity", Path(out) / "fidelity" / "cells"):
        if path.exists() and not path.is_dir():
            raise ValueError(f"--out: {path} is not a directory")


def _say(text: str) -> None:
    print(f"fidelity: {text}", file=sys.stderr, flush=True)


def run(rows: Sequence[str], episodes: int, out: Path, backend: str = "process", address: str | None = None, slice_s: float | None = None,
        families: Sequence[str] | None = None, n_nodes: int = 2) -> dict[str, Any]:
    """The suite (module docstring): ``families`` (default :data:`FAMILIES`), ``n_nodes`` nodes with two slots each."""
    from benchmarks.report import commit, machine

    check_run(episodes, n_nodes, out, backend)
    began = time.perf_counter()
    families, config = tuple(families or FAMILIES), config_for(n_nodes)
    runs = specs(families)
    out = Path(out) / "fidelity"
    cells_dir = out / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    settings = resumed_settings(out, backend, slice_s, families, n_nodes)  # a resumed run keeps what its cells were played with
    _say(f"recording the bank of {len(runs)} runs offline")
    bank = record_bank("fidelity", runs, steps=RUN_STEPS)
    plays = workloads(bank, episodes, config)
    _say(f"starting and warming up {n_nodes} {backend} worker(s)" + ("" if settings else ", then profiling them"))
    nodes = make_nodes(n_nodes, backend, address=address)
    try:
        warm_up(nodes, families)
        settings_path = out / "settings.json"
        if settings is None:
            throughput = profile(nodes, families)
            chosen = slice_s if slice_s is not None else float(np.median([nominal_rate(f, config) / throughput[f] for f in families]))
            settings = {"slice_s": chosen, "profile_batches_per_s": throughput, "backend": backend, "families": list(families), "n_nodes": n_nodes}
            write_atomic(settings_path, json.dumps(settings, indent=1) + "\n")
        # episode by episode, every row in turn: a machine whose speed drifts (a shared VM) slows every row alike
        order = [(e, row) for e in range(episodes) for row in rows]
        cells = [live_cell(row, e, plays[e], settings, nodes, cells_dir, runs, config)
                 for e, row in tqdm(order, desc="fidelity live cells", unit="cell")]
    finally:
        nodes.close()
    live = {row: np.array([c["completion_rate"] for c in cells if c["row"] == row]) for row in rows}
    fit = calibrate([c["records"] for c in cells], n_nodes)  # shown; each episode replays with a fit that leaves it out
    curve_families = [spec.family for spec in runs]
    means, spread = [], []
    for e, workload in enumerate(tqdm(plays, desc="fidelity replays")):
        held_out = calibrate([c["records"] for c in cells if c["episode"] != e], n_nodes)
        replay, replay_config = calibrated(workload, curve_families, held_out, config)
        means.append(simulated(rows, [replay], replay_config))
        draws = [simulated(rows, [replay], replay_config, lambda row: SpreadSource(held_out, [SEED, e, d])) for d in range(SPREAD_DRAWS)]
        spread.append({row: np.mean([draw[row] for draw in draws], axis=0) for row in rows})
    simulations = {"uncalibrated": simulated(rows, plays, config),
                   "calibrated_means": {row: np.concatenate([run[row] for run in means]) for row in rows},
                   "calibrated": {row: np.concatenate([run[row] for run in spread]) for row in rows}}
    trace = {row: [traced(c, plays[c["episode"]], config) for c in sorted(cells, key=lambda c: c["episode"]) if c["row"] == row] for row in rows}
    summary = summarize(rows, live, simulations)
    for entry in summary:
        replays = trace[entry["row"]]
        entry["trace_equal"] = int(sum(r is not None and abs(r - float(x)) < 1e-12 for r, x in zip(replays, live[entry["row"]])))
        entry["trace_left"] = sum(r is None for r in replays)
    result = {"suite": "fidelity", "rows": summary, "episodes": episodes, "backend": settings["backend"], "slice_s": settings["slice_s"],
              "profile_batches_per_s": settings["profile_batches_per_s"], "nominal_rate": {f: nominal_rate(f, config) for f in families},
              "config": {"n_nodes": config.n_nodes, "n_slots": config.n_slots, "arrival_steps": config.arrival_steps,
                         "max_cycles": config.max_cycles, "load": config.load, "recipe": dataclasses.asdict(RECIPE)},
              "families": list(families), "runs_per_family": RUNS_PER_FAMILY, "run_steps": {f: run_steps(f) for f in families},
              "calibration": fit.as_dict(), "measured": measured(cells, settings["slice_s"]),
              "rank_tau": {name: kendall_tau([r["live"] for r in summary], [r[name] for r in summary]) for name in VARIANTS},
              "spread_draws": SPREAD_DRAWS,
              "per_episode": {row: {"live": live[row].tolist(), **{name: simulations[name][row].tolist() for name in VARIANTS}, "trace": trace[row]}
                              for row in rows},
              "wall_s": time.perf_counter() - began, "live_wall_s": sum(c["wall_s"] for c in cells), "machine": machine(), "commit": commit(),
              "cell_commits": sorted({c.get("commit", "unknown") for c in cells})}
    write_results("fidelity", result, out=out)
    figure(result, out / "fidelity.png")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks fidelity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", default=list(ROWS), help=f"rows to run (default: {' '.join(ROWS)})")
    parser.add_argument("--episodes", type=int, default=EPISODES, help=f"live episodes per row, each its own root (default {EPISODES}, "
                        f"at most {MAX_EPISODES:,})")
    parser.add_argument("--backend", choices=LIVE_BACKENDS, default="process", help="worker nodes: processes (default) or Ray actors")
    parser.add_argument("--address", default=None, help="a Ray cluster's address (with --backend ray; default a local ray.init())")
    parser.add_argument("--slice", type=float, default=None, dest="slice_s", help="seconds per step (default: sized by a profile, module docstring)")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), help=f"live task families, {RUNS_PER_FAMILY} runs each (default: "
                        f"{' '.join(FAMILIES)}; any of {', '.join(LIVE_FAMILIES)})")
    parser.add_argument("--nodes", type=int, default=2, help=f"worker nodes N (two task slots each; default 2, at most {MAX_NODES})")
    add_out(parser)
    args = parser.parse_args(argv)
    unknown = [f for f in args.families if f not in LIVE_FAMILIES]
    if unknown:
        parser.error(f"--families: unknown live task family(ies) {unknown}; choose from {', '.join(LIVE_FAMILIES)}")
    try:
        check_run(args.episodes, args.nodes, args.out, args.backend)
    except ValueError as error:
        parser.error(str(error))
    if args.slice_s is not None and not 0.0 < args.slice_s < 60.0:
        parser.error(f"--slice must be seconds in (0, 60), got {args.slice_s}")
    if args.address is not None and args.backend != "ray":
        parser.error("--address needs --backend ray")
    from benchmarks.agents import make_agent

    for row in args.rows:  # every row is built once before any live episode starts
        try:
            make_agent(row)
        except (ValueError, FileNotFoundError) as error:
            parser.error(f"--rows: {error}")
    try:
        resumed_settings(Path(args.out) / "fidelity", args.backend, args.slice_s, args.families, args.nodes)
    except ValueError as error:
        parser.error(str(error))
    result = run(args.rows, args.episodes, args.out, args.backend, args.address, args.slice_s, args.families, args.nodes)
    print(table(result))
    print(f"\nwrote {Path(args.out) / 'fidelity'}/fidelity.json and fidelity.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
