"""prediction: Table 1, remaining-demand prediction scored at decision points, with leak probes.

Points. Each task set's committed evaluation suite (``load_suite(task_set, "train", root, episode)``,
every root × episode; N = 4, the default EnvConfig of the task set) is played to the end by two fixed
policies, ``edf`` and ``edf-admission:oracle``. A decision point is every (task, step) at which the task
has k >= 1 reports (:mod:`benchmarks.decision_points`): a predictor gets the task's full reported-loss
history, its target and its remaining window ``deadline − t`` as the budget, and is scored against the
hidden nominal remaining demand (``Simulator.remaining_demand()``; ``inf`` = never reaches the target).
At most ``--max-points`` points per task set and policy are scored (a seeded subsample); the output says
how many existed and how many were scored.

Metrics per (task set, policy, bucket of k, predictor), and pooled over policies and buckets:

* capped MAE: mean |min(median, CAP) − min(truth, CAP)|, CAP = 120 node-steps (``inf`` counts as CAP);
* censored: share of medians >= CAP (or ``inf``);
* Brier score, reliability curve (10 equal-width bins of p) and ECE of ``p_within_budget`` against the
  label *feasible* = [truth <= remaining window] (finishes if served every step from now on);
* AUC of feasibility: ``p_within_budget`` as a score for that label (rank-based, Mann–Whitney; ties 1/2).

95% CIs come from a bootstrap over episodes (the cluster: every point of a resampled episode, both
policies, comes along), the same resamples for every predictor, so differences are paired; each cell
also gives the paired difference to the best leak probe of its (task set, policy, bucket) per metric.

Rows: ``fm`` (the shipped flow-matching predictor), ``wls``, ``dkf``, ``last_slope``, ``oracle`` (exact,
horizon 10^6) and three leak probes that see no curve value, fitted on seeded train workloads only
(:mod:`benchmarks.decision_points`). Writes ``prediction.json``, ``prediction.csv``, ``prediction.md`` and
``prediction.png`` under ``--out`` (default ``results`` under the working directory; ``--quick`` alone writes to
``results/prediction_quick``), each atomically, the JSON last.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import RESULTS_DIR, markdown_table, save_figure, write_atomic, write_results
from benchmarks.decision_points import (BUCKET_LABELS, BUCKETS, CAP, PROBE_POLICIES, PROBE_ROWS, PROBE_SEED, TRAIN_EPISODES, DecisionPoints,
                                        bucket_of, collect, train_probes)
from core_env.config import EnvConfig
from core_env.extras import needs
from core_env.generators import SuiteEpisode
from core_env.workload import SUITE_EPISODES, SUITE_ROOTS, SUITE_TASK_SETS
from mara_agents.predictors import PREDICTORS
from mara_agents.protocols import REMAINING_DEMAND, Predictor

with needs(__name__):
    from scipy.stats import rankdata

#: The fixed policies whose rollouts give the decision points.
POLICIES = PROBE_POLICIES
#: Curve-aware rows, then the leak probes (permanent rows).
PREDICTOR_ROWS = ("pfn", "fm", "fm+pfn", "pfn-ens", "wls", "dkf", "last_slope", "pow4", "mmf4", "oracle")
ROWS = PREDICTOR_ROWS + PROBE_ROWS
#: Default cap on scored points per task set and policy (the full suite then takes a few minutes on 2 cores).
MAX_POINTS = 20_000
RESAMPLES = 1000
CALIBRATION_BINS = 10
#: The policy / bucket label of a pooled cell.
ALL = "all"
#: Every metric of a cell (each with a 95% CI).
METRICS = ("mae", "censored", "brier", "ece", "auc", "feasible_share", "mae_within_cap", "mae_beyond_cap", "truth_beyond_cap",
           "false_admit", "false_reject")
#: Metrics with a paired difference to the best probe, and whether lower is better.
COMPARED = {"mae": True, "brier": True, "auc": False}
#: Issue 27's targets for the transferable predictor, pooled over policies and buckets: Brier at most
#: this share of the best curve-free row's and ECE at most this on the held-out task sets, AUC at least
#: this on every task set.
TARGET_PREDICTOR = "pfn"
TARGET_BRIER_SHARE, TARGET_ECE, TARGET_AUC = 0.75, 0.05, 0.90
HELD_OUT = ("rl_ood", "vit_ood")
#: The policy whose decision points no admission on the truth has selected: Table 1 also reads the targets on
#: its points alone, because the other policy (``edf-admission:oracle``) admits on the true demand, so which
#: of its tasks stay in the slots depends on the label, and the curve-free probes, fitted per policy, learn
#: that selection (issue 48).
UNSELECTED_POLICY = "edf"
UNSELECTED_NOTE = ("`edf-admission:oracle` admits on the true demand, so its points are selected on the label and the "
                   "probes fitted on them learn the selection; pooled calibration mixes that selection into the predictor's")
QUICK = dict(roots=1, episodes=1, max_points=300, resamples=50, train_episodes=2, timing_runs=1)


def make_predictor(label: str) -> Predictor:
    """The predictor of a curve-aware row (probes are fitted per task set, see :func:`train_probes`)."""
    if label == "oracle":
        return PREDICTORS["oracle"](horizon=1_000_000)  # far beyond any window: never censors a demand
    if label not in PREDICTORS:
        raise ValueError(f"unknown predictor row {label!r}; rows are {list(ROWS)}")
    return PREDICTORS[label]()


# --------------------------------------------------------------------------------------------------
# Metrics on plain arrays


def capped_error(median: np.ndarray, truth: np.ndarray, cap: float = CAP) -> np.ndarray:
    """|min(median, cap) − min(truth, cap)| per point (``inf`` counts as the cap)."""
    return np.abs(np.minimum(np.asarray(median, dtype=np.float64), cap) - np.minimum(np.asarray(truth, dtype=np.float64), cap))


def censored(median: np.ndarray, cap: float = CAP) -> np.ndarray:
    """(M,) 1.0 where the median is at least the cap (or ``inf``)."""
    return (np.asarray(median, dtype=np.float64) >= cap).astype(np.float64)


def _check_probabilities(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p, y = np.asarray(p, dtype=np.float64), np.asarray(y)
    if p.shape != y.shape or p.ndim != 1:
        raise ValueError(f"probabilities and labels must be 1-D arrays of one shape, got {p.shape} and {y.shape}")
    if np.any(~np.isfinite(p) | (p < 0) | (p > 1)):
        raise ValueError("probabilities must lie in [0, 1]")
    return p, y.astype(np.float64)


def brier(p: np.ndarray, y: np.ndarray) -> float:
    """Mean squared difference between probabilities and 0/1 labels."""
    p, y = _check_probabilities(p, y)
    return float(np.mean((p - y) ** 2)) if p.size else math.nan


def calibration_bin(p: np.ndarray, bins: int = CALIBRATION_BINS) -> np.ndarray:
    """(M,) index of each probability's equal-width bin in [0, 1] (1.0 goes to the last bin)."""
    return np.minimum((np.asarray(p, dtype=np.float64) * bins).astype(np.int64), bins - 1)


def reliability(p: np.ndarray, y: np.ndarray, bins: int = CALIBRATION_BINS) -> dict[str, list]:
    """The calibration curve: per equal-width bin of p, the count, mean p and observed rate (None when empty)."""
    p, y = _check_probabilities(p, y)
    which = calibration_bin(p, bins)
    count = np.bincount(which, minlength=bins)
    mean_p = np.bincount(which, p, minlength=bins) / np.maximum(count, 1)
    rate = np.bincount(which, y, minlength=bins) / np.maximum(count, 1)
    return {"edges": np.linspace(0.0, 1.0, bins + 1).tolist(), "count": count.tolist(),
            "mean_p": [float(v) if c else None for v, c in zip(mean_p, count)], "rate": [float(v) if c else None for v, c in zip(rate, count)]}


def ece(p: np.ndarray, y: np.ndarray, bins: int = CALIBRATION_BINS) -> float:
    """Expected calibration error: Σ_bins (n_b / n) |mean p_b − rate_b| over equal-width bins of p."""
    p, y = _check_probabilities(p, y)
    if not p.size:
        return math.nan
    which = calibration_bin(p, bins)
    return float(np.sum(np.abs(np.bincount(which, p, minlength=bins) - np.bincount(which, y, minlength=bins))) / p.size)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve, Mann–Whitney form: (Σ ranks of positives − P(P+1)/2) / (P·N), ties 1/2.

    ``nan`` when the labels hold only one class.
    """
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels).astype(bool)
    if scores.shape != labels.shape or scores.ndim != 1:
        raise ValueError(f"scores and labels must be 1-D arrays of one shape, got {scores.shape} and {labels.shape}")
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if positives == 0 or negatives == 0:
        return math.nan
    ranks = rankdata(scores)  # average ranks of ties
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


# --------------------------------------------------------------------------------------------------
# The bootstrap over episodes


def episode_weights(n_episodes: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(1 + R, E) how often each episode is drawn: row 0 is the sample itself (all ones), rows 1.. are R
    resamples of the E episodes with replacement (each row sums to E)."""
    if n_episodes < 1 or resamples < 1:
        raise ValueError(f"the bootstrap needs >= 1 episode and >= 1 resample, got {n_episodes} and {resamples}")
    draws = rng.integers(0, n_episodes, size=(resamples, n_episodes))
    counts = np.zeros((resamples, n_episodes))
    np.add.at(counts, (np.repeat(np.arange(resamples), n_episodes), draws.reshape(-1)), 1.0)
    return np.vstack([np.ones((1, n_episodes)), counts])


def _per_episode(values: np.ndarray, episode: np.ndarray, n_episodes: int) -> np.ndarray:
    return np.bincount(episode, values, minlength=n_episodes)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def clustered_auc(scores: np.ndarray, labels: np.ndarray, episode: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(rows,) the AUC of every row of episode ``weights`` (rows, E): each point counts as often as its
    episode is drawn. With all-ones weights it is :func:`auc`; ``nan`` where a class has no weight.

    Computed exactly from the (E, E) matrix C[e, f] = Σ over positives i of e and negatives j of f of
    [s_i > s_j] + [s_i = s_j] / 2: the AUC of weights w is wᵀCw / ((w·P)(w·N)).
    """
    n_episodes = weights.shape[1]
    labels = np.asarray(labels).astype(bool)
    pos_score, pos_episode = scores[labels], episode[labels]
    neg_score, neg_episode = scores[~labels], episode[~labels]
    pairs = np.zeros((n_episodes, n_episodes))
    for f in np.unique(neg_episode):
        negatives = np.sort(neg_score[neg_episode == f])
        below = np.searchsorted(negatives, pos_score, side="left")
        tied = np.searchsorted(negatives, pos_score, side="right") - below
        pairs[:, f] = np.bincount(pos_episode, below + 0.5 * tied, minlength=n_episodes)
    positives = weights @ np.bincount(pos_episode, minlength=n_episodes)
    negatives = weights @ np.bincount(neg_episode, minlength=n_episodes)
    return _ratio(np.einsum("re,ef,rf->r", weights, pairs, weights), positives * negatives)


def cell_statistics(median: np.ndarray, p: np.ndarray, truth: np.ndarray, window: np.ndarray, episode: np.ndarray,
                    weights: np.ndarray) -> dict[str, np.ndarray]:
    """Every metric of one cell for every row of episode ``weights`` ((1 + R, E); row 0 = the sample)."""
    n_episodes = weights.shape[1]
    feasible = (truth <= window).astype(np.float64)
    ones = np.ones_like(truth)
    count = weights @ _per_episode(ones, episode, n_episodes)
    error = capped_error(median, truth)
    admit = (np.ceil(median) <= window).astype(np.float64)  # EDF + admission's decision: the median fits the window
    mean = {name: _ratio(weights @ _per_episode(values, episode, n_episodes), count)
            for name, values in (("mae", error), ("censored", censored(median)),
                                 ("brier", (p - feasible) ** 2), ("feasible_share", feasible),
                                 ("false_admit", admit * (1 - feasible)), ("false_reject", (1 - admit) * feasible))}
    beyond = truth >= CAP  # the truth is censored at the cap (never, or too far to matter)
    for name, part in (("mae_within_cap", ~beyond), ("mae_beyond_cap", beyond)):
        mean[name] = _ratio(weights @ _per_episode(np.where(part, error, 0.0), episode, n_episodes),
                            weights @ _per_episode(part.astype(np.float64), episode, n_episodes))
    mean["truth_beyond_cap"] = _ratio(weights @ _per_episode(beyond.astype(np.float64), episode, n_episodes), count)
    which = calibration_bin(p) * n_episodes + episode  # (bin, episode) pairs
    size = CALIBRATION_BINS * n_episodes
    p_sum = np.bincount(which, p, minlength=size).reshape(CALIBRATION_BINS, n_episodes)
    y_sum = np.bincount(which, feasible, minlength=size).reshape(CALIBRATION_BINS, n_episodes)
    gap = np.abs(weights @ p_sum.T - weights @ y_sum.T).sum(axis=1)
    return {**mean, "ece": _ratio(gap, count), "auc": clustered_auc(p, feasible > 0, episode, weights), "points": count}


def interval(values: np.ndarray) -> list[float] | None:
    """95% percentile interval of the resamples ``values[1:]`` (None when none is defined)."""
    resampled = values[1:]
    resampled = resampled[np.isfinite(resampled)]
    if resampled.size == 0:
        return None
    return [float(x) for x in np.percentile(resampled, [2.5, 97.5])]


def _number(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


# --------------------------------------------------------------------------------------------------
# The benchmark


def _rng(seed: int, *words: str) -> np.random.Generator:
    return np.random.default_rng([seed, *(zlib.crc32(w.encode()) for w in words)])


def predict(predictor: Predictor, points: DecisionPoints) -> tuple[np.ndarray, np.ndarray]:
    """(P,) predicted medians and p_within_budget of the points, the remaining window as the budget."""
    if len(points) == 0:
        return np.zeros(0), np.zeros(0)
    oracle = {REMAINING_DEMAND: points.truth} if predictor.needs_oracle else None
    summary = predictor.predict(points.histories(), points.target, points.window, oracle=oracle, windows=points.deadline_window)
    return np.asarray(summary.median, dtype=np.float64), np.asarray(summary.p_within_budget, dtype=np.float64)


def count_points(existing: DecisionPoints, scored: DecisionPoints) -> dict[str, Any]:
    """How many points existed and were scored, in all and per bucket, and the shares of their labels."""
    bucket_all, bucket_scored = existing.bucket, scored.bucket
    return {"points": len(existing), "scored": len(scored),
            "tasks_with_points": int(np.unique(existing.episode * (existing.task.max(initial=0) + 1) + existing.task).size),
            "infinite_truth_share": _number(np.mean(np.isinf(existing.truth))) if len(existing) else None,
            "feasible_share": _number(np.mean(existing.feasible)) if len(existing) else None,
            "by_bucket": {label: {"points": int(np.sum(bucket_all == j)), "scored": int(np.sum(bucket_scored == j))}
                          for j, label in enumerate(BUCKET_LABELS)}}


def score_task_set(task_set: str, scored: dict[str, DecisionPoints], predictions: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]],
                   weights: np.ndarray, rows: Sequence[str]) -> list[dict[str, Any]]:
    """The cells of one task set: every (policy or all, bucket or all, row), with paired differences to
    the best probe of the same (policy, bucket) per metric of :data:`COMPARED`."""
    policies = list(scored)
    cat = {name: np.concatenate([getattr(scored[q], name) for q in policies]) for name in ("truth", "window", "episode", "reports")}
    policy_of = np.concatenate([np.full(len(scored[q]), i) for i, q in enumerate(policies)])
    bucket = bucket_of(cat["reports"])
    median = {row: np.concatenate([predictions[q][row][0] for q in policies]) for row in rows}
    p = {row: np.concatenate([predictions[q][row][1] for q in policies]) for row in rows}
    cells = []
    for i, policy in [*enumerate(policies), (None, ALL)]:
        for j, label in [*enumerate(BUCKET_LABELS), (None, ALL)]:
            keep = np.ones(policy_of.size, bool)
            if i is not None:
                keep &= policy_of == i
            if j is not None:
                keep &= bucket == j
            if not keep.any():
                continue
            truth, window, episode = cat["truth"][keep], cat["window"][keep], cat["episode"][keep]
            stats = {row: cell_statistics(median[row][keep], p[row][keep], truth, window, episode, weights) for row in rows}
            group = [_cell(task_set, policy, label, row, stats[row], p[row][keep], truth <= window, episode) for row in rows]
            _compare_to_probes(group, stats, rows)
            cells += group
    return cells


def _cell(task_set: str, policy: str, bucket: str, row: str, stats: dict[str, np.ndarray], p: np.ndarray, feasible: np.ndarray,
          episode: np.ndarray) -> dict[str, Any]:
    cell: dict[str, Any] = {"task_set": task_set, "policy": policy, "bucket": bucket, "predictor": row,
                            "points": int(stats["points"][0]), "episodes": int(np.unique(episode).size)}
    for name in METRICS:
        cell[name], cell[f"{name}_ci"] = _number(stats[name][0]), interval(stats[name])
    cell["reliability"] = reliability(p, feasible)
    return cell


def _compare_to_probes(group: list[dict[str, Any]], stats: dict[str, dict[str, np.ndarray]], rows: Sequence[str]) -> None:
    """Add to each cell of ``group`` its paired difference (row − best probe) for the :data:`COMPARED` metrics."""
    probes = [r for r in rows if r in PROBE_ROWS]
    for metric, lower in COMPARED.items():
        defined = [r for r in probes if np.isfinite(stats[r][metric][0])]
        if not defined:
            continue
        best = (min if lower else max)(defined, key=lambda r: stats[r][metric][0])
        for cell in group:
            diff = stats[cell["predictor"]][metric] - stats[best][metric]
            cell.setdefault("vs_best_probe", {})[metric] = {"probe": best, "diff": _number(diff[0]), "ci": interval(diff)}


def time_predictors(predictors: dict[str, Predictor], points: DecisionPoints, runs: int, size: int = 1024) -> dict[str, float]:
    """Median seconds of ``predict`` on ``size`` histories (the first scored points, tiled), after a warm-up."""
    if runs < 1 or len(points) == 0:
        return {}
    tiled = points.subset(np.resize(np.arange(len(points)), size))
    out = {}
    for label, predictor in predictors.items():
        predict(predictor, tiled.subset(np.arange(8)))  # warm-up
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            predict(predictor, tiled)
            times.append(time.perf_counter() - start)
        out[label] = float(np.median(times))
    return out


def _check_options(task_sets: Sequence[str], policies: Sequence[str], rows: Sequence[str], roots: int, episodes: int,
                   max_points: int | None, resamples: int) -> None:
    if not task_sets:
        raise ValueError(f"task sets must be a non-empty selection of {list(SUITE_TASK_SETS)} or bank files, got {list(task_sets)}")
    for task_set in task_sets:
        if task_set not in SUITE_TASK_SETS:
            EnvConfig(task_set=task_set)  # a bank file (python -m core_env.curves import); a clear error otherwise
    if not policies:
        raise ValueError("at least one policy is needed")
    bad_rows = [r for r in rows if r not in ROWS]
    if not rows or bad_rows:
        raise ValueError(f"rows must be a non-empty selection of {list(ROWS)}, got {list(rows)}")
    if not 1 <= roots <= SUITE_ROOTS or not 1 <= episodes <= SUITE_EPISODES:
        raise ValueError(f"roots must lie in 1..{SUITE_ROOTS} and episodes in 1..{SUITE_EPISODES}, got {roots} and {episodes}")
    if max_points is not None and max_points < 1:
        raise ValueError(f"max_points must be >= 1 (or None for every point), got {max_points}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")


def _evaluation_workloads(task_set: str, roots: int, episodes: int):
    """(config, workloads, their (root, episode)): the committed suite of a built-in task set at the
    training load, or a bank file's suite drawn by the suites' seeding scheme from its eval split."""
    if task_set not in SUITE_TASK_SETS:
        from benchmarks.cells import bank_suite

        return bank_suite(task_set, "train", roots, episodes)
    config = EnvConfig(task_set=task_set)
    source = [(r, e) for r in range(roots) for e in range(episodes)]
    return config, [SuiteEpisode(task_set, "train", r, e, config.n_nodes).workload() for r, e in source], source


def evaluate(task_sets: Sequence[str] = SUITE_TASK_SETS, policies: Sequence[str] = POLICIES, rows: Sequence[str] = ROWS,
             roots: int = SUITE_ROOTS, episodes: int = SUITE_EPISODES, max_points: int | None = MAX_POINTS, resamples: int = RESAMPLES,
             train_episodes: int = TRAIN_EPISODES, timing_runs: int = 5, seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """Every metric of Table 1 (see the module docstring) as a JSON-ready dict."""
    _check_options(task_sets, policies, rows, roots, episodes, max_points, resamples)
    say = print if progress else (lambda *a, **k: None)
    predictors = {row: make_predictor(row) for row in rows if row not in PROBE_ROWS}
    counts: dict[str, Any] = {}
    fitted: dict[str, Any] = {}
    cells: list[dict[str, Any]] = []
    timing_predictors, timing_points = None, None
    labels: list[str] = []
    for task_set in task_sets:
        start = time.perf_counter()
        config, workloads, source = _evaluation_workloads(task_set, roots, episodes)
        probes, train_points = train_probes(task_set, policies, train_episodes, config.n_nodes)
        task_set = config.task_set_name  # a bank file is labelled by its name from here on
        labels.append(task_set)
        fitted[task_set] = {name: probe.parameters() for name, probe in probes.items()}
        row_predictors = {row: predictors[row] if row in predictors else probes[row] for row in rows}
        ids = [(task_set, r, e) for r, e in source]
        counts[task_set] = {"train_points": train_points}
        scored, predictions = {}, {}
        for policy in policies:
            existing = collect(policy, workloads, config, ids)
            scored[policy] = existing.subsample(max_points, _rng(seed, task_set, policy))
            counts[task_set][policy] = count_points(existing, scored[policy])
            predictions[policy] = {row: predict(predictor, scored[policy]) for row, predictor in row_predictors.items()}
        weights = episode_weights(len(ids), resamples, _rng(seed, task_set, "bootstrap"))
        cells += score_task_set(task_set, scored, predictions, weights, rows)
        if timing_points is None:
            timing_predictors, timing_points = row_predictors, scored[policies[0]]
        scored_text = ", ".join(f"{q}: {counts[task_set][q]['scored']} of {counts[task_set][q]['points']} points" for q in policies)
        say(f"prediction: {task_set} done in {time.perf_counter() - start:.1f} s ({scored_text})", flush=True)
    timing = time_predictors(timing_predictors, timing_points, timing_runs)
    threads = None
    if "fm" in predictors:
        with needs(__name__):
            import torch

        threads = torch.get_num_threads()
    return {"suite": "prediction", "task_sets": labels, "task_set_sources": list(task_sets), "policies": list(policies), "rows": list(rows), "cap": CAP,
            "buckets": [{"label": label, "min_reports": lo, "max_reports": None if math.isinf(hi) else int(hi)} for label, lo, hi in BUCKETS],
            "roots": roots, "episodes": episodes, "max_points": max_points, "resamples": resamples, "calibration_bins": CALIBRATION_BINS,
            "train_episodes": train_episodes, "probe_seed": PROBE_SEED, "seed": seed, "counts": counts, "probes": fitted,
            "cells": cells, "timing_s_per_1024": timing, "torch_threads": threads}


# --------------------------------------------------------------------------------------------------
# Tables and the figure


def _ci(value: float | None, ci: list[float] | None, digits: int) -> str:
    if value is None:
        return "n/a"
    text = f"{value:.{digits}f}"
    return text + (f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else "")


def _signed(entry: dict[str, Any] | None, digits: int) -> str:
    if not entry or entry["diff"] is None:
        return "n/a"
    ci = entry["ci"]
    return f"{entry['diff']:+.{digits}f}" + (f" [{ci[0]:+.{digits}f}, {ci[1]:+.{digits}f}]" if ci else "")


def _cells(result: dict[str, Any], policy: str, bucket: str) -> list[dict[str, Any]]:
    return [c for c in result["cells"] if c["policy"] == policy and c["bucket"] == bucket]


def counts_table(result: dict[str, Any]) -> str:
    body = []
    for task_set, entry in result["counts"].items():
        for policy in result["policies"]:
            c = entry[policy]
            by = " / ".join(f"{b['scored']}/{b['points']}" for b in c["by_bucket"].values())
            body.append((task_set, policy, c["points"], c["scored"], by, f"{100 * (c['infinite_truth_share'] or 0):.0f}",
                         f"{100 * (c['feasible_share'] or 0):.0f}", entry["train_points"]))
    return markdown_table(("task set", "policy", "decision points", "scored", f"scored/points per bucket ({', '.join(BUCKET_LABELS)})",
                           "truth = inf %", "feasible %", "probe train points"), body)


def pooled_table(result: dict[str, Any]) -> str:
    """Per (task set, predictor), pooled over policies and buckets, with paired differences to the best probe."""
    body = []
    for c in _cells(result, ALL, ALL):
        vs = c.get("vs_best_probe", {})
        body.append((c["task_set"], c["predictor"], c["points"], _ci(c["mae"], c["mae_ci"], 1), f"{100 * c['censored']:.0f}",
                     _ci(c["brier"], c["brier_ci"], 3), _ci(c["ece"], c["ece_ci"], 3), _ci(c["auc"], c["auc_ci"], 3),
                     _signed(vs.get("mae"), 1), _signed(vs.get("brier"), 3), _signed(vs.get("auc"), 3)))
    return markdown_table(("task set", "predictor", "points", f"capped MAE (cap {result['cap']}) [95% CI]", "median ≥ cap %",
                           "Brier [95% CI]", "ECE [95% CI]", "AUC [95% CI]", "MAE − best probe", "Brier − best probe",
                           "AUC − best probe"), body)


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def targets_table(result: dict[str, Any], rows: Sequence[str] = (TARGET_PREDICTOR, "fm", "fm+pfn", "pfn-ens"), policy: str = ALL) -> str:
    """Brier / ECE / AUC of ``rows`` per task set against issue 27's targets: Brier ≤ 0.75 × the best
    curve-free row's (every probe, the fitted prior included) and ECE ≤ 0.05 on the held-out task sets, AUC
    ≥ 0.90 everywhere; each cell says met or MISSED. Pooled over policies by default; with ``policy`` on that
    policy's points alone, against the probes fitted and scored on the same points."""
    if policy != ALL and policy not in result["policies"]:
        raise ValueError(f"policy must be one of {result['policies']} or {ALL!r}, got {policy!r}")
    by_row = {(c["task_set"], c["predictor"]): c for c in _cells(result, policy, ALL)}
    body = []
    for task_set in result["task_sets"]:
        probes = [by_row[(task_set, p)] for p in PROBE_ROWS if (task_set, p) in by_row]
        best = min(probes, key=lambda c: c["brier"]) if probes else None
        held_out = task_set in HELD_OUT
        for row in rows:
            c = by_row.get((task_set, row))
            if c is None or best is None:
                continue
            share = c["brier"] / best["brier"]
            body.append((task_set, row, f"{c['brier']:.3f}", f"{best['brier']:.3f} ({best['predictor']})",
                         f"{share:.3f}" + (f" ({_verdict(share <= TARGET_BRIER_SHARE)})" if held_out else ""),
                         f"{c['ece']:.3f}" + (f" ({_verdict(c['ece'] <= TARGET_ECE)})" if held_out else ""),
                         f"{c['auc']:.3f} ({_verdict(c['auc'] >= TARGET_AUC)})"))
    return markdown_table(("task set", "predictor", "Brier", "best curve-free Brier", f"Brier / best curve-free (target ≤ {TARGET_BRIER_SHARE} held out)",
                           f"ECE (target ≤ {TARGET_ECE} held out)", f"AUC (target ≥ {TARGET_AUC})"), body)


def split_table(result: dict[str, Any]) -> str:
    """Capped MAE on the points whose truth is below the cap and on those at or beyond it (pooled)."""
    body = [(c["task_set"], c["predictor"], f"{100 * c['truth_beyond_cap']:.0f}", _ci(c["mae_within_cap"], c["mae_within_cap_ci"], 1),
             _ci(c["mae_beyond_cap"], c["mae_beyond_cap_ci"], 1), f"{100 * c['censored']:.0f}") for c in _cells(result, ALL, ALL)]
    return markdown_table(("task set", "predictor", "truth ≥ cap %", "capped MAE, truth < cap", "capped MAE, truth ≥ cap",
                           "median ≥ cap %"), body)


def bucket_table(result: dict[str, Any], metric: str, digits: int) -> str:
    """``metric`` per bucket of reports (columns), per (task set, predictor), pooled over policies."""
    body = []
    for task_set in result["task_sets"]:
        for row in result["rows"]:
            by = {c["bucket"]: c for c in result["cells"] if c["task_set"] == task_set and c["policy"] == ALL and c["predictor"] == row}
            body.append((task_set, row, *(_ci(by[b][metric], by[b][f"{metric}_ci"], digits) if b in by else "—" for b in BUCKET_LABELS)))
    return markdown_table(("task set", "predictor", *(f"k {b}" for b in BUCKET_LABELS)), body)


def policy_table(result: dict[str, Any]) -> str:
    """Per (task set, policy, predictor), pooled over buckets."""
    body = []
    for task_set in result["task_sets"]:
        for policy in result["policies"]:
            for c in (c for c in _cells(result, policy, ALL) if c["task_set"] == task_set):
                body.append((task_set, policy, c["predictor"], c["points"], _ci(c["mae"], c["mae_ci"], 1), _ci(c["brier"], c["brier_ci"], 3),
                             _ci(c["ece"], c.get("ece_ci"), 3), _ci(c["auc"], c["auc_ci"], 3), _signed(c.get("vs_best_probe", {}).get("auc"), 3)))
    return markdown_table(("task set", "policy", "predictor", "points", "capped MAE [95% CI]", "Brier [95% CI]", "ECE [95% CI]",
                           "AUC [95% CI]", "AUC − best probe"), body)


def timing_table(result: dict[str, Any]) -> str:
    return markdown_table(("predictor", "predict, 1,024 histories (ms, median)"),
                          [(k, f"{1000 * v:.1f}") for k, v in result["timing_s_per_1024"].items()])


def table(result: dict[str, Any]) -> str:
    """Every Markdown table of a result, with a line on what was scored."""
    cap = "every point" if result["max_points"] is None else f"at most {result['max_points']:,} points per task set and policy (seeded subsample)"
    intro = (f"Decision points of `{'`, `'.join(result['policies'])}` rollouts on {result['roots']} roots × {result['episodes']} episodes "
             f"per task set; {cap}; capped MAE with cap {result['cap']} node-steps; 95% CIs from {result['resamples']} bootstrap "
             f"resamples of episodes (paired across predictors). Probes fitted on {result['train_episodes']} seeded train workloads "
             f"per task set. Seed {result['seed']}.")
    parts = [intro, "**Targets of the transferable predictor** (pooled over policies and buckets)", targets_table(result)]
    if UNSELECTED_POLICY in result["policies"]:
        parts += [f"**The same targets on the points of `{UNSELECTED_POLICY}` alone** (a reading, not the targets: "
                  f"{UNSELECTED_NOTE})", targets_table(result, policy=UNSELECTED_POLICY)]
    parts += [
             "**Points**", counts_table(result), "**Pooled over policies and buckets** (differences: row − best probe, paired)",
             pooled_table(result), "**Capped MAE split by the truth** (pooled; truth ≥ cap: never reaches the target, or not within the cap)",
             split_table(result), "**Capped MAE by reports observed** (pooled over policies)", bucket_table(result, "mae", 1),
             "**AUC of feasibility by reports observed** (pooled over policies)", bucket_table(result, "auc", 3),
             "**Admission errors by reports observed** (pooled over policies; the rule of `edf-admission`: admit when the "
             "median fits the remaining window): share of all points admitted though infeasible (false admits)", bucket_table(result, "false_admit", 3),
             "and share of all points rejected though feasible (false rejects)", bucket_table(result, "false_reject", 3),
             "**Per policy** (pooled over buckets)", policy_table(result)]
    if result["timing_s_per_1024"]:
        threads = f" (torch threads: {result['torch_threads']})" if result.get("torch_threads") else ""
        parts += [f"**Time of `predict`**{threads}", timing_table(result)]
    return "\n\n".join(parts) + "\n"


def figure(result: dict[str, Any]) -> Any:
    """Capped MAE by bucket per task set (top) and the reliability diagrams (bottom), pooled over policies."""
    with needs(__name__):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    task_sets, rows = result["task_sets"], result["rows"]
    fig, axes = plt.subplots(2, len(task_sets), figsize=(4.6 * len(task_sets), 7.6), squeeze=False)
    x = np.arange(len(BUCKET_LABELS))
    palette = plt.get_cmap("tab20").colors  # one colour per row (the default cycle repeats after 10 rows)
    colour = {row: palette[i % len(palette)] for i, row in enumerate(rows)}
    for col, task_set in enumerate(task_sets):
        top, bottom = axes[0][col], axes[1][col]
        for row in rows:
            by = {c["bucket"]: c for c in result["cells"] if c["task_set"] == task_set and c["policy"] == ALL and c["predictor"] == row}
            style = "--" if row in PROBE_ROWS else "-"
            y = np.array([by[b]["mae"] if b in by else np.nan for b in BUCKET_LABELS], dtype=float)
            ci = [by[b]["mae_ci"] if b in by and by[b]["mae_ci"] else [np.nan, np.nan] for b in BUCKET_LABELS]
            err = np.abs(np.array([[y[i] - ci[i][0] for i in x], [ci[i][1] - y[i] for i in x]]))
            top.errorbar(x, y, yerr=np.nan_to_num(err), linestyle=style, marker="o", markersize=4, capsize=3, label=row, color=colour[row])
            if ALL in by:
                curve = by[ALL]["reliability"]
                keep = [i for i, n in enumerate(curve["count"]) if n]
                bottom.plot([curve["mean_p"][i] for i in keep], [curve["rate"][i] for i in keep], linestyle=style, marker="o", markersize=3,
                            color=colour[row])
        top.set_xticks(x, [f"k {b}" for b in BUCKET_LABELS])
        top.set_title(task_set)
        top.grid(alpha=0.3)
        bottom.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle=":")
        bottom.set_xlabel("predicted p_within_budget (bin mean)")
        bottom.set_xlim(0, 1)
        bottom.set_ylim(0, 1)
        bottom.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"capped MAE (node-steps, cap {result['cap']})")
    axes[1][0].set_ylabel("feasible share (truth ≤ remaining window)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=(len(rows) + 1) // 2, fontsize=8, frameon=False)  # two lines
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def csv_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per cell (CIs as low/high columns; no reliability curve)."""
    rows = []
    for c in result["cells"]:
        row = {k: c[k] for k in ("task_set", "policy", "bucket", "predictor", "points", "episodes")}
        for name in METRICS:
            ci = c[f"{name}_ci"] or [None, None]
            row.update({name: c[name], f"{name}_lo": ci[0], f"{name}_hi": ci[1]})
        for name in COMPARED:
            entry = c.get("vs_best_probe", {}).get(name) or {"probe": None, "diff": None, "ci": None}
            ci = entry["ci"] or [None, None]
            row.update({f"{name}_best_probe": entry["probe"], f"{name}_vs_probe": entry["diff"], f"{name}_vs_probe_lo": ci[0],
                        f"{name}_vs_probe_hi": ci[1]})
        rows.append(row)
    return rows


def write_outputs(result: dict[str, Any], out: Path) -> list[Path]:
    """``prediction.png``, ``prediction.md``, then ``prediction.json`` and ``prediction.csv`` under ``out``, each atomically.

    Everything is rendered and serialised before the first write, and the JSON goes last, so a failure
    leaves a previous ``prediction.json`` as it was.
    """
    with needs(__name__):
        import matplotlib.pyplot as plt

    text = table(result)
    json.dumps(result, allow_nan=False)  # fails here, before any write, on a value JSON cannot hold
    rows = csv_rows(result)
    fig = figure(result)
    try:
        paths = [save_figure(fig, Path(out) / "prediction.png", dpi=120)]
    finally:
        plt.close(fig)
    paths.append(write_atomic(Path(out) / "prediction.md", text))
    return paths + write_results("prediction", result, rows, out=out)


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks prediction", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="directory of the outputs (default ./results; "
                                                                "with --quick, ./results/prediction_quick)")
    parser.add_argument("--quick", action="store_true", help="smoke configuration: 1 root, 1 episode, 300 points, 50 resamples, 2 train episodes")
    parser.add_argument("--max-points", type=int, default=None,
                        help=f"scored points per task set and policy, a seeded subsample (default {MAX_POINTS:,}; 0 = every point)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the subsample and the bootstrap")
    parser.add_argument("--task-sets", "--task-set", nargs="+", default=list(SUITE_TASK_SETS),
                        help=f"built-in task sets ({', '.join(SUITE_TASK_SETS)}; default: all) or bank files made by python -m core_env.curves import")
    parser.add_argument("--resamples", type=int, default=None, help=f"bootstrap resamples of episodes (default {RESAMPLES})")
    parser.add_argument("--timing-runs", type=int, default=None, help="runs of the predict timing (median; default 5, 0 = skip)")
    args = parser.parse_args(argv)
    options: dict[str, Any] = dict(QUICK) if args.quick else {}
    if args.max_points is not None:
        if args.max_points < 0:
            parser.error("--max-points must be >= 0")
        options["max_points"] = args.max_points or None
    if args.resamples is not None:
        options["resamples"] = args.resamples
    if args.timing_runs is not None:
        options["timing_runs"] = args.timing_runs
    out = args.out if args.out is not None else (RESULTS_DIR / "prediction_quick" if args.quick else RESULTS_DIR)
    start = time.perf_counter()
    result = evaluate(task_sets=args.task_sets, seed=args.seed, **options)
    result["wall_s"] = time.perf_counter() - start
    result["quick"] = args.quick
    result["command"] = " ".join(["python -m benchmarks prediction", *argv])
    print(table(result))
    paths = write_outputs(result, out)
    print(f"wall time {result['wall_s']:.1f} s; wrote {', '.join(str(p) for p in paths)}")
    return 0
