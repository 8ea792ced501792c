"""Benchmarks for core_env and mara_agents, run as ``python -m benchmarks SUITE``.

Every suite writes its results under :data:`RESULTS_DIR` (``results/`` in the working directory, never the
installed package; gitignored in a checkout) or a directory of the caller's (``--out``) as
``SUITE.json`` (and, for per-episode tables, ``SUITE.csv``). Files are written to a temporary name and
renamed into place, so a reader never sees a half-written file and a failed run leaves the old one.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core_env import npz

#: Relative, so it resolves against the working directory when a suite runs (an installed package's own
#: folder, e.g. site-packages, is never written).
RESULTS_DIR = Path("results")
#: Every file a suite writes goes through :func:`core_env.npz.write_atomic` (text as UTF-8, bytes as given): a
#: temporary file beside it renamed into place, so a reader never sees a half-written file and a failure leaves the old one.
write_atomic = write_atomic_bytes = npz.write_atomic


def figure_png(fig: Any, **savefig: Any) -> bytes:
    """A matplotlib figure rendered to bytes, PNG unless ``format=`` says otherwise (render everything first, then
    write: see :func:`write_atomic`)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, **{"format": "png", **savefig})
    return buffer.getvalue()


def save_figure(fig: Any, path: Path, **savefig: Any) -> Path:
    """``fig.savefig`` to ``path`` (its suffix the format) atomically (a reader never sees a half-written file; a failure leaves the old one)."""
    return write_atomic(path, figure_png(fig, format=Path(path).suffix.lstrip(".") or "png", **savefig))


def write_results(name: str, payload: Mapping[str, Any], rows: Sequence[Mapping[str, Any]] | None = None, out: Path | None = None) -> list[Path]:
    """Write ``payload`` to ``OUT/name.json`` and ``rows`` (if given) to ``OUT/name.csv`` (OUT defaults to
    :data:`RESULTS_DIR`), each atomically."""
    directory = Path(out) if out is not None else RESULTS_DIR
    text = json.dumps(payload, indent=1) + "\n"  # serialised before anything is written
    table = None
    if rows:
        buffer = io.StringIO(newline="")
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        table = buffer.getvalue()
    paths = [write_atomic(directory / f"{name}.json", text)]
    if table is not None:
        paths.append(write_atomic(directory / f"{name}.csv", table))
    return paths


def add_out(parser: Any) -> None:
    """The ``--out DIR`` option every suite has: where its outputs go (nothing is written elsewhere)."""
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help=f"output directory (default {RESULTS_DIR})")


def add_suite_selection(parser: Any) -> None:
    """``--task-sets`` and ``--loads`` options choosing committed evaluation suites (default: all)."""
    from core_env.config import LOADS
    from core_env.workload import SUITE_TASK_SETS

    parser.add_argument("--task-sets", nargs="+", default=list(SUITE_TASK_SETS), choices=SUITE_TASK_SETS, help="default: all")
    parser.add_argument("--loads", nargs="+", default=list(LOADS), choices=list(LOADS), help="default: all")


def add_bank_selection(parser: Any) -> None:
    """``--task-set BANK.npz [--roots R] [--episodes E]``: a bank file of your own curves in place of the
    committed task sets (:func:`bank_or_task_sets`), its workloads drawn by the suites' seeding scheme."""
    from core_env.workload import SUITE_EPISODES, SUITE_ROOTS

    parser.add_argument("--task-set", default=None, metavar="BANK.npz",
                        help="a bank file of your own curves in place of --task-sets (fits on its train split, scores on its eval split)")
    parser.add_argument("--roots", type=int, default=SUITE_ROOTS, help=f"evaluation roots of a bank file (default {SUITE_ROOTS})")
    parser.add_argument("--episodes", type=int, default=SUITE_EPISODES, help=f"episodes per root of a bank file (default {SUITE_EPISODES})")


def bank_or_task_sets(parser: Any, args: Any) -> list[str]:
    """``[args.task_set]`` when a bank file is given (checked: ``parser.error`` names a bad file or count), else ``args.task_sets``."""
    if args.task_set is None:
        return list(args.task_sets)
    from core_env.config import EnvConfig

    if args.roots < 1 or args.episodes < 1:
        parser.error(f"--roots and --episodes must be >= 1, got {args.roots} and {args.episodes}")
    try:
        EnvConfig(task_set=args.task_set)
    except ValueError as exc:
        parser.error(str(exc))
    return [args.task_set]


def add_trace(parser: Any) -> None:
    """``--trace PATH [--trace-layout L] [--step-seconds S]``: replay a CSV job trace (:mod:`core_env.trace`)."""
    from core_env.trace import LAYOUTS

    parser.add_argument("--trace", default=None, metavar="TRACE.csv",
                        help="replay this job trace's arrivals (and deadlines, targets, rates where given) on the task set "
                             "(--task-set, default id); each root draws the missing fields with its own seed")
    parser.add_argument("--trace-layout", choices=LAYOUTS, default="generic", help="the trace's columns and units (default generic)")
    parser.add_argument("--step-seconds", type=float, default=None,
                        help="trace seconds per environment step (default: the layout's; see core_env.trace.read_trace)")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def evaluate(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run your own agent through a suite: :func:`benchmarks.api.evaluate` (imported on first use)."""
    from benchmarks.api import evaluate as run

    return run(*args, **kwargs)
