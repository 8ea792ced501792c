"""Live measurements replayed in the simulator, as task sources (:mod:`core_env.task_source`).

- :class:`TraceSource` replays one recorded live episode: each service trains exactly the batches it
  trained live (:attr:`core_env.live.LiveSource.records`), on the recorded curves. With the same agent and
  workload, an engine that models everything but throughput faithfully reproduces the live episode
  exactly; a service the record does not have (the agent chose otherwise than live) raises
  :class:`LeftTheRecord` (a ValueError).
- :class:`SpreadSource` is the calibrated service model with its measured spread: each service trains
  the batches the calibrated simulator plans (run rate × node speed × (1 − switching cost if switched))
  times the machine's speed at that step on a path drawn per episode from the recorded ones
  (:attr:`core_env.live.calibration.Calibration.paths`: slow steps come in runs and slow every node at
  once) times a ratio drawn from the spread left for its kind of service (a task's first, a plain or a
  switched service: :attr:`core_env.live.calibration.Calibration.spread`), all from a seeded generator.

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
    Use it with the workload and config :func:`core_env.live.calibration.calibrated` returns. A calibration
    without paths leaves the machine's speed at 1."""

    def __init__(self, calibration: Calibration, seed: Any) -> None:
        missing = sorted(set(KINDS) - set(calibration.spread))
        if missing:
            raise ValueError(f"the calibration has no measured spread for {missing} services: calibrate it with calibrate()")
        self._quantiles = {kind: np.asarray(calibration.spread[kind], np.float64) for kind in KINDS}
        self._grid = {kind: np.linspace(0.0, 1.0, q.size) for kind, q in self._quantiles.items()}
        self._paths = [np.asarray(path, np.float64) for path in calibration.paths if len(path)]
        self._rng = np.random.default_rng(seed)
        self._last: dict[tuple[int, int, int], tuple[int, int]] = {}  # (env, episode, task) -> (node, t) of its last service
        self._path_of: dict[tuple[int, int], np.ndarray] = {}  # (env, episode) -> the machine path it plays on

    def report(self, sim: Simulator, served: Served) -> Reports:
        ratio = np.empty(len(served.env))
        draws = self._rng.random(len(served.env))
        for j, (env, node, task) in enumerate(zip(served.env.tolist(), served.node.tolist(), served.task.tolist())):
            key, t = (env, int(sim.episodes_started[env]), task), int(sim.t[env])
            kind = service_kind(self._last.get(key), node, t)
            self._last[key] = (node, t)
            ratio[j] = np.interp(draws[j], self._grid[kind], self._quantiles[kind]) * self._machine(key[:2], t)
        return curve_reports_with(sim, served, served.batches * ratio)

    def _machine(self, episode: tuple[int, int], t: int) -> float:
        """The machine's speed at step ``t`` of an episode: its path (drawn at the episode's first service), the last value past its end."""
        if not self._paths:
            return 1.0
        if episode not in self._path_of:
            self._path_of[episode] = self._paths[int(self._rng.integers(len(self._paths)))]
        path = self._path_of[episode]
        return float(path[min(t, path.size - 1)])


__all__ = ["LeftTheRecord", "SpreadSource", "TraceSource"]
