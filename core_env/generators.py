"""Workload generators: the only randomness of an episode and the only place its workload is chosen.

Every episode's :class:`~core_env.workload.Workload` comes from a generator: ``generator.workload(rng)``.
A generator is resolved once from what the caller has (the env's config and its ``reset`` options, a
benchmark cell, a trainer's config), and every view, trainer and benchmark asks it:

* :class:`Drawn` — a seeded draw: arrivals at the load's intensity per node, each task by the config's
  recipe on a curve bank (the task set's train curves by default);
* :class:`SuiteEpisode` — one episode of a pre-generated evaluation suite (committed, or a file or
  directory of your own), refused on a node count it was not generated for (its load is per node);
* :class:`Stress` — the constructed scenario with a known optimum (built here; :func:`stress_workload`);
* :class:`Given` — a workload you built (or a trace replay, :func:`core_env.trace.trace_workload`).

:func:`generator_for` is a config's own generator (what ``reset(seed=...)`` draws from);
:func:`generator_from_options` reads ``reset(options=...)``. Replays ignore the rng; a draw uses nothing
else.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from core_env.config import LOADS, EnvConfig
from core_env.curves import CurveBank
from core_env.curves.stress import stress_bank
from core_env.recipe import TaskRecipe
from core_env.suites import SUITE_NODES, SUITE_TASK_SETS, load_suite, load_suite_file, suite_file_meta, suite_meta
from core_env.workload import Workload, draw_workload

#: The reset options :func:`generator_from_options` reads.
OPTIONS = ("workload", "suite", "suite_dir", "task_set", "load", "root", "episode", "any_nodes")


#: Reset options that choose an episode of an evaluation suite: read only with ``"suite"`` (without it,
#: reset draws a seeded workload), and ``load`` / ``suite_dir`` only with ``"suite": "eval"`` (a suite
#: file carries its own load).
SUITE_OPTIONS = ("root", "episode", "task_set", "load", "suite_dir", "any_nodes")
EVAL_SUITE_OPTIONS = ("load", "suite_dir")


def reset_options(options: Any, what: str = "options") -> Mapping[str, Any] | None:
    """``reset(options=...)`` of one env checked, the one rule of every view (the options themselves:
    :func:`generator_from_options`, which checks them too): None or a mapping from option names (str); no
    option that would be ignored: ``workload`` alone, :data:`SUITE_OPTIONS` only with ``suite``, ``load``
    and ``suite_dir`` only with ``suite="eval"``; ``suite`` and ``suite_dir`` paths (str or path-like).
    TypeError / ValueError naming the option otherwise. Unknown names are left to the generator (a warning:
    PettingZoo's own API test resets with ``{"options": 1}``)."""
    if options is None:
        return None
    if not isinstance(options, Mapping):
        raise TypeError(f"{what} must be a mapping of reset option names to values (or None), got {type(options).__name__} {options!r}")
    names = [k for k in options if not isinstance(k, str)]
    if names:
        raise TypeError(f"{what} must have option names (str) as keys, got {names!r}")
    others = [k for k in OPTIONS if k in options and k != "workload"]
    if "workload" in options and others:
        raise ValueError(f"{what}['workload'] replays that workload, so {others} would be ignored: pass 'workload' alone")
    chosen = [k for k in SUITE_OPTIONS if k in options]
    if "suite" not in options:
        if chosen:
            raise ValueError(f"{what} {chosen} choose an episode of an evaluation suite and need {what}['suite'] ('eval' or a suite "
                             "file's path): without 'suite', reset draws a seeded workload and would ignore them")
        return options
    for key, kind in (("suite", "'eval' or a suite file's path"), ("suite_dir", "a directory's path")):
        value = options.get(key)
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"{what}[{key!r}] must be {kind} (str or os.PathLike), got {type(value).__name__} {value!r}")
    ignored = [k for k in EVAL_SUITE_OPTIONS if k in options]
    if options["suite"] != "eval" and ignored:
        raise ValueError(f"{what} {ignored} are read only with {what}['suite'] == 'eval', got suite={options['suite']!r} (a suite "
                         "file carries its own load): leave them out, or use suite='eval'")
    return options


#: Task sets that name one constructed workload rather than curves to draw from: played once (one root,
#: one episode), never trained on.
FIXED_SCENARIOS = ("stress",)


def is_fixed_scenario(task_set: Any) -> bool:
    """Whether ``task_set`` names a fixed scenario (:data:`FIXED_SCENARIOS`)."""
    return isinstance(task_set, str) and task_set in FIXED_SCENARIOS


class WorkloadGenerator(Protocol):
    """Where an episode's workload comes from (module docstring)."""

    #: The curve bank its workloads are on (replays: the suite's; draws: the one drawn from).
    bank: CurveBank
    #: Whether a learner may train on its workloads (the stress scenario and evaluation suites: no).
    trains: bool
    #: Whether it gives one workload whatever the rng (a scenario played once).
    fixed: bool

    def workload(self, rng: np.random.Generator | None = None) -> Workload:
        """One episode's workload; ``rng`` is the only randomness a draw uses (a replay ignores it)."""
        ...


@dataclasses.dataclass(frozen=True)
class Drawn:
    """A seeded draw (:func:`core_env.workload.draw_workload`): ``arrival_steps`` steps of arrivals at
    ``intensity`` per node on ``n_nodes`` nodes (only the steps ``horizon`` lets an episode play), each task
    drawn from ``bank`` by ``recipe`` against the families of ``reference`` (default: ``bank``)."""

    bank: CurveBank
    intensity: float
    arrival_steps: int
    recipe: TaskRecipe
    n_nodes: int
    reference: CurveBank | None = None
    horizon: int | None = None
    trains: bool = True
    fixed = False

    @classmethod
    def from_config(cls, config: EnvConfig, bank: CurveBank | None = None, reference: CurveBank | None = None, horizon: int | None = None) -> Drawn:
        """The config's load, arrival window, recipe and node count on ``bank`` (default: its train curves)."""
        return cls(config.bank("train") if bank is None else bank, config.arrival_intensity, config.arrival_steps, config.recipe,
                   config.n_nodes, reference, horizon, trains=bank is None)

    def workload(self, rng: np.random.Generator | None = None) -> Workload:
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"a drawn workload needs a numpy Generator, got {type(rng).__name__}")
        return draw_workload(self.bank, self.intensity, self.arrival_steps, rng, self.recipe, n_nodes=self.n_nodes, reference=self.reference,
                             horizon=self.horizon)


@dataclasses.dataclass(frozen=True)
class Given:
    """A workload built elsewhere (by hand, from a trace), replayed as is."""

    given: Workload
    trains: bool = False
    fixed = True

    @property
    def bank(self) -> CurveBank:
        return self.given.bank

    def workload(self, rng: np.random.Generator | None = None) -> Workload:
        return self.given


@dataclasses.dataclass(frozen=True)
class Stress:
    """The constructed scenario on ``n_nodes`` nodes with ``feasible`` feasible tasks: one fixed workload whose
    optimum is known (every feasible task completes: :attr:`optimum`, 13/20 at N = 4), where FIFO and EDF
    complete nothing and a clairvoyant scheduler all it can.

    Feasible tasks arrive every 2 steps from step N, each needing exactly ``w = 2N`` node-steps within a
    window of ``w`` steps (slack 1): one missed step dooms it. At most N of them overlap, so serving each
    on every step of its window completes them all. Decoys (flat curves, never reach their targets)
    arrive earlier and have earlier deadlines, and N of them are active at the first N feasible arrivals;
    after that, each feasible arrival sees N - 1 earlier doomed feasible tasks plus one decoy ahead of it
    in both arrival order (FIFO) and deadline order (EDF). With N = 4 and 13 feasible tasks there are 7
    decoys: the slot-relaxed MILP, the independent-feasibility relaxation and the clairvoyant rate are 13/20 = 65%; FIFO = EDF = 0%.
    The arrival window ends after the last arrival, so the episode ends once the tasks have drained.
    """

    n_nodes: int
    feasible: int = 13
    trains: bool = False
    fixed = True

    @property
    def bank(self) -> CurveBank:
        return stress_bank()

    @property
    def optimum(self) -> float:
        """The best completion rate any scheduler reaches: its feasible tasks over its tasks."""
        workload = self.workload()
        return float(np.isfinite(workload.demand).sum() / len(workload))

    def workload(self, rng: np.random.Generator | None = None) -> Workload:
        n_nodes, feasible = self.n_nodes, self.feasible
        if feasible < n_nodes:
            raise ValueError(f"the stress scenario needs at least n_nodes={n_nodes} feasible tasks")
        w = 2 * n_nodes
        bank = self.bank
        learner = bank.curve(0)
        target = 0.5 * (learner[w - 2] + learner[w - 1])  # first reported at step w
        first = n_nodes
        tasks = []  # (arrival, deadline, target, curve)
        for j in range(n_nodes):  # decoys covering the first N feasible arrivals
            tasks.append((j, first + w - 1, 0.5, 1))
        covered = n_nodes
        group = 1
        while covered < feasible:  # one decoy per N later feasible arrivals
            first_cover = first + 2 * covered
            tasks.append((first + 2 * group - 1, first_cover + w - 1, 0.5, 1))
            covered += n_nodes
            group += 1
        for i in range(feasible):
            a = first + 2 * i
            tasks.append((a, a + w, target, 0))
        tasks.sort(key=lambda task: task[0])
        arrival, deadline, targets, curve = (np.array(col) for col in zip(*tasks))
        bps = np.ones(arrival.size)
        demand = np.array([bank.demand(int(c), float(t), 1.0) for c, t in zip(curve, targets)])
        return Workload(bank, arrival, deadline, targets, bps, curve, demand, int(arrival[-1]) + 1)


def stress_workload(n_nodes: int = 4, feasible: int = 13) -> Workload:
    """The stress scenario's workload (:class:`Stress`) on ``n_nodes`` nodes."""
    return Stress(n_nodes, feasible).workload()


@dataclasses.dataclass(frozen=True)
class SuiteEpisode:
    """Episode ``episode`` of root ``root`` of an evaluation suite: the committed one of a task set's name
    and a named load, one in ``suite_dir`` (``python -m core_env.suites generate``), or the suite file at
    ``path``. Refused (ValueError) when the suite was generated for another node count than ``n_nodes``,
    unless ``any_nodes``."""

    task_set: Any
    load: str | float | None
    root: int
    episode: int
    n_nodes: int
    suite_dir: str | os.PathLike | None = None
    path: str | os.PathLike | None = None
    any_nodes: bool = False
    trains: bool = False
    fixed = True

    @property
    def bank(self) -> CurveBank:
        return self.workload().bank

    def workload(self, rng: np.random.Generator | None = None) -> Workload:
        if self.path is not None:
            workload = load_suite_file(self.path, self.root, self.episode, task_set=self.task_set)
        else:
            workload = load_suite(self.task_set, self.load, self.root, self.episode, self.suite_dir)
        if not self.any_nodes:  # after the read, so that a bad root or episode is named first
            meta = suite_file_meta(self.path) if self.path is not None else suite_meta(self.task_set, self.load, self.suite_dir)
            generated = meta.get("n_nodes")
            if generated is not None and generated != self.n_nodes:
                name = str(self.path) if self.path is not None else f"{self.task_set}/{self.load}"
                raise ValueError(f"suite {name} was generated for n_nodes={generated} (its load is per node); this env has "
                                 f"n_nodes={self.n_nodes}: replay it on that many nodes, or pass options['any_nodes']=True to replay "
                                 "it on these on purpose")
        return workload


def suite_workloads(task_set: str, load: str, cells: Sequence[tuple[int, int]], n_nodes: int = SUITE_NODES) -> list[Workload]:
    """The workloads of the (root, episode) ``cells`` of a committed evaluation suite, each from its
    :class:`SuiteEpisode` on ``n_nodes`` nodes (what the benchmarks replay)."""
    return [SuiteEpisode(task_set, load, root, episode, n_nodes).workload() for root, episode in cells]


def suite_scheme(load: Any, n_nodes: int) -> bool:
    """Whether episodes at this load on ``n_nodes`` nodes follow the suites' scheme: a named load, on the
    node count the suites are generated for (:data:`core_env.suites.SUITE_NODES`)."""
    return isinstance(load, str) and load in LOADS and n_nodes == SUITE_NODES


def committed_suite_fits(task_set: Any, load: Any, n_nodes: int) -> bool:
    """Whether a committed evaluation suite replays this (task set, load) on ``n_nodes`` nodes: a built-in
    task set with a suite, at a named load, on the suites' node count."""
    return isinstance(task_set, str) and task_set in SUITE_TASK_SETS and suite_scheme(load, n_nodes)


def generator_for(config: EnvConfig) -> WorkloadGenerator:
    """A config's own generator: the stress scenario for ``task_set="stress"``, else a seeded draw on its
    task set's train curves (arrivals only for the steps ``max_cycles`` lets an episode play)."""
    if is_fixed_scenario(config.task_set):
        return Stress(config.n_nodes)
    return Drawn.from_config(config, horizon=config.max_cycles)


def _int_option(options: dict[str, Any], key: str) -> int:
    value = options.get(key, 0)
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"options[{key!r}] must be an int, got {value!r}")
    return int(value)


def generator_from_options(config: EnvConfig, options: dict[str, Any] | None) -> WorkloadGenerator:
    """The generator ``reset(options=...)`` asks for (the config's own without options).

    Options: ``{"workload": Workload}`` replays a given workload; ``{"suite": "eval", "root": r,
    "episode": e}`` (optionally ``"task_set"``, ``"load"``, defaulting to the config's) replays a
    pre-generated evaluation workload: a committed one, or with ``"suite_dir": DIR`` one written by
    :func:`core_env.suites.write_suite` / ``python -m core_env.suites generate``; ``{"suite": PATH,
    "root": r, "episode": e}`` replays the suite file at PATH. A suite's load is per node, so it is
    replayed only on as many nodes as it was generated for (its meta's ``n_nodes``), unless ``"any_nodes":
    True`` says the other N is meant. Unknown option keys are ignored with a warning.
    """
    options = dict(reset_options(options) or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        warnings.warn(f"ignoring unknown reset option(s) {unknown}; known options: {sorted(OPTIONS)}", stacklevel=4)
    if "workload" in options:
        workload = options["workload"]
        if not isinstance(workload, Workload):
            raise TypeError(f"options['workload'] must be a Workload, got {type(workload).__name__}")
        return Given(workload)
    if "suite" not in options:
        return generator_for(config)
    root, episode = _int_option(options, "root"), _int_option(options, "episode")
    any_nodes = options.get("any_nodes", False)
    if not isinstance(any_nodes, bool):
        raise TypeError(f"options['any_nodes'] must be a bool, got {any_nodes!r}")
    suite = options["suite"]
    if suite != "eval":
        if isinstance(suite, os.PathLike) or (isinstance(suite, str) and (suite.endswith(".npz") or os.path.isfile(suite))):
            return SuiteEpisode(options.get("task_set", config.task_set), None, root, episode, config.n_nodes, path=suite, any_nodes=any_nodes)
        raise ValueError(f"unknown suite {suite!r}; use 'eval' (the committed suites, or with 'suite_dir' a directory of "
                         "generated ones) or the path of a suite file")
    task_set = options.get("task_set", config.task_set if config.bank_path is not None else config.task_set_name)
    load = options.get("load", config.load)
    suite_dir = options.get("suite_dir")
    if suite_dir is None:
        if config.bank_path is not None and "task_set" not in options:
            raise ValueError(f"no committed evaluation suite for bank {config.task_set_name!r}: generate one with "
                             f"`python -m core_env.suites generate --task-set {config.task_set} --out DIR` and pass options "
                             "{'suite': 'eval', 'suite_dir': DIR, ...}")
    return SuiteEpisode(task_set, load, root, episode, config.n_nodes, suite_dir=suite_dir, any_nodes=any_nodes)


__all__ = ["Drawn", "FIXED_SCENARIOS", "Given", "OPTIONS", "Stress", "SuiteEpisode", "WorkloadGenerator", "committed_suite_fits",
           "generator_for", "generator_from_options", "is_fixed_scenario", "reset_options", "stress_workload", "suite_scheme",
           "suite_workloads"]
