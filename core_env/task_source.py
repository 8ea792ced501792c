"""The task source: what a served task reports. The seam between the rules and where losses come from.

A step's rules (:mod:`core_env.rules`) need one thing from outside: the loss each served task reports
after the batches it trained this step. In the simulator that is the task's learning curve from the
curve bank (:func:`core_env.rules.curve_report`, inside the compiled step). Any other source — real
training runs on worker nodes, a replay of logged runs — implements :class:`TaskSource` and is passed
to :meth:`core_env.sim.Simulator.step` (``source=``); the step then runs in two compiled halves around
``source.report`` with the same rules, so no second copy of them exists:

1. the nodes' choices are resolved and each serving node's batches set (rules 1–2);
2. ``source.report(sim, served)`` returns the loss of every served task (:class:`Served` says which
   tasks, on which node, how many batches, from which position);
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

from core_env import dynamics

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


class TaskSource(Protocol):
    """Supplies the loss each served task reports (module docstring)."""

    def report(self, sim: Simulator, served: Served) -> np.ndarray:
        """(M,) float64: the loss task ``served.task[j]`` of env ``served.env[j]`` reports after training
        ``served.batches[j]`` batches from position ``served.progress[j]`` (the mean loss over them)."""
        ...


def served_of(sim: Simulator) -> Served:
    """The tasks the first half of a step chose to serve (:func:`core_env.dynamics.start_step`), in
    (env, node) order."""
    a = sim.arrays
    env, node = np.nonzero(a.chosen >= 0)
    slot = a.chosen[env, node]
    return Served(env, slot, node, sim.task[env, slot].copy(), a.batches[env, node].copy(), sim.progress[env, slot].copy())


def reports_of(source: TaskSource, sim: Simulator) -> np.ndarray:
    """(B, K) the reports of ``source`` for the served slots (0 elsewhere), checked.

    Raises:
        TypeError: ``source`` has no ``report`` method.
        ValueError: its reports are not M finite numbers.
    """
    if not callable(getattr(source, "report", None)):
        raise TypeError(f"source must be a TaskSource (an object with a report(sim, served) method), got {type(source).__name__}")
    served = served_of(sim)
    losses = np.asarray(source.report(sim, served), dtype=np.float64)
    if losses.shape != served.env.shape:
        raise ValueError(f"{type(source).__name__}.report returned shape {losses.shape}, expected ({len(served.env)},): one loss per served task")
    if not np.all(np.isfinite(losses)):
        bad = int(np.flatnonzero(~np.isfinite(losses))[0])
        raise ValueError(f"{type(source).__name__}.report returned loss {float(losses[bad])!r} for task {int(served.task[bad])} of env "
                         f"{int(served.env[bad])}: losses must be finite")
    out = np.zeros((sim.B, sim.K))
    out[served.env, served.slot] = losses
    return out


class CurveSource:
    """The curve bank as a :class:`TaskSource`: each task reports the mean of its learning curve over the
    new batches (:func:`core_env.rules.curve_report`, the compiled step's own source)."""

    def report(self, sim: Simulator, served: Served) -> np.ndarray:
        dynamics.curve_reports(sim._state)
        return sim.arrays.reported[served.env, served.slot].copy()


__all__ = ["CurveSource", "Served", "TaskSource", "reports_of", "served_of"]
