"""The live task source: served tasks train for real on worker nodes and report their own losses (issue 32).

:class:`LiveSource` is a :class:`core_env.task_source.TaskSource`: pass it to
:meth:`core_env.sim.Simulator.step` (``source=``), or to an environment as ``task_source=``, and every
served task of a step trains on the worker of the node serving it (:mod:`core_env.live.workers`: in this
process, one process per node, or one Ray actor per node). The rules — choices, slots, deadlines,
completion at the target, rewards — are the engine's own. Two ways to step:

- **planned batches** (``slice_s=None``): a service trains the whole optimizer steps its batches reach
  (``floor(progress + batches) − floor(progress)``, so fractional batches accumulate as in the simulator)
  and reports their mean loss; a service that completes no whole batch reports the task's latest loss
  (its first service always trains at least one); losses are clipped to a bank's range before the
  mean, as the bank clips its curves. Deterministic: with whole batches per step the episode
  equals its simulation on the recorded curves (tests/test_live.py).
- **wall-clock slices** (``slice_s=seconds``): each served task trains batch after batch until the slice
  is over, so real throughput, contention between workers, node heterogeneity and the time to move a
  task's state from the node that last trained it (preemption and migration) decide how far it gets;
  the source reports the batches trained (:class:`core_env.task_source.Reports`) and they are the task's
  progress. Not reproducible by nature: the records are the evidence.

Which run a workload's task is: ``specs[c]`` for a task on curve ``c`` of the workload's bank.
:func:`record_bank` records every spec's run offline into a :class:`~core_env.curves.CurveBank` (curve
``c`` = run ``specs[c]``'s losses, one per batch), deterministically from the same seeds, so the same
workload replays in the simulator. :attr:`LiveSource.records` keeps one row per service (batches
planned and trained, every batch's loss, seconds moving, loading and training);
:meth:`LiveSource.write_records` writes them as JSON lines.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core_env.curves import CurveBank
from core_env.curves.bank import LOSS_CEIL, LOSS_FLOOR
from core_env.live.tasks import LIVE_FAMILIES, TaskSpec, build_task
from core_env.live.workers import InProcessNodes, NodeFailure
from core_env.task_source import Reports, Served

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
    """Served tasks train for real on worker nodes (module docstring).

    Args:
        specs: ``specs[c]`` is the run behind curve ``c`` of the workloads' bank.
        steps: every run's length in batches (default: its family's).
        nodes: the workers (:func:`core_env.live.workers.make_nodes`), one per node of each env (node
            ``n`` of env ``b`` is worker ``b * N + n``); default: in-process workers, made on first use (planned
            batches only: with ``slice_s`` the nodes must train at once, on processes or Ray).
        slice_s: None — each service trains the whole batches the rules planned (deterministic: the
            episode equals its simulation on :func:`record_bank`); a float — a step is a wall-clock slice
            of that many seconds, and each served task trains as many batches as its node manages in it,
            less the time to move the task's state if it last trained elsewhere.
    """

    def __init__(self, specs: Sequence[TaskSpec], steps: int | None = None, nodes: Any = None, slice_s: float | None = None) -> None:
        if not specs:
            raise ValueError("specs must name at least one run")
        for i, spec in enumerate(specs):
            if not isinstance(spec, TaskSpec):
                raise TypeError(f"specs[{i}] must be a TaskSpec, got {type(spec).__name__}")
            if spec.family not in LIVE_FAMILIES and ":" not in spec.family:
                raise ValueError(f"specs[{i}]: unknown live task family {spec.family!r}; choose from {list(LIVE_FAMILIES)} or give 'module:factory'")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1):
            raise ValueError(f"steps must be None (each run's own length) or an int >= 1, got {steps!r}")
        if slice_s is not None and (isinstance(slice_s, bool) or not isinstance(slice_s, (int, float)) or not 0.0 < slice_s < 3600.0):
            raise ValueError(f"slice_s must be None (planned batches) or seconds in (0, 3600), got {slice_s!r}")
        if slice_s is not None and nodes is None:
            raise ValueError("slice_s needs nodes that train at once (nodes=make_nodes(N, 'process') or 'ray'); "
                             "the default in-process workers run one after another")
        self.specs, self.steps, self.nodes, self.slice_s = list(specs), steps, nodes, slice_s
        self._where: dict[tuple, int] = {}  # task key -> the worker holding it
        self._latest: dict[tuple, float] = {}
        self._sim: Simulator | None = None
        self._episodes: dict[int, tuple[int, int]] = {}  # env -> (the sim's episodes started there, this source's episode number)
        self._broken: str | None = None  # the failure that ended this source
        self._uid = uuid.uuid4().hex  # task keys are unique to this source: a pool may serve several
        #: One row per service: the env's episode number (from 0), the step's time, env, node, task, curve,
        #: run family, batches planned and trained, the losses of every batch, whether the run was over
        #: after it (``finished``), and the seconds spent moving (``move_s``), loading and training it.
        self.records: list[dict[str, Any]] = []
        #: One row per env and step with a service: episode, env, t, services, the step's seconds in this
        #: source (moves and training: ``serve_s``) and since the source's previous step ended (``between_s``:
        #: the agent's decision and the engine; None at the first).
        self.steps_log: list[dict[str, Any]] = []
        self._ended: float | None = None

    def _start_episodes(self, sim: Simulator, envs: set[int]) -> None:
        """A new episode in an env (a reset): its old tasks are dropped on the workers holding them."""
        if sim is not self._sim:  # another simulator (a new env): every env starts anew
            self._sim = sim
            self._episodes = {env: (-1, number) for env, (_, number) in self._episodes.items()}
        for env in envs:
            started, number = self._episodes.get(env, (-1, -1))
            if started != int(sim.episodes_started[env]):  # a reset, even to the same workload
                self._episodes[env] = (int(sim.episodes_started[env]), number + 1)
                self._forget([key for key in self._where if key[1] == env])

    def _forget(self, keys: list[tuple]) -> None:
        for worker in {self._where[key] for key in keys}:
            self.nodes.result(worker, self.nodes.submit(worker, "drop", [key for key in keys if self._where[key] == worker]))
        for key in keys:
            del self._where[key]
            self._latest.pop(key, None)

    def _spec(self, sim: Simulator, env: int, task: int) -> TaskSpec:
        curve = int(sim.workloads[env].curve[task])
        if not 0 <= curve < len(self.specs):
            raise ValueError(f"task {task} of env {env} is on curve {curve}, but the source has {len(self.specs)} runs")
        return self.specs[curve]

    def report(self, sim: Simulator, served: Served) -> np.ndarray | Reports:
        if self._broken is not None:
            raise NodeFailure(f"this live source failed before ({self._broken}): its tasks' state is gone; "
                              "start a new episode with a new source and pool")
        try:
            return self._report(sim, served)
        except NodeFailure as error:
            self._broken = str(error).splitlines()[0]
            raise

    def _report(self, sim: Simulator, served: Served) -> np.ndarray | Reports:
        if self.nodes is None:
            self.nodes = InProcessNodes(sim.B * sim.N)
        if len(self.nodes) < sim.B * sim.N:
            raise ValueError(f"the source has {len(self.nodes)} worker nodes; B * N = {sim.B * sim.N} are needed")
        self._start_episodes(sim, set(served.env.tolist()))
        M = len(served.env)
        keys = [(self._uid, int(served.env[j]), self._episodes[int(served.env[j])][1], int(served.task[j])) for j in range(M)]
        workers = [int(served.env[j]) * sim.N + int(served.node[j]) for j in range(M)]
        specs = [self._spec(sim, keys[j][1], keys[j][3]) for j in range(M)]
        planned = [self._planned(served, j, keys[j]) for j in range(M)]
        began = time.perf_counter()
        moves = {j: self.nodes.submit(self._where[keys[j]], "take", keys[j]) for j in range(M)
                 if keys[j] in self._where and self._where[keys[j]] != workers[j]}
        states, move_s = [None] * M, [0.0] * M
        for j, handle in moves.items():  # every holder hands its task over at once; each move's time is its own wait
            states[j] = self.nodes.result(self._where[keys[j]], handle)
            move_s[j] = time.perf_counter() - began
        orders = [self.nodes.submit(workers[j], "serve", keys[j], specs[j], self.steps, states[j], planned[j],
                                    None if self.slice_s is None else self.slice_s - move_s[j], keys[j] not in self._latest)
                  for j in range(M)]
        results = [self.nodes.result(workers[j], orders[j]) for j in range(M)]
        loss, trained = np.empty(M), np.empty(M)
        for j, result in enumerate(results):
            self._where[keys[j]] = workers[j]
            if result["losses"].size:
                self._latest[keys[j]] = float(np.mean(np.clip(result["losses"], LOSS_FLOOR, LOSS_CEIL)))  # as a bank's curve
            loss[j], trained[j] = self._latest[keys[j]], result["losses"].size
            _, env, episode, task = keys[j]
            self.records.append({"episode": episode, "t": int(sim.t[env]), "env": env, "node": int(served.node[j]), "task": task,
                                 "curve": int(sim.workloads[env].curve[task]), "family": specs[j].family, "planned": float(served.batches[j]),
                                 "trained": int(trained[j]), "losses": result["losses"].tolist(), "finished": bool(result["finished"]), "moved": j in moves,
                                 "move_s": move_s[j], "load_s": result["load_s"], "train_s": result["train_s"]})
        ended = time.perf_counter()
        for env in sorted(set(served.env.tolist())):
            self.steps_log.append({"episode": self._episodes[env][1], "env": env, "t": int(sim.t[env]), "services": int((served.env == env).sum()),
                                   "serve_s": ended - began, "between_s": None if self._ended is None else began - self._ended})
        self._ended = ended
        return loss if self.slice_s is None else Reports(loss, trained)

    def _planned(self, served: Served, j: int, key: tuple) -> int | None:
        """The whole batches service ``j`` trains without a wall-clock slice: those its fractional batches
        reach (``floor(progress + batches) − floor(progress)``), at least one at a task's first service."""
        if self.slice_s is not None:
            return None
        start = np.floor(served.progress[j])
        whole = int(np.floor(served.progress[j] + served.batches[j]) - start)
        return max(whole, 1) if key not in self._latest else whole

    @property
    def trained(self) -> int:
        """Batches trained so far, over every service."""
        return sum(record["trained"] for record in self.records)

    def write_records(self, path: str | os.PathLike) -> None:
        """The services as JSON lines (one per service), written atomically."""
        path = Path(path)
        partial = path.with_name(path.name + ".partial")
        partial.write_text("".join(json.dumps(record) + "\n" for record in self.records))
        os.replace(partial, path)

    def close(self, nodes: bool = True) -> None:
        """Drop this source's tasks from the workers, and with ``nodes`` stop the workers too (a pool
        shared by several sources is closed by the last, or by its owner)."""
        if self.nodes is not None and self._where:
            try:
                self._forget(list(self._where))
            except NodeFailure:  # a dead worker's tasks are gone with it
                self._where.clear()
                self._latest.clear()
        if nodes and self.nodes is not None:
            self.nodes.close()
        self._episodes.clear()
        self._sim = None
