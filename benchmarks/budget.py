"""budget: does learning help? MARA on the posterior (``mara-post``) at growing PPO budgets against its teacher.

Every snapshot under ``--snapshots`` (default ``mara_agents/checkpoints/budget``; one ``<shaping>-<env
steps>[-s<seed>].pt`` with its manifest ``.json`` (no ``-s``: seed 0; the manifest's seed must agree), written
by ``python -m mara_agents.mat.ppo`` runs resumed from one budget to the next: the trainer's learning rate is
constant, so a run resumed to 1 M env-steps is a 1 M-step run) plays the committed ``id`` suite at the
training load (10 evaluation roots × 4 episodes); so does the teacher the snapshots were warm-started from
(their manifests name it). Completion is averaged per root, and each snapshot is paired with the teacher by
root (t-based 95% CI, exact sign-flip p). Where a shaping and budget have several seeds, their mean is a row
too: the seeds are averaged within each root before pairing (the evaluation root is the unit), their spread
reported apart, and the verdict and the figure's line follow the seed means.

Writes ``OUT/budget/budget.{json,md}`` and ``budget.png`` (completion against env-steps, one line per
shaping, the teacher's level as a band), atomically. Nothing is trained here.

Each snapshot's and the teacher's per-root completions are kept in ``OUT/budget/cells/<key>.json`` as they
are computed, so an interrupted run resumes and a new snapshot costs only its own rollouts. The key hashes
what the numbers depend on (the snapshot's sha256 or the teacher's spec, the shipped FM and PFN weights, the
roots and episodes, the cell format); a file is read only when its checksum, key and values verify
(otherwise it is recomputed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import add_out, figure_png, markdown_table, write_atomic, write_atomic_bytes
from benchmarks.cell_store import FORMAT, checksum
from benchmarks.stats import paired_difference
from core_env.config import EnvConfig
from core_env.extras import needs
from core_env.generators import suite_workloads
from core_env.suites import SUITE_EPISODES, SUITE_ROOTS

#: The paper's learned-allocator claim, as issue 48 states it: the learned allocator ≥ its teacher + 2 points.
CLAIM_MARGIN = 2.0
SNAPSHOTS = Path(__file__).resolve().parent.parent / "mara_agents" / "checkpoints" / "budget"
NAME = re.compile(r"^(dense|sparse)-(\d+)(?:-s(\d+))?$")


def snapshots(directory: Path) -> list[tuple[str, int, int, Path]]:
    """(shaping, env-step budget, seed, checkpoint) of every ``<shaping>-<steps>[-s<seed>].pt`` in ``directory``,
    by shaping, budget and seed."""
    found = []
    for path in sorted(directory.glob("*.pt")):
        match = NAME.match(path.stem)
        if match is None:
            raise ValueError(f"{path}: a budget snapshot is named <dense|sparse>-<env steps>[-s<seed>].pt")
        found.append((match[1], int(match[2]), int(match[3] or 0), path))
    if not found:
        raise ValueError(f"no budget snapshots (<dense|sparse>-<env steps>[-s<seed>].pt) in {directory}")
    return sorted(found, key=lambda s: (s[0], s[1], s[2]))


def per_root(agent, roots: int = SUITE_ROOTS, episodes: int = SUITE_EPISODES, task_set: str = "id", load: str = "train") -> np.ndarray:
    """(roots,) completion % of ``agent`` on each evaluation root of the committed suite (its first ``episodes`` averaged)."""
    from benchmarks.rollout import run_agent

    config = EnvConfig(task_set=task_set, load=load)
    out = []
    for root in range(roots):
        workloads = suite_workloads(task_set, load, [(root, e) for e in range(episodes)], config.n_nodes)
        out.append(100.0 * float(np.mean(run_agent(agent, workloads, config)["completion_rate"])))
    return np.array(out)


def _cache_key(what: dict[str, Any], roots: int, episodes: int) -> str:
    text = json.dumps([FORMAT, "budget", what, roots, episodes], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _read_cached(path: Path, key: str, roots: int) -> np.ndarray | None:
    """The per-root completions saved at ``path``, or None unless its checksum, key and values verify."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or saved.get("checksum") != checksum(saved) or saved.get("key") != key:
        return None
    values = np.asarray(saved.get("per_root"), dtype=np.float64) if isinstance(saved.get("per_root"), list) else np.empty(0)
    if values.shape != (roots,) or not np.all((values >= 0) & (values <= 100)):
        return None
    return values


def cached_per_root(cache: Path | None, what: dict[str, Any], compute: Callable[[], np.ndarray], roots: int, episodes: int) -> np.ndarray:
    """``compute()`` (per-root completion %), or what ``cache`` holds for ``what`` (see the module docstring)."""
    if cache is None:
        return compute()
    key = _cache_key(what, roots, episodes)
    path = cache / f"{key}.json"
    values = _read_cached(path, key, roots)
    if values is None:
        values = compute()
        body = {"key": key, "what": what, "roots": roots, "episodes": episodes, "per_root": values.tolist()}
        cache.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({**body, "checksum": checksum(body)}, indent=1) + "\n")
    return values


def run(directory: Path, roots: int = SUITE_ROOTS, episodes: int = SUITE_EPISODES, cache: Path | None = None) -> dict[str, Any]:
    from benchmarks.agents import FM_MANIFEST, PFN_MANIFEST, manifest_sha, make_agent, weights_id
    from mara_agents.mat.agent import MATAgent

    found = [(shaping, steps, seed, path, json.loads(path.with_suffix(".json").read_text())) for shaping, steps, seed, path in snapshots(directory)]
    teachers = {manifest.get("teacher") for *_, manifest in found}
    if len(teachers) != 1 or None in teachers:
        raise ValueError(f"budget snapshots must share one teacher, found {sorted(map(str, teachers))}")
    wrong = [path.name for _, _, seed, path, manifest in found if manifest.get("seed") != seed]
    if wrong:
        raise ValueError(f"budget snapshots {wrong}: the seed in the name (none: 0) is not the manifest's")
    teacher = teachers.pop()
    records = []
    for shaping, steps, seed, path, manifest in found:
        # the key names the checkpoint's bytes (loading it verifies them against its manifest)
        what = {"snapshot": hashlib.sha256(path.read_bytes()).hexdigest(), "fm": manifest_sha(FM_MANIFEST), "pfn": manifest_sha(PFN_MANIFEST)}
        values = cached_per_root(cache, what, lambda: per_root(MATAgent.load(path), roots, episodes), roots, episodes)
        records.append({"shaping": shaping, "env_steps_budget": steps, "env_steps": int(manifest.get("env_steps", steps)),
                        "variant": manifest.get("variant"), "seed": seed, "teacher": teacher,
                        "sha256": manifest.get("sha256"), "per_root": values.tolist(),
                        "mean": float(values.mean()), "sd": float(values.std(ddof=1))})
    teacher_values = cached_per_root(cache, {"agent": teacher, "weights": weights_id(teacher)},
                                     lambda: per_root(make_agent(teacher), roots, episodes), roots, episodes)
    for record in records:
        record["minus_teacher"] = paired_difference(np.array(record["per_root"]), teacher_values)
    means, steps = seed_means(records, teacher_values), last_steps(records)
    return {"suite": "budget", "scenario": "id/train", "roots": roots, "episodes": episodes, "teacher": teacher,
            "teacher_per_root": teacher_values.tolist(), "teacher_mean": float(teacher_values.mean()),
            "snapshots": records, "seed_means": means, "last_steps": steps,
            "verdict": verdict(lines_of(records, means)) + " " + last_step_sentence(steps)}


def seed_means(records: list[dict[str, Any]], teacher_values: np.ndarray) -> list[dict[str, Any]]:
    """One record per (shaping, budget) with two or more seeds: the seeds averaged within each root, paired with
    the teacher by root; ``seed_sd`` is the sd of the seeds' means (their spread, apart from the roots')."""
    out = []
    for shaping, steps in dict.fromkeys((r["shaping"], r["env_steps_budget"]) for r in records):
        mine = [r for r in records if (r["shaping"], r["env_steps_budget"]) == (shaping, steps)]
        if len(mine) < 2:
            continue
        values = np.mean([r["per_root"] for r in mine], axis=0)
        out.append({"shaping": shaping, "env_steps_budget": steps, "seeds": [r["seed"] for r in mine], "per_root": values.tolist(),
                    "mean": float(values.mean()), "sd": float(values.std(ddof=1)),
                    "seed_sd": float(np.std([r["mean"] for r in mine], ddof=1)),
                    "minus_teacher": paired_difference(values, teacher_values)})
    return out


def lines_of(records: list[dict[str, Any]], means: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (shaping, budget) the record the verdict and the figure's line read: the seed mean where there are
    several seeds, else the one snapshot."""
    averaged = {(m["shaping"], m["env_steps_budget"]): m for m in means}
    picked = {}
    for r in records:
        key = (r["shaping"], r["env_steps_budget"])
        picked.setdefault(key, averaged.get(key, r))
    return list(picked.values())


def last_steps(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per shaping, the last step measured within each seed whose line reaches the largest budget: that seed's
    largest budget against its budget before, paired by root (whether the curve still climbs there)."""
    out = []
    for shaping in sorted({r["shaping"] for r in records}):
        by_seed: dict[int, list[dict[str, Any]]] = {}
        for r in records:
            if r["shaping"] == shaping:
                by_seed.setdefault(r["seed"], []).append(r)
        runs = [sorted(mine, key=lambda r: r["env_steps_budget"]) for mine in by_seed.values() if len(mine) >= 2]
        if not runs:
            continue
        furthest = max(run[-1]["env_steps_budget"] for run in runs)
        for run in sorted((run for run in runs if run[-1]["env_steps_budget"] == furthest), key=lambda run: run[-1]["seed"]):
            before, last = run[-2], run[-1]
            out.append({"shaping": shaping, "seed": last["seed"], "from": before["env_steps_budget"], "to": last["env_steps_budget"],
                        "difference": paired_difference(np.array(last["per_root"]), np.array(before["per_root"]))})
    return out


def _by_ci(difference: dict[str, float], above: str, below: str, spans: str) -> str:
    """``above`` when a paired difference's CI lies above 0, ``below`` when below, else ``spans``."""
    return above if difference["ci_low"] > 0 else below if difference["ci_high"] < 0 else spans


def last_step_sentence(steps: list[dict[str, Any]]) -> str:
    """What the last step of each shaping's furthest seed changed, and whether it is distinguishable from 0."""
    parts = []
    for s in steps:
        d = s["difference"]
        moved = _by_ci(d, "up", "down", "not distinguishable from no change")
        parts.append(f"{s['shaping']}, seed {s['seed']}, {s['from'] / 1e6:g} M → {s['to'] / 1e6:g} M env-steps: "
                     f"{d['mean']:+.1f} [{d['ci_low']:+.1f}, {d['ci_high']:+.1f}] points ({moved}).")
    return ("Last step measured within each seed (paired by root): " + " ".join(parts)) if parts else ""


def verdict(records: list[dict[str, Any]]) -> str:
    """One sentence per shaping: each budget's difference from the teacher, and where the largest budget stands;
    then whether any budget reaches the teacher + :data:`CLAIM_MARGIN` (the paper's learned-allocator claim)."""
    lines = []
    for shaping in sorted({r["shaping"] for r in records}):
        mine = [r for r in records if r["shaping"] == shaping]
        d = mine[-1]["minus_teacher"]
        tail = _by_ci(d, "above the teacher (CI above 0)", "below the teacher (CI below 0)", "not distinguishable from the teacher (CI spans 0)")
        steps = ", ".join(f"{r['env_steps_budget'] / 1e6:g} M{_seeds(r)}: {r['minus_teacher']['mean']:+.1f}" for r in mine)
        lines.append(f"{shaping}: − teacher by budget {steps}; at {mine[-1]['env_steps_budget'] / 1e6:g} M env-steps{_seeds(mine[-1])} "
                     f"{d['mean']:+.1f} [{d['ci_low']:+.1f}, {d['ci_high']:+.1f}], {tail}.")
    best = max(records, key=lambda r: r["minus_teacher"]["mean"])
    reached = [r for r in records if r["minus_teacher"]["mean"] >= CLAIM_MARGIN and r["minus_teacher"]["ci_low"] > 0]
    if reached:
        lines.append(f"The teacher + {CLAIM_MARGIN:g} (the paper's learned-allocator claim) is reached at "
                     + ", ".join(f"{r['shaping']} {r['env_steps_budget'] / 1e6:g} M" for r in reached) + ".")
    else:
        lines.append(f"No budget measured reaches the teacher + {CLAIM_MARGIN:g} with a CI above 0: the paper's learned-allocator "
                     f"claim does not reproduce here (closest: {best['shaping']} {best['env_steps_budget'] / 1e6:g} M{_seeds(best)}, "
                     f"{best['minus_teacher']['mean']:+.1f}).")
    return " ".join(lines)


def _seeds(record: dict[str, Any]) -> str:
    return f" ({len(record['seeds'])} seeds)" if "seeds" in record else ""


def summary(result: dict[str, Any]) -> str:
    def row(r: dict[str, Any], seeds: str) -> tuple[str, ...]:
        d = r["minus_teacher"]
        return (r["shaping"], f"{r['env_steps_budget']:,}", seeds, f"{r['mean']:.1f} ± {r['sd']:.1f}",
                f"{d['mean']:+.1f} [{d['ci_low']:+.1f}, {d['ci_high']:+.1f}]", f"{d['p_value']:.4f}")

    rows = []
    for r in result["snapshots"]:
        rows.append(row(r, str(r["seed"])))
        for m in result.get("seed_means", []):
            last = [s for s in result["snapshots"] if (s["shaping"], s["env_steps_budget"]) == (m["shaping"], m["env_steps_budget"])][-1]
            if last is r:
                rows.append(row(m, f"mean of {len(m['seeds'])} (seed sd {m['seed_sd']:.1f})"))
    rows.append(("teacher: " + result["teacher"], "—", "—", f"{result['teacher_mean']:.1f} ± {np.std(result['teacher_per_root'], ddof=1):.1f}", "", ""))
    return "\n".join([f"MARA on the posterior (mara-post) against env-steps of PPO, {result['scenario']}, "
                      f"{result['roots']} evaluation roots (completion %, mean ± sd over roots; − teacher paired by root, t-based 95% CI; "
                      "several seeds are averaged within each root before pairing):", "",
                      markdown_table(("shaping", "env-steps", "seed", "completion %", "− teacher", "p"), rows), "", result["verdict"]])


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
    line = lines_of(result["snapshots"], result.get("seed_means", []))
    for shaping, marker in (("dense", "o"), ("sparse", "s")):
        mine = [r for r in line if r["shaping"] == shaping]
        if not mine:
            continue
        x = [r["env_steps_budget"] for r in mine]
        y = [r["mean"] for r in mine]
        err = [1.96 * r["sd"] / np.sqrt(len(r["per_root"])) for r in mine]
        drawn = ax.errorbar(x, y, yerr=err, marker=marker, capsize=3, label=f"mara-post, {shaping} shaping (seed mean where several)")
        seeds = [r for r in result["snapshots"] if r["shaping"] == shaping]
        if len(seeds) > len(mine):
            ax.scatter([r["env_steps_budget"] for r in seeds], [r["mean"] for r in seeds], marker=marker, s=14, facecolors="none",
                       edgecolors=drawn.lines[0].get_color(), label=f"{shaping}: each seed")
    ax.set_xscale("log")
    budgets = sorted({r["env_steps_budget"] for r in result["snapshots"]})
    ax.set_xticks(budgets, [f"{b / 1e6:g} M" for b in budgets])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # only the budgets are labelled: no overlapping minor labels
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
    parser.add_argument("--snapshots", type=Path, default=SNAPSHOTS, help=f"directory of <shaping>-<steps>[-s<seed>].pt snapshots (default {SNAPSHOTS})")
    parser.add_argument("--roots", type=int, default=SUITE_ROOTS, help=f"evaluation roots (default {SUITE_ROOTS})")
    parser.add_argument("--episodes", type=int, default=SUITE_EPISODES, help=f"episodes per root (default {SUITE_EPISODES})")
    add_out(parser)
    args = parser.parse_args(argv)
    if not 2 <= args.roots <= SUITE_ROOTS or not 1 <= args.episodes <= SUITE_EPISODES:
        parser.error(f"--roots must be in [2, {SUITE_ROOTS}] and --episodes in [1, {SUITE_EPISODES}], got {args.roots} and {args.episodes}")
    start = time.perf_counter()
    try:
        result = run(args.snapshots, args.roots, args.episodes, cache=args.out / "budget" / "cells")
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
