"""``python -m benchmarks SUITE [suite options]``: run one benchmark suite (see DESIGN.md §5)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: Suite name -> (module with ``main(argv) -> int``, one-line description).
SUITES = {
    "quick": ("benchmarks.quick", "heuristics on id/train (5 evaluation roots) and the stress scenario"),
    "calibration": ("benchmarks.calibration", "FIFO, EDF, clairvoyant and the feasibility bound per task set and load"),
    "perf": ("benchmarks.perf", "env-steps/s of the PettingZoo, Gymnasium and batched views vs a minimal ParallelEnv"),
    "prediction": ("benchmarks.prediction", "Table 1: remaining-demand prediction error per task set and predictor"),
}


def main(argv: Sequence[str] | None = None) -> int:
    listing = "\n".join(f"  {name:8s} {text}" for name, (_, text) in SUITES.items())
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description="Run a benchmark suite.",
                                     epilog=f"suites:\n{listing}", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", help=f"one of: {', '.join(SUITES)}")
    args, rest = parser.parse_known_args(argv)
    if args.suite not in SUITES:
        parser.error(f"unknown suite {args.suite!r}; available suites: {', '.join(SUITES)}")
    return importlib.import_module(SUITES[args.suite][0]).main(rest)


if __name__ == "__main__":
    sys.exit(main())
