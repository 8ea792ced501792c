"""A benchmark cell: what it is (identity, key) and the workloads it plays.

A :class:`Cell` is one agent row (and training seed, for learned agents) on one evaluation root of one
scenario: a task set, a load, environment overrides (nodes, slots, speeds, switching cost) and the
root's episodes. Its key names its result in the cache (:mod:`benchmarks.cell_store`); the runner
(:mod:`benchmarks.cells`) computes it (:mod:`benchmarks.cell_play`).

Workloads: named loads at N = 4 replay the committed evaluation suites (``load_suite``); other
scenarios (more nodes, a numeric load) draw seeded workloads on the evaluation curves, reproducibly from
the cell; ``stress`` is the fixed stress scenario. Each episode's workload generator is chosen through
:mod:`core_env.generators` (:meth:`Cell.episode_generators`). A cell whose ``task_set`` is a **bank file** (your own
curves, ``python -m core_env.curves import``) draws its episodes on the bank's eval split with the train
split as reference: at a named load and N = 4 by the suites' seeding scheme
(:func:`core_env.workload.suite_rng`), so root ``r`` episode ``e`` is exactly episode ``(r, e)`` of
``python -m core_env.suites generate --task-set BANK``; otherwise as the other drawn scenarios. Its key
includes the bank file's sha256, so a changed bank never reuses cached cells. A cell with a ``trace``
(layout, path, step_seconds) replays that job trace on its task set (:meth:`Cell.trace_workloads`);
its key includes the trace file's sha256 and its ``max_cycles`` is raised to the trace's horizon. A row
with its own runner (:data:`benchmarks.cell_play.ROW_RUNNERS`) adds what else its results read to the key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zlib
from typing import Any

import numpy as np

from benchmarks.cell_store import FORMAT
from core_env.config import EnvConfig
from core_env.curves import bank_file, is_bank_path
from core_env.generators import Drawn, Given, SuiteEpisode, WorkloadGenerator, committed_suite_fits, generator_for, suite_scheme
from core_env.workload import SUITE_EPISODES, Workload, suite_rng

_DRAWN_SEED = 20261129
_TRACE_SEED = 20261130


@dataclasses.dataclass(frozen=True)
class Cell:
    """One agent row × training seed × scenario × evaluation root (see the module docstring)."""

    agent: str
    task_set: str = "id"
    load: str | float = "train"
    root: int = 0
    seed: int = 0
    env: tuple[tuple[str, Any], ...] = ()  # EnvConfig overrides as sorted (name, value) pairs
    episodes: int = SUITE_EPISODES
    trace: tuple[tuple[str, Any], ...] = ()  # a replayed job trace: sorted (name, value) pairs of layout, path, step_seconds

    @property
    def key(self) -> str:
        from benchmarks.agents import weights_id
        from benchmarks.cell_play import ROW_RUNNERS

        weights = weights_id(self.agent, self.seed)  # learned rows: which checkpoint (heuristic keys are unchanged)
        extra: list[Any] = [weights] if weights else []
        if self.bank_sha256 is not None:  # a bank file: its content, not only its path (built-in keys are unchanged)
            extra.append({"bank_sha256": self.bank_sha256})
        if self.trace:  # a trace file: its content too
            extra.append({"trace_sha256": self.replayed()[0]})
        runner = ROW_RUNNERS.get(self.agent)
        if runner is not None and runner.key is not None:  # what else its results read (milp-slots: the stored K-slot ceilings)
            extra.append(runner.key(self))
        text = json.dumps([FORMAT, self.fields()] + extra, sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    def fields(self) -> dict[str, Any]:
        """The cell's fields as keyed and saved with its result (``trace`` only when set, so the keys and
        cached results of cells without a trace are unchanged)."""
        out = dataclasses.asdict(self)
        if not self.trace:
            del out["trace"]
        return out

    def replayed(self):
        """(sha256, :class:`core_env.trace.Trace`) of the cell's trace file (read once per file content)."""
        from core_env.trace import trace_file

        options = dict(self.trace)
        return trace_file(options["path"], options["layout"], options["step_seconds"])

    @property
    def bank_sha256(self) -> str | None:
        """The sha256 of the bank file ``task_set`` names (None for a built-in task set)."""
        return bank_file(self.task_set).sha256 if is_bank_path(self.task_set) else None

    def config(self) -> EnvConfig:
        """The cell's EnvConfig; with a trace and no ``max_cycles`` override, ``max_cycles`` is raised to the
        trace's horizon (:func:`core_env.trace.trace_horizon`) so that long traces are not truncated."""
        from core_env.trace import trace_horizon

        overrides = dict(self.env)
        config = EnvConfig(task_set=self.task_set, load=self.load, **overrides)
        if self.trace and "max_cycles" not in overrides:
            config = dataclasses.replace(config, max_cycles=max(config.max_cycles, trace_horizon(self.replayed()[1], config.recipe)))
        return config

    def episode_generators(self) -> list[tuple[WorkloadGenerator, np.random.Generator | None]]:
        """Each episode's workload generator (:mod:`core_env.generators`) and the rng it draws with (None for
        a replay): a fixed scenario once; a trace replayed per episode; a bank file's eval split drawn by
        the suites' seeding scheme (at a named load on the suites' N) or by the cells' own; the committed
        suite where it fits the config; else the task set's eval curves drawn by the cells' own scheme
        (targets and deadlines from the train runs, as in the suites)."""
        config = self.config()
        own = generator_for(config)
        if own.fixed:
            return [(own, None)]
        if self.trace:
            return [(Given(workload), None) for workload in self.trace_workloads(config)]
        if config.bank_path is None and committed_suite_fits(self.task_set, self.load, config.n_nodes):
            return [(SuiteEpisode(self.task_set, self.load, self.root, e, config.n_nodes), None) for e in range(self.episodes)]
        name = config.task_set_name
        if config.bank_path is not None and suite_scheme(self.load, config.n_nodes):
            rngs = [suite_rng(name, self.load, self.root, e) for e in range(self.episodes)]
        else:
            tag = zlib.crc32(f"{name}|{self.load}|{config.n_nodes}".encode())
            rngs = [np.random.default_rng([_DRAWN_SEED, tag, self.root, e]) for e in range(self.episodes)]
        drawn = Drawn.from_config(config, bank=config.bank("eval"), reference=config.bank("train"))
        return [(drawn, rng) for rng in rngs]

    def workloads(self) -> list[Workload]:
        return [generator.workload(rng) for generator, rng in self.episode_generators()]

    def trace_record(self) -> dict[str, Any] | None:
        """The provenance of the cell's trace (path, sha256, layout, step_seconds), or None without one."""
        if not self.trace:
            return None
        options = dict(self.trace)
        return {"path": options["path"], "sha256": self.replayed()[0], "layout": options["layout"], "step_seconds": options["step_seconds"]}

    def trace_workloads(self, config: EnvConfig) -> list[Workload]:
        """The trace replayed once per episode: arrivals (and deadlines, targets, rates where given) from the
        trace, every missing field drawn on the eval split (train split as reference) by the generator
        ``[seed, crc32(trace sha256), root, episode]``."""
        from core_env.trace import trace_workload

        sha, trace = self.replayed()
        tag = zlib.crc32(sha.encode())
        bank, reference = config.bank("eval"), config.bank("train")
        return [trace_workload(trace, bank, np.random.default_rng([_TRACE_SEED, tag, self.root, e]), config.recipe, config.n_nodes, reference)
                for e in range(self.episodes)]


def bank_suite(task_set: str, load: str, roots: int = 10, episodes: int = SUITE_EPISODES) -> tuple[EnvConfig, list[Workload], list[tuple[int, int]]]:
    """A bank file's evaluation suite at a named load, as the cells draw it (:meth:`Cell.workloads`: the
    eval split, the suites' seeding scheme): (config, workloads, their (root, episode)), ``roots`` × ``episodes``."""
    cells = [Cell("edf", task_set, load, root=r, episodes=episodes) for r in range(roots)]
    return cells[0].config(), [w for cell in cells for w in cell.workloads()], [(r, e) for r in range(roots) for e in range(episodes)]
