"""Live measurements replayed in the simulator, as task sources (:mod:`core_env.task_source`).

- :class:`TraceSource` replays one recorded live episode: each service trains exactly the batches it
  trained live (:attr:`core_env.live.LiveSource.records`), on the recorded curves. With the same agent and
  workload, an engine that models everything but throughput faithfully reproduces the live episode
  exactly; a service the record does not have (the agent chose otherwise than live) raises
  :class:`LeftTheRecord` (a ValueError).
- :class:`SpreadSource` is the calibrated service model with its measured spread: each service trains
  the batches the calibrated simulator plans (family rate × node speed × (1 − switching cost if
  switched)) times a ratio drawn from the calibration's measured spread for its kind of service (a task's
  first, a plain or a switched service: :attr:`core_env.live.calibration.Calibration.spread`), from a
  seeded generator.

Both report the mean of each task's curve over the batches it trained
(:func:`core_env.task_source.curve_reports_with`), as the simulator's own curve source does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from core_env.live.calibration import KINDS, Calibration, service_kind
from core_env.task_source import Reports, Served, curve_reports_with

if TYPE_CHECKING:
    from core_env.sim import Simulator


class LeftTheRecord(ValueError):
    """A trace replay served a task the recorded episode did not serve then (the agent chose otherwise than live)."""


class TraceSource:
    """One live episode's services replayed exactly (module docstring): ``records`` are its rows of
    :attr:`core_env.live.LiveSource.records` (one episode; ValueError for several)."""

    def __init__(self, records: Sequence[Mapping[str, Any]]) -> None:
        episodes = sorted({int(r.get("episode", 0)) for r in records})
        if len(episodes) > 1:
            raise ValueError(f"TraceSource replays one episode's records, got episodes {episodes}")
        self._trained = {(int(r["env"]), int(r["t"]), int(r["node"]), int(r["task"])): float(r["trained"]) for r in records}

    def report(self, sim: Simulator, served: Served) -> Reports:
        trained = np.empty(len(served.env))
        for j, (env, node, task) in enumerate(zip(served.env.tolist(), served.node.tolist(), served.task.tolist())):
            key = (env, int(sim.t[env]), node, task)
            if key not in self._trained:
                raise LeftTheRecord(f"the replay left the recorded episode: node {node} of env {env} serves task {task} at t = {key[1]}, "
                                 "which the record does not (the agent chose otherwise than live)")
            trained[j] = self._trained[key]
        return curve_reports_with(sim, served, trained)


class SpreadSource:
    """The calibrated service model with its measured spread (module docstring); ``seed`` seeds the draws.
    Use it with the workload and config :func:`core_env.live.calibration.calibrated` returns."""

    def __init__(self, calibration: Calibration, seed: Any) -> None:
        missing = sorted(set(KINDS) - set(calibration.spread))
        if missing:
            raise ValueError(f"the calibration has no measured spread for {missing} services: calibrate it with calibrate()")
        self._quantiles = {kind: np.asarray(calibration.spread[kind], np.float64) for kind in KINDS}
        self._grid = {kind: np.linspace(0.0, 1.0, q.size) for kind, q in self._quantiles.items()}
        self._rng = np.random.default_rng(seed)
        self._last: dict[tuple[int, int, int], tuple[int, int]] = {}  # (env, episode, task) -> (node, t) of its last service

    def report(self, sim: Simulator, served: Served) -> Reports:
        ratio = np.empty(len(served.env))
        draws = self._rng.random(len(served.env))
        for j, (env, node, task) in enumerate(zip(served.env.tolist(), served.node.tolist(), served.task.tolist())):
            key, t = (env, int(sim.episodes_started[env]), task), int(sim.t[env])
            kind = service_kind(self._last.get(key), node, t)
            self._last[key] = (node, t)
            ratio[j] = np.interp(draws[j], self._grid[kind], self._quantiles[kind])
        return curve_reports_with(sim, served, served.batches * ratio)


__all__ = ["LeftTheRecord", "SpreadSource", "TraceSource"]
