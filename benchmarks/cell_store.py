"""Cell results: their format, their integrity checks, and the cache store that keeps them on disk.

A cell's result (:func:`cell_result`: per-episode statistics and the cell's means) is a JSON file named by
the cell's key under the cache directory (:class:`CellStore`), written atomically.

Integrity: each saved cell carries ``checksum``, the sha256 of its canonical JSON (``json.dumps`` of the
result without ``checksum``, ``sort_keys=True``). :meth:`CellStore.load` treats a cell as missing (so it
is recomputed) unless the checksum verifies, the result is this cell's (format, key, cell fields), its
episode list is complete (the cell's ``episodes``; one for ``stress``) and every mean agrees with the
episodes. A computed result that fails the same checks is an error, never saved or returned
(:func:`benchmarks.cells.run_cells`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks import RESULTS_DIR
from core_env.generators import is_fixed_scenario
from core_env.npz import write_atomic

if TYPE_CHECKING:
    from benchmarks.cell import Cell
    from core_env.workload import Workload

#: Bump when a cell's result would change for the same key (invalidates every cached cell).
FORMAT = 3  # 2: discrete_core_v1 workloads; 3: saved cells carry a checksum
CELL_DIR = RESULTS_DIR / "cells"
#: Per-episode statistics kept in a cell's result.
EPISODE_STATS = ("completion_rate", "completed", "arrived", "failed", "rejected", "node_utilization", "busy_node_steps",
                 "wasted_node_steps", "switches", "conflicts", "invalid_actions", "t")


def cell_result(cell: Cell, episodes: list[dict[str, Any]], workloads: Sequence[Workload], stats: Sequence[str] = EPISODE_STATS,
                **extra: Any) -> dict[str, Any]:
    """A cell's JSON-ready result: its format, key and fields, its ``episodes`` (one dict of statistics each),
    their means over ``stats``, the mean feasibility bound of its ``workloads``, and ``extra`` (``decision_ms``,
    ``wall_s``, a ceiling row's ``ceiling``, ...)."""
    means = {key: float(np.mean([e[key] for e in episodes])) for key in stats}
    return {"format": FORMAT, "key": cell.key, "cell": cell.fields(), "episodes": episodes, "mean": means,
            "feasibility_bound": float(np.mean([w.feasibility_bound() for w in workloads])), **extra}


def checksum(result: dict[str, Any]) -> str:
    """The sha256 of a cell result's canonical JSON: ``json.dumps`` of the result without its ``checksum``
    entry, ``sort_keys=True`` (what :meth:`CellStore.save` stores and :meth:`CellStore.load` verifies)."""
    body = {key: value for key, value in result.items() if key != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def expected_episodes(cell: Cell) -> int:
    """How many episodes a result of ``cell`` holds (``len(cell.workloads())``, from the cell's fields)."""
    return 1 if is_fixed_scenario(cell.task_set) else cell.episodes


def _number(value: Any) -> bool:
    return isinstance(value, (int, float))


#: Ranges an episode statistic of a cell result must lie in (a checksum can be recomputed after an edit;
#: these catch values no episode can produce): shares in [0, 1], counts and times finite and >= 0.
SHARES = ("completion_rate", "node_utilization", "gap")


def _out_of_range(episode: dict[str, Any]) -> str | None:
    for name, value in episode.items():
        if not _number(value):
            continue
        if not math.isfinite(value):
            return f"{name} = {value!r} is not finite"
        if value < 0 or (name in SHARES and value > 1):
            return f"{name} = {value!r} is outside {'[0, 1]' if name in SHARES else '[0, inf)'}"
    if _number(episode.get("completed")) and _number(episode.get("arrived")) and episode["completed"] > episode["arrived"]:
        return f"completed {episode['completed']!r} exceeds arrived {episode['arrived']!r}"
    return None


def result_problem(cell: Cell, result: Any, key: str | None = None) -> str | None:
    """Why ``result`` (as parsed from JSON, without ``checksum``) is not a complete, consistent result of
    ``cell``, or None when it is: format, key and cell fields must be the cell's, the episode list complete
    (:func:`expected_episodes`), every :data:`EPISODE_STATS` mean present and every mean equal to the mean
    of its episodes (to 1e-9 relative), and every episode statistic in its range (shares in [0, 1], the
    rest finite and >= 0, completed <= arrived). ``key``: ``cell.key`` if already known."""
    if not isinstance(result, dict):
        return f"not a JSON object ({type(result).__name__})"
    if result.get("format") != FORMAT:
        return f"format {result.get('format')!r}, expected {FORMAT}"
    key = cell.key if key is None else key
    if result.get("key") != key:
        return f"key {result.get('key')!r}, expected {key!r}"
    if result.get("cell") != json.loads(json.dumps(cell.fields(), default=list)):
        return f"cell fields {result.get('cell')!r} are not the cell's"
    episodes, means, expected = result.get("episodes"), result.get("mean"), expected_episodes(cell)
    if not isinstance(episodes, list) or len(episodes) != expected:
        return f"{len(episodes) if isinstance(episodes, list) else 'no'} episodes, expected {expected}"
    if not all(isinstance(e, dict) for e in episodes):
        return "an episode is not a JSON object"
    for e, episode in enumerate(episodes):
        problem = _out_of_range(episode)
        if problem:
            return f"episode {e}: {problem}"
    if not isinstance(means, dict) or not set(EPISODE_STATS) <= set(means):
        return f"means of {sorted(set(EPISODE_STATS) - set(means if isinstance(means, dict) else ()))} are missing"
    for name, mean in means.items():
        values = [e.get(name) for e in episodes]
        if not _number(mean) or not all(_number(v) for v in values):
            return f"mean or episode values of {name!r} are missing or not numbers"
        recomputed = float(np.mean(values))
        if not (math.isclose(mean, recomputed, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(mean) and math.isnan(recomputed))):
            return f"mean {name} = {mean!r} disagrees with its episodes ({recomputed!r})"
    return None


class CellStore:
    """Cell results as JSON files under ``directory``, each with its checksum (atomic writes; a file that
    is corrupt, truncated or inconsistent counts as missing)."""

    def __init__(self, directory: Path = CELL_DIR) -> None:
        self.directory = Path(directory)

    def path(self, cell: Cell) -> Path:
        return self.directory / f"{cell.key}.json"

    def load(self, cell: Cell) -> dict[str, Any] | None:
        """The cached result (without its ``checksum``), or None when it is missing or unreadable, its
        checksum does not verify, or it is not a complete, consistent result of this cell
        (:func:`result_problem`)."""
        key = cell.key
        try:
            result = json.loads((self.directory / f"{key}.json").read_text())
        except (OSError, ValueError):  # includes UnicodeDecodeError and JSONDecodeError
            return None
        if not isinstance(result, dict) or result.get("checksum") != checksum(result):
            return None
        result = {name: value for name, value in result.items() if name != "checksum"}
        return None if result_problem(cell, result, key) is not None else result

    def save(self, cell: Cell, result: dict[str, Any]) -> None:
        """Write ``result`` (JSON-ready) with its :func:`checksum` as the cell's file, atomically
        (:func:`core_env.npz.write_atomic`: a temporary file unique to this process and thread, renamed into place)."""
        body = {name: value for name, value in result.items() if name != "checksum"}
        write_atomic(self.path(cell), json.dumps({**body, "checksum": checksum(body)}, indent=0, sort_keys=True).encode())
