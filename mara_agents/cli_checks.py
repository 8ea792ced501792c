"""Checks shared by the training command lines (``train_fm``, ``train_pfn``, ``mara_agents.mat.ppo``,
``mara_agents.mat.train_all``): range-checked flag values (:func:`int_flag`, :func:`float_flag`: a bad value exits 2
with argparse's error line naming the flag), and outputs that never land in the package's shipped checkpoints
(:data:`~mara_agents.checkpoint_files.SHIPPED_DIR`) unless ``--overwrite-shipped`` says so (:func:`refuse_shipped`,
:func:`output_file`)."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path

from mara_agents.checkpoint_files import SHIPPED_DIR

#: The largest seed (numpy's and torch's seeding take any integer in [0, 2**32 - 1]).
SEED_MAX = 2**32 - 1
#: The most examples a trainer simulates per set (each holds a history: a few KiB).
EXAMPLES_MAX = 10**7
#: The most optimizer steps, batch rows and torch threads a command line may ask for.
STEPS_MAX, BATCH_MAX, THREADS_MAX = 10**9, 10**6, 1024
#: Where a training CLI writes by default: under build/ of the working directory, never the package.
BUILD_DIR = Path("build")


def int_flag(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type=``: an integer in [low, high]; anything else exits 2 with argparse's error line naming the flag."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}], got {text!r}")
        return value
    return parse


def float_flag(low: float, high: float = math.inf, low_open: bool = False) -> Callable[[str], float]:
    """An argparse ``type=``: a finite number in [low, high] ((low, high] with ``low_open``); NaN, inf and anything
    else exit 2 with argparse's error line naming the flag."""
    bounds = (f"> {low}" if low_open else f">= {low}") + ("" if high == math.inf else f" and <= {high}")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not (value > low if low_open else value >= low) or value > high:
            raise argparse.ArgumentTypeError(f"must be a finite number {bounds}, got {text!r}")
        return value
    return parse


def shipped(path: Path) -> bool:
    """Whether ``path`` lies inside the package's shipped checkpoints (``mara_agents/checkpoints/``)."""
    return Path(path).resolve().is_relative_to(SHIPPED_DIR.resolve())


def add_overwrite_flag(parser: argparse.ArgumentParser) -> None:
    """``--overwrite-shipped``: allow ``--out`` inside the shipped checkpoints (:func:`refuse_shipped`)."""
    parser.add_argument("--overwrite-shipped", action="store_true",
                        help=f"allow --out inside the package's shipped checkpoints ({SHIPPED_DIR}), replacing them")


def refuse_shipped(parser: argparse.ArgumentParser, flag: str, path: Path, allowed: bool) -> None:
    """Exit 2 (``parser.error``) naming ``flag`` when ``path`` lies inside the shipped checkpoints and not ``allowed``
    (``--overwrite-shipped`` was not given)."""
    if shipped(path) and not allowed:
        parser.error(f"{flag} {path} is inside the shipped checkpoints {SHIPPED_DIR}: pass --overwrite-shipped to write there")


def unwritable(directory: Path) -> str | None:
    """Why ``directory`` cannot be made or written (a probe file is written and removed), or None when it can;
    checked before any training, so a bad output fails at once, not after hours."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        return str(error.strerror or error)
    return None


def add_output_flags(parser: argparse.ArgumentParser, default: Path) -> None:
    """``--out`` (default ``default``, under build/) and ``--overwrite-shipped`` (see :func:`output_file`)."""
    parser.add_argument("--out", type=Path, default=default,
                        help=f"weights file, or a directory to write {default.name} into; its manifest is written beside it (default %(default)s)")
    add_overwrite_flag(parser)


def output_file(parser: argparse.ArgumentParser, args: argparse.Namespace, name: str) -> Path:
    """The weights file ``--out`` names (a directory: ``name`` inside it), checked before any training: exit 2 naming
    ``--out`` when it lies inside the shipped checkpoints without ``--overwrite-shipped`` or cannot be written."""
    out = args.out / name if args.out.is_dir() else args.out
    refuse_shipped(parser, "--out", out, args.overwrite_shipped)
    reason = unwritable(out.parent)
    if reason is not None:
        parser.error(f"--out {out} cannot be written: {reason}")
    return out
