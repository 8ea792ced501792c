"""prediction: Table 1, remaining-demand prediction error per task set and predictor.

Tasks come from the committed evaluation suites (eval curve banks; 5 roots × 4 episodes at load
``train``) of each task set. A task is kept when its hidden nominal demand n* is finite and at least
``MIN_DEMAND`` node-steps (the others are counted, not scored); at most ``--max-tasks`` per task set
are kept (seeded subsample; default: all eligible tasks). For each observed fraction f, a predictor sees the first
k = max(1, floor(f·n*)) nominal reported losses (``CurveBank.reported_losses``), the target and the
budget window − k (window = deadline − arrival); the truth is n* − k remaining node-steps.

Metrics per (task set, fraction, predictor), with 95% percentile-bootstrap CIs over tasks (the same
resamples for every predictor, so comparisons are paired by task):

* capped MAE: mean |min(median, CAP) − min(truth, CAP)| with CAP = 120 node-steps (the FM horizon);
  an ``inf`` (censored) median counts as CAP;
* budget accuracy: share of tasks where [p_within_budget ≥ 0.5] equals [truth ≤ budget].

The table also gives the share of tasks whose predicted median is censored or at least CAP. It also
times ``predict`` on 1,024 histories (the id histories at the first fraction, tiled) per predictor (median of ``--timing-runs`` runs). Results
go to ``benchmarks/results/prediction.json`` and the figure to ``docs/figures/prediction_mae.png``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from benchmarks import markdown_table, write_results
from core_env.workload import SUITE_EPISODES, SUITE_ROOTS, SUITE_TASK_SETS, load_suite
from mara_agents.predictors import PREDICTORS
from mara_agents.protocols import REMAINING_DEMAND, Predictor

#: Cap of the capped MAE, in node-steps: the FM predictor's horizon.
CAP = 120
#: Smallest demand (nominal node-steps) of a scored task.
MIN_DEMAND = 4
FRACTIONS = (0.1, 0.25, 0.5)
#: Row label -> how to build the predictor.
PREDICTOR_ROWS = ("fm", "fm (no prior)", "wls", "dkf", "last_slope", "oracle")
FIGURE = Path(__file__).resolve().parent.parent / "docs" / "figures" / "prediction_mae.png"


def make_predictor(label: str) -> Predictor:
    if label == "fm":
        return PREDICTORS["fm"]()
    if label == "fm (no prior)":
        return PREDICTORS["fm"](reachable=None)
    if label == "oracle":
        # A horizon far beyond any window, so the oracle never censors a demand it is given.
        return PREDICTORS["oracle"](horizon=1_000_000)
    return PREDICTORS[label]()


def load_tasks(task_set: str, roots: int, episodes: int, max_tasks: int | None, rng: np.random.Generator) -> dict[str, Any]:
    """Scored tasks of ``task_set`` (curve, bps, target, demand, window) plus counts of the dropped ones."""
    workloads = [load_suite(task_set, "train", r, e) for r in range(roots) for e in range(episodes)]
    bank = workloads[0].bank
    cat = {name: np.concatenate([getattr(w, name) for w in workloads]) for name in ("curve", "batches_per_step", "target", "demand")}
    cat["window"] = np.concatenate([w.window for w in workloads])
    demand = cat["demand"]
    keep = np.flatnonzero(np.isfinite(demand) & (demand >= MIN_DEMAND))
    counts = {"total": int(demand.size), "infeasible": int((~np.isfinite(demand)).sum()),
              "short": int((np.isfinite(demand) & (demand < MIN_DEMAND)).sum()), "eligible": int(keep.size)}
    if max_tasks is not None and keep.size > max_tasks:
        keep = np.sort(rng.choice(keep, size=max_tasks, replace=False))
    counts["scored"] = int(keep.size)
    return {"bank": bank, "counts": counts, **{name: value[keep] for name, value in cat.items()}}


def observe(tasks: dict[str, Any], fraction: float) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """Histories, targets, budgets and true remaining demand at an observed ``fraction`` of the demand."""
    demand = tasks["demand"]
    k = np.maximum(1, np.floor(fraction * demand)).astype(np.int64)
    bank = tasks["bank"]
    histories = [bank.reported_losses(int(c), float(b), steps=int(n)) for c, b, n in zip(tasks["curve"], tasks["batches_per_step"], k)]
    budgets = np.maximum(tasks["window"] - k, 0).astype(np.float64)
    return histories, tasks["target"].astype(np.float64), budgets, demand - k


def bootstrap_ci(values: np.ndarray, indices: np.ndarray) -> tuple[float, float]:
    """95% percentile CI of the mean of ``values`` over the (R, n) resample ``indices``."""
    means = values[indices].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def score(prediction, truth: np.ndarray, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-task capped absolute error and budget correctness (0/1)."""
    median = np.minimum(np.nan_to_num(prediction.median, posinf=CAP), CAP)
    error = np.abs(median - np.minimum(truth, CAP))
    correct = ((prediction.p_within_budget >= 0.5) == (truth <= budgets)).astype(np.float64)
    return error, correct


def time_predictors(predictors: dict[str, Predictor], histories: list[np.ndarray], targets: np.ndarray,
                    budgets: np.ndarray, truth: np.ndarray, runs: int, size: int = 1024) -> dict[str, float]:
    """Median seconds of ``predict`` on ``size`` histories (tiled from the given ones)."""
    idx = np.resize(np.arange(len(histories)), size)
    h, t, b = [histories[i] for i in idx], targets[idx], budgets[idx]
    oracle = {REMAINING_DEMAND: truth[idx]}
    out = {}
    for label, predictor in predictors.items():
        extra = {"oracle": oracle} if predictor.needs_oracle else {}
        predictor.predict(h[:8], t[:8], b[:8], **({"oracle": {REMAINING_DEMAND: truth[idx][:8]}} if extra else {}))  # warm-up
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            predictor.predict(h, t, b, **extra)
            times.append(time.perf_counter() - start)
        out[label] = float(np.median(times))
    return out


def evaluate(task_sets: Sequence[str] = SUITE_TASK_SETS, fractions: Sequence[float] = FRACTIONS,
             rows: Sequence[str] = PREDICTOR_ROWS, roots: int = SUITE_ROOTS, episodes: int = SUITE_EPISODES,
             max_tasks: int | None = None, resamples: int = 1000, timing_runs: int = 5, seed: int = 0) -> dict[str, Any]:
    """Every metric of Table 1 (see the module docstring)."""
    rng = np.random.default_rng(seed)
    predictors = {label: make_predictor(label) for label in rows}
    cells: list[dict[str, Any]] = []
    counts: dict[str, dict[str, int]] = {}
    timing_inputs = None
    for task_set in tqdm(task_sets, desc="prediction", unit="task set", leave=False):
        tasks = load_tasks(task_set, roots, episodes, max_tasks, rng)
        counts[task_set] = tasks["counts"]
        n = tasks["counts"]["scored"]
        for fraction in fractions:
            histories, targets, budgets, truth = observe(tasks, fraction)
            if timing_inputs is None:
                timing_inputs = (histories, targets, budgets, truth)
            indices = rng.integers(0, n, size=(resamples, n))
            errors = {}
            for label, predictor in predictors.items():
                extra = {"oracle": {REMAINING_DEMAND: truth}} if predictor.needs_oracle else {}
                summary = predictor.predict(histories, targets, budgets, **extra)
                error, correct = score(summary, truth, budgets)
                errors[label] = error
                cells.append({"task_set": task_set, "fraction": fraction, "predictor": label, "tasks": n,
                              "mae": float(error.mean()), "mae_ci": bootstrap_ci(error, indices),
                              "accuracy": float(correct.mean()), "accuracy_ci": bootstrap_ci(correct, indices),
                              "censored": float(np.mean(summary.median >= CAP)),
                              "censored_truth": float(np.mean(truth >= CAP))})
            if "fm" in errors and "wls" in errors:
                # Paired relative change of FM's capped MAE vs WLS's, with its bootstrap CI.
                fm_means, wls_means = errors["fm"][indices].mean(axis=1), errors["wls"][indices].mean(axis=1)
                ratio = fm_means / np.maximum(wls_means, 1e-12) - 1.0
                for cell in cells[-len(predictors):]:
                    if cell["predictor"] == "fm":
                        cell["vs_wls"] = float(errors["fm"].mean() / max(errors["wls"].mean(), 1e-12) - 1.0)
                        cell["vs_wls_ci"] = tuple(float(x) for x in np.percentile(ratio, [2.5, 97.5]))
    import torch

    timing = time_predictors(predictors, *timing_inputs, runs=timing_runs)
    return {"cells": cells, "counts": counts, "timing_s_per_1024": timing, "torch_threads": torch.get_num_threads(),
            "cap": CAP, "min_demand": MIN_DEMAND, "fractions": list(fractions), "resamples": resamples,
            "max_tasks": max_tasks, "seed": seed}


def table(result: dict[str, Any]) -> str:
    body = []
    for c in result["cells"]:
        vs = f"{100 * c['vs_wls']:+.0f}% [{100 * c['vs_wls_ci'][0]:+.0f}, {100 * c['vs_wls_ci'][1]:+.0f}]" if "vs_wls" in c else ""
        body.append((c["task_set"], c["fraction"], c["predictor"], c["tasks"],
                     f"{c['mae']:.2f} [{c['mae_ci'][0]:.2f}, {c['mae_ci'][1]:.2f}]",
                     f"{100 * c['accuracy']:.1f} [{100 * c['accuracy_ci'][0]:.1f}, {100 * c['accuracy_ci'][1]:.1f}]",
                     f"{100 * c['censored']:.0f}", vs))
    return markdown_table(("task set", "f", "predictor", "tasks", f"capped MAE (cap {result['cap']}) [95% CI]",
                           "budget acc. % [95% CI]", "median ≥ cap %", "FM MAE vs wls [95% CI]"), body)


def timing_table(result: dict[str, Any]) -> str:
    return markdown_table(("predictor", "predict, 1,024 histories (ms, median)"),
                          [(k, f"{1000 * v:.1f}") for k, v in result["timing_s_per_1024"].items()])


def figure(result: dict[str, Any], path: Path = FIGURE) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    task_sets = list(dict.fromkeys(c["task_set"] for c in result["cells"]))
    labels = list(dict.fromkeys(c["predictor"] for c in result["cells"]))
    fig, axes = plt.subplots(1, len(task_sets), figsize=(4.2 * len(task_sets), 3.6), sharey=True, squeeze=False)
    for ax, task_set in zip(axes[0], task_sets):
        for label in labels:
            cs = [c for c in result["cells"] if c["task_set"] == task_set and c["predictor"] == label]
            x = [c["fraction"] for c in cs]
            y = np.array([c["mae"] for c in cs])
            err = np.array([[c["mae"] - c["mae_ci"][0] for c in cs], [c["mae_ci"][1] - c["mae"] for c in cs]])
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=label)
        ax.set_title(task_set)
        ax.set_xlabel("observed fraction f of the demand")
        ax.set_xticks(result["fractions"])
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"capped MAE (node-steps, cap {result['cap']})")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks prediction", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a handful of tasks and 50 bootstrap resamples (for tests)")
    parser.add_argument("--max-tasks", type=int, default=None, help="at most this many tasks per task set (seeded subsample; default all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the subsample and the bootstrap")
    parser.add_argument("--no-figure", action="store_true", help="skip the PNG figure")
    args = parser.parse_args(argv)
    options = dict(max_tasks=12, resamples=50, timing_runs=1, roots=1, episodes=1) if args.quick else dict(max_tasks=args.max_tasks)
    start = time.perf_counter()
    result = evaluate(seed=args.seed, **options)
    wall = time.perf_counter() - start
    print(table(result))
    print()
    print(timing_table(result))
    print(f"\ntorch threads {result['torch_threads']}; counts per task set: {result['counts']}")
    paths = write_results("prediction_quick" if args.quick else "prediction", {"suite": "prediction", "wall_s": wall, "quick": args.quick, **result})
    if not (args.quick or args.no_figure):
        paths.append(figure(result))
    print(f"\nwall time {wall:.1f} s; wrote {', '.join(str(p) for p in paths)}")
    return 0
