"""Worker nodes for live tasks: one process per node (default), or one Ray actor per node.

A node's worker (:class:`NodeWorker`) keeps the live tasks that last trained on it, resident in memory.
Serving a task (:meth:`NodeWorker.serve`) trains it either a given number of whole batches or until a
wall-clock slice has passed, and reports the losses and where the time went: ``load_s`` building the
task or loading a moved state, ``train_s`` training. A task served by another node than the one holding
it moves: the holder hands over its state (:meth:`NodeWorker.take`, timed by the caller) and the new node
loads it, so migration and preemption cost what they really cost.

Pools of workers, all with ``submit(node, method, *args) -> handle`` (the order goes out),
``result(node, handle, timeout=None)`` (its answer, waited for at most ``timeout`` seconds) and
``close()``; submitting to every node first and then collecting lets the nodes work at once:

- :class:`InProcessNodes` — the workers are objects in this process (serial; deterministic tests). An
  order runs when its answer is asked for; with a ``timeout`` it runs in a thread of its own, and an
  order that overruns it fails the pool — its thread cannot be stopped (Python threads cannot be killed):
  it runs on in the background until its task returns, and the pool takes no further order;
- :class:`ProcessNodes` — one ``spawn``-ed process per node, one torch thread each (the default live pool);
  every order carries a sequence number, and an answer nobody read (an interrupted step) is discarded
  when a later order's answer is read, so an answer never reaches another order;
- :class:`RayNodes` — one Ray actor per node: a local ``ray.init()`` by default, ``address=`` an existing
  cluster's (``pip install ray``; the tasks' modules must be importable on the cluster's workers).

A worker that dies (found when an order is sent or when its answer is awaited), an order that overruns
its timeout, an order interrupted half-way through a pipe (Ctrl-C), or a task that raises on a worker
raises :class:`NodeFailure` naming the node, and the pool marks itself failed (``failed``: why): it takes
no further order — the tasks that lived on a dead or hung worker are lost. The task source then fails the
step and the engine leaves the state as it was before it (never a silent wrong loss); a worker asked to
serve a task it should hold but does not raises instead of restarting the task from its first batch:
start a new episode with a new pool and a new source. ``close()`` is bounded: worker processes get
:data:`CLOSE_GRACE_S` seconds to stop by themselves, then they are killed. Worker processes ignore Ctrl-C
(SIGINT): the main process handles it and ``close()`` stops them.

Pool sizes are bounded (:func:`max_nodes`): :data:`MAX_NODES` workers, and at most
:data:`PROCESSES_PER_CPU` worker processes per CPU core of this machine.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import pickle
import signal
import threading
import time
import traceback
from typing import Any

import numpy as np

from core_env.extras import needs
from core_env.npz import interrupts_held
from core_env.live.tasks import LiveTask, TaskSpec, build_task, checked_losses

#: The most workers a pool may have (any backend).
MAX_NODES = 1024
#: The most worker processes per CPU core of this machine (each is a Python interpreter with its task's libraries).
PROCESSES_PER_CPU = 8
#: The most torch threads a worker may be given.
MAX_THREADS = 256
#: Seconds ``ProcessNodes.close()`` waits for its workers to stop by themselves before it kills them.
CLOSE_GRACE_S = 2.0


class NodeFailure(RuntimeError):
    """A worker node died, overran its time or a task failed on it (the message names the node and the cause)."""


class NodeTimeout(NodeFailure):
    """A worker node gave no answer within the time it was given (a task that blocks, or too short a limit)."""


def _limit_threads(threads: int) -> None:
    if importlib.util.find_spec("torch") is None:  # a numpy-only task needs no torch
        return
    with needs(__name__):
        import torch
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
        first service reports a loss). A task's ``train(n)`` must return n losses (ValueError naming it)."""
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
            losses = checked_losses(spec, int(batches), task.train(int(batches)))
        else:
            pieces = []
            while (must_train and not pieces) or (time.perf_counter() - start < seconds and not _finished(task)):
                pieces.append(checked_losses(spec, 1, task.train(1)))
            if not pieces and _finished(task):  # a run already over reports its plateau (one free batch)
                pieces.append(checked_losses(spec, 1, task.train(1)))
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
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's; close() stops this one
    worker = NodeWorker(node, threads)
    while True:
        try:
            message = pickle.loads(connection.recv_bytes())
        except EOFError:  # the pool closed
            return
        if message is None:
            return
        number, method, args = message
        connection.send((number, *_call(worker, method, args)))


def _failure(node: int, method: str, detail: str) -> NodeFailure:
    return NodeFailure(f"node {node}: {method} failed on its worker: {detail}")


def _overran(node: int, method: str, timeout: float) -> NodeTimeout:
    return NodeTimeout(f"node {node}: its worker gave no answer to {method} within {timeout:.3g} s")


class _Pool:
    """What every pool shares: ``failed`` (why it takes no further order) and its refusal."""

    failed: str | None = None
    _closed = False

    def _check_open(self, node: int) -> None:
        if self._closed:
            raise NodeFailure("this pool is closed: start a new one")
        if self.failed is not None:  # answers to earlier orders may be lost or a worker hung: nothing can be trusted
            raise NodeFailure(f"this pool failed before ({self.failed.splitlines()[0]}): close it and start a new one")
        if isinstance(node, bool) or not isinstance(node, (int, np.integer)) or not 0 <= node < len(self):
            raise ValueError(f"node must be an int in [0, {len(self)}), got {node!r}")

    def _fail(self, error: NodeFailure) -> NodeFailure:
        if self.failed is None:
            self.failed = str(error)
        return error


class _Order:
    """An in-process order and, once run, its answer ``(ok, value)``."""

    __slots__ = ("node", "method", "args", "answer")

    def __init__(self, node: int, method: str, args: tuple) -> None:
        self.node, self.method, self.args, self.answer = node, method, args, None


class InProcessNodes(_Pool):
    """The workers as objects in this process: orders run one after another, in the order submitted, when
    an answer is asked for (module docstring: with a timeout each runs in a thread of its own)."""

    backend = "inprocess"

    def __init__(self, n_nodes: int, threads: int = 1) -> None:
        self.workers = [NodeWorker(node, None) for node in range(_check_nodes(n_nodes, self.backend))]
        self._queue: list[_Order] = []

    def __len__(self) -> int:
        return len(self.workers)

    def submit(self, node: int, method: str, *args: Any) -> _Order:
        self._check_open(node)
        order = _Order(int(node), method, args)
        self._queue.append(order)
        return order

    def result(self, node: int, handle: _Order, timeout: float | None = None) -> Any:
        deadline = None if timeout is None else time.perf_counter() + timeout
        while handle.answer is None:
            self._check_open(node)
            if handle not in self._queue:
                raise ValueError(f"node {node}: that handle is no order of this pool waiting for its answer")
            self._run(self._queue.pop(0), deadline, timeout)
        ok, value = handle.answer
        if not ok:
            raise _failure(node, handle.method, value)
        return value

    def _run(self, order: _Order, deadline: float | None, timeout: float | None) -> None:
        worker = self.workers[order.node]
        if deadline is None:
            try:
                order.answer = _call(worker, order.method, order.args)
            except BaseException:  # interrupted (Ctrl-C) half-way through a task: its state is unknown
                self._fail(NodeFailure(f"node {order.node}: interrupted during {order.method}"))
                raise
            return
        box: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                box.append(_call(worker, order.method, order.args))
            except BaseException as error:  # SystemExit and the like, raised by a task
                box.append((False, f"{type(error).__name__}: {error}"))

        thread = threading.Thread(target=run, daemon=True, name=f"core-node-{order.node}")
        try:
            thread.start()
            thread.join(max(deadline - time.perf_counter(), 0.0))
        except BaseException:  # interrupted (Ctrl-C): the order runs on in its thread, which cannot be stopped
            self._fail(NodeFailure(f"node {order.node}: interrupted during {order.method} (it runs on in its thread)"))
            raise
        if thread.is_alive():  # it runs on in its thread: the task it trains is in use, so the pool is done
            raise self._fail(_overran(order.node, order.method, timeout))
        order.answer = box[0]

    def close(self) -> None:
        self.workers, self._queue, self._closed = [], [], True


class ProcessNodes(_Pool):
    """One ``spawn``-ed worker process per node (``threads`` torch threads each), talking over pipes;
    orders and answers carry a sequence number (module docstring)."""

    backend = "process"

    def __init__(self, n_nodes: int, threads: int = 1, start_timeout: float = 120.0) -> None:
        n_nodes = _check_nodes(n_nodes, self.backend)
        context = multiprocessing.get_context("spawn")
        self.connections, self.processes = [], []
        self._sent, self._read = [0] * n_nodes, [0] * n_nodes  # per node: the last order sent, the last answer read
        try:
            for node in range(n_nodes):
                mine, theirs = context.Pipe()
                process = context.Process(target=_serve_forever, args=(theirs, node, threads), daemon=True, name=f"core-node-{node}")
                process.start()
                theirs.close()
                self.connections.append(mine)
                self.processes.append(process)
            for node in range(n_nodes):  # wait until every worker answers
                self.result(node, self.submit(node, "pid"), timeout=start_timeout)
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self.processes)

    def submit(self, node: int, method: str, *args: Any) -> tuple[int, str]:
        self._check_open(node)
        number = self._sent[node] + 1
        message = pickle.dumps((number, method, args), protocol=pickle.HIGHEST_PROTOCOL)
        with interrupts_held():  # a Ctrl-C meanwhile is raised once the message went whole
            try:
                self.connections[node].send_bytes(message)
            except (BrokenPipeError, OSError) as error:
                raise self._fail(self._died(node, method, error)) from error
            except BaseException:  # half-way through the message (outside the main thread): the pipe's framing is lost
                self._fail(NodeFailure(f"node {node}: interrupted while sending {method}"))
                raise
            self._sent[node] = number
        return number, method

    def result(self, node: int, handle: tuple[int, str], timeout: float | None = None) -> Any:
        number, method = handle
        if number <= self._read[node]:
            raise ValueError(f"node {node}: the answer to order {number} ({method}) was read or discarded before")
        self._check_open(node)
        deadline = None if timeout is None else time.perf_counter() + timeout
        try:
            got, ok, value = self._answer(node, method, deadline, timeout)
            while got < number:  # an earlier order's answer nobody read (an interrupted step): it can reach no one
                got, ok, value = self._answer(node, method, deadline, timeout)
            if not ok:
                raise _failure(node, method, value)
        except NodeFailure as error:
            raise self._fail(error)
        return value

    def _answer(self, node: int, method: str, deadline: float | None, timeout: float | None) -> tuple[int, bool, Any]:
        connection, process = self.connections[node], self.processes[node]
        while not connection.poll(0.05):
            if not process.is_alive():
                raise self._died(node, method, None)
            if deadline is not None and time.perf_counter() > deadline:
                raise _overran(node, method, timeout)
        with interrupts_held():  # a Ctrl-C meanwhile is raised once the answer is read whole (and then discarded)
            try:
                answer = connection.recv()
            except (EOFError, OSError) as error:
                raise self._died(node, method, error) from error
            except BaseException:  # half-way through the answer (outside the main thread): the pipe's framing is lost
                self._fail(NodeFailure(f"node {node}: interrupted while reading its answer to {method}"))
                raise
            self._read[node] = answer[0]
        return answer

    def _died(self, node: int, method: str, error: BaseException | None) -> NodeFailure:
        process = self.processes[node]
        process.join(timeout=1.0)
        return NodeFailure(f"node {node}: its worker process (pid {process.pid}) died during {method} (exit code "
                           f"{process.exitcode}); the tasks it held are lost: close this pool and start a new episode")

    def close(self) -> None:
        """Stop the workers: each gets :data:`CLOSE_GRACE_S` seconds (all together) to stop, then it is killed."""
        for connection in self.connections:
            try:
                connection.send_bytes(pickle.dumps(None))
            except (OSError, ValueError):  # a dead worker, or a closed pipe
                pass
        deadline = time.perf_counter() + CLOSE_GRACE_S
        for process in self.processes:
            process.join(timeout=max(deadline - time.perf_counter(), 0.0))
        for process in self.processes:
            if process.is_alive():  # busy in a task (a hung or interrupted step) or deaf: killed
                process.kill()
                process.join(timeout=1.0)
        for connection in self.connections:
            connection.close()
        self.connections, self.processes, self._closed = [], [], True

    def __del__(self) -> None:
        if getattr(self, "processes", None):
            self.close()


class RayNodes(_Pool):
    """One Ray actor per node (``num_cpus=threads`` each); ``address``: an existing cluster's (default:
    ``ray.init()``'s own choice: ``RAY_ADDRESS``, else the cluster this machine last started with ``ray start``,
    else a new local instance). In a process already connected to Ray, ``address`` must be None, ``"auto"``
    or the connected cluster's (a resumed run in a notebook passes the same address again)."""

    backend = "ray"

    def __init__(self, n_nodes: int, threads: int = 1, address: str | None = None) -> None:
        n_nodes = _check_nodes(n_nodes, self.backend)
        with needs(__name__, "ray"):
            import ray
        self.ray = ray
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        elif address not in (None, "auto") and address != ray.get_runtime_context().gcs_address:
            raise ValueError(f"address={address!r}: Ray is already initialised in this process (ray.shutdown() first, "
                             f"or leave address=None to use the running Ray at {ray.get_runtime_context().gcs_address})")
        actor = ray.remote(num_cpus=threads)(NodeWorker)
        self.actors = [actor.remote(node, threads) for node in range(n_nodes)]
        for node in range(n_nodes):
            self.result(node, self.submit(node, "pid"))

    def __len__(self) -> int:
        return len(self.actors)

    def submit(self, node: int, method: str, *args: Any) -> tuple[str, Any]:
        self._check_open(node)
        return method, getattr(self.actors[node], method).remote(*args)

    def result(self, node: int, handle: tuple[str, Any], timeout: float | None = None) -> Any:
        method, reference = handle
        self._check_open(node)
        try:
            return self.ray.get(reference, timeout=timeout)
        except self.ray.exceptions.GetTimeoutError:
            raise self._fail(_overran(node, method, timeout)) from None
        except self.ray.exceptions.RayActorError as error:
            raise self._fail(NodeFailure(f"node {node}: its Ray actor died during {method}; the tasks it held are lost: "
                                         "close this pool and start a new episode")) from error
        except self.ray.exceptions.RayTaskError as error:
            raise self._fail(_failure(node, method, str(error))) from error

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors, self._closed = [], True


def max_nodes(backend: str) -> int:
    """The most workers a pool on ``backend`` may have: :data:`MAX_NODES`, and for ``"process"`` at most
    :data:`PROCESSES_PER_CPU` per CPU core of this machine."""
    if backend == "process":
        return min(MAX_NODES, PROCESSES_PER_CPU * (os.cpu_count() or 1))
    return MAX_NODES


def _check_nodes(n_nodes: Any, backend: str) -> int:
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)) or n_nodes < 1:
        raise ValueError(f"n_nodes must be an int >= 1, got {n_nodes!r}")
    if n_nodes > max_nodes(backend):
        per_cpu = f" ({PROCESSES_PER_CPU} worker processes per CPU core; os.cpu_count() = {os.cpu_count()})" if backend == "process" else ""
        raise ValueError(f"n_nodes={n_nodes}: a {backend!r} pool has at most {max_nodes(backend)} workers{per_cpu}")
    return int(n_nodes)


BACKENDS = {"inprocess": InProcessNodes, "process": ProcessNodes, "ray": RayNodes}


def make_nodes(n_nodes: int, backend: str = "process", threads: int = 1, address: str | None = None):
    """A pool of ``n_nodes`` workers on ``backend`` (``"process"``, ``"ray"`` or ``"inprocess"``): at most
    :func:`max_nodes` of them, each with ``threads`` (at most :data:`MAX_THREADS`) torch threads.

    Raises:
        ValueError: an unknown backend, ``address`` without Ray, or a count out of its range.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {sorted(BACKENDS)}")
    if address is not None and backend != "ray":
        raise ValueError(f"address= names a Ray cluster; it needs backend='ray', got backend={backend!r}")
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or not 1 <= threads <= MAX_THREADS:
        raise ValueError(f"threads must be an int in [1, {MAX_THREADS}], got {threads!r}")
    _check_nodes(n_nodes, backend)
    if backend == "ray":
        return RayNodes(n_nodes, threads, address)
    return BACKENDS[backend](n_nodes, threads)
