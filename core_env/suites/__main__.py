"""Evaluation suites on the command line: ``python -m core_env.suites [generate ...]``.

``python -m core_env.suites`` (no arguments) regenerates the committed suites: writes
``core_env/data/suites/{task_set}__{load}.npz`` (10 roots × 4 episodes each, on the corpus's eval
curves) and their sha256 manifest; the files come out byte-identical from the same corpus and code.

``python -m core_env.suites generate --task-set BANK.npz --loads train x2 --out DIR`` writes suites of
any task set (a bank file made by ``python -m core_env.curves import``, or a built-in name) to your own
directory, by the same recipe and seeding scheme as the committed ones
(:func:`write_suite`): ``DIR/{name}__{load}.npz`` plus ``DIR/manifest.json`` with
their sha256. Replay them with ``env.reset(options={"suite": "eval", "suite_dir": DIR, "root": r,
"episode": e})``. Options: ``--roots`` (10), ``--episodes`` (4), ``--seed`` (the committed suites'
seed), ``--n-nodes`` (4), ``--arrival-steps`` (500) and ``--recipe`` (a JSON object of
:class:`core_env.recipe.TaskRecipe` fields, or the path of a JSON file holding one; recorded in each
file's meta).

Exit status: 0 on success, 2 on a bad task set, bank file, load or recipe (the message says which).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from core_env.config import LOADS, parse_load
from core_env.suites import SUITE_EPISODES, SUITE_MANIFEST, SUITE_NODES, SUITE_ROOTS, SUITE_SEED, _read_manifest, _read_suite, write_suite, write_suites


def _load(text: str) -> str | float:
    try:
        return parse_load(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _recipe(text: str) -> dict:
    source = text
    if not text.lstrip().startswith("{"):
        path = Path(text)
        if not path.is_file():
            raise argparse.ArgumentTypeError(f"--recipe must be a JSON object or a JSON file, got {text!r}")
        source = path.read_text()
    try:
        value = json.loads(source)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--recipe is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"--recipe must be a JSON object of TaskRecipe fields, got {type(value).__name__}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core_env.suites", description="Regenerate the committed evaluation suites (no arguments), "
                                     "or generate suites of any task set into a directory of your own.")
    sub = parser.add_subparsers(dest="command")
    gen = sub.add_parser("generate", help="write evaluation suites of a bank file (or a built-in task set) to a directory",
                         description="Write DIR/{name}__{load}.npz and DIR/manifest.json by the committed suites' recipe and seeding scheme.")
    gen.add_argument("--task-set", required=True, help="a bank file (python -m core_env.curves import ... --out BANK.npz) or id / rl_ood / vit_ood")
    gen.add_argument("--loads", nargs="+", type=_load, default=["train"], help=f"loads: {' '.join(LOADS)} or intensities in (0, 1] (default train)")
    gen.add_argument("--out", type=Path, required=True, help="the directory to write (created if needed)")
    gen.add_argument("--roots", type=int, default=SUITE_ROOTS, help=f"evaluation roots (default {SUITE_ROOTS})")
    gen.add_argument("--episodes", type=int, default=SUITE_EPISODES, help=f"episodes per root (default {SUITE_EPISODES})")
    gen.add_argument("--seed", type=int, default=SUITE_SEED, help=f"suite seed (default {SUITE_SEED}, the committed suites')")
    gen.add_argument("--n-nodes", type=int, default=SUITE_NODES, help=f"nodes the arrivals are drawn for (default {SUITE_NODES})")
    gen.add_argument("--arrival-steps", type=int, default=500, help="arrival window (default 500)")
    gen.add_argument("--recipe", type=_recipe, default=None, help="TaskRecipe fields as a JSON object or a JSON file (default: the v1 recipe)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command is None:
        for name, digest in write_suites().items():
            print(f"{digest}  {name}")
        return 0
    try:
        for load in args.loads:
            path = write_suite(args.task_set, load, args.out, roots=args.roots, episodes=args.episodes, seed=args.seed, recipe=args.recipe,
                               arrival_steps=args.arrival_steps, n_nodes=args.n_nodes)
            arrays, meta = _read_suite(path)
            digest = _read_manifest(path.parent / SUITE_MANIFEST.name)[path.name]
            print(f"{digest}  {path}  ({meta['task_set']}/{meta['load']}: {meta['roots']} roots x {meta['episodes']} episodes, "
                  f"{int(arrays['episode_offsets'][-1])} tasks, N = {meta['n_nodes']}, seed {meta['seed']})")
    except (ValueError, TypeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
