"""Command line for curve banks: ``python -m core_env.curves {import,info} ...``.

``import`` reads your training curves (CSV, ``.npz`` or TensorBoard event files), prints every
transformation applied on the way (also recorded in the bank's manifest), and writes a versioned bank
file; ``info`` verifies a bank file against its checksums and prints its manifest summary. See
:mod:`core_env.curves.importer` and docs/tutorials/bring-your-own-curves.md.

Exit status: 0 on success, 2 on a bad source or bank file (the message names the file and the row or
run), or a missing optional package.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from core_env.curves.importer import DEFAULT_FAMILY, FORMATS, MAX_POINTS, import_curves, read_bank_manifest, write_bank


def _summary(manifest: dict[str, Any]) -> list[str]:
    """The lines both subcommands print about a bank."""
    src, counts = manifest["source"], manifest["counts"]
    lines = [f"source: {src['path']} ({src['format']}, sha256 {src['sha256'][:16]}...)"]
    origin = ("no family in the source" if manifest["family_source"] == "default" else f"families from the {manifest['family_source']}")
    lines.append(f"runs: {counts['runs']} in {len(manifest['families'])} famil{'y' if len(manifest['families']) == 1 else 'ies'} "
                 f"({origin}), {counts['points']:,} points, one point = {manifest['steps']['unit']} step(s)")
    n_div = sum(1 for r in manifest["runs"] if r["flags"] & manifest["flag_rule"]["bits"]["diverged"])
    n_nl = sum(1 for r in manifest["runs"] if r["flags"] & manifest["flag_rule"]["bits"]["non_learner"])
    lines.append(f"flags ({manifest['flag_rule']['function']} v{manifest['flag_rule']['version']}): {n_div} diverged, {n_nl} non-learner(s)")
    transformations = manifest["transformations"]
    lines.append("transformations:" + ("" if transformations else " none"))
    lines += [f"  - {t['message']}" for t in transformations]
    if manifest["notes"]:
        lines.append("notes:")
        lines += [f"  - {n}" for n in manifest["notes"]]
    split = manifest["split"]
    lines.append(f"split (seed {split['seed']}, eval share {split['eval_share']:g}, stratified by family): "
                 f"{counts['train']} train / {counts['eval']} eval")
    width = max(len("family"), *(len(f) for f in manifest["families"]))
    lines.append(f"  {'family':<{width}}  runs  train  eval  diverged  non-learner")
    for fam, info in manifest["families"].items():
        lines.append(f"  {fam:<{width}}  {info['runs']:>4}  {info['train']:>5}  {info['eval']:>4}  {info['diverged']:>8}  {info['non_learner']:>11}")
    return lines


def _import(args: argparse.Namespace) -> int:
    imported = import_curves(
        args.source, args.format, tag=args.tag, eval_share=args.eval_share, seed=args.seed, family_column=args.family_column,
        run_column=args.run_column, step_column=args.step_column, loss_column=args.loss_column, default_family=args.family,
        step_unit=args.step_unit, drop_bad_runs=args.drop_bad_runs, allow_pickle=args.allow_pickle, name=args.name,
        max_points=args.max_points,
    )
    digest = write_bank(args.out, imported)
    for line in _summary(imported.manifest):
        print(line)
    print(f"wrote {args.out} (format {imported.manifest['format']} v{imported.manifest['format_version']}, sha256 {digest[:16]}...)")
    return 0


def _info(args: argparse.Namespace) -> int:
    manifest = read_bank_manifest(args.bank)
    print(f"{args.bank}: {manifest['format']} v{manifest['format_version']}, name {manifest['name']!r}, checksums OK")
    for line in _summary(manifest):
        print(line)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core_env.curves", description="Import training curves into a versioned bank file.")
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="read curves from CSV / npz / TensorBoard and write a bank file",
                         description="Read curves and write a bank file; every transformation is printed and recorded in the manifest.")
    imp.add_argument("source", help="a CSV file, an .npz file, or a TensorBoard log directory / event file")
    imp.add_argument("--out", required=True, help="the bank file to write (.npz)")
    imp.add_argument("--format", choices=FORMATS, default=None, help="source format (default: from the path)")
    imp.add_argument("--tag", default=None, help="TensorBoard scalar tag (optional when the files hold exactly one)")
    imp.add_argument("--eval-share", type=float, default=0.3, help="share of each family's runs in the eval split (default 0.3)")
    imp.add_argument("--seed", type=int, default=0, help="seed of the train/eval split (default 0)")
    imp.add_argument("--family-column", default=None, help="CSV column holding the family (default: 'family' if present)")
    imp.add_argument("--run-column", default="run_id", help="CSV column holding the run id (default run_id)")
    imp.add_argument("--step-column", default="step", help="CSV column holding the step (default step)")
    imp.add_argument("--loss-column", default="loss", help="CSV column holding the loss (default loss)")
    imp.add_argument("--family", default=DEFAULT_FAMILY, help=f"family of runs the source gives none (default {DEFAULT_FAMILY!r})")
    imp.add_argument("--step-unit", type=int, default=None, help="steps per curve point (default: gcd of the logged step differences)")
    imp.add_argument("--drop-bad-runs", action="store_true", help="drop runs with < 2 finite points instead of failing (recorded)")
    imp.add_argument("--allow-pickle", action="store_true", help="allow ragged object arrays in an .npz (trusted files only)")
    imp.add_argument("--name", default=None, help="bank name (default: the source's name)")
    imp.add_argument("--max-points", type=int, default=MAX_POINTS, help=f"refuse more points than this after resampling (default {MAX_POINTS:,})")
    imp.set_defaults(func=_import)
    info = sub.add_parser("info", help="verify a bank file and print its manifest summary")
    info.add_argument("bank", help="a bank file written by `import`")
    info.set_defaults(func=_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, OSError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
