"""Benchmark rows: a name for every agent a suite can run, and how to build it.

A row is a heuristic (``HEURISTICS``), or an allocator (``ALLOCATORS``) on its default predictor, or
``ALLOCATOR:PREDICTOR`` for the same allocator on another predictor (``lara:oracle`` is LARA's
allocator with exact demands: the part of LARA's gap that is allocation, not prediction), or a learned
row (``LEARNED``: MARA and its variants), loaded from its shipped checkpoint for a training seed, or a
shipped third-party-library policy (``LIBRARY_ROWS``: ``ppo-tianshou``, Tianshou's masked PPO on the plain
observation, and ``ppo-tianshou-fm``, the same on flow-matching predictor features,
:mod:`mara_agents.integrations.tianshou_ppo`; ``ppo-sb3``, sb3-contrib's MaskablePPO with the per-slot
policy, :mod:`mara_agents.integrations.sb3_maskable`; ``ppo-torchrl``, TorchRL's PPO with the same policy,
:mod:`mara_agents.integrations.torchrl_ppo`; ``ppo-rllib``, RLlib's PPO with it as an RLModule,
:mod:`mara_agents.integrations.rllib_ppo`, trained in its own venv and played without Ray; ``mappo-benchmarl``,
BenchMARL's MAPPO with it as a BenchMARL model on the batched TorchRL env,
:mod:`mara_agents.integrations.benchmarl_ppo`, trained in the same venv and played without BenchMARL).
``prior-edf`` is the admission probe on the curve-free prior (:mod:`mara_agents.heuristics.prior_edf`), fitted on the
train workloads of the task set it plays.

A **third-party row** is ``module.path:attr`` (any name whose part before ``:`` is not a shipped
allocator): ``attr`` (dotted attributes allowed) is an :class:`~mara_agents.protocols.Agent`, an Agent
class, or a zero-argument factory returning one. The module is imported as ``python -m`` would (the
working directory is on the path). Its cells are keyed by the sha256 of the module's source file, so
editing the agent never reuses cached results; an object that loads weights names them in a ``weights``
attribute (a path or a list of paths), whose bytes join the key, so retraining never does either. :func:`register` adds an in-memory factory under a name
(the Python API, :func:`benchmarks.api.evaluate`).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import re
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from benchmarks.ceiling_cells import CEILING_ROWS
from mara_agents.allocators import ALLOCATORS, make_allocator
from mara_agents.heuristics import HEURISTICS
from mara_agents.heuristics import prior_edf
from mara_agents.protocols import Agent

#: Rows of the quick suite, in table order (learned rows: training seed 0).
QUICK_ROWS = ("random", "fifo", "edf", "window-edf", "target-edf", "prior-edf", "las", "edf-admission", "llf", "slaq", "laira", "lara", "lara-fm",
              "edf-admission:fm,min_reports=5", "lara:pfn", "edf-admission:pfn,min_reports=1", "index:pfn,deadline_pct=0,explore=2",
              "plan:pfn,samples=16,explore=2", "mara-wls", "mara", "mara-pfn",
              "edf-admission:oracle", "llf:oracle", "laira:oracle", "lara:oracle", "clairvoyant")


#: Learned rows (the MAT variants) and the training seeds whose checkpoints ship.
LEARNED = ("mara", "mara-wls", "mara-sparse", "mat", "mara-pure", "mara-sparse-pure", "mara-pfn", "mara-post", "mara-post-pure")
#: A learned row's trainer variant (mara_agents.mat.ppo.VARIANTS); ``-pure`` rows are the same variants
#: trained by PPO alone, with no teacher warm start (their manifests record ``teacher: null``).
LEARNED_VARIANT = {"mara": "mara", "mara-wls": "mara-wls", "mara-sparse": "mara-sparse", "mat": "mat",
                   "mara-pure": "mara", "mara-sparse-pure": "mara-sparse", "mara-pfn": "mara-pfn",
                   "mara-post": "mara-post", "mara-post-pure": "mara-post"}
LEARNED_SEEDS = (0, 1, 2)
CHECKPOINT_DIR = Path(__file__).resolve().parent.parent / "mara_agents" / "checkpoints" / "mat"


def is_learned(row: str) -> bool:
    return row in LEARNED


def library_checkpoints() -> dict[str, Path]:
    """Each shipped third-party-library row's checkpoint (``policy.pt``; manifest and train.json beside it)."""
    from mara_agents.integrations import benchmarl_ppo, rllib_ppo, sb3_maskable, tianshou_ppo, torchrl_ppo  # none imports its library

    return {"ppo-tianshou": tianshou_ppo.SHIPPED_CHECKPOINT, "ppo-tianshou-fm": tianshou_ppo.SHIPPED_FM_CHECKPOINT,
            "ppo-sb3": sb3_maskable.SHIPPED_CHECKPOINT, "ppo-torchrl": torchrl_ppo.SHIPPED_CHECKPOINT, "ppo-rllib": rllib_ppo.SHIPPED_CHECKPOINT,
            "mappo-benchmarl": benchmarl_ppo.SHIPPED_CHECKPOINT}


#: Shipped policies trained by a third-party library (Tianshou, sb3-contrib, TorchRL, RLlib, BenchMARL): each row's module
#: (its ``load_agent`` plays the checkpoint of :func:`library_checkpoints`, manifest beside it).
LIBRARY_TRAINERS = {"ppo-tianshou": "mara_agents.integrations.tianshou_ppo", "ppo-tianshou-fm": "mara_agents.integrations.tianshou_ppo",
                    "ppo-sb3": "mara_agents.integrations.sb3_maskable", "ppo-torchrl": "mara_agents.integrations.torchrl_ppo",
                    "ppo-rllib": "mara_agents.integrations.rllib_ppo", "mappo-benchmarl": "mara_agents.integrations.benchmarl_ppo"}
LIBRARY_ROWS = tuple(LIBRARY_TRAINERS)


def is_trained(row: str) -> bool:
    """A row whose policy was trained (the MAT variants and the shipped third-party-library policies)."""
    return is_learned(row) or row in LIBRARY_ROWS


#: The admission probe on the curve-free prior, fitted on the train workloads of the task set it plays
#: (:mod:`mara_agents.heuristics.prior_edf`).
PRIOR_EDF = prior_edf.NAME
#: Rows that are ceilings or strong heuristics knowing the hidden demand, not schedulers.
ORACLE_ROWS = ("clairvoyant", *CEILING_ROWS)
#: In-memory third-party factories (:func:`register`): name -> (factory, fingerprint).
REGISTERED: dict[str, tuple[Callable[[], Agent], str]] = {}


def knows_demand(row: str) -> bool:
    """True for rows that are told the hidden demand (``clairvoyant``, ``…:oracle``) and for the ceiling rows (K-slot and slot-relaxed MILP)."""
    return row in ORACLE_ROWS or row.split(",")[0].partition(":")[2] == "oracle"


def is_external(row: str) -> bool:
    """True for third-party rows: registered names and ``module.path:attr``."""
    if row in REGISTERED:
        return True
    prefix, colon, _ = row.partition(":")
    shipped = prefix.split(",")[0] in ALLOCATORS or prefix in HEURISTICS or prefix in LEARNED or prefix in (*LIBRARY_ROWS, PRIOR_EDF, *ORACLE_ROWS)
    return bool(colon) and not shipped


def register(name: str, factory: Callable[[], Agent], fingerprint: str | None = None) -> str:
    """Make ``factory`` (an Agent instance, class or zero-argument factory) runnable as row ``name``.

    ``fingerprint`` identifies its code for the cell cache (default: the sha256 of the source file that
    defines it; a random one, never reused, when there is none).
    """
    if not isinstance(name, str) or not name or name in HEURISTICS or name in LEARNED or name == PRIOR_EDF or name.partition(":")[0] in ALLOCATORS:
        raise ValueError(f"a registered row needs a new non-empty name, not a shipped row: {name!r}")
    if fingerprint is None:
        fingerprint = _source_fingerprint(factory) or uuid.uuid4().hex
    REGISTERED[name] = (factory, fingerprint)
    return name


def _source_fingerprint(obj: object) -> str | None:
    try:
        source = inspect.getsourcefile(obj if inspect.isclass(obj) or inspect.isfunction(obj) else type(obj))
        return hashlib.sha256(Path(source).read_bytes()).hexdigest()[:16] if source else None
    except (TypeError, OSError):
        return None


def _resolve_external(row: str) -> tuple[Callable[[], Agent] | Agent, str | None]:
    """(the object named by ``module.path:attr``, sha256 of its module's source)."""
    if row in REGISTERED:
        return REGISTERED[row]
    module_name, _, attr = row.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: modules in the working directory import
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"third-party row {row!r}: cannot import module {module_name!r} ({error}); "
                         "use module.path:attr with the module importable from the working directory or PYTHONPATH") from error
    obj: object = module
    for part in attr.split("."):
        if not part or not hasattr(obj, part):
            raise ValueError(f"third-party row {row!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    source = getattr(module, "__file__", None)
    fingerprint = hashlib.sha256(Path(source).read_bytes()).hexdigest()[:16] if source else None
    weights = _weights_files(row, obj)
    if weights and fingerprint:
        digest = hashlib.sha256(fingerprint.encode())
        for path in weights:
            digest.update(path.read_bytes())
        fingerprint = digest.hexdigest()[:16]
    return obj, fingerprint


def _weights_files(row: str, obj: object) -> list[Path]:
    """The files named by the row object's optional ``weights`` attribute (a path or a list of paths, e.g.
    ``trained.weights = "runs/x/policy.pt"`` on a factory): their bytes join the row's cell key, so retrained
    weights never reuse cached results."""
    weights = getattr(obj, "weights", None)
    if weights is None:
        return []
    paths = [weights] if isinstance(weights, (str, os.PathLike)) else list(weights) if isinstance(weights, (list, tuple)) else None
    if paths is None or not all(isinstance(p, (str, os.PathLike)) for p in paths):
        raise ValueError(f"third-party row {row!r}: its 'weights' attribute must be a path or a list of paths, got {weights!r}")
    missing = [str(p) for p in paths if not Path(p).is_file()]
    if missing:
        raise ValueError(f"third-party row {row!r}: weights file(s) {missing} named by its 'weights' attribute do not exist")
    return [Path(p) for p in paths]


def _external_agent(row: str) -> Agent:
    obj, _ = _resolve_external(row)
    agent = obj if isinstance(obj, Agent) else obj() if callable(obj) else None
    if not isinstance(agent, Agent):
        raise TypeError(f"third-party row {row!r} must name an Agent (mara_agents.protocols.Agent), an Agent class or a "
                        f"zero-argument factory of one; it gave {type(agent if agent is not None else obj).__name__}")
    return agent


def trained_on(row: str, seed: int = 0) -> str | None:
    """The environment version a learned row's checkpoint was trained on (its manifest's ``env_version``;
    checkpoints without one predate discrete_core_v1: ``v0``); None for rows that are not learned."""
    if not is_learned(row):
        return None
    try:
        return str(json.loads(checkpoint_path(row, seed).with_suffix(".json").read_text()).get("env_version", "v0"))
    except (OSError, ValueError):
        return None


#: The teacher a learned row is compared with when its checkpoint had none (the shipped recipe's teacher).
REFERENCE_TEACHER = "edf-admission:fm,min_reports=5"


def teacher_of(row: str, seed: int = 0) -> str | None:
    """The agent a learned row's checkpoint was warm-started from (its manifest's ``teacher``, or
    ``ppo_config.teacher``), :data:`REFERENCE_TEACHER` for a teacher-free checkpoint; None for other rows."""
    if not is_learned(row):
        return None
    try:
        manifest = json.loads(checkpoint_path(row, seed).with_suffix(".json").read_text())
    except (OSError, ValueError):
        return None
    return manifest.get("teacher") or (manifest.get("ppo_config") or {}).get("teacher") or REFERENCE_TEACHER


def checkpoint_path(row: str, seed: int) -> Path:
    """Where the shipped checkpoint of a learned row and training seed lives."""
    return CHECKPOINT_DIR / f"{row}-seed{seed}.pt"


def available(row: str) -> bool:
    """False only for trained rows some of whose shipped checkpoints are missing."""
    if row in LIBRARY_ROWS:
        return library_checkpoints()[row].exists()
    return not is_learned(row) or all(checkpoint_path(row, s).exists() for s in LEARNED_SEEDS)


FM_MANIFEST = Path(__file__).resolve().parent.parent / "mara_agents" / "checkpoints" / "flow_matching.json"
PFN_MANIFEST = FM_MANIFEST.with_name("pfn.json")


def uses_fm(row: str) -> bool:
    """A row whose decisions depend on the shipped flow-matching checkpoint: ``lara-fm``, any allocator
    spec naming ``fm`` (``edf-admission:fm,min_reports=5``), and the learned variants on FM features."""
    if is_learned(row):
        from mara_agents.mat.ppo import VARIANTS

        return (VARIANTS[LEARNED_VARIANT[row]][0] or "").partition("-")[0] == "fm"
    return not is_external(row) and "fm" in re.split(r"[^a-z0-9_]+", row.lower())


def uses_pfn(row: str) -> bool:
    """A row whose decisions depend on the shipped PFN checkpoint: any allocator spec naming ``pfn``
    (``lara:pfn``, ``edf-admission:pfn,min_reports=5``) and the learned variants on PFN features."""
    if is_learned(row):
        from mara_agents.mat.ppo import VARIANTS

        return (VARIANTS[LEARNED_VARIANT[row]][0] or "").partition("-")[0] == "pfn"
    return not is_external(row) and "pfn" in re.split(r"[^a-z0-9_]+", row.lower())


def weights_id(row: str, seed: int = 0) -> str | None:
    """The sha256 (first 16 hex digits) of the weights behind a row and seed, from the checkpoints'
    manifests: a learned row's policy, and the flow-matching and PFN predictors' for every row that uses
    them (:func:`uses_fm`, :func:`uses_pfn`; joined by ``+``); None for rows without weights (or whose checkpoint is missing).
    Benchmark cells include it in their key, so retrained checkpoints never reuse cached results."""
    own = _own_weights_id(row, seed)
    if not (uses_fm(row) or uses_pfn(row)):
        return own
    fm = manifest_sha(FM_MANIFEST) if uses_fm(row) else None
    pfn = manifest_sha(PFN_MANIFEST) if uses_pfn(row) else None
    return "+".join(part for part in (own, f"fm:{fm}" if fm else None, f"pfn:{pfn}" if pfn else None) if part) or None


def manifest_sha(manifest: Path) -> str | None:
    """The first 16 hex digits of the sha256 a checkpoint manifest records, None when it is missing or unreadable."""
    try:
        return str(json.loads(manifest.read_text())["sha256"])[:16]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _own_weights_id(row: str, seed: int) -> str | None:
    if is_learned(row):
        manifest = checkpoint_path(row, seed).with_suffix(".json")
    elif row in LIBRARY_ROWS:
        manifest = library_checkpoints()[row].with_suffix(".json")
    elif is_external(row):
        return _resolve_external(row)[1]
    else:
        return None
    return manifest_sha(manifest)


def make_agent(row: str, seed: int = 0, task_set: str | None = None) -> Agent:
    """The agent of a benchmark row (see the module docstring); ``seed`` seeds the random agent and picks
    a learned row's training seed; ``task_set`` (a built-in name or a bank file) is the one the row plays,
    needed by rows fitted per task set (:data:`PRIOR_EDF`, posterior allocators with ``prior=1``) and ignored by the others."""
    if row == PRIOR_EDF:
        return prior_edf.make_prior_edf(task_set)
    if is_learned(row):
        from mara_agents.mat.agent import MATAgent

        path = checkpoint_path(row, seed)
        if not path.exists():
            raise FileNotFoundError(f"no checkpoint for {row!r} seed {seed} at {path}; train it with python -m mara_agents.mat.ppo")
        expect = {"variant": LEARNED_VARIANT[row], "seed": seed, **({"teacher": None} if row.endswith("-pure") else {})}
        return MATAgent.load(path, expect=expect)  # a checkpoint copied under another row's name is refused
    if row in LIBRARY_ROWS:
        path, trainer = library_checkpoints()[row], LIBRARY_TRAINERS[row]
        if not path.exists():
            raise FileNotFoundError(f"no checkpoint for {row!r} at {path}; train it with python -m {trainer}")
        return importlib.import_module(trainer).load_agent(path)
    if row in CEILING_ROWS:
        raise ValueError(f"{row!r} is an offline-optimum ceiling row (benchmarks.ceiling_cells), not an agent")
    if is_external(row):
        return _external_agent(row)
    if row in HEURISTICS:
        return HEURISTICS[row](seed) if row == "random" else HEURISTICS[row]()
    if row.split(",")[0].partition(":")[0] in ALLOCATORS:
        return make_allocator(row, task_set)
    raise ValueError(f"unknown agent row {row!r}: heuristics {sorted(HEURISTICS)}, allocators {sorted(ALLOCATORS)} "
                     "(optionally ':predictor' and ',key=int' options, e.g. 'lara:oracle', 'edf-admission:fm,min_reports=5'), "
                     f"the probe {PRIOR_EDF!r}, learned {list(LEARNED)}, or a third-party module.path:attr")
