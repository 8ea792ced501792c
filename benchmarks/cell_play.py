"""How one job of cells is computed: an agent row's rollout, or the runner registered for its row.

Cells that differ only in their root play as one batch (:func:`run_group`: one agent, one simulator, fewer
and larger predictor calls). A row that is not a rollout of an agent registers a :class:`RowRunner` in
:data:`ROW_RUNNERS`: the ceiling rows ``milp`` and ``milp-slots`` (stored or solved optima,
:mod:`benchmarks.ceiling_cells`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.ceiling_cells import MILP, MILP_SLOTS, ceiling_results, slot_ceiling_key, slot_ceiling_results
from benchmarks.cell_store import EPISODE_STATS, cell_result
from core_env.extras import needs

if TYPE_CHECKING:
    from benchmarks.cell import Cell

#: Per-step agreement of a learned row with its teacher (:class:`benchmarks.rollout.Agreement`), stored
#: per cell as ``teacher_agreement`` (means over its episodes).
AGREEMENT = ("same_tasks_served", "served_also_by_shadow")


@dataclasses.dataclass(frozen=True)
class RowRunner:
    """How the cells of a row that is not an agent's rollout are computed.

    Attributes:
        run: a job of cells (differing only in their root) -> their results (:func:`benchmarks.cell_store.cell_result`).
        key: what else a cell's results read, added to its key (:attr:`benchmarks.cell.Cell.key`), or None.
    """

    run: Callable[[Sequence[Cell]], list[dict[str, Any]]]
    key: Callable[[Cell], Any] | None = None


#: Rows computed by their own runner instead of a rollout: the ceiling rows (:mod:`benchmarks.ceiling_cells`);
#: ``milp-slots`` keys the stored K-slot ceilings it reads, so an improved search recomputes its cells.
ROW_RUNNERS: dict[str, RowRunner] = {MILP: RowRunner(ceiling_results), MILP_SLOTS: RowRunner(slot_ceiling_results, slot_ceiling_key)}


def run_cell(cell: Cell) -> dict[str, Any]:
    """Play the cell's episodes with its agent (one batch); the JSON-ready result."""
    return run_group([cell])[0]


def run_group(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """Play cells that differ only in their root as one batch (one agent, one simulator): the same
    per-episode results as cell by cell, with fewer and larger predictor calls; a row of :data:`ROW_RUNNERS`
    by its runner."""
    first = cells[0]
    if any(dataclasses.replace(c, root=first.root) != first for c in cells):
        raise ValueError("a group's cells must differ only in their root")
    runner = ROW_RUNNERS.get(first.agent)
    return runner.run(cells) if runner is not None else rollout_results(cells)


def rollout_results(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """The results of an agent row's cells, played as one batch (learned rows: with their per-step agreement
    with their teacher, on their own trajectories)."""
    from benchmarks.agents import make_agent, teacher_of
    from benchmarks.rollout import run_agent

    with needs(__name__):
        import torch

    torch.set_num_threads(1)  # tiny per-step ops: one thread is fastest, and parallel workers must not oversubscribe the cores
    start = time.perf_counter()
    first = cells[0]
    workloads = [cell.workloads() for cell in cells]
    flat = [w for group in workloads for w in group]
    teacher = teacher_of(first.agent, first.seed)
    shadow = make_agent(teacher) if teacher else None
    stats, decision_s, decisions = run_agent(make_agent(first.agent, first.seed, first.task_set), flat, first.config(), timed=True, shadow=shadow)
    per_env_ms = 1e3 * decision_s / max(decisions * len(flat), 1)
    results, offset = [], 0
    for cell, group in zip(cells, workloads):
        episodes = [{key: stats[key][offset + i].item() for key in EPISODE_STATS} for i in range(len(group))]
        offset += len(group)
        result = cell_result(cell, episodes, group, decision_ms=per_env_ms, wall_s=(time.perf_counter() - start) / len(cells))
        if shadow is not None:
            rows = slice(offset - len(group), offset)
            result["teacher_agreement"] = {"teacher": teacher, **{key: float(np.nanmean(stats[key][rows])) for key in AGREEMENT}}
        results.append(result)
    return results
