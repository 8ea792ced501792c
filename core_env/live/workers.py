"""Worker nodes for live tasks: one process per node (default), or one Ray actor per node.

A node's worker (:class:`NodeWorker`) keeps the live tasks that last trained on it, resident in memory.
Serving a task (:meth:`NodeWorker.serve`) trains it either a given number of whole batches or until a
wall-clock slice has passed, and reports the losses and where the time went: ``load_s`` building the
task or loading a moved state, ``train_s`` training. A task served by another node than the one holding
it moves: the holder hands over its state (:meth:`NodeWorker.take`, timed by the caller) and the new node
loads it, so migration and preemption cost what they really cost.

Pools of workers, all with ``submit(node, method, *args) -> handle`` (the order goes out),
``result(node, handle)`` (its answer, waited for) and ``close()``; submitting to every node first and
then collecting lets the nodes work at once:

- :class:`InProcessNodes` — the workers are objects in this process (serial; deterministic tests);
- :class:`ProcessNodes` — one ``spawn``-ed process per node, one torch thread each (the default live pool);
- :class:`RayNodes` — one Ray actor per node: a local ``ray.init()`` by default, ``address=`` an existing
  cluster's (``pip install ray``; the tasks' modules must be importable on the cluster's workers).

A worker that dies, or a task that raises on a worker, raises :class:`NodeFailure` naming the node: the
task source then fails the step and the engine leaves the state as it was before it (never a silent
wrong loss). After a failure the source and a process pool take no further order (answers to the other
nodes' orders may be left unread, and the tasks that lived on the dead worker are lost), and a worker
asked to serve a task it should hold but does not raises instead of restarting the task from its first
batch: start a new episode with a new pool and a new source.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time
import traceback
from typing import Any

import numpy as np

from core_env.live.tasks import LiveTask, TaskSpec, build_task


class NodeFailure(RuntimeError):
    """A worker node died or a task failed on it (the message names the node and the cause)."""


def _limit_threads(threads: int) -> None:
    try:
        import torch
    except ImportError:  # a numpy-only task needs no torch
        return
    torch.set_num_threads(threads)


def _finished(task: LiveTask) -> bool:
    return bool(getattr(task, "finished", False))


class NodeWorker:
    """One node's worker: the tasks resident on it, served on request (module docstring)."""

    def __init__(self, node: int, threads: int | None = 1) -> None:
        self.node = node
        self.tasks: dict[Any, LiveTask] = {}
        if threads is not None:  # a worker process or actor of its own (in-process workers leave the caller's threads)
            _limit_threads(threads)

    def pid(self) -> int:
        return os.getpid()

    def serve(self, key: Any, spec: TaskSpec, steps: int | None, state: bytes | None, batches: int | None,
              seconds: float | None, must_train: bool) -> dict[str, Any]:
        """Train task ``key`` (built from ``spec``; from ``state`` when it moved here): ``batches`` whole
        batches, or with ``batches=None`` one batch after another until ``seconds`` have passed since the
        order arrived or the run is over (a task's ``finished``: past its length it only repeats its
        plateau, which costs nothing and is not throughput); at least one when ``must_train`` (a task's
        first service reports a loss)."""
        start = time.perf_counter()
        if state is None and key not in self.tasks and not must_train:
            raise RuntimeError(f"task {key!r} should live on node {self.node} but does not (a restarted worker?): "
                               "its state is lost, so it cannot go on")
        if state is not None or key not in self.tasks:
            task = build_task(spec)
            if steps is not None and hasattr(task, "steps"):
                task.steps = int(steps)
            if state is not None:
                task.load_state_dict(pickle.loads(state))
            self.tasks[key] = task
        task = self.tasks[key]
        loaded = time.perf_counter()
        if batches is not None:
            losses = np.asarray(task.train(int(batches)), dtype=np.float64)
        else:
            pieces = []
            while (must_train and not pieces) or (time.perf_counter() - start < seconds and not _finished(task)):
                pieces.append(np.asarray(task.train(1), dtype=np.float64))
            if not pieces and _finished(task):  # a run already over reports its plateau (one free batch)
                pieces.append(np.asarray(task.train(1), dtype=np.float64))
            losses = np.concatenate(pieces) if pieces else np.zeros(0)
        return {"losses": losses, "load_s": loaded - start, "train_s": time.perf_counter() - loaded, "finished": _finished(task)}

    def take(self, key: Any) -> bytes:
        """Task ``key``'s state, handed over (it no longer lives here)."""
        return pickle.dumps(self.tasks.pop(key).state_dict(), protocol=pickle.HIGHEST_PROTOCOL)

    def drop(self, keys: list[Any]) -> None:
        """Forget tasks (their episode ended)."""
        for key in keys:
            self.tasks.pop(key, None)


def _call(worker: NodeWorker, method: str, args: tuple) -> tuple[bool, Any]:
    try:
        return True, getattr(worker, method)(*args)
    except Exception as error:  # sent back and raised as a NodeFailure naming the node
        return False, f"{type(error).__name__}: {error}\n{traceback.format_exc()}"


def _serve_forever(connection, node: int, threads: int) -> None:
    worker = NodeWorker(node, threads)
    while True:
        try:
            message = connection.recv()
        except EOFError:  # the pool closed
            return
        if message is None:
            return
        connection.send(_call(worker, *message))


def _failure(node: int, method: str, detail: str) -> NodeFailure:
    return NodeFailure(f"node {node}: {method} failed on its worker: {detail}")


class InProcessNodes:
    """The workers as objects in this process: each order runs when it is submitted (serial)."""

    backend = "inprocess"

    def __init__(self, n_nodes: int, threads: int = 1) -> None:
        self.workers = [NodeWorker(node, None) for node in range(_check_nodes(n_nodes))]

    def __len__(self) -> int:
        return len(self.workers)

    def submit(self, node: int, method: str, *args: Any) -> tuple[str, tuple[bool, Any]]:
        return method, _call(self.workers[node], method, args)

    def result(self, node: int, handle: tuple[str, tuple[bool, Any]]) -> Any:
        method, (ok, value) = handle
        if not ok:
            raise _failure(node, method, value)
        return value

    def close(self) -> None:
        self.workers = []


class ProcessNodes:
    """One ``spawn``-ed worker process per node (``threads`` torch threads each), talking over pipes."""

    backend = "process"

    def __init__(self, n_nodes: int, threads: int = 1, start_timeout: float = 120.0) -> None:
        context = multiprocessing.get_context("spawn")
        self.connections, self.processes = [], []
        self.failed: str | None = None  # the first failure: the pool takes no order after it
        for node in range(_check_nodes(n_nodes)):
            mine, theirs = context.Pipe()
            process = context.Process(target=_serve_forever, args=(theirs, node, threads), daemon=True, name=f"core-node-{node}")
            process.start()
            theirs.close()
            self.connections.append(mine)
            self.processes.append(process)
        for node in range(n_nodes):  # wait until every worker answers
            self.result(node, self.submit(node, "pid"), timeout=start_timeout)

    def __len__(self) -> int:
        return len(self.processes)

    def submit(self, node: int, method: str, *args: Any) -> str:
        if self.failed is not None:  # answers to earlier orders may still wait in the pipes: nothing can be trusted
            raise NodeFailure(f"this pool failed before ({self.failed.splitlines()[0]}): close it and start a new one")
        try:
            self.connections[node].send((method, args))
        except (BrokenPipeError, OSError) as error:
            raise self._died(node, method, error) from error
        return method

    def result(self, node: int, handle: str, timeout: float | None = None) -> Any:
        try:
            return self._result(node, handle, timeout)
        except NodeFailure as error:
            self.failed = str(error)
            raise

    def _result(self, node: int, handle: str, timeout: float | None) -> Any:
        connection, process = self.connections[node], self.processes[node]
        waited = 0.0
        while not connection.poll(0.05):
            waited += 0.05
            if not process.is_alive():
                raise self._died(node, handle, None)
            if timeout is not None and waited > timeout:
                raise NodeFailure(f"node {node}: no answer to {handle} within {timeout:g} s")
        try:
            ok, value = connection.recv()
        except (EOFError, OSError) as error:
            raise self._died(node, handle, error) from error
        if not ok:
            raise _failure(node, handle, value)
        return value

    def _died(self, node: int, method: str, error: BaseException | None) -> NodeFailure:
        process = self.processes[node]
        process.join(timeout=1.0)
        return NodeFailure(f"node {node}: its worker process (pid {process.pid}) died during {method} (exit code "
                           f"{process.exitcode}); the tasks it held are lost: close this pool and start a new episode")

    def close(self) -> None:
        for connection, process in zip(self.connections, self.processes):
            try:
                connection.send(None)
            except (BrokenPipeError, OSError):
                pass
            process.join(timeout=5.0)
            if process.is_alive():
                process.kill()
            connection.close()
        self.connections, self.processes = [], []

    def __del__(self) -> None:
        if getattr(self, "processes", None):
            self.close()


class RayNodes:
    """One Ray actor per node (``num_cpus=threads`` each); ``address``: an existing cluster's (default: a
    local ``ray.init()``)."""

    backend = "ray"

    def __init__(self, n_nodes: int, threads: int = 1, address: str | None = None) -> None:
        try:
            import ray
        except ImportError as error:
            raise ImportError("backend='ray' needs Ray: pip install ray") from error
        self.ray = ray
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        elif address is not None:
            raise ValueError(f"address={address!r}: Ray is already initialised in this process (ray.shutdown() first, "
                             "or leave address=None to use the running Ray)")
        actor = ray.remote(num_cpus=threads)(NodeWorker)
        self.actors = [actor.remote(node, threads) for node in range(_check_nodes(n_nodes))]
        for node in range(n_nodes):
            self.result(node, self.submit(node, "pid"))

    def __len__(self) -> int:
        return len(self.actors)

    def submit(self, node: int, method: str, *args: Any) -> tuple[str, Any]:
        return method, getattr(self.actors[node], method).remote(*args)

    def result(self, node: int, handle: tuple[str, Any]) -> Any:
        method, reference = handle
        try:
            return self.ray.get(reference)
        except self.ray.exceptions.RayActorError as error:
            raise NodeFailure(f"node {node}: its Ray actor died during {method}; the tasks it held are lost: "
                              "close this pool and start a new episode") from error
        except self.ray.exceptions.RayTaskError as error:
            raise _failure(node, method, str(error)) from error

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors = []


def _check_nodes(n_nodes: Any) -> int:
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)) or n_nodes < 1:
        raise ValueError(f"n_nodes must be an int >= 1, got {n_nodes!r}")
    return int(n_nodes)


BACKENDS = {"inprocess": InProcessNodes, "process": ProcessNodes, "ray": RayNodes}


def make_nodes(n_nodes: int, backend: str = "process", threads: int = 1, address: str | None = None):
    """A pool of ``n_nodes`` workers on ``backend`` (``"process"``, ``"ray"`` or ``"inprocess"``)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {sorted(BACKENDS)}")
    if address is not None and backend != "ray":
        raise ValueError(f"address= names a Ray cluster; it needs backend='ray', got backend={backend!r}")
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be an int >= 1, got {threads!r}")
    if backend == "ray":
        return RayNodes(n_nodes, threads, address)
    return BACKENDS[backend](n_nodes, threads)
