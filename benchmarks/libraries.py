"""The library integrations on the small configuration: the figures docs/tutorials/ quote, measured, never typed.

Each integration of :mod:`mara_agents.integrations` trains with its tutorial's budget on the small
configuration (:data:`~mara_agents.integrations.common.SMALL_ENV`: N = 2, K = 4, a 60-step arrival window),
seed 0, torch threads 1; where it has a greedy policy, the policy plays the same 16 seeded episodes as the
reference rules (seeds 10000–10015). Written to ``docs/results/libraries/libraries.json`` (``--out``:
elsewhere), one entry per library, resumable: a library already in the file is kept unless named with
``--only``. The tutorials' tables are generated blocks of it (:mod:`benchmarks.docs_blocks`).

RLlib and BenchMARL live in their own venv (``make rllib-venv``) and are not run here; their tutorials say so.

Run::

    python -m benchmarks libraries                  # every library not yet in the file (~12 min on 2 cores)
    python -m benchmarks libraries --only tianshou   # rerun one
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import write_atomic
from benchmarks.report import commit, machine
from core_env.extras import needs

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results" / "libraries" / "libraries.json"
#: The seeded episodes every greedy policy and reference rule plays.
EVAL_SEEDS = tuple(range(10_000, 10_016))


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _tianshou() -> dict[str, Any]:
    from mara_agents.integrations import tianshou_ppo
    from mara_agents.integrations.common import SMALL_ENV

    with tempfile.TemporaryDirectory() as run:
        report = tianshou_ppo.train(SMALL_ENV, epochs=8, steps_per_epoch=2048, collect_steps=512, n_envs=2, seed=0, out=run, verbose=False)
        greedy = tianshou_ppo.evaluate(tianshou_ppo.load_agent(run), SMALL_ENV, EVAL_SEEDS)
    return {**report, "greedy": greedy,
            "budget": "8 epochs x 2,048 env steps (PPO update every 512 steps, 2 envs)"}


def _sb3(vectorized: bool, n_envs: int, n_steps: int, timesteps: int, policy: str = "mlp") -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        from mara_agents.integrations import sb3_maskable
        from mara_agents.integrations.common import SMALL_ENV

        report = sb3_maskable.train(SMALL_ENV, timesteps=timesteps, n_steps=n_steps, n_envs=n_envs, seed=0, verbose=False,
                                    vectorized=vectorized, policy=policy)
        greedy = sb3_maskable.evaluate(report.pop("model"), SMALL_ENV, EVAL_SEEDS)
        how = "one CoreVecEnv" if vectorized else "DummyVecEnv"
        budget = f"{timesteps:,} env steps: rollouts of {n_envs} envs x {n_steps} steps ({how}){', per-slot policy' if policy == 'slot' else ''}"
        return {**report, "greedy": greedy, "budget": budget}

    return run


def _torchrl() -> dict[str, Any]:
    from mara_agents.integrations import torchrl_ppo
    from mara_agents.integrations.common import SMALL_ENV

    report = torchrl_ppo.train(SMALL_ENV, iterations=16, frames_per_batch=1024, seed=0, verbose=False)
    return {**report, "budget": "16 collector batches x 1,024 env steps"}


def _torchrl_slot() -> dict[str, Any]:
    from mara_agents.integrations import slot_policy, torchrl_ppo
    from mara_agents.integrations.common import SMALL_ENV

    with tempfile.TemporaryDirectory() as run:
        report = torchrl_ppo.train(SMALL_ENV, iterations=16, frames_per_batch=2048, minibatch_size=512, seed=0, verbose=False, view="vector",
                                   policy="slot", n_envs=8, out=run)
        greedy = slot_policy.evaluate(torchrl_ppo.load_agent(run), SMALL_ENV, EVAL_SEEDS)
    return {**report, "greedy": greedy, "budget": "16 collector batches x 2,048 env steps (8 envs of the vector env), per-slot policy"}


#: Library -> its run (tutorial page in the docs: docs/tutorials/<page>).
LIBRARIES: dict[str, Callable[[], dict[str, Any]]] = {
    "tianshou": _tianshou,
    "sb3-maskable": _sb3(False, n_envs=2, n_steps=512, timesteps=16_384),
    "sb3-vectorized": _sb3(True, n_envs=8, n_steps=256, timesteps=32_768),
    "sb3-dummy": _sb3(False, n_envs=8, n_steps=256, timesteps=32_768),  # sb3-vectorized's run through DummyVecEnv
    "sb3-slot": _sb3(True, n_envs=8, n_steps=256, timesteps=32_768, policy="slot"),
    "torchrl": _torchrl,
    "torchrl-slot": _torchrl_slot,
}
#: The reference rules on the same seeds (conflict-free heuristics of :mod:`mara_agents.heuristics`).
REFERENCES = ("random", "fifo", "edf")


def references() -> dict[str, float]:
    """Mean completion of the reference rules (and of independent masked random play) on :data:`EVAL_SEEDS`."""
    from mara_agents.heuristics import HEURISTICS
    from mara_agents.integrations.common import SMALL_ENV, random_masked_completion
    from mara_agents.integrations.tianshou_ppo import evaluate

    out = {row: evaluate(HEURISTICS[row](0) if row == "random" else HEURISTICS[row](), SMALL_ENV, EVAL_SEEDS)["completion_rate"] for row in REFERENCES}
    out["random, nodes independent"] = random_masked_completion(SMALL_ENV, EVAL_SEEDS)
    return out


def _summary(report: dict[str, Any], wall: float, cpu: float) -> dict[str, Any]:
    keep = ("library", "algorithm", "vec_env", "policy", "env", "env_steps", "updates", "seconds", "first", "last", "all", "greedy", "budget",
            "conflict_rule")
    digest = hashlib.sha256(json.dumps(report.get("episodes", []), sort_keys=True).encode()).hexdigest()[:16]
    return {**{k: report[k] for k in keep if k in report}, "episodes_sha256": digest, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}


def run(only: Sequence[str] = (), out: Path = OUT) -> dict[str, Any]:
    """Run the libraries missing from ``out`` (and every one named in ``only``); returns the file's content."""
    with needs(__name__):
        import torch

    torch.set_num_threads(1)
    saved = json.loads(out.read_text()) if out.exists() else {}
    saved.setdefault("runs", {})
    for name in LIBRARIES:
        if name in saved["runs"] and name not in only:
            continue
        print(f"libraries: training {name} ...", flush=True)
        wall, cpu = time.perf_counter(), _cpu()
        report = LIBRARIES[name]()
        saved["runs"][name] = _summary(report, time.perf_counter() - wall, _cpu() - cpu)
        saved.update({"commit": commit(), "machine": machine(), "eval_seeds": list(EVAL_SEEDS), "references": references()})
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, json.dumps(saved, indent=1, sort_keys=True, default=float) + "\n")
    return saved


def table(saved: dict[str, Any]) -> str:
    """The tutorials' table: completion during training and of the greedy policy, masks, conflicts, time."""
    lines = ["| library | budget | training completion, first → last quarter | greedy, 16 seeded episodes | invalid actions, all training episodes | "
             "conflicts, all training episodes | wall / CPU s |",
             "|---|---|---|---|---|---|---|"]
    runs = saved["runs"]
    for name in [*(n for n in LIBRARIES if n in runs), *(n for n in runs if n not in LIBRARIES)]:  # the tutorials' order
        r = runs[name]
        greedy = f"**{r['greedy']['completion_rate']:.3f}**" if "greedy" in r else "—"
        total = r["all"]
        conflicts = f"{total['conflicts']} in {total['episodes']} episodes"
        lines.append(f"| {name} | {r.get('budget', '—')} | {r['first'].get('completion_rate', float('nan')):.3f} → "
                     f"{r['last'].get('completion_rate', float('nan')):.3f} | {greedy} | {total['invalid_actions']} | {conflicts} | "
                     f"{r['wall_s']:,.0f} / {r['cpu_s']:,.0f} |")
    refs = saved["references"]
    lines.append(f"| *reference rules, same 16 episodes* | — | — | " + " / ".join(f"{name} {value:.3f}" for name, value in refs.items()) + " | 0 | — | |")
    machine_text = f"{saved['machine']['cpus']} CPUs ({saved['machine']['processor']})"
    lines += ["", f"Small configuration (N = 2, K = 4, 60-step arrival window), seed 0, torch threads 1; measured by "
              f"`python -m benchmarks libraries` at commit {saved['commit']} on {machine_text} "
              "(docs/results/libraries/libraries.json). Conflicts: choices the env resolved (one task, two nodes); "
              "the per-slot policy (tianshou, sb3-slot, torchrl-slot) prevents them in its joint distribution."]
    return "\n".join(lines)


def vec_env_table(saved: dict[str, Any]) -> str:
    """sb3-vectorized.md's table: the same MaskablePPO run stepped through one CoreVecEnv and through DummyVecEnv."""
    runs = saved["runs"]
    batched, dummy = runs["sb3-vectorized"], runs["sb3-dummy"]
    same = batched["episodes_sha256"] == dummy["episodes_sha256"]

    def cells(label: str, value: Callable[[dict[str, Any]], str]) -> str:
        return f"| {label} | {value(batched)} | {value(dummy)} |"

    episodes = batched["all"]["episodes"]
    lines = ["| | CoreVecEnv (this page) | DummyVecEnv of 8 `gym.make` envs (same script) |", "|---|---|---|",
             cells("`learn` wall time", lambda r: f"{r['seconds']:.1f} s ({r['env_steps'] / r['seconds']:,.0f} steps/s)"),
             cells("whole run, wall / CPU", lambda r: f"{r['wall_s']:.0f} s / {r['cpu_s']:.0f} s"),
             cells(f"invalid actions, all {episodes} training episodes", lambda r: str(r["all"]["invalid_actions"])),
             cells("training completion, first → last quarter (sampled actions)",
                   lambda r: f"{r['first']['completion_rate']:.3f} → {r['last']['completion_rate']:.3f}"),
             cells(f"greedy completion, {len(saved['eval_seeds'])} seeded episodes",
                   lambda r: f"{r['greedy']['completion_rate']:.3f} ({r['greedy']['conflicts']} conflicts)"),
             "", f"{batched['budget']} vs the same through DummyVecEnv; the training episodes of the two runs are "
             f"{'identical' if same else 'NOT identical'} (sha256 of their statistics, docs/results/libraries/libraries.json, "
             f"commit {saved['commit']}, {saved['machine']['cpus']} CPUs, torch threads 1)."]
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks libraries", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", default=[], metavar="LIBRARY", help=f"rerun these ({', '.join(LIBRARIES)})")
    parser.add_argument("--out", type=Path, default=OUT, help="the JSON file to fill (default: docs/results/libraries/libraries.json)")
    args = parser.parse_args(list(argv))
    unknown = [name for name in args.only if name not in LIBRARIES]
    if unknown:
        parser.error(f"unknown libraries {unknown}; available: {', '.join(LIBRARIES)}")
    print(table(run(args.only, args.out)))
    return 0
