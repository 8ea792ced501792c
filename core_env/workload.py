"""Workloads: the only source of randomness in the environment.

A :class:`Workload` is one episode's task list: arrival step, deadline, target loss, batches per
node-step and hidden curve of every task, plus each task's hidden nominal demand. It is drawn from a
seeded generator (:func:`draw_workload`), built by hand (:func:`stress_workload`, tests), or replayed
from a committed evaluation suite (:func:`load_suite`) or one generated into a directory of your own, on
any task set or bank file (:func:`write_suite`, ``python -m core_env.suites generate``). Which of these an
episode gets is decided in one place, :mod:`core_env.generators`; this module holds the draws, the
suite files and their checksums and stored ceilings.

Timing convention: a task with arrival step ``a`` is visible (in a slot, servable) from the start of
step ``a``; with deadline ``d`` it may be served in steps ``a, ..., d - 1`` and fails at the end of step
``d - 1`` if its reported loss has not reached the target. Its window is ``d - a`` node-steps, and it is
independently feasible iff its nominal demand is at most its window.

Arrivals (v1): in each step of the arrival window each node's users submit a task with probability
``intensity`` (:func:`draw_arrivals`), so the load means the same pressure at any N. Each task is then
drawn by the v1 recipe (:mod:`core_env.recipe`): target, compute rate and deadline from family-level
knowledge only; the hidden demand emerges from curve × target × rate and is sometimes infinite.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import math
import os
import zlib
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import numpy as np

from core_env.config import LOADS, EnvConfig, load_intensity, load_label
from core_env.curves import CurveBank, bank_for
from core_env.curves.stress import stress_bank
from core_env.npz import write_npz
from core_env.recipe import DEFAULT_RECIPE, FamilyReference, TaskRecipe, draw_tasks

SUITE_DIR = Path(__file__).parent / "data" / "suites"
SUITE_MANIFEST = SUITE_DIR / "manifest.json"
#: The MILP offline optimum of every committed episode (written by ``python -m benchmarks ceilings``).
CEILINGS_PATH = SUITE_DIR / "ceilings.json"
#: The K-slot ceilings (:mod:`benchmarks.ceilings`) and their schedules.
SLOT_CEILINGS_PATH = SUITE_DIR / "slot_ceilings.json"
SLOT_SCHEDULES_PATH = SUITE_DIR / "slot_schedules.npz"
#: The sha256 of the stored ceilings' three files (``ceilings.json``, ``slot_ceilings.json``,
#: ``slot_schedules.npz``), in a manifest beside them, ``{file name: sha256}`` as the suites' ``manifest.json``:
#: ``python -m benchmarks ceilings`` writes it with them (:func:`benchmarks.ceilings.write_stored`) and every read verifies it.
SLOT_MANIFEST_NAME = "slot_manifest.json"
SUITE_ROOTS = 10
SUITE_EPISODES = 4
SUITE_NODES = 4
SUITE_SEED = 20261201
SUITE_TASK_SETS = ("id", "rl_ood", "vit_ood")
#: Largest batches per node-step a workload may hold: times the largest node speed (1e3) and any episode
#: length, progress stays a finite float64 (the simulator continues past 2^62 batches on the plateau).
MAX_BATCHES_PER_STEP = 1e18
_TASK_FIELDS = ("arrival", "deadline", "target", "batches_per_step", "curve", "demand")


@dataclasses.dataclass(frozen=True, eq=False)
class Workload:
    """One episode's tasks, sorted by arrival step (all arrays have shape (M,)).

    Attributes:
        bank: the curves the tasks train on.
        arrival: int64 arrival steps, non-decreasing, in [0, arrival_steps).
        deadline: int64 deadline steps, > arrival.
        target: float64 target losses (> 0).
        batches_per_step: float64 batches one node-step of speed 1 trains (> 0).
        curve: int64 indices into ``bank``.
        demand: float64 hidden nominal demand in node-steps (inf if the target is never reached).
        arrival_steps: T_arrive the workload was drawn for.
    """

    bank: CurveBank
    arrival: np.ndarray
    deadline: np.ndarray
    target: np.ndarray
    batches_per_step: np.ndarray
    curve: np.ndarray
    demand: np.ndarray
    arrival_steps: int

    def __post_init__(self) -> None:
        steps = self.arrival_steps
        if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ValueError(f"workload arrival_steps must be an int >= 1, got {steps!r}")
        object.__setattr__(self, "arrival_steps", int(steps))
        n = np.asarray(self.arrival).shape
        casts = {"arrival": np.int64, "deadline": np.int64, "curve": np.int64, "target": np.float64,
                 "batches_per_step": np.float64, "demand": np.float64}
        for name, dtype in casts.items():
            value = np.array(getattr(self, name), dtype=dtype)
            if value.ndim != 1 or value.shape != n:
                raise ValueError(f"workload field {name!r} must have shape {n}, got {value.shape}")
            value.setflags(write=False)
            object.__setattr__(self, name, value)
        if n[0] == 0:
            return
        if np.any(np.diff(self.arrival) < 0):
            raise ValueError("workload arrivals must be sorted by arrival step")
        if self.arrival[0] < 0 or self.arrival[-1] >= self.arrival_steps:
            raise ValueError(f"workload arrivals must lie in [0, {self.arrival_steps})")
        if np.any(self.deadline <= self.arrival):
            raise ValueError("every deadline must be later than its task's arrival")
        if not (np.all(np.isfinite(self.target)) and np.all(self.target > 0)):
            raise ValueError("targets must be finite and > 0")
        if not (np.all(np.isfinite(self.batches_per_step)) and np.all(self.batches_per_step > 0)
                and np.all(self.batches_per_step <= MAX_BATCHES_PER_STEP)):
            raise ValueError(f"batches_per_step must be finite, > 0 and <= {MAX_BATCHES_PER_STEP:g}")
        if np.any(self.curve < 0) or np.any(self.curve >= len(self.bank)):
            raise ValueError(f"curve indices must lie in [0, {len(self.bank)})")

    def __len__(self) -> int:
        return int(self.arrival.size)

    @property
    def window(self) -> np.ndarray:
        """Node-steps each task can receive before its deadline, (M,)."""
        return self.deadline - self.arrival

    @property
    def independently_feasible(self) -> np.ndarray:
        """(M,) bool: the task can finish before its deadline if served every step from arrival."""
        return self.demand <= self.window

    def feasibility_bound(self) -> float:
        """Independent-feasibility relaxation of the completion rate: the share of tasks that fit their window alone (ignores contention; the ceiling is the MILP, :mod:`mara_agents.bounds`)."""
        return float(self.independently_feasible.mean()) if len(self) else 0.0


@functools.lru_cache(maxsize=8)
def _reference_of(bank: CurveBank, recipe: TaskRecipe) -> FamilyReference:
    return FamilyReference(bank, recipe)


def draw_arrivals(intensity: float, n_nodes: int, arrival_steps: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted arrival steps: in each step, each of the ``n_nodes`` nodes' users submits a task with
    probability ``intensity`` (so Binomial(N, intensity) tasks per step; the same pressure at any N)."""
    counts = np.count_nonzero(rng.random((arrival_steps, n_nodes)) < intensity, axis=1)
    return np.repeat(np.arange(arrival_steps, dtype=np.int64), counts)


def draw_workload(bank: CurveBank, intensity: float, arrival_steps: int, rng: np.random.Generator,
                  recipe: TaskRecipe = DEFAULT_RECIPE, n_nodes: int = 4, reference: CurveBank | None = None,
                  horizon: int | None = None) -> Workload:
    """A workload of ``arrival_steps`` steps: :func:`draw_arrivals` at ``intensity`` per node, each task
    drawn from ``bank`` by ``recipe`` (:mod:`core_env.recipe`) against the families of ``reference``
    (the runs the submitters know; default: ``bank`` itself). With ``horizon`` (an episode's
    ``max_cycles``), arrivals are drawn only for the steps an episode can play, ``min(arrival_steps,
    horizon)``: a config whose arrival window outlasts its episodes costs what it can play, not more
    (the draw is unchanged whenever ``arrival_steps <= horizon``, as in every default config)."""
    steps = arrival_steps if horizon is None else min(arrival_steps, int(horizon))
    arrival = draw_arrivals(intensity, n_nodes, steps, rng)
    tasks = draw_tasks(bank, _reference_of(reference if reference is not None else bank, recipe), arrival.size, rng)
    return Workload(bank, arrival, arrival + tasks["window"], tasks["target"], tasks["batches_per_step"],
                    tasks["curve"], tasks["demand"], arrival_steps)


# --------------------------------------------------------------------------------------------------
# The stress scenario


def stress_workload(n_nodes: int = 4, feasible: int = 13) -> Workload:
    """The constructed scenario where FIFO and EDF complete nothing and a clairvoyant scheduler all it can.

    Feasible tasks arrive every 2 steps from step N, each needing exactly ``w = 2N`` node-steps within a
    window of ``w`` steps (slack 1): one missed step dooms it. At most N of them overlap, so serving each
    on every step of its window completes them all. Decoys (flat curves, never reach their targets)
    arrive earlier and have earlier deadlines, and N of them are active at the first N feasible arrivals;
    after that, each feasible arrival sees N - 1 earlier doomed feasible tasks plus one decoy ahead of it
    in both arrival order (FIFO) and deadline order (EDF). With N = 4 and 13 feasible tasks there are 7
    decoys: the slot-relaxed MILP, the independent-feasibility relaxation and the clairvoyant rate are 13/20 = 65%; FIFO = EDF = 0%.
    The arrival window ends after the last arrival, so the episode ends once the tasks have drained.
    """
    if feasible < n_nodes:
        raise ValueError(f"the stress scenario needs at least n_nodes={n_nodes} feasible tasks")
    w = 2 * n_nodes
    bank = stress_bank()
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


# --------------------------------------------------------------------------------------------------
# Pre-generated evaluation suites


def suite_rng(task_set: str, load: str, root: int, episode: int, seed: int = SUITE_SEED) -> np.random.Generator:
    """The generator of one suite episode: ``default_rng([seed, crc32(task_set), crc32(load), root, episode])``.

    ``task_set`` is the task set's name (a bank file's manifest name), ``load`` the load's label (a name
    in :data:`LOADS`, or :func:`load_label` of an intensity). The committed suites use ``seed =``
    :data:`SUITE_SEED`; :func:`generate_suite` and the benchmarks' bank scenarios use this same scheme.
    """
    return np.random.default_rng([seed, zlib.crc32(task_set.encode()), zlib.crc32(load.encode()), root, episode])


_suite_rng = suite_rng  # the name before it was public


def suite_path(task_set: str, load: str, directory: str | os.PathLike | None = None) -> Path:
    """The suite file of a task set's name and a load label: in :data:`SUITE_DIR` (committed), or in ``directory``."""
    return (SUITE_DIR if directory is None else Path(directory)) / f"{task_set}__{load}.npz"


def _task_set_banks(task_set: str | os.PathLike) -> tuple[str, CurveBank, CurveBank, dict[str, Any]]:
    """(name, eval bank, train bank, extra meta) of a built-in task set or a bank file."""
    from core_env.curves import CORPUS_TASK_SETS, bank_file, is_bank_path

    if isinstance(task_set, str) and task_set in CORPUS_TASK_SETS:
        return task_set, bank_for(task_set, "eval"), bank_for(task_set, "train"), {}
    if isinstance(task_set, CurveBank):
        raise TypeError("a suite needs a task set with train and eval splits: a built-in name or a bank file's path, not a CurveBank")
    if isinstance(task_set, str) and not is_bank_path(task_set):  # "stress"
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
    from core_env.recipe import recipe_from

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


def write_suites(directory: Path = SUITE_DIR) -> dict[str, str]:
    """Regenerate every committed suite file and the manifest of their sha256 checksums."""
    manifest = {}
    for task_set in SUITE_TASK_SETS:
        for load in LOADS:
            path = directory / suite_path(task_set, load).name
            manifest[path.name] = write_npz(path, generate_suite(task_set, load))
    (directory / SUITE_MANIFEST.name).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
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
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest[path.name] = write_npz(path, arrays)
    temporary = manifest_path.with_name(f".{manifest_path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(temporary, manifest_path)
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
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
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
    if load not in LOADS:
        raise ValueError(f"no evaluation suite for load {load!r}; suites exist for {sorted(LOADS)}")


def _task_set_name(task_set: str | os.PathLike) -> str:
    """A task set's name for suite files: a built-in name as is, a bank file's manifest name."""
    from core_env.curves import bank_file, is_bank_path

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
    manifest = SUITE_MANIFEST if suite_dir is None else path.parent / SUITE_MANIFEST.name
    return json.loads(manifest.read_text())[path.name]


def suite_cells(task_set: str, load: str, suite_dir: str | os.PathLike | None = None) -> list[tuple[int, int]]:
    """Every (evaluation root, episode) of a suite, roots outer."""
    meta = suite_meta(task_set, load, suite_dir)
    return [(r, e) for r in range(meta["roots"]) for e in range(meta["episodes"])]


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
    from core_env.config import EnvConfig

    return _stored_ceilings(SLOT_CEILINGS_PATH, "K-slot", task_set, load, {"n_slots": EnvConfig().n_slots})


# --------------------------------------------------------------------------------------------------
# The stored ceilings: verified and range-checked on every read

#: Numbers every stored ceiling entry holds; a K-slot entry also those its table reads.
CEILING_FIELDS = ("completed", "bound", "arrived", "gap")
SLOT_CEILING_FIELDS = (*CEILING_FIELDS, "greedy", "relaxed_bound", "time_limit", "seconds")
#: Slack allowed between a whole count and a solver's float bound (completed <= bound, bound <= arrived).
BOUND_TOLERANCE = 1e-6
_SOLVE = {"MILP": "run `python -m benchmarks ceilings`", "K-slot": "run `python -m benchmarks ceilings --only slots`"}


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
    from core_env.npz import read_npz

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


def load_suite(task_set: str | os.PathLike, load: str | float, root: int, episode: int, suite_dir: str | os.PathLike | None = None) -> Workload:
    """One pre-generated evaluation workload, verified against the manifest checksum and curve bank: from the
    committed suites, or with ``suite_dir`` from a directory written by :func:`write_suite` (``task_set``
    a built-in name or a bank file's path)."""
    if suite_dir is None:
        _check_suite_name(task_set, load)
        return _suite_workload(suite_path(task_set, load), root, episode, bank_for(task_set, "eval"), f"{task_set}/{load}")
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
    from core_env.curves import bank_file, is_bank_path

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


# --------------------------------------------------------------------------------------------------
# Choosing the workload of an episode


def select_workload(config: EnvConfig, rng: np.random.Generator, options: dict[str, Any] | None) -> Workload:
    """The workload for ``reset(seed, options)``: the generator the options ask for
    (:func:`core_env.generators.generator_from_options`, which documents them) drawn with ``rng``."""
    from core_env.generators import generator_from_options

    return generator_from_options(config, options).workload(rng)
