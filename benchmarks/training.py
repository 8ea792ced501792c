"""training: the shipped MAT checkpoints' training runs, from their manifests (no training here).

For every ``mara_agents/checkpoints/mat/*.json``: variant, seed, teacher (if the run was warm-started),
env steps, updates, wall minutes, the wall minutes at which its evaluation first beat LARA, and the
evaluation completion history the trainer logged (deterministic policy on 16 fixed seeded workloads
drawn from the `id` *training* curves). The baselines are played on those same workloads: EDF, LARA,
LARA-FM. Writes ``OUT/training/training.{json,md}`` (OUT: ``--out``, default ``results`` under the working directory) and
the wall-clock curve ``training_curve.png``, atomically (evaluation completion against training wall minutes, one line per run).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import add_out, figure_png, markdown_table, write_atomic, write_atomic_bytes
from benchmarks.agents import CHECKPOINT_DIR, make_agent
from benchmarks.rollout import run_agent
from core_env.config import EnvConfig
from core_env.extras import needs

BASELINES = ("edf", "lara", "lara-fm")
#: The environment version the trainer's workloads come from today.
CURRENT_ENV = "discrete_core_v1"


def manifests(directory: Path = CHECKPOINT_DIR) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]


def baselines(rows: Sequence[str] = BASELINES, episodes: int = 16) -> dict[str, float]:
    """Completion of ``rows`` on the trainer's evaluation workloads."""
    from mara_agents.mat.ppo import EVAL_SEED, training_workloads

    config = EnvConfig()
    draw = training_workloads(config)
    workloads = [draw(np.random.default_rng([EVAL_SEED, i])) for i in range(episodes)]
    return {row: float(run_agent(make_agent(row), workloads, config)["completion_rate"].mean()) for row in rows}


def minutes_to_beat(run: dict[str, Any], level: float) -> str:
    """Training wall minutes at the first evaluation above ``level`` ("never" if none was)."""
    above = [h["elapsed"] for h in run["eval"]["history"] if h["completion_rate"] > level]
    return f"{above[0] / 60:.1f}" if above else "never"


def figure(runs: list[dict[str, Any]], levels: dict[str, float]) -> bytes:
    with needs(__name__):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    colours = dict(zip(sorted({r["variant"] for r in runs}), plt.get_cmap("tab10").colors))
    for run in runs:
        history = run["eval"]["history"]
        ax.plot([h["elapsed"] / 60 for h in history], [100 * h["completion_rate"] for h in history], marker=".",
                color=colours[run["variant"]], label=run["variant"] if run["seed"] == min(r["seed"] for r in runs if r["variant"] == run["variant"]) else None)
    for (row, level), style in zip(levels.items(), ("--", "-.", ":")):
        ax.axhline(100 * level, color="grey", linestyle=style, lw=1, label=row)
    ax.set_xlabel("training wall minutes (one core each)")
    ax.set_ylabel("eval completion % (16 training-curve workloads)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    data = figure_png(fig, dpi=110)
    plt.close(fig)
    return data


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks training", description=__doc__.splitlines()[0])
    add_out(parser)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    runs = manifests()
    if not runs:
        print(f"no MAT checkpoints in {CHECKPOINT_DIR}; train them with python -m mara_agents.mat.train_all")
        return 0
    levels = baselines()
    rows = [(r["variant"], r["seed"], (r.get("ppo_config") or {}).get("teacher") or "none", f"{r['env_steps']:,}", r["updates"],
             f"{r['wall_seconds'] / 60:.1f}", minutes_to_beat(r, levels["lara"]), f"{100 * r['eval']['final_completion_rate']:.1f}")
            for r in runs]
    header = ("variant", "seed", "teacher", "env steps", "updates", "wall min", "min to beat LARA", "final eval %")
    old = sorted({r.get("env_version", "v0") for r in runs} - {CURRENT_ENV})
    caveat = ([f"These runs were trained and evaluated on {', '.join(old)} workloads, the baselines are replayed on today's ({CURRENT_ENV}) "
               "trainer workloads: the last two columns compare across environment versions and are indicative only."] if old else [])
    text = "\n".join([markdown_table(header, rows), "",
                      "Baselines on the trainer's evaluation workloads: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in levels.items()), *caveat])
    print(text)
    directory = args.out / "training"
    curve = figure(runs, levels)
    payload = json.dumps({"suite": "training", "runs": runs, "baselines": levels, "wall_s": time.perf_counter() - start}, indent=1) + "\n"
    write_atomic_bytes(directory / "training_curve.png", curve)
    write_atomic(directory / "training.json", payload)
    write_atomic(directory / "training.md", text + "\n")
    print(f"wrote {directory}/training.json, training.md, training_curve.png")
    return 0
