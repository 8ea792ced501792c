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

Integrity: the records hold only services of steps the engine kept, and no task is ever credited with
another's losses. A step is refused when a served task reports a non-finite loss (ValueError naming the
task), when a worker fails or overruns the step's time limit (:class:`~core_env.live.workers.NodeFailure`
naming the node and the task) or when it is interrupted (Ctrl-C); the engine then undoes the step, but the
served tasks may have trained on, so the source marks itself failed and refuses every further step (a
NodeFailure saying why): start a new episode with a new source (and, after a NodeFailure, a new pool). A
step has a time limit, ``step_timeout_s`` (default: :data:`DEFAULT_STEP_TIMEOUT_S` seconds, or
:data:`STEP_TIMEOUT_SLICES` slices if that is longer); :meth:`LiveSource.close` is bounded too.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from core_env.curves import CurveBank
from core_env.curves.bank import LOSS_CEIL, LOSS_FLOOR
from core_env.live.tasks import LIVE_FAMILIES, TaskSpec, build_task, checked_losses
from core_env.live.workers import InProcessNodes, NodeFailure, NodeTimeout
from core_env.npz import write_atomic
from core_env.task_source import Reports, Served

if TYPE_CHECKING:
    from core_env.sim import Simulator


#: A step's time limit when ``step_timeout_s`` is not given: this many seconds, or
#: :data:`STEP_TIMEOUT_SLICES` wall-clock slices if that is longer.
DEFAULT_STEP_TIMEOUT_S = 60.0
STEP_TIMEOUT_SLICES = 10
#: The longest time limit a step may be given (a day).
MAX_STEP_TIMEOUT_S = 86400.0
#: Seconds ``close(nodes=False)`` waits for the workers to drop this source's tasks (a pool it closes is stopped instead).
CLOSE_TIMEOUT_S = 5.0


def _check_steps(steps: Any) -> None:
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1):
        raise ValueError(f"steps must be None (each run's own length) or an int >= 1, got {steps!r}")


def _check_specs(specs: Any) -> list[TaskSpec]:
    if isinstance(specs, (str, bytes)) or not isinstance(specs, Sequence) or not specs:
        raise ValueError(f"specs must be a non-empty sequence of TaskSpec (one per run), got {specs!r:.80}")
    for i, spec in enumerate(specs):
        if not isinstance(spec, TaskSpec):
            raise TypeError(f"specs[{i}] must be a TaskSpec, got {type(spec).__name__}")
        if spec.family not in LIVE_FAMILIES and ":" not in spec.family:
            raise ValueError(f"specs[{i}]: unknown live task family {spec.family!r}; choose from {list(LIVE_FAMILIES)} or give 'module:factory'")
    return list(specs)


def record_bank(name: str, specs: Sequence[TaskSpec], steps: int | None = None) -> CurveBank:
    """A curve bank of the runs ``specs``, each trained once to its length (``steps`` optimizer steps when
    given) in one go: curve ``c`` is run ``specs[c]``'s per-batch losses, labelled by its family.

    Raises:
        TypeError: a spec that is not a TaskSpec, or a task whose ``train`` returns no numbers.
        ValueError: ``steps`` not an int >= 1, a run without a length of its own, or a ``train(n)`` that
            does not return n losses.
    """
    specs = _check_specs(specs)
    _check_steps(steps)
    curves = []
    for spec in specs:
        task = build_task(spec)
        length = getattr(task, "steps", None) if steps is None else int(steps)
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1:
            raise ValueError(f"give steps: task {spec} has no length of its own (its steps: {length!r})")
        if steps is not None and hasattr(task, "steps"):
            task.steps = int(steps)
        curves.append(checked_losses(spec, int(length), task.train(int(length))))
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
        step_timeout_s: a step's time limit in seconds, in (0, :data:`MAX_STEP_TIMEOUT_S`]: its moves,
            its services and the drops of ended episodes' tasks together. A node that has not answered
            by then fails the step with a NodeFailure naming the node and the task it serves (a task that
            blocks in ``train``), and the pool takes no further order. Default:
            :data:`DEFAULT_STEP_TIMEOUT_S`, or :data:`STEP_TIMEOUT_SLICES` × ``slice_s`` if that is longer.
            On in-process workers an overrunning task runs on in a thread that cannot be stopped (it ends
            when the task's ``train`` returns): use worker processes for tasks that may hang.
    """

    def __init__(self, specs: Sequence[TaskSpec], steps: int | None = None, nodes: Any = None, slice_s: float | None = None,
                 step_timeout_s: float | None = None) -> None:
        specs = _check_specs(specs)
        _check_steps(steps)
        if slice_s is not None and (isinstance(slice_s, bool) or not isinstance(slice_s, (int, float)) or not 0.0 < slice_s < 3600.0):
            raise ValueError(f"slice_s must be None (planned batches) or seconds in (0, 3600), got {slice_s!r}")
        if slice_s is not None and nodes is None:
            raise ValueError("slice_s needs nodes that train at once (nodes=make_nodes(N, 'process') or 'ray'); "
                             "the default in-process workers run one after another")
        if step_timeout_s is not None and (isinstance(step_timeout_s, bool) or not isinstance(step_timeout_s, (int, float, np.floating))
                                           or not 0.0 < step_timeout_s <= MAX_STEP_TIMEOUT_S):
            raise ValueError(f"step_timeout_s must be None (the default limit) or seconds in (0, {MAX_STEP_TIMEOUT_S:g}], got {step_timeout_s!r}")
        self.specs, self.steps, self.nodes, self.slice_s = specs, steps, nodes, slice_s
        #: The step's time limit in force (seconds).
        self.step_timeout_s = float(step_timeout_s) if step_timeout_s is not None else max(
            DEFAULT_STEP_TIMEOUT_S, STEP_TIMEOUT_SLICES * (slice_s or 0.0))
        self._where: dict[tuple, int] = {}  # task key -> the worker holding it
        self._latest: dict[tuple, float] = {}
        self._sim: Simulator | None = None
        self._episodes: dict[int, tuple[int, int]] = {}  # env -> (the sim's episodes started there, this source's episode number)
        self._served_t: dict[tuple[int, int], int] = {}  # (env, episode number) -> t of the last step served there
        self._broken: str | None = None  # why this source takes no further step
        self._ordered = False  # orders went out in the step under way: a failure now may have left tasks trained on
        self._uid = uuid.uuid4().hex  # task keys are unique to this source: a pool may serve several
        #: One row per service of a step the engine kept: the env's episode number (from 0), the step's time,
        #: env, node, task, curve, run family, batches planned and trained, the losses of every batch,
        #: whether the run was over after it (``finished``), and the seconds spent moving (``move_s``),
        #: loading and training it.
        self.records: list[dict[str, Any]] = []
        #: One row per env and step with a service: episode, env, t, services, the step's seconds in this
        #: source (moves and training: ``serve_s``) and since the source's previous step ended (``between_s``:
        #: the agent's decision and the engine; None at the first).
        self.steps_log: list[dict[str, Any]] = []
        self._ended: float | None = None

    def _start_episodes(self, sim: Simulator, envs: set[int], deadline: float) -> None:
        """A new episode in an env (a reset): its old tasks are dropped on the workers holding them."""
        if sim is not self._sim:  # another simulator (a new env): every env starts anew
            self._sim = sim
            self._episodes = {env: (-1, number) for env, (_, number) in self._episodes.items()}
        for env in envs:
            started, number = self._episodes.get(env, (-1, -1))
            if started != int(sim.episodes_started[env]):  # a reset, even to the same workload
                self._episodes[env] = (int(sim.episodes_started[env]), number + 1)
                self._forget([key for key in self._where if key[1] == env], deadline, "dropping an ended episode's tasks")

    def _check_kept(self, sim: Simulator, envs: set[int]) -> None:
        """A step this source served but the engine undid afterwards (something after the source refused it,
        or Ctrl-C between the two): its tasks trained on, so the source fails, and that step's records go."""
        for env in sorted(envs):
            number = self._episodes[env][1]
            last = self._served_t.get((env, number))
            if last is not None and int(sim.t[env]) <= last:
                gone = lambda row: row["episode"] == number and row["env"] == env and row["t"] == last  # noqa: E731
                self.records = [row for row in self.records if not gone(row)]
                self.steps_log = [row for row in self.steps_log if not gone(row)]
                self._broken = (f"the engine undid step t = {last} of env {env} after this source had served it, "
                                "and its tasks trained on")
                raise NodeFailure(f"this live source cannot go on: {self._broken}; start a new episode with a new source")

    def _forget(self, keys: list[tuple], deadline: float, doing: str) -> None:
        holders = {self._where[key] for key in keys}
        drops = {worker: self.nodes.submit(worker, "drop", [key for key in keys if self._where[key] == worker]) for worker in sorted(holders)}
        for worker, handle in drops.items():
            self._wait(worker, handle, deadline, doing)
        for key in keys:
            del self._where[key]
            self._latest.pop(key, None)

    def _wait(self, worker: int, handle: Any, deadline: float, doing: str) -> Any:
        """The answer to ``handle``, by ``deadline``; a NodeFailure says what the node was ``doing``."""
        try:
            return self.nodes.result(worker, handle, timeout=max(deadline - time.perf_counter(), 0.0))
        except NodeFailure as error:
            if isinstance(error, NodeTimeout):
                raise NodeFailure(f"node {worker}: no answer within the step's time limit (step_timeout_s = {self.step_timeout_s:g} s) "
                                  f"while {doing}: a task that blocks in train, or a limit too short for it (give a larger "
                                  "step_timeout_s); the pool takes no further order: close it") from error
            first, _, rest = str(error).partition("\n")
            raise NodeFailure(f"{first} (while {doing})" + (f"\n{rest}" if rest else "")) from error

    def _spec(self, sim: Simulator, env: int, task: int) -> TaskSpec:
        curve = int(sim.workloads[env].curve[task])
        if not 0 <= curve < len(self.specs):
            raise ValueError(f"task {task} of env {env} is on curve {curve}, but the source has {len(self.specs)} runs")
        return self.specs[curve]

    def report(self, sim: Simulator, served: Served) -> np.ndarray | Reports:
        if self._broken is not None:
            raise NodeFailure(f"this live source failed before ({self._broken}): its tasks may not be where the engine "
                              "believes; start a new episode with a new source (and, after a node's failure, a new pool)")
        self._ordered = False
        kept = len(self.records), len(self.steps_log)
        try:
            return self._report(sim, served)
        except BaseException as error:  # the engine undoes the step: none of it is kept here either
            del self.records[kept[0]:], self.steps_log[kept[1]:]
            if self._ordered and self._broken is None:  # orders went out: served tasks may have trained on, or a node is lost
                self._broken = str(error).splitlines()[0] if str(error) else f"{type(error).__name__} mid-step"  # Ctrl-C: no message
            raise

    def _report(self, sim: Simulator, served: Served) -> np.ndarray | Reports:
        if self.nodes is None:
            self.nodes = InProcessNodes(sim.B * sim.N)
        if len(self.nodes) < sim.B * sim.N:
            raise ValueError(f"the source has {len(self.nodes)} worker nodes; B * N = {sim.B * sim.N} are needed")
        M = len(served.env)
        specs = [self._spec(sim, int(served.env[j]), int(served.task[j])) for j in range(M)]
        envs = set(served.env.tolist())
        deadline = time.perf_counter() + self.step_timeout_s
        self._ordered = True
        self._start_episodes(sim, envs, deadline)
        self._check_kept(sim, envs)
        keys = [(self._uid, int(served.env[j]), self._episodes[int(served.env[j])][1], int(served.task[j])) for j in range(M)]
        workers = [int(served.env[j]) * sim.N + int(served.node[j]) for j in range(M)]
        planned = [self._planned(served, j, keys[j]) for j in range(M)]
        what = [f"task {keys[j][3]} of env {keys[j][1]} (run {specs[j]})" for j in range(M)]
        began = time.perf_counter()
        moves = {j: self.nodes.submit(self._where[keys[j]], "take", keys[j]) for j in range(M)
                 if keys[j] in self._where and self._where[keys[j]] != workers[j]}
        states, move_s = [None] * M, [0.0] * M
        for j, handle in moves.items():  # every holder hands its task over at once; each move's time is its own wait
            states[j] = self._wait(self._where[keys[j]], handle, deadline, f"handing {what[j]} over to node {workers[j]}")
            move_s[j] = time.perf_counter() - began
        orders = [self.nodes.submit(workers[j], "serve", keys[j], specs[j], self.steps, states[j], planned[j],
                                    None if self.slice_s is None else self.slice_s - move_s[j], keys[j] not in self._latest)
                  for j in range(M)]
        results = [self._wait(workers[j], orders[j], deadline, f"serving {what[j]}") for j in range(M)]
        for j, result in enumerate(results):  # the step is refused before anything is kept
            losses = result["losses"]
            bad = np.flatnonzero(~np.isfinite(losses))
            if bad.size:
                raise ValueError(f"{what[j]} reported a non-finite loss ({float(losses[bad[0]])!r} at batch {bad[0] + 1} of "
                                 f"{losses.size}) on node {workers[j]}: a live task's losses must be finite. The step is refused, "
                                 "and as the task trained on, this source takes no further step")
            if not losses.size and keys[j] not in self._latest:
                raise ValueError(f"{what[j]} trained no batch at its first service on node {workers[j]}: it has no loss to report")
        return self._keep(sim, served, keys, workers, specs, results, moves, move_s, began)

    def _keep(self, sim: Simulator, served: Served, keys: list, workers: list, specs: list, results: list, moves: dict,
              move_s: list, began: float) -> np.ndarray | Reports:
        """The step's services, kept: where each task lives, its latest loss, the records and the step's log."""
        M = len(keys)
        loss, trained = np.empty(M), np.empty(M)
        for j, result in enumerate(results):
            self._where[keys[j]] = workers[j]
            if result["losses"].size:
                self._latest[keys[j]] = float(np.mean(np.clip(result["losses"], LOSS_FLOOR, LOSS_CEIL)))  # as a bank's curve
            loss[j], trained[j] = self._latest[keys[j]], result["losses"].size
            _, env, episode, task = keys[j]
            self._served_t[(env, episode)] = int(sim.t[env])
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
        write_atomic(path, "".join(json.dumps(record) + "\n" for record in self.records))

    def close(self, nodes: bool = True) -> None:
        """With ``nodes``, stop the workers (bounded: see the pool's ``close``); without, drop this source's
        tasks from them (a pool shared by several sources is closed by the last, or by its owner), waiting at
        most :data:`CLOSE_TIMEOUT_S` seconds: a worker that does not answer by then fails the pool."""
        if self.nodes is not None and self._where and not nodes:
            try:
                self._forget(list(self._where), time.perf_counter() + CLOSE_TIMEOUT_S, "dropping this source's tasks at close()")
            except NodeFailure:  # a dead or hung worker's tasks are gone with it; the pool is marked failed
                pass
        self._where.clear()
        self._latest.clear()
        if nodes and self.nodes is not None:
            self.nodes.close()
        self._episodes.clear()
        self._sim = None
