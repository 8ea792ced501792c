"""Train every shipped MAT checkpoint: 5 variants × 3 seeds, a few trainings side by side.

``python -m mara_agents.mat.train_all [--minutes M] --parallel 2 [--runs DIR] [--variants ...] [--seeds ...]
[-- extra ppo flags, e.g. --steps N]`` runs ``python -m mara_agents.mat.ppo`` for each (variant, seed) into
``DIR/VARIANT-seedS/`` (``--threads`` each, default one; rerunning resumes unfinished runs and skips finished ones), then
copies each finished policy to ``mara_agents/checkpoints/mat/VARIANT-seedS.pt`` with its manifest — the
files the benchmark's learned rows load — only with ``--overwrite-shipped`` (without it: train only, the shipped
checkpoints untouched; rerun with it to publish finished runs). Bad flags exit 2 with argparse's error line naming the flag.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from mara_agents.checkpoint_files import SHIPPED_DIR
from mara_agents.cli_checks import SEED_MAX, THREADS_MAX, float_flag, int_flag, refuse_shipped, shipped
from mara_agents.mat.agent import POLICY_FILE
from mara_agents.mat.ppo import VARIANTS

CHECKPOINTS = SHIPPED_DIR / "mat"
#: The most trainings at once (each is a process with its own environments).
PARALLEL_MAX = 256


def publish(run: Path, name: str, checkpoints: Path = CHECKPOINTS) -> Path:
    """Copy a finished run's policy and manifest to ``checkpoints/NAME.pt`` and ``NAME.json``."""
    checkpoints.mkdir(parents=True, exist_ok=True)
    target = checkpoints / f"{name}.pt"
    shutil.copyfile(run / POLICY_FILE, target)
    shutil.copyfile((run / POLICY_FILE).with_suffix(".json"), target.with_suffix(".json"))
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mara_agents.mat.train_all", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float_flag(0.0, low_open=True), help="training minutes per run (or pass --steps N after --)")
    parser.add_argument("--parallel", type=int_flag(1, PARALLEL_MAX), default=2, help="trainings at once")
    parser.add_argument("--threads", type=int_flag(1, THREADS_MAX), default=1, help="torch threads per training (default 1: --parallel 2 fills 2 cores)")
    parser.add_argument("--runs", type=Path, default=Path("runs/mat"), help="run directories (default runs/mat)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int_flag(0, SEED_MAX), default=[0, 1, 2])
    publish_flags = parser.add_mutually_exclusive_group()
    publish_flags.add_argument("--overwrite-shipped", action="store_true",
                            help=f"publish each finished run to the shipped checkpoints ({CHECKPOINTS}), replacing them")
    publish_flags.add_argument("--no-publish", action="store_true", help="train only (the default; kept for older command lines)")
    parser.add_argument("--suffix", default="", help="appended to each run's and checkpoint's name, e.g. --suffix=-pure (with =: the value starts with a dash) for runs without a teacher")
    args, extra = parser.parse_known_args(argv)
    refuse_shipped(parser, "--runs", args.runs, args.overwrite_shipped)
    publishing = args.overwrite_shipped
    # runs inside the shipped checkpoints (allowed above) need the trainer's leave too
    extra = [a for a in extra if a != "--"] + (["--overwrite-shipped"] if shipped(args.runs) else [])
    queue = [(v, s) for s in args.seeds for v in args.variants]
    running: list[tuple[str, Path, subprocess.Popen]] = []
    while queue or running:
        while queue and len(running) < args.parallel:
            variant, seed = queue.pop(0)
            name = f"{variant}{args.suffix}-seed{seed}"
            run = args.runs / name
            if (run / POLICY_FILE).exists():
                print(f"{name}: finished earlier", flush=True)
                if publishing:
                    publish(run, name)
                continue
            run.mkdir(parents=True, exist_ok=True)
            command = [sys.executable, "-m", "mara_agents.mat.ppo", "--out", str(run), "--variant", variant, "--seed", str(seed),
                       "--threads", str(args.threads), *([] if args.minutes is None else ["--minutes", str(args.minutes)]), *extra]
            print(f"{name}: {' '.join(command)}", flush=True)
            running.append((name, run, subprocess.Popen(command, stdout=(run / "train.log").open("a"), stderr=subprocess.STDOUT)))
        time.sleep(5)
        for item in list(running):
            name, run, process = item
            if process.poll() is not None:
                running.remove(item)
                if process.returncode == 0 and (run / POLICY_FILE).exists():
                    print(f"{name}: done" + (f" -> {publish(run, name)}" if publishing else ""), flush=True)
                else:
                    print(f"{name}: FAILED with status {process.returncode} (see {run / 'train.log'})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
