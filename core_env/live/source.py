"""The live task source: served tasks train for real and report their own losses (issue 32, first part).

:class:`LiveSource` is a :class:`core_env.task_source.TaskSource`: pass it to
:meth:`core_env.sim.Simulator.step` (``source=``) and every served task of a step trains the whole
optimizer steps its batches reach (``floor(progress + batches) − floor(progress)``, so fractional
batches accumulate as in the simulator) and reports their mean loss; a step that completes no whole
batch reports the task's latest loss (its first service always trains at least one). The rules —
choices, slots, deadlines, completion at the target, rewards — are the engine's own.

Which run a workload's task is: ``specs[c]`` for a task on curve ``c`` of the workload's bank.
:func:`record_bank` records every spec's run offline into a :class:`~core_env.curves.CurveBank` (curve
``c`` = run ``specs[c]``'s losses, one per batch), so the same workload replays in the simulator on the
recorded curves: with whole batches per step the live and simulated episodes agree (tests/test_live.py).

So far the runs train in this process, one after the other (the nodes' work is serialised); worker
processes, Ray actors, wall-clock slices and measured migration costs are the rest of issue 32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from core_env.curves import CurveBank
from core_env.live.tasks import LiveTask, TaskSpec, build_task
from core_env.task_source import Served

if TYPE_CHECKING:
    from core_env.sim import Simulator


def record_bank(name: str, specs: Sequence[TaskSpec], steps: int | None = None) -> CurveBank:
    """A curve bank of the runs ``specs``, each trained once to its length (``steps`` optimizer steps when
    given) in one go: curve ``c`` is run ``specs[c]``'s per-batch losses, labelled by its family."""
    curves = []
    for spec in specs:
        task = build_task(spec)
        length = getattr(task, "steps", None) if steps is None else steps
        if length is None:
            raise ValueError(f"give steps: task {spec.family!r} has no length of its own")
        if steps is not None and hasattr(task, "steps"):
            task.steps = int(steps)
        curves.append(task.train(int(length)))
    return CurveBank(name, curves, [spec.family for spec in specs])


class LiveSource:
    """Served tasks train for real (module docstring). ``specs[c]``: the run behind curve ``c``;
    ``steps``: every run's length (default: its family's)."""

    def __init__(self, specs: Sequence[TaskSpec], steps: int | None = None) -> None:
        if not specs:
            raise ValueError("specs must name at least one run")
        self.specs, self.steps = list(specs), steps
        self._tasks: dict[tuple[int, int], LiveTask] = {}
        self._latest: dict[tuple[int, int], float] = {}
        self._episodes: dict[int, object] = {}
        #: Optimizer steps trained per step call (for throughput and fidelity reports).
        self.trained: list[int] = []

    def _task(self, sim: Simulator, env: int, task: int) -> LiveTask:
        if self._episodes.get(env) is not sim.workloads[env]:  # a new episode in this env: its runs start afresh
            self._episodes[env] = sim.workloads[env]
            for key in [key for key in self._tasks if key[0] == env]:
                del self._tasks[key]
                self._latest.pop(key, None)
        key = (env, task)
        if key not in self._tasks:
            curve = int(sim.workloads[env].curve[task])
            if not 0 <= curve < len(self.specs):
                raise ValueError(f"task {task} of env {env} is on curve {curve}, but the source has {len(self.specs)} runs")
            live = build_task(self.specs[curve])
            if self.steps is not None and hasattr(live, "steps"):
                live.steps = int(self.steps)
            self._tasks[key] = live
        return self._tasks[key]

    def report(self, sim: Simulator, served: Served) -> np.ndarray:
        out = np.empty(len(served.env))
        total = 0
        for j in range(len(served.env)):
            env, task = int(served.env[j]), int(served.task[j])
            live = self._task(sim, env, task)
            start = np.floor(served.progress[j])
            whole = int(np.floor(served.progress[j] + served.batches[j]) - start)
            if whole == 0 and (env, task) not in self._latest:
                whole = 1  # a task's first service reports a loss it trained
            if whole > 0:
                self._latest[(env, task)] = float(np.mean(live.train(whole)))
                total += whole
            out[j] = self._latest[(env, task)]
        self.trained.append(total)
        return out
