"""Evaluation suites: pre-generated workloads replayed byte for byte, their files and checksums.

A suite is ``roots`` × ``episodes`` workloads of one task set at one load, drawn once by the suites' seeding
scheme (:func:`suite_rng`) and stored as one byte-reproducible ``.npz`` file (:mod:`core_env.npz`) whose sha256
is listed in a ``manifest.json`` beside it; every read verifies it. The committed suites live in
:data:`SUITE_DIR` (:data:`SUITE_TASK_SETS` × the named loads, :data:`SUITE_ROOTS` × :data:`SUITE_EPISODES`
episodes each, for :data:`SUITE_NODES` nodes); :func:`write_suite` generates suites of any task set or bank file
into a directory of your own. An episode reads them through its generator
(:class:`core_env.generators.SuiteEpisode`), or directly with :func:`load_suite` / :func:`load_suite_file`.

Its command line, ``python -m core_env.suites [generate ...]`` (``core_env/suites/__main__.py``), regenerates the committed
suites or writes suites of your own.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core_env.config import LOADS, load_intensity, load_label
from core_env.curves import CORPUS_TASK_SETS, CurveBank, bank_file, bank_for, is_bank_path
from core_env.npz import write_atomic, write_npz
from core_env.recipe import DEFAULT_RECIPE, TaskRecipe, recipe_from
from core_env.workload import Workload, draw_workload

SUITE_DIR = Path(__file__).parent.parent / "data" / "suites"
SUITE_MANIFEST = SUITE_DIR / "manifest.json"
SUITE_ROOTS = 10
SUITE_EPISODES = 4
SUITE_NODES = 4
SUITE_SEED = 20261201
SUITE_TASK_SETS = ("id", "rl_ood", "vit_ood")
_TASK_FIELDS = ("arrival", "deadline", "target", "batches_per_step", "curve", "demand")


def suite_rng(task_set: str, load: str, root: int, episode: int, seed: int = SUITE_SEED) -> np.random.Generator:
    """The generator of one suite episode: ``default_rng([seed, crc32(task_set), crc32(load), root, episode])``.

    ``task_set`` is the task set's name (a bank file's manifest name), ``load`` the load's label (a name
    in :data:`LOADS`, or :func:`load_label` of an intensity). The committed suites use ``seed =``
    :data:`SUITE_SEED`; :func:`generate_suite` and the benchmarks' bank scenarios use this same scheme.
    """
    return np.random.default_rng([seed, zlib.crc32(task_set.encode()), zlib.crc32(load.encode()), root, episode])



def suite_path(task_set: str, load: str, directory: str | os.PathLike | None = None) -> Path:
    """The suite file of a task set's name and a load label: in :data:`SUITE_DIR` (committed), or in ``directory``."""
    return (SUITE_DIR if directory is None else Path(directory)) / f"{task_set}__{load}.npz"


def _task_set_banks(task_set: str | os.PathLike) -> tuple[str, CurveBank, CurveBank, dict[str, Any]]:
    """(name, eval bank, train bank, extra meta) of a built-in task set or a bank file."""
    if isinstance(task_set, str) and task_set in CORPUS_TASK_SETS:
        return task_set, bank_for(task_set, "eval"), bank_for(task_set, "train"), {}
    if isinstance(task_set, CurveBank):
        raise TypeError("a suite needs a task set with train and eval splits: a built-in name or a bank file's path, not a CurveBank")
    if isinstance(task_set, str) and not is_bank_path(task_set):  # a fixed scenario (the stress scenario)
        raise ValueError(f"no evaluation suite for task set {task_set!r}: suites are drawn for {list(CORPUS_TASK_SETS)} or a bank file")
    verified = bank_file(task_set)
    extra = {"bank_file": {"name": verified.name, "sha256": verified.sha256, "path": verified.path}}
    return verified.name, verified.bank("eval"), verified.bank("train"), extra


def generate_suite(task_set: str | os.PathLike, load: str | float, roots: int = SUITE_ROOTS, episodes: int = SUITE_EPISODES,
                   arrival_steps: int = 500, recipe: TaskRecipe | dict | None = DEFAULT_RECIPE, seed: int = SUITE_SEED,
                   n_nodes: int = SUITE_NODES) -> dict[str, np.ndarray]:
    """The arrays of one evaluation suite: ``roots`` × ``episodes`` workloads for ``n_nodes`` nodes on the
    task set's eval curves, targets and deadlines set from its train curves (the reference runs), episode
    ``(r, e)`` drawn from :func:`suite_rng` ``(name, load label, r, e, seed)``.

    ``task_set``: a built-in name (``id``, ``rl_ood``, ``vit_ood``) or a bank file's path (its ``eval`` and
    ``train`` splits; the meta then records the file's name, sha256 and path as ``bank_file``).
    ``load``: a name in :data:`LOADS` or an intensity per node in (0, 1]. ``recipe``: a TaskRecipe or a dict
    of its fields. The committed suites are ``generate_suite(task_set, load)``.
    """
    recipe = recipe_from(recipe)
    label = load_label(load)
    for name, value, low in (("roots", roots, 1), ("episodes", episodes, 1), ("arrival_steps", arrival_steps, 1), ("n_nodes", n_nodes, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    name, bank, reference, extra = _task_set_banks(task_set)
    workloads = [
        draw_workload(bank, load_intensity(load), arrival_steps, suite_rng(name, label, r, e, seed), recipe, n_nodes, reference)
        for r in range(roots) for e in range(episodes)
    ]
    arrays = {field: np.concatenate([getattr(w, field) for w in workloads]) for field in _TASK_FIELDS}
    arrays["episode_offsets"] = np.concatenate([[0], np.cumsum([len(w) for w in workloads])]).astype(np.int64)
    meta = {"format": 2, "env": "discrete_core_v1", "task_set": name, "load": label, "intensity": load_intensity(load),
            "n_nodes": int(n_nodes), "roots": int(roots), "episodes": int(episodes), "arrival_steps": int(arrival_steps),
            "seed": int(seed), "bank": bank.fingerprint, "reference": reference.fingerprint, "recipe": recipe.as_dict(), **extra}
    arrays["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    return arrays


def _read_manifest(path: Path) -> dict[str, str]:
    """A suites' manifest (file name -> sha256), ``{}`` where there is none yet."""
    return json.loads(path.read_text()) if path.exists() else {}


def _write_manifest(path: Path, manifest: dict[str, str]) -> None:
    """A suites' manifest, written atomically."""
    write_atomic(path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def write_suites(directory: Path = SUITE_DIR) -> dict[str, str]:
    """Regenerate every committed suite file and the manifest of their sha256 checksums."""
    manifest = {}
    for task_set in SUITE_TASK_SETS:
        for load in LOADS:
            path = directory / suite_path(task_set, load).name
            manifest[path.name] = write_npz(path, generate_suite(task_set, load))
    _write_manifest(directory / SUITE_MANIFEST.name, manifest)
    return manifest


def write_suite(task_set: str | os.PathLike, load: str | float, directory: str | os.PathLike, roots: int = SUITE_ROOTS,
                episodes: int = SUITE_EPISODES, seed: int = SUITE_SEED, recipe: TaskRecipe | dict | None = DEFAULT_RECIPE,
                arrival_steps: int = 500, n_nodes: int = SUITE_NODES) -> Path:
    """Generate one evaluation suite (:func:`generate_suite`, same recipe and seeding scheme as the committed
    suites) into ``directory`` (created if needed) and list its sha256 in ``directory/manifest.json``
    (other entries kept). Returns the file, ``directory/{name}__{load}.npz``; replay it with
    ``reset(options={"suite": "eval", "suite_dir": directory, "root": r, "episode": e})`` or
    ``{"suite": path, ...}``, or :func:`load_suite_file`. Files are byte-reproducible (:mod:`core_env.npz`).
    The committed directory is refused: regenerate that with ``python -m core_env.suites``.
    """
    directory = Path(directory)
    if directory.resolve() == SUITE_DIR.resolve():
        raise ValueError(f"{directory} holds the committed suites; regenerate them with `python -m core_env.suites`, "
                         "write your own suites to another directory")
    arrays = generate_suite(task_set, load, roots, episodes, arrival_steps, recipe, seed, n_nodes)
    meta = json.loads(arrays["meta"].tobytes())
    directory.mkdir(parents=True, exist_ok=True)
    path = suite_path(meta["task_set"], meta["load"], directory)
    manifest_path = directory / SUITE_MANIFEST.name
    manifest = _read_manifest(manifest_path)
    manifest[path.name] = write_npz(path, arrays)
    _write_manifest(manifest_path, manifest)
    return path


def generate_suites(task_set: str | os.PathLike, loads: Sequence[str | float], directory: str | os.PathLike, **options: Any) -> list[Path]:
    """:func:`write_suite` for each load; the written files."""
    return [write_suite(task_set, load, directory, **options) for load in loads]


_SUITE_CACHE: dict[Any, tuple[dict[str, np.ndarray], dict[str, Any]]] = {}


def _read_suite(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """A suite file's arrays and meta, verified against the ``manifest.json`` beside it (cached per file version)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"evaluation suite file {path} is missing")
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size, stat.st_ino)
    if key in _SUITE_CACHE:
        return _SUITE_CACHE[key]
    manifest_path = SUITE_MANIFEST if path.parent == SUITE_DIR else path.parent / SUITE_MANIFEST.name
    manifest = _read_manifest(manifest_path)
    expected = manifest.get(path.name)
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if expected is None:
        raise ValueError(f"evaluation suite file {path.name} is not listed in {manifest_path}"
                         + ("" if path.parent == SUITE_DIR else "; write suites with `python -m core_env.suites generate` (it keeps the manifest)"))
    if actual != expected:
        raise ValueError(f"checksum mismatch for evaluation suite file {path.name}: expected sha256 {expected}, got {actual}")
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    meta = json.loads(arrays.pop("meta").tobytes().decode())
    _SUITE_CACHE[key] = (arrays, meta)
    return arrays, meta


def _check_suite_name(task_set: str, load: str) -> None:
    if task_set not in SUITE_TASK_SETS:
        raise ValueError(f"no evaluation suite for task set {task_set!r}; suites exist for {list(SUITE_TASK_SETS)}")
    if not (isinstance(load, str) and load in LOADS):
        raise ValueError(f"no evaluation suite for load {load!r}; suites are pre-generated for named loads {sorted(LOADS)}")


def _task_set_name(task_set: str | os.PathLike) -> str:
    """A task set's name for suite files: a built-in name as is, a bank file's manifest name."""
    return bank_file(task_set).name if is_bank_path(task_set) else str(task_set)


def _suite_file(task_set: str | os.PathLike, load: str | float, suite_dir: str | os.PathLike | None) -> Path:
    if suite_dir is None:
        _check_suite_name(task_set, load)
        return suite_path(task_set, load)
    return suite_path(_task_set_name(task_set), load_label(load), suite_dir)


def suite_meta(task_set: str | os.PathLike, load: str | float, suite_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """The metadata of a suite file (roots, episodes, n_nodes, recipe, seeds, banks): a committed one, or with
    ``suite_dir`` one written by :func:`write_suite` (``task_set`` may then be a bank file's path)."""
    return dict(_read_suite(_suite_file(task_set, load, suite_dir))[1])


def suite_file_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The metadata of the suite file at ``path`` (verified against the manifest beside it)."""
    return dict(_read_suite(Path(path))[1])


def suite_sha256(task_set: str, load: str, suite_dir: str | os.PathLike | None = None) -> str:
    """The manifest's sha256 of a suite file (verified when the suite is read)."""
    path = _suite_file(task_set, load, suite_dir)
    _read_suite(path)
    return _read_manifest(SUITE_MANIFEST if suite_dir is None else path.parent / SUITE_MANIFEST.name)[path.name]


def suite_cells(task_set: str, load: str, suite_dir: str | os.PathLike | None = None) -> list[tuple[int, int]]:
    """Every (evaluation root, episode) of a suite, roots outer."""
    meta = suite_meta(task_set, load, suite_dir)
    return [(r, e) for r in range(meta["roots"]) for e in range(meta["episodes"])]


def load_suite(task_set: str | os.PathLike, load: str | float, root: int, episode: int, suite_dir: str | os.PathLike | None = None) -> Workload:
    """One pre-generated evaluation workload, verified against the manifest checksum and curve bank: from the
    committed suites, or with ``suite_dir`` from a directory written by :func:`write_suite` (``task_set``
    a built-in name or a bank file's path)."""
    if suite_dir is None:
        return _suite_workload(_suite_file(task_set, load, None), root, episode, bank_for(task_set, "eval"), f"{task_set}/{load}")
    return load_suite_file(_suite_file(task_set, load, suite_dir), root, episode, task_set=task_set)


def _suite_workload(path: Path, root: int, episode: int, bank: CurveBank, label: str) -> Workload:
    arrays, meta = _read_suite(path)
    if not (0 <= root < meta["roots"]) or not (0 <= episode < meta["episodes"]):
        raise ValueError(f"suite {label} has roots 0..{meta['roots'] - 1} and episodes 0..{meta['episodes'] - 1}, got root={root}, episode={episode}")
    if bank.fingerprint != meta["bank"]:
        raise ValueError(f"suite {label} was generated for a different curve bank; regenerate it with `python -m core_env.suites`"
                         + ("" if path.parent == SUITE_DIR else " generate"))
    i = root * meta["episodes"] + episode
    lo, hi = arrays["episode_offsets"][i], arrays["episode_offsets"][i + 1]
    fields = {name: arrays[name][lo:hi] for name in _TASK_FIELDS}
    return Workload(bank, arrival_steps=int(meta["arrival_steps"]), **fields)


def suite_bank(meta: dict[str, Any], task_set: Any = None) -> CurveBank:
    """The eval curves a suite file was generated on: its built-in task set's, or its bank file's (``task_set``
    if that is a path or CurveBank with the recorded bank, else the path recorded in the meta)."""
    if "bank_file" not in meta:
        return bank_for(meta["task_set"], "eval")
    recorded = meta["bank_file"]
    tried = []
    if isinstance(task_set, CurveBank) and task_set.fingerprint == meta["bank"]:
        return task_set
    for candidate in ([task_set] if isinstance(task_set, (str, os.PathLike)) and is_bank_path(task_set) else []) + [recorded["path"]]:
        try:
            verified = bank_file(candidate)
        except ValueError as exc:
            tried.append(str(exc))
            continue
        if verified.sha256 == recorded["sha256"]:
            return verified.bank("eval")
        tried.append(f"{verified.path} has sha256 {verified.sha256[:16]}...")
    raise ValueError(f"the suite was generated on bank file {recorded['name']!r} (sha256 {recorded['sha256'][:16]}..., at {recorded['path']}), "
                     f"which is not available ({'; '.join(tried)}); pass task_set= that bank file")


def load_suite_file(path: str | os.PathLike, root: int, episode: int, task_set: Any = None) -> Workload:
    """One workload of the suite file at ``path`` (written by :func:`write_suite`, or a committed one).

    The file is verified against the ``manifest.json`` beside it; its curves are the built-in task set's
    eval split, or the eval split of the bank file it records (``task_set``, a bank file's path, is tried
    first: use it when the bank file has moved); the bank's fingerprint must match the meta's.
    """
    path = Path(path)
    _, meta = _read_suite(path)
    return _suite_workload(path, root, episode, suite_bank(meta, task_set), f"{path.name}")
