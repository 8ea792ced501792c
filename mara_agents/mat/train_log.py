"""The trainer's logs and stop signals.

:class:`TrainLog` writes ``OUT/metrics.jsonl`` (one row per PPO update, one for the warm start), mirrors the
rows to TensorBoard under ``OUT/tb`` and shows a tqdm bar (neither when quiet). On a resume it first drops
the rows logged after the state it resumes from (:func:`trim_metrics`). :func:`stop_signals` turns Ctrl-C
and SIGTERM into a clean stop (checkpoint, then exit) while a run trains.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from core_env.extras import MissingExtra, needs
from core_env.npz import write_atomic
from mara_agents.mat.train_state import METRICS_FILE


def trim_metrics(path: Path, updates: int, pretrained: bool) -> None:
    """Drop the metrics.jsonl rows written after the state we resume from (a run killed between two
    saves logged updates the state does not hold), so the log stays monotone in ``updates``."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:  # a line cut short by the kill
            continue
        if ("pretraining" in row and pretrained) or row.get("updates", math.inf) <= updates:
            kept.append(line)
    write_atomic(path, "".join(line + "\n" for line in kept).encode())


def tensorboard(out: Path):
    """A SummaryWriter under ``out/tb``; without tensorboard None, and a line on stderr saying that the run
    writes no TensorBoard logs and which extra adds them."""
    try:
        with needs(__name__, "tensorboard"):
            import tensorboard  # noqa: F401  (what torch.utils.tensorboard needs)
            from torch.utils.tensorboard import SummaryWriter
    except MissingExtra as missing:
        print(f"no TensorBoard logs: {missing}", file=sys.stderr)
        return None
    return SummaryWriter(str(out / "tb"))


class TrainLog:
    """``out/metrics.jsonl`` (trimmed to a resumed state of ``updates`` updates), TensorBoard and a progress bar
    (neither when ``quiet``); a context manager that closes them."""

    def __init__(self, out: Path, quiet: bool, updates: int, pretrained: bool) -> None:
        self.path, self.quiet, self.bar = out / METRICS_FILE, quiet, None
        trim_metrics(self.path, updates, pretrained)
        self.writer = None if quiet else tensorboard(out)

    def __enter__(self) -> TrainLog:
        return self

    def __exit__(self, *_: Any) -> None:
        for closing in (self.bar, self.writer):
            if closing is not None:
                closing.close()

    def progress(self, total: int | None, initial: int, desc: str) -> None:
        """Show a tqdm bar of env-steps (not when quiet)."""
        if not self.quiet:
            with needs(__name__):
                from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="env-step", dynamic_ncols=True, desc=desc)

    def _write(self, row: dict[str, Any]) -> None:
        with open(self.path, "a") as handle:
            handle.write(json.dumps(row) + "\n")

    def pretraining(self, report: dict[str, Any], elapsed: float, completion: float, teacher: str) -> None:
        """The warm start's row: the cloning report and the cloned policy's evaluation."""
        self._write({"pretraining": report, "elapsed": elapsed, "eval_completion": completion})
        if self.bar is not None:
            self.bar.write(f"teacher {teacher}: {report}; cloned policy eval {completion:.3f}")

    def update(self, metrics: dict[str, Any], env_steps: int, elapsed: float, completion: float | None) -> None:
        """A PPO update's row (``completion``: the latest evaluation, shown on the bar)."""
        self._write(metrics)
        if self.writer is not None:
            for key, value in metrics.items():
                if key not in ("env_steps", "updates"):
                    self.writer.add_scalar(key, value, env_steps)
        if self.bar is not None:
            self.bar.update(env_steps - self.bar.n)
            shown = {"sps": f"{metrics['sps']:.0f}", "kl": f"{metrics['approx_kl']:.4f}", "ev": f"{metrics['explained_variance']:.2f}",
                     "ent": f"{metrics['entropy']:.2f}", "min": f"{elapsed / 60:.1f}"}
            if "train_completion" in metrics:
                shown["train"] = f"{metrics['train_completion']:.3f}"
            if completion is not None:
                shown["eval"] = f"{completion:.3f}"
            self.bar.set_postfix(shown, refresh=False)


class Stoppable(Protocol):
    stop_requested: bool

    def request_stop(self) -> None: ...


@contextlib.contextmanager
def stop_signals(run: Stoppable) -> Iterator[None]:
    """While inside: Ctrl-C and SIGTERM call ``run.request_stop()`` (a clean stop: checkpoint, then exit); a
    second Ctrl-C interrupts at once. Outside the main thread nothing is installed."""
    previous = {}

    def on_signal(signum: int, frame: Any) -> None:
        if run.stop_requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        run.request_stop()

    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[signum] = signal.signal(signum, on_signal)
        except ValueError:  # not the main thread
            pass
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
