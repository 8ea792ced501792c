"""The ceiling rows of the cell-based suites, as cell results: ``milp`` (slot-relaxed optimum, an upper
bound) and ``milp-slots`` (the K-slot optimum under the env's own rules, or the interval around it).

``milp-slots`` is read from the stored K-slot ceilings (``core_env/data/suites/slot_ceilings.json``,
:mod:`benchmarks.ceilings`) and exists for the committed evaluation suites only (a built-in task set at a
named load at the suites' N and K, no other override, no trace): its per-episode ``completed`` is the value
of a stored schedule replayed in the env, its ``gap`` the distance to the proven bound (0 where optimal).
Elsewhere the row does not run (see :func:`has_stored_slot_ceiling`): a K-slot search takes seconds to
minutes per episode and is not done on the fly. The stored files are read verified: ``slot_ceilings.json``
against the sha256 in ``slot_manifest.json`` beside it, every entry of both ceilings files range-checked
(:func:`core_env.workload.read_slot_ceilings`, :func:`~core_env.workload.read_ceilings`); a file that fails
is a ValueError naming it and the entry, never a ceiling above 100 %.

The ``milp`` row:

For the committed evaluation suites (a built-in task set at a named load at the suites' N, unit speeds)
the optimum is read from the stored ceilings (``core_env/data/suites/ceilings.json``, every episode
proven optimal); for other unit-speed scenarios (more nodes, the stress scenario, a bank file, a replayed trace) it is
solved here with :func:`mara_agents.bounds.milp_ceiling`, once per cell, and cached like any other cell. A cell whose
solve stopped at the time limit reports the best schedule found and its dual bound (``gap`` > 0),
never a number above what was proven. Scenarios with node speeds or a switching cost have no exact
ceiling and do not run this row (see :func:`has_exact_ceiling`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.cell_store import EPISODE_STATS, cell_result

#: The slot-relaxed optimum's row name (an upper bound) in every completion table.
MILP = "milp"
#: The K-slot optimum's row name (the ceiling of every completion table and the denominator of "gap closed").
MILP_SLOTS = "milp-slots"
#: Both ceiling rows: optima computed offline, not schedulers.
CEILING_ROWS = (MILP_SLOTS, MILP)
#: Environment overrides under which the MILP (unit speeds, no switching cost) is not an exact ceiling.
NOT_EXACT_UNDER = ("node_speeds", "switch_cost")


def has_exact_ceiling(env: Sequence[tuple[str, Any]]) -> bool:
    """Whether the MILP is the exact ceiling of a scenario with these EnvConfig overrides."""
    overrides = dict(env)
    return not any(overrides.get(name) not in (None, 0, 0.0) for name in NOT_EXACT_UNDER)


def _episode(completed: int, arrived: int, t: float, gap: float) -> dict[str, Any]:
    """A ceiling episode's statistics (the rollout's :data:`~benchmarks.cell_store.EPISODE_STATS`, 0 where a
    schedule has none, and ``gap``, the distance to the proven bound)."""
    episode = dict.fromkeys(EPISODE_STATS, 0.0)
    episode.update(completion_rate=completed / arrived if arrived else 0.0, completed=completed, arrived=arrived, t=t, gap=gap)
    return episode


def _result(cell: Any, episodes: list[dict[str, Any]], workloads: Sequence[Any], ceiling: str, start: float) -> dict[str, Any]:
    """A ceiling row's cell result (:func:`benchmarks.cell_store.cell_result`, with the mean ``gap``) from its episodes."""
    return cell_result(cell, episodes, workloads, (*EPISODE_STATS, "gap"), ceiling=ceiling, decision_ms=0.0, wall_s=time.perf_counter() - start)


def has_stored_slot_ceiling(task_set: str, load: Any, env: Sequence[tuple[str, Any]], trace: Any = None) -> bool:
    """Whether a scenario is a committed evaluation suite, whose K-slot ceilings are stored."""
    from core_env.generators import committed_suite_fits
    from core_env.workload import SUITE_NODES

    overrides = dict(env)
    return not trace and set(overrides) <= {"n_nodes"} and committed_suite_fits(task_set, load, overrides.get("n_nodes", SUITE_NODES))


def slot_ceiling_digest(cell: Any) -> str | None:
    """The sha256 of the stored K-slot entries a ``milp-slots`` cell reads (None where none are stored), so
    that a cached cell is recomputed when a longer search improves them."""
    from core_env.workload import suite_slot_ceilings

    if not has_stored_slot_ceiling(cell.task_set, cell.load, cell.env, cell.trace):
        return None
    table = suite_slot_ceilings(cell.task_set, cell.load)
    entries = [table.get((cell.root, e)) for e in range(cell.episodes)]
    return hashlib.sha256(json.dumps(entries, sort_keys=True, default=str).encode()).hexdigest()


def slot_ceiling_key(cell: Any) -> dict[str, str | None]:
    """What a ``milp-slots`` cell adds to its key (its runner's ``key``, :mod:`benchmarks.cell_play`): :func:`slot_ceiling_digest`."""
    return {"slot_ceilings_sha256": slot_ceiling_digest(cell)}


def slot_ceiling_results(cells: Sequence[Any]) -> list[dict[str, Any]]:
    """Cell results of the ``milp-slots`` row, from the stored K-slot ceilings."""
    from core_env.workload import suite_slot_ceilings

    results = []
    for cell in cells:
        start = time.perf_counter()
        if not has_stored_slot_ceiling(cell.task_set, cell.load, cell.env, cell.trace):
            raise ValueError(f"no stored K-slot ceiling for {cell.task_set}/{cell.load} with {dict(cell.env)}: committed suites only")
        table = suite_slot_ceilings(cell.task_set, cell.load)
        episodes = [_episode(int(entry["completed"]), int(entry["arrived"]), float(cell.config().arrival_steps), float(entry["gap"]))
                    for entry in (table[(cell.root, e)] for e in range(cell.episodes))]
        results.append(_result(cell, episodes, cell.workloads(), "stored", start))
    return results


def ceiling_results(cells: Sequence[Any]) -> list[dict[str, Any]]:
    """Cell results of the ``milp`` row (the format of :func:`benchmarks.cell_play.run_group`)."""
    from core_env.generators import committed_suite_fits
    from core_env.workload import suite_ceilings
    from mara_agents.bounds import milp_ceiling

    results = []
    for cell in cells:
        start = time.perf_counter()
        if not has_exact_ceiling(cell.env):
            raise ValueError(f"no exact MILP ceiling for a scenario with {dict(cell.env)} (unit speeds and no switching cost only)")
        config, workloads = cell.config(), cell.workloads()
        stored = not cell.trace and committed_suite_fits(cell.task_set, cell.load, config.n_nodes)
        table = suite_ceilings(cell.task_set, cell.load) if stored else None
        episodes = []
        for e, workload in enumerate(workloads):
            if table is not None:
                entry = table[(cell.root, e)]
                completed, bound, arrived = int(entry["completed"]), float(entry["bound"]), int(entry["arrived"])
            else:
                solved = milp_ceiling(workload, config.n_nodes)
                completed, bound, arrived = solved.completed, solved.bound, solved.arrived
            episodes.append(_episode(completed, arrived, float(config.arrival_steps), (bound - completed) / max(bound, 1.0)))
        results.append(_result(cell, episodes, workloads, "stored" if stored else "solved", start))
    return results
