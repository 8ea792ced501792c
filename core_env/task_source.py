"""The task source: what a served task reports. The seam between the rules and where losses come from.

A step's rules (:mod:`core_env.rules`) need one thing from outside: the loss each served task reports
after the batches it trained this step. In the simulator that is the task's learning curve from the
curve bank (:func:`core_env.rules.curve_report`, inside the compiled step). Any other source — real
training runs on worker nodes, a replay of logged runs — implements :class:`TaskSource` and is passed
to :meth:`core_env.sim.Simulator.step` (``source=``); the step then runs in two compiled halves around
``source.report`` with the same rules, so no second copy of them exists:

1. the nodes' choices are resolved and each serving node's batches set (rules 1–2);
2. ``source.report(sim, served)`` returns the loss of every served task (:class:`Served` says which
   tasks, on which node, how many batches, from which position), or a :class:`Reports` that also says
   how many batches each task really trained (a live source on wall-clock slices: what a node achieved
   in the slice, not what the rules planned); those batches are the tasks' progress from then on;
3. the reports are kept, completions free slots, deadlines pass, tasks arrive, rewards are paid (rules
   2–7).

A source must be deterministic for the step to be reproducible; its reports must be finite floats. If it
raises or reports a non-finite loss, the step is undone (the state is left as before it; a source's own
bookkeeping, such as the curve source's running integral, is its own).
:class:`CurveSource` is the curve bank behind this interface (the same numbers as the compiled step,
tested step for step), the template for a new source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

if TYPE_CHECKING:
    from core_env.sim import Simulator


class Served(NamedTuple):
    """The tasks served this step, one entry per serving node (M entries, (M,) arrays): ``env`` and
    ``slot`` where the task sits, ``node`` serving it, ``task`` its index in ``sim.workloads[env]``,
    ``batches`` it trains now (speed and switching cost applied), ``progress`` the batches it had trained
    before (its position on its run)."""

    env: np.ndarray
    slot: np.ndarray
    node: np.ndarray
    task: np.ndarray
    batches: np.ndarray
    progress: np.ndarray


class Reports(NamedTuple):
    """What a source reports for the M served tasks: ``loss`` (M,) the mean loss over the batches each
    trained, and ``batches`` (M,) how many it trained (finite, >= 0), when that differs from the plan."""

    loss: np.ndarray
    batches: np.ndarray


class TaskSource(Protocol):
    """Supplies the loss each served task reports (module docstring)."""

    def report(self, sim: Simulator, served: Served) -> np.ndarray | Reports:
        """(M,) float64: the loss task ``served.task[j]`` of env ``served.env[j]`` reports after training
        ``served.batches[j]`` batches from position ``served.progress[j]`` (the mean loss over them); or
        :class:`Reports` with the batches each task trained instead."""
        ...


def served_of(sim: Simulator) -> Served:
    """The tasks the first half of a step chose to serve (:func:`core_env.dynamics.start_step`), in
    (env, node) order."""
    a = sim.arrays
    env, node = np.nonzero(a.chosen >= 0)
    slot = a.chosen[env, node]
    return Served(env, slot, node, sim.task[env, slot].copy(), a.batches[env, node].copy(), sim.progress[env, slot].copy())


def _checked(name: str, served: Served, values: np.ndarray, what: str, low: float) -> np.ndarray:
    """``values`` as (M,) float64, each finite and >= ``low`` (ValueError naming the first bad one)."""
    values = np.asarray(values, dtype=np.float64)
    if values.shape != served.env.shape:
        raise ValueError(f"{name} returned {what} of shape {values.shape}, expected ({len(served.env)},): one per served task")
    bad = ~(np.isfinite(values) & (values >= low))
    if np.any(bad):
        j = int(np.flatnonzero(bad)[0])
        rule = "finite" if low == -np.inf else f"finite and >= {low:g}"
        raise ValueError(f"{name} returned {what} {float(values[j])!r} for task {int(served.task[j])} of env {int(served.env[j])}: "
                         f"{what} must be {rule}")
    return values


def check_source(source: object) -> TaskSource | None:
    """``source`` if it is None or has a ``report`` method (TypeError naming what it got otherwise)."""
    if source is not None and not callable(getattr(source, "report", None)):
        raise TypeError(f"task_source must be a TaskSource (an object with a report(sim, served) method), got {type(source).__name__}")
    return source


def reports_of(source: TaskSource, sim: Simulator) -> tuple[np.ndarray, np.ndarray | None]:
    """(B, K) the losses ``source`` reports for the served slots (0 elsewhere), and (B, N) the batches
    each serving node trained (None when the source keeps the plan), checked.

    Raises:
        TypeError: ``source`` has no ``report`` method.
        ValueError: its losses are not M finite numbers, or its batches not M finite numbers >= 0.
    """
    check_source(source)
    served, name = served_of(sim), f"{type(source).__name__}.report"
    reported = source.report(sim, served)
    trained = None
    if isinstance(reported, Reports):
        trained = np.array(sim.arrays.batches)
        trained[served.env, served.node] = _checked(name, served, reported.batches, "batches", 0.0)
        reported = reported.loss
    out = np.zeros((sim.B, sim.K))
    out[served.env, served.slot] = _checked(name, served, reported, "loss", -np.inf)
    return out, trained


def curve_reports_with(sim: Simulator, served: Served, batches: np.ndarray) -> Reports:
    """The curve source's :class:`Reports` when served task ``j`` trains ``batches[j]`` batches instead of
    the plan (a replay of measured services: :mod:`core_env.live.replay`): the mean of each task's curve
    over the batches it trained, and those batches. A service that trained no batch reports the task's
    latest loss, as a live task does (the curve source would report the loss at its position)."""
    batches = np.asarray(batches, dtype=np.float64)
    latest = sim.last_loss[served.env, served.slot].copy()
    sim.arrays.batches[served.env, served.node] = batches
    sim.curve_reports()
    loss = sim.arrays.reported[served.env, served.slot].copy()
    idle = (batches == 0) & (served.progress > 0)
    loss[idle] = latest[idle]
    return Reports(loss, batches.copy())


class CurveSource:
    """The curve bank as a :class:`TaskSource`: each task reports the mean of its learning curve over the
    new batches (:func:`core_env.rules.curve_report`, the compiled step's own source)."""

    def report(self, sim: Simulator, served: Served) -> np.ndarray:
        sim.curve_reports()
        return sim.arrays.reported[served.env, served.slot].copy()


__all__ = ["CurveSource", "Reports", "Served", "TaskSource", "check_source", "curve_reports_with", "reports_of", "served_of"]
