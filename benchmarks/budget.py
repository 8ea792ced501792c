"""budget: does learning help? MARA on the posterior (``mara-post``) at growing PPO budgets against its teacher.

Every snapshot under ``--snapshots`` (default ``mara_agents/checkpoints/budget``; one ``<shaping>-<env
steps>.pt`` with its manifest ``.json``, written by ``python -m mara_agents.mat.ppo`` runs resumed from one
budget to the next: the trainer's learning rate is constant, so a run resumed to 1 M env-steps is a 1 M-step
run) plays the committed ``id`` suite at the training load (10 evaluation roots × 4 episodes); so does the
teacher the snapshots were warm-started from (their manifests name it). Completion is averaged per root, and
each snapshot is paired with the teacher by root (t-based 95% CI, exact sign-flip p).

Writes ``OUT/budget/budget.{json,md}`` and ``budget.png`` (completion against env-steps, one line per
shaping, the teacher's level as a band), atomically. Nothing is trained here.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import add_out, figure_png, markdown_table, write_atomic, write_atomic_bytes
from benchmarks.stats import paired_difference
from core_env.config import EnvConfig
from core_env.extras import needs
from core_env.generators import suite_workloads
from core_env.suites import SUITE_EPISODES, SUITE_ROOTS

SNAPSHOTS = Path(__file__).resolve().parent.parent / "mara_agents" / "checkpoints" / "budget"
NAME = re.compile(r"^(dense|sparse)-(\d+)$")


def snapshots(directory: Path) -> list[tuple[str, int, Path]]:
    """(shaping, env-step budget, checkpoint) of every ``<shaping>-<steps>.pt`` in ``directory``, by shaping and budget."""
    found = []
    for path in sorted(directory.glob("*.pt")):
        match = NAME.match(path.stem)
        if match is None:
            raise ValueError(f"{path}: a budget snapshot is named <dense|sparse>-<env steps>.pt")
        found.append((match[1], int(match[2]), path))
    if not found:
        raise ValueError(f"no budget snapshots (<dense|sparse>-<env steps>.pt) in {directory}")
    return sorted(found, key=lambda s: (s[0], s[1]))


def per_root(agent, roots: int = SUITE_ROOTS, episodes: int = SUITE_EPISODES, task_set: str = "id", load: str = "train") -> np.ndarray:
    """(roots,) completion % of ``agent`` on each evaluation root of the committed suite (its first ``episodes`` averaged)."""
    from benchmarks.rollout import run_agent

    config = EnvConfig(task_set=task_set, load=load)
    out = []
    for root in range(roots):
        workloads = suite_workloads(task_set, load, [(root, e) for e in range(episodes)], config.n_nodes)
        out.append(100.0 * float(np.mean(run_agent(agent, workloads, config)["completion_rate"])))
    return np.array(out)


def run(directory: Path, roots: int = SUITE_ROOTS, episodes: int = SUITE_EPISODES) -> dict[str, Any]:
    from benchmarks.agents import make_agent
    from mara_agents.mat.agent import MATAgent

    found = [(shaping, steps, path, json.loads(path.with_suffix(".json").read_text())) for shaping, steps, path in snapshots(directory)]
    teachers = {manifest.get("teacher") for *_, manifest in found}
    if len(teachers) != 1 or None in teachers:
        raise ValueError(f"budget snapshots must share one teacher, found {sorted(map(str, teachers))}")
    teacher = teachers.pop()
    records = []
    for shaping, steps, path, manifest in found:
        values = per_root(MATAgent.load(path), roots, episodes)  # verified against its manifest's sha256
        records.append({"shaping": shaping, "env_steps_budget": steps, "env_steps": int(manifest.get("env_steps", steps)),
                        "variant": manifest.get("variant"), "seed": manifest.get("seed"), "teacher": teacher,
                        "sha256": manifest.get("sha256"), "per_root": values.tolist(),
                        "mean": float(values.mean()), "sd": float(values.std(ddof=1))})
    teacher_values = per_root(make_agent(teacher), roots, episodes)
    for record in records:
        record["minus_teacher"] = paired_difference(np.array(record["per_root"]), teacher_values)
    return {"suite": "budget", "scenario": "id/train", "roots": roots, "episodes": episodes, "teacher": teacher,
            "teacher_per_root": teacher_values.tolist(), "teacher_mean": float(teacher_values.mean()),
            "snapshots": records, "verdict": verdict(records)}


def verdict(records: list[dict[str, Any]]) -> str:
    """One sentence per shaping: each budget's difference from the teacher, and where the largest budget stands."""
    lines = []
    for shaping in sorted({r["shaping"] for r in records}):
        mine = [r for r in records if r["shaping"] == shaping]
        d = mine[-1]["minus_teacher"]
        tail = ("above the teacher (CI above 0)" if d["ci_low"] > 0 else "below the teacher (CI below 0)" if d["ci_high"] < 0
                else "not distinguishable from the teacher (CI spans 0)")
        steps = ", ".join(f"{r['env_steps_budget'] / 1e6:g} M: {r['minus_teacher']['mean']:+.1f}" for r in mine)
        lines.append(f"{shaping}: − teacher by budget {steps}; at {mine[-1]['env_steps_budget'] / 1e6:g} M env-steps "
                     f"{d['mean']:+.1f} [{d['ci_low']:+.1f}, {d['ci_high']:+.1f}], {tail}.")
    return " ".join(lines)


def summary(result: dict[str, Any]) -> str:
    rows = [(r["shaping"], f"{r['env_steps_budget']:,}", f"{r['mean']:.1f} ± {r['sd']:.1f}",
             f"{r['minus_teacher']['mean']:+.1f} [{r['minus_teacher']['ci_low']:+.1f}, {r['minus_teacher']['ci_high']:+.1f}]",
             f"{r['minus_teacher']['p_value']:.4f}") for r in result["snapshots"]]
    rows.append(("teacher: " + result["teacher"], "—", f"{result['teacher_mean']:.1f} ± {np.std(result['teacher_per_root'], ddof=1):.1f}", "", ""))
    return "\n".join([f"MARA on the posterior (mara-post, seed 0) against env-steps of PPO, {result['scenario']}, "
                      f"{result['roots']} evaluation roots (completion %, mean ± sd over roots; − teacher paired by root, t-based 95% CI):", "",
                      markdown_table(("shaping", "env-steps", "completion %", "− teacher", "p"), rows), "", result["verdict"]])


def figure(result: dict[str, Any]) -> bytes:
    with needs(__name__):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.6))
    teacher = np.array(result["teacher_per_root"])
    half = 1.96 * teacher.std(ddof=1) / np.sqrt(teacher.size)
    ax.axhspan(teacher.mean() - half, teacher.mean() + half, color="grey", alpha=0.25, label=f"teacher ({result['teacher']})")
    ax.axhline(teacher.mean(), color="grey")
    for shaping, marker in (("dense", "o"), ("sparse", "s")):
        mine = [r for r in result["snapshots"] if r["shaping"] == shaping]
        if not mine:
            continue
        x = [r["env_steps_budget"] for r in mine]
        y = [r["mean"] for r in mine]
        err = [1.96 * r["sd"] / np.sqrt(len(r["per_root"])) for r in mine]
        ax.errorbar(x, y, yerr=err, marker=marker, capsize=3, label=f"mara-post, {shaping} shaping")
    ax.set_xscale("log")
    ax.set_xlabel("PPO env-steps (log scale)")
    ax.set_ylabel(f"completion % ({result['scenario']}, {result['roots']} roots)")
    ax.set_title("Does learning help? MARA on the posterior vs its teacher")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2, frameon=False)  # below the axes: no point hidden
    fig.tight_layout()
    data = figure_png(fig, dpi=120)
    plt.close(fig)
    return data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks budget", description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=Path, default=SNAPSHOTS, help=f"directory of <shaping>-<steps>.pt snapshots (default {SNAPSHOTS})")
    parser.add_argument("--roots", type=int, default=SUITE_ROOTS, help=f"evaluation roots (default {SUITE_ROOTS})")
    parser.add_argument("--episodes", type=int, default=SUITE_EPISODES, help=f"episodes per root (default {SUITE_EPISODES})")
    add_out(parser)
    args = parser.parse_args(argv)
    if not 2 <= args.roots <= SUITE_ROOTS or not 1 <= args.episodes <= SUITE_EPISODES:
        parser.error(f"--roots must be in [2, {SUITE_ROOTS}] and --episodes in [1, {SUITE_EPISODES}], got {args.roots} and {args.episodes}")
    start = time.perf_counter()
    try:
        result = run(args.snapshots, args.roots, args.episodes)
    except (OSError, ValueError) as error:
        parser.exit(2, f"python -m benchmarks budget: {error}\n")
    result["wall_s"] = time.perf_counter() - start
    out = args.out / "budget"
    out.mkdir(parents=True, exist_ok=True)
    text = summary(result)
    print(text)
    write_atomic(out / "budget.json", json.dumps(result, indent=1) + "\n")
    write_atomic(out / "budget.md", text + "\n")
    write_atomic_bytes(out / "budget.png", figure(result))
    print(f"wall time {result['wall_s']:.1f} s; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
