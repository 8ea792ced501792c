"""The ``milp`` row of the cell-based suites: the offline optimum of each cell's episodes, as a cell result.

For the committed evaluation suites (a built-in task set at a named load at the suites' N, unit speeds)
the optimum is read from the stored ceilings (``core_env/data/suites/ceilings.json``, every episode
proven optimal); for other unit-speed scenarios (more nodes, the stress scenario, a bank file, a replayed trace) it is
solved here with :func:`mara_agents.bounds.milp_ceiling`, once per cell, and cached like any other cell. A cell whose
solve stopped at the time limit reports the best schedule found and its dual bound (``gap`` > 0),
never a number above what was proven. Scenarios with node speeds or a switching cost have no exact
ceiling and do not run this row (see :func:`has_exact_ceiling`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

#: The ceiling's row name in every completion table.
MILP = "milp"
#: Environment overrides under which the MILP (unit speeds, no switching cost) is not an exact ceiling.
NOT_EXACT_UNDER = ("node_speeds", "switch_cost")


def has_exact_ceiling(env: Sequence[tuple[str, Any]]) -> bool:
    """Whether the MILP is the exact ceiling of a scenario with these EnvConfig overrides."""
    overrides = dict(env)
    return not any(overrides.get(name) not in (None, 0, 0.0) for name in NOT_EXACT_UNDER)


def ceiling_results(cells: Sequence[Any]) -> list[dict[str, Any]]:
    """Cell results of the ``milp`` row (the format of :func:`benchmarks.cells.run_group`)."""
    from benchmarks.cells import EPISODE_STATS, FORMAT
    from core_env.config import LOADS
    from core_env.workload import SUITE_NODES, SUITE_TASK_SETS, suite_ceilings
    from mara_agents.bounds import milp_ceiling

    results = []
    for cell in cells:
        start = time.perf_counter()
        if not has_exact_ceiling(cell.env):
            raise ValueError(f"no exact MILP ceiling for a scenario with {dict(cell.env)} (unit speeds and no switching cost only)")
        config, workloads = cell.config(), cell.workloads()
        stored = not cell.trace and cell.task_set in SUITE_TASK_SETS and isinstance(cell.load, str) and cell.load in LOADS and config.n_nodes == SUITE_NODES
        table = suite_ceilings(cell.task_set, cell.load) if stored else None
        episodes = []
        for e, workload in enumerate(workloads):
            if table is not None:
                entry = table[(cell.root, e)]
                completed, bound, arrived = int(entry["completed"]), float(entry["bound"]), int(entry["arrived"])
            else:
                solved = milp_ceiling(workload, config.n_nodes)
                completed, bound, arrived = solved.completed, solved.bound, solved.arrived
            episode = dict.fromkeys(EPISODE_STATS, 0.0)
            episode.update(completion_rate=completed / arrived if arrived else 0.0, completed=completed, arrived=arrived,
                           t=float(config.arrival_steps))
            episode["gap"] = (bound - completed) / max(bound, 1.0)
            episodes.append(episode)
        means = {key: float(np.mean([e[key] for e in episodes])) for key in (*EPISODE_STATS, "gap")}
        results.append({"format": FORMAT, "key": cell.key, "cell": cell.fields(), "episodes": episodes, "mean": means,
                        "feasibility_bound": float(np.mean([w.feasibility_bound() for w in workloads])), "ceiling": "stored" if stored else "solved",
                        "decision_ms": 0.0, "wall_s": time.perf_counter() - start})
    return results
