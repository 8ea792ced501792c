"""Choosing an allocator row's settings on *train* workloads only: ``python -m benchmarks.tuning``.

A curve-aware row's free settings (the reports EDF + admission waits before a prediction may turn a
task away, ``min_reports``, and optionally the probability of fitting it requires, ``admit_pct``; or any
grid of rows given with ``--rows``, e.g. the posterior allocators' ``deadline_pct`` and ``explore``) are chosen here, never on the evaluation suites: each candidate row plays
the seeded train workloads of :func:`benchmarks.decision_points.train_workloads` (the ``id`` train
curves with themselves as reference runs, seeds disjoint from every suite) and the best mean
completion wins. ``rl_ood`` and ``vit_ood`` are never read. The choice and every candidate's score
are written to ``--out`` (JSON) and printed.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.agents import make_agent
from benchmarks.decision_points import train_workloads
from benchmarks.rollout import run_agent
from core_env.config import EnvConfig
from core_env.npz import write_atomic

#: Candidate rows: EDF + admission on a predictor, for each min_reports.
MIN_REPORTS = (1, 2, 3, 5, 8)


def score_rows(rows: Sequence[str], task_set: str = "id", episodes: int = 16) -> dict[str, dict[str, float]]:
    """Mean and sd of the completion rate (%) of each row over the train workloads (one batch per row)."""
    workloads = train_workloads(task_set, episodes)
    out = {}
    for row in rows:
        rates = 100.0 * run_agent(make_agent(row, task_set=task_set), workloads, EnvConfig(task_set=task_set))["completion_rate"]
        out[row] = {"mean": float(np.mean(rates)), "sd": float(np.std(rates, ddof=1)) if rates.size > 1 else 0.0}
        print(f"{row}: {out[row]['mean']:.2f} ± {out[row]['sd']:.2f}", flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tuning", description=__doc__.split("\n")[0])
    parser.add_argument("--predictor", default="pfn", help="predictor of the EDF + admission rows (default pfn)")
    parser.add_argument("--min-reports", type=int, nargs="+", default=list(MIN_REPORTS))
    parser.add_argument("--admit-pct", type=int, nargs="*", default=[],
                        help="also try admitting at P(demand fits) >= PCT/100 for each of these (default: the median rule only)")
    parser.add_argument("--rows", nargs="+", default=None,
                        help="score these rows instead of the EDF + admission grid (e.g. index:pfn,deadline_pct=75)")
    parser.add_argument("--episodes", type=int, default=16, help="train workloads (default 16)")
    parser.add_argument("--out", type=Path, default=Path("build/tuning.json"))
    args = parser.parse_args(argv)
    if args.episodes < 1 or any(m < 0 for m in args.min_reports) or any(not 1 <= p <= 100 for p in args.admit_pct):
        parser.error("--episodes must be >= 1, --min-reports >= 0 and --admit-pct in [1, 100]")
    rows = args.rows or [f"edf-admission:{args.predictor},min_reports={m}" + (f",admit_pct={p}" if p else "")
                         for m in args.min_reports for p in [None, *args.admit_pct]]
    try:
        scores = score_rows(rows, "id", args.episodes)
    except ValueError as error:
        parser.exit(2, f"python -m benchmarks.tuning: {error}\n")
    best = max(scores, key=lambda r: scores[r]["mean"])
    write_atomic(args.out, (json.dumps({"task_set": "id", "workloads": "train (benchmarks.decision_points.train_workloads)",
                                        "episodes": args.episodes, "scores": scores, "chosen": best}, indent=1) + "\n").encode())
    print(f"chosen: {best} (written to {args.out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
