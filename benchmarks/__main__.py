"""``python -m benchmarks SUITE [suite options]``: run one benchmark suite (docs/benchmarks.md lists them).

A suite whose optional dependencies are not installed exits 2 with one line naming the extra to install
(:mod:`core_env.extras`; the suites need ``bench``)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from core_env.extras import MissingExtra, is_optional, missing_extra

#: Suite name -> (module with ``main(argv) -> int``, one-line description).
SUITES = {
    "quick": ("benchmarks.quick", "heuristics and learning-aware allocators on id/train (10 evaluation roots) and the stress scenario, with the slot-relaxed MILP (an upper bound)"),
    "ceilings": ("benchmarks.ceilings", "the MILP offline optimum of every committed evaluation episode (stored with the suites)"),
    "leakage": ("benchmarks.leakage", "leak audit: does the deadline window give the hidden demand away? (window-EDF vs EDF vs oracle, MILP)"),
    "calibration": ("benchmarks.calibration", "FIFO, EDF, clairvoyant, the slot-relaxed MILP and the feasibility relaxation per task set and load"),
    "perf": ("benchmarks.perf", "env-steps/s of the PettingZoo, Gymnasium and batched views vs a minimal ParallelEnv"),
    "budget": ("benchmarks.budget", "does learning help? MARA on the posterior at growing PPO budgets against its teacher (id/train)"),
    "prediction": ("benchmarks.prediction", "Table 1: remaining-demand prediction error per task set and predictor"),
    "paper": ("benchmarks.report:paper", "Table 2: completion of every agent per task set at the training load and heavier loads"),
    "stress": ("benchmarks.report:stress", "Table 3: the stress scenario (FIFO = EDF = 0; ceiling 65%)"),
    "diagnostics": ("benchmarks.report:diagnostics", "Table 4: utilization, wasted node-steps, switches, conflicts, decision latency"),
    "shaping": ("benchmarks.report:shaping", "Table 5: shaped vs sparse reward (MARA vs MARA-sparse)"),
    "falsifier": ("benchmarks.report:falsifier", "heterogeneous node speeds + switching cost, zero-shot: does MARA's margin survive?"),
    "scale": ("benchmarks.report:scale", "more nodes and slots than trained on (N = 8, 16), zero-shot"),
    "libraries": ("benchmarks.libraries", "each RL library integration trained on the small configuration: the tutorials' figures"),
    "training": ("benchmarks.training", "the shipped MAT checkpoints' training curves against EDF, LARA and LARA-FM"),
    "fidelity": ("benchmarks.fidelity", "the schedulers live on worker processes (or Ray) vs the simulator, uncalibrated and calibrated (issue 32)"),
    "restore": ("benchmarks.restore", "rebuild a cell cache from the published outputs (docs/results), to re-render the suites after the ceilings change"),
    "all": ("benchmarks.everything", "every suite, then docs/results.md from the outputs"),
}


def main(argv: Sequence[str] | None = None) -> int:
    listing = "\n".join(f"  {name:11s} {text}" for name, (_, text) in SUITES.items())
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description="Run a benchmark suite.",
                                     epilog=f"suites:\n{listing}", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", help=f"one of: {', '.join(SUITES)}")
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):  # no suite named: the top-level help or usage error
        parser.parse_args(argv)
        parser.error("name a suite first")
    name, rest = argv[0], argv[1:]  # everything after the suite is the suite's own (its --help included)
    if name not in SUITES:
        parser.error(f"unknown suite {name!r}; available suites: {', '.join(SUITES)}")
    module, _, suite = SUITES[name][0].partition(":")
    try:
        loaded = importlib.import_module(module)
        return (loaded.main_for(suite) if suite else loaded.main)(rest)
    except MissingExtra as missing:
        parser.exit(2, f"{parser.prog} {name}: {missing}\n")
    except ModuleNotFoundError as error:  # an optional dependency imported outside a core_env.extras.needs guard
        if not is_optional(error.name):
            raise
        parser.exit(2, f"{parser.prog} {name}: {missing_extra(error.name, module, 'bench')}\n")


if __name__ == "__main__":
    sys.exit(main())
