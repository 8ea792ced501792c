"""The stored offline optima of the committed evaluation suites, read verified and range-checked.

``python -m benchmarks ceilings`` (:mod:`benchmarks.ceilings`) solves every committed episode once and stores
the results beside the suites (:data:`core_env.suites.SUITE_DIR`): the slot-relaxed MILP optimum
(``ceilings.json``), the K-slot ceilings (``slot_ceilings.json``) and their schedules (``slot_schedules.npz``),
with the three files' sha256 in ``slot_manifest.json``. This module reads them for the benchmarks' ceiling
rows (:mod:`benchmarks.ceiling_cells`, ``quick``, ``calibration``, ``leakage``) and for the solver itself, which
resumes from them: every read verifies the file against the manifest and range-checks every entry, so a
corrupted or hand-edited file is a ValueError naming it and the entry, never a ceiling above 100 %.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core_env.config import EnvConfig
from core_env.npz import read_npz
from core_env.suites import SUITE_DIR, suite_cells, suite_path, suite_sha256

#: The MILP offline optimum of every committed episode (written by ``python -m benchmarks ceilings``).
CEILINGS_PATH = SUITE_DIR / "ceilings.json"
#: The K-slot ceilings (:mod:`benchmarks.ceilings`) and their schedules.
SLOT_CEILINGS_PATH = SUITE_DIR / "slot_ceilings.json"
SLOT_SCHEDULES_PATH = SUITE_DIR / "slot_schedules.npz"
#: The sha256 of the stored ceilings' three files (``ceilings.json``, ``slot_ceilings.json``,
#: ``slot_schedules.npz``), in a manifest beside them, ``{file name: sha256}`` as the suites' ``manifest.json``:
#: ``python -m benchmarks ceilings`` writes it with them (:func:`benchmarks.ceilings.write_stored`) and every read verifies it.
SLOT_MANIFEST_NAME = "slot_manifest.json"
#: Numbers every stored ceiling entry holds; a K-slot entry also those its table reads.
CEILING_FIELDS = ("completed", "bound", "arrived", "gap")
SLOT_CEILING_FIELDS = (*CEILING_FIELDS, "greedy", "relaxed_bound", "time_limit", "seconds")
#: Slack allowed between a whole count and a solver's float bound (completed <= bound, bound <= arrived).
BOUND_TOLERANCE = 1e-6
_SOLVE = {"MILP": "run `python -m benchmarks ceilings`", "K-slot": "run `python -m benchmarks ceilings --only slots`"}


def suite_ceilings(task_set: str, load: str) -> dict[tuple[int, int], dict[str, Any]]:
    """The stored slot-relaxed MILP ceilings of a suite, ``{(root, episode): {"completed", "bound", "arrived", "gap", ...}}``.

    Raises ValueError when ``ceilings.json`` is missing, holds no entry for the suite, was solved for
    another version of the suite file (checksum), lacks an episode, or fails :func:`read_ceilings`'s checks.
    """
    return _stored_ceilings(CEILINGS_PATH, "MILP", task_set, load)


def schedule_key(task_set: str, load: str, root: int, episode: int) -> str:
    """The name of an episode's K-slot schedule in ``slot_schedules.npz``."""
    return f"{task_set}__{load}__r{root}__e{episode}"


def suite_slot_ceilings(task_set: str, load: str) -> dict[tuple[int, int], dict[str, Any]]:
    """The stored K-slot ceilings of a suite, ``{(root, episode): {"completed", "bound", "arrived", "gap",
    "status", ...}}``: ``completed`` is achieved by a stored schedule, ``bound`` is proven, ``status`` says
    whether they meet (``optimal``) or bracket the K-slot optimum (``interval``).

    Raises ValueError when ``slot_ceilings.json`` is missing, holds no entry for the suite, was solved for
    another version of the suite file (checksum) or another slot count, lacks an episode, or fails
    :func:`read_slot_ceilings`'s checks (its manifest's sha256, every entry's ranges).
    """
    return _stored_ceilings(SLOT_CEILINGS_PATH, "K-slot", task_set, load, {"n_slots": EnvConfig().n_slots})


def slot_manifest_path(path: str | os.PathLike | None = None) -> Path:
    """The manifest listing the sha256 of a K-slot ceilings file (default :data:`SLOT_CEILINGS_PATH`): beside it."""
    return Path(SLOT_CEILINGS_PATH if path is None else path).parent / SLOT_MANIFEST_NAME


def read_slot_manifest(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """The manifest beside a K-slot ceilings file (:func:`slot_manifest_path`): file name → sha256, ``{}`` where
    there is none yet. Raises ValueError naming it when it is not a JSON object."""
    manifest_path = slot_manifest_path(path)
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"{manifest_path}: the K-slot ceilings' manifest is not readable JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{manifest_path}: the K-slot ceilings' manifest is not a JSON object of file name -> sha256")
    return manifest


def verified_slot_file(path: str | os.PathLike, kind: str = "K-slot") -> bytes:
    """The bytes of a stored ceilings file (``kind`` ``"K-slot"``: the K-slot ceilings or schedules;
    ``"MILP"``: the slot-relaxed ceilings), verified against the sha256 its manifest (:func:`slot_manifest_path`) lists.

    Raises:
        ValueError: naming the file, when it is missing, the manifest is missing, unreadable or does not list
            it, or the file's sha256 differs from the listed one (an edit, a flipped bit, a truncation).
    """
    path = Path(path)
    manifest_path = slot_manifest_path(path)
    if not path.is_file():
        raise ValueError(f"no stored {kind} ceilings ({path} is missing); {_SOLVE[kind]}")
    expected = read_slot_manifest(path).get(path.name)
    if not isinstance(expected, str):
        raise ValueError(f"{path}: its sha256 is not listed in {manifest_path}; write the {kind} ceilings with {_SOLVE[kind][4:]}")
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise ValueError(f"checksum mismatch for {path}: {manifest_path.name} lists sha256 {expected}, the file has {actual} (edited or "
                         f"corrupted); restore it (git checkout) or {_SOLVE[kind]}")
    return data


def read_slot_schedules(path: str | os.PathLike | None = None) -> dict[str, np.ndarray]:
    """The stored K-slot schedules (default :data:`SLOT_SCHEDULES_PATH`): :func:`schedule_key` → (S, 2) uint16
    (step, task) services, the file verified first (:func:`verified_slot_file`; raises its ValueError)."""
    path = Path(SLOT_SCHEDULES_PATH if path is None else path)
    verified_slot_file(path)
    return read_npz(path)


def read_slot_ceilings(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Every stored K-slot ceiling (default :data:`SLOT_CEILINGS_PATH`; suite file name → its entry), the file
    verified against its manifest (:func:`verified_slot_file`) and every entry range-checked (:func:`ceiling_problem`).

    Raises:
        ValueError: naming the file (and the entry) when it is missing, fails its checksum, is not JSON of
            ``{suite file: {"sha256", "episodes": {"root/episode": entry}}}``, or an entry is out of range.
    """
    path = Path(SLOT_CEILINGS_PATH if path is None else path)
    return _checked_store(path, verified_slot_file(path), "K-slot")


def read_ceilings(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Every stored slot-relaxed ceiling (default :data:`CEILINGS_PATH`), the file verified against its
    manifest (:func:`verified_slot_file`) and every entry range-checked (:func:`ceiling_problem`); raises ValueError naming the file and the entry as :func:`read_slot_ceilings`."""
    path = Path(CEILINGS_PATH if path is None else path)
    return _checked_store(path, verified_slot_file(path, "MILP"), "MILP")


def _checked_store(path: Path, data: bytes, kind: str) -> dict[str, Any]:
    try:
        store = json.loads(data)
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError
        raise ValueError(f"{path}: not valid JSON ({exc}); {_SOLVE[kind]}") from None
    problem = ceilings_problem(store, SLOT_CEILING_FIELDS if kind == "K-slot" else CEILING_FIELDS)
    if problem is not None:
        raise ValueError(f"{path}: {problem}; {_SOLVE[kind]}")
    return store


def ceilings_problem(store: Any, fields: Sequence[str] = CEILING_FIELDS) -> str | None:
    """Why the content of a ceilings file is not ``{suite file: {"sha256": str, "episodes": {key: entry}}}`` with
    every entry in range (:func:`ceiling_problem`), naming the entry; None when it is."""
    if not isinstance(store, dict):
        return f"not a JSON object of suite files (a {type(store).__name__})"
    for name, entry in store.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) or not isinstance(entry.get("episodes"), dict):
            return f"entry {name!r} is not an object with a 'sha256' string and an 'episodes' object"
        for key, episode in entry["episodes"].items():
            problem = ceiling_problem(episode, fields)
            if problem is not None:
                return f"entry {name!r} episode {key!r}: {problem}"
    return None


def ceiling_problem(entry: Any, fields: Sequence[str] = CEILING_FIELDS) -> str | None:
    """Why one stored episode's ceiling is out of range, or None: ``fields`` present and numbers, every number
    finite and >= 0, ``completed`` and ``arrived`` whole, completed <= arrived, completed <= bound <= arrived
    (within :data:`BOUND_TOLERANCE`), gap <= 1."""
    if not isinstance(entry, dict):
        return f"not an object (a {type(entry).__name__})"
    missing = [name for name in fields if name not in entry]
    if missing:
        return f"lacks {missing}"
    for name, value in entry.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if name in fields and not number:
            return f"{name} = {value!r} is not a number"
        if number and not (math.isfinite(value) and value >= 0):
            return f"{name} = {value!r} is not a finite number >= 0"
    completed, bound, arrived = entry["completed"], entry["bound"], entry["arrived"]
    if completed != int(completed) or arrived != int(arrived):
        return f"completed {completed!r} and arrived {arrived!r} must be whole numbers"
    if completed > arrived:
        return f"completed {completed!r} exceeds arrived {arrived!r}"
    if completed > bound + BOUND_TOLERANCE:
        return f"completed {completed!r} exceeds the proven bound {bound!r}"
    if bound > arrived + BOUND_TOLERANCE:
        return f"bound {bound!r} exceeds arrived {arrived!r}"
    if entry["gap"] > 1:
        return f"gap {entry['gap']!r} exceeds 1"
    return None


def _stored_ceilings(path: Path, kind: str, task_set: str, load: str, expect: dict[str, Any] | None = None) -> dict[tuple[int, int], dict[str, Any]]:
    sha, name, command = suite_sha256(task_set, load), suite_path(task_set, load).name, _SOLVE[kind]
    entry = (read_slot_ceilings(path) if kind == "K-slot" else read_ceilings(path)).get(name)
    if entry is None or entry.get("sha256") != sha or any(entry.get(k) != v for k, v in (expect or {}).items()):
        raise ValueError(f"the stored {kind} ceilings of {name} are missing or were solved for another version of the file; {command}")
    out = {}
    for r, e in suite_cells(task_set, load):
        if f"{r}/{e}" not in entry["episodes"]:
            raise ValueError(f"the stored {kind} ceilings of {name} lack root {r} episode {e}; {command}")
        out[(r, e)] = entry["episodes"][f"{r}/{e}"]
    return out


def suite_ceiling_rates(task_set: str, load: str, cells: Sequence[tuple[int, int]]) -> np.ndarray:
    """(len(cells),) the stored slot-relaxed MILP optimum completion rate of each (root, episode) of a suite."""
    return _rates(suite_ceilings(task_set, load), cells)


def suite_slot_ceiling_rates(task_set: str, load: str, cells: Sequence[tuple[int, int]]) -> np.ndarray:
    """(len(cells),) the stored K-slot ceiling's completion rate (best schedule found) of each (root, episode) of a suite."""
    return _rates(suite_slot_ceilings(task_set, load), cells)


def _rates(stored: dict[tuple[int, int], dict[str, Any]], cells: Sequence[tuple[int, int]]) -> np.ndarray:
    return np.array([stored[c]["completed"] / max(stored[c]["arrived"], 1) for c in cells], dtype=np.float64)
