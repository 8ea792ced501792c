"""Environment configuration: one validated, frozen dataclass shared by every view.

The same keyword names are accepted by the PettingZoo view, the Gymnasium view and the batched
simulator: ``n_nodes``, ``n_slots``, ``arrival_steps``, ``load``, ``task_set``, ``curve_source``,
``recipe``, ``reward``, ``kappa``, ``history``, ``node_speeds``, ``switch_cost``, ``strict``,
``max_cycles``, ``render_mode``. Invalid values raise :class:`ValueError` / :class:`TypeError` naming
the field.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from core_env.curves import TASK_SETS
from core_env.recipe import DEFAULT_RECIPE, recipe_from

#: Arrival intensity per node of the named loads: in each step of the arrival window, each node's users
#: submit a task with this probability, so a step brings Binomial(N, intensity) tasks and the pressure
#: per node is the same at N = 4 and N = 256. ``train`` is the training load; the others scale it.
#: Calibration (EDF well below the slot-relaxed MILP at ``train``) is in docs/curves.md.
TRAIN_INTENSITY = 0.1
LOADS: dict[str, float] = {"train": TRAIN_INTENSITY, "x1.25": 1.25 * TRAIN_INTENSITY, "x1.5": 1.5 * TRAIN_INTENSITY, "x2": 2 * TRAIN_INTENSITY}

REWARDS: tuple[str, ...] = ("shaped", "sparse")
#: The largest potential weight ``kappa`` (EnvConfig): beyond it the potential swamps the completions.
KAPPA_MAX = 100.0
CURVE_SOURCES: tuple[str, ...] = ("corpus", "prior")
RENDER_MODES: tuple[str, ...] = ("ansi", "rgb_array", "human")


def load_label(load: Any) -> str:
    """The one check of a load: its label in suite file names, meta and seeds (a name in :data:`LOADS`, or
    ``repr`` of an intensity per node in (0, 1]); ValueError for anything else."""
    if isinstance(load, str):
        if load not in LOADS:
            raise ValueError(f"unknown load {load!r}; expected one of {sorted(LOADS)} or an intensity per node in (0, 1]")
        return load
    if not _is_real(load) or not 0.0 < float(load) <= 1.0:
        raise ValueError(f"load must be a name in {sorted(LOADS)} or an intensity per node in (0, 1], got {load!r}")
    return repr(float(load))


def parse_load(text: str, name: str = "load") -> str | float:
    """A load written as text (a command line's ``--load``): a name in :data:`LOADS` as is, else the intensity the
    number spells, checked by :func:`load_label`; ValueError ``"{name} must be one of ..."`` for anything else."""
    try:
        load = text if text in LOADS else float(text)
        load_label(load)
    except ValueError:
        raise ValueError(f"{name} must be one of {sorted(LOADS)} or an intensity per node in (0, 1], got {text!r}") from None
    return load


def load_intensity(load: str | float) -> float:
    """A (checked) load's arrival probability per node and step."""
    return LOADS[load] if isinstance(load, str) else float(load)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """Validated environment configuration.

    Attributes:
        n_nodes: N, compute nodes (agents), 1–256.
        n_slots: K, visible task slots, 1–1024.
        arrival_steps: T_arrive, steps during which tasks may arrive; the episode then drains. Seeded draws
            cover min(arrival_steps, max_cycles) steps: arrivals no episode can reach are not drawn.
        load: a name in :data:`LOADS` or an arrival intensity per node and step in (0, 1] (the
            probability that each node's users submit a task in a step).
        task_set: ``"id"``, ``"rl_ood"``, ``"vit_ood"``, ``"stress"``, a custom
            :class:`core_env.curves.CurveBank`, or the path (str or path-like) of a bank file made by
            ``python -m core_env.curves import`` (verified on creation; seeded workloads draw from its
            ``train`` split, which is also the recipe's family reference; see :meth:`bank`).
        curve_source: where seeded workloads of a named task set get their curves: ``"corpus"``
            (real training curves, default) or ``"prior"`` (the parametric prior fitted to the corpus).
            Evaluation suites always replay corpus curves. A bank file or CurveBank is its own source
            (``"prior"`` is refused for a bank file).
        recipe: the task recipe of seeded workloads (:class:`core_env.recipe.TaskRecipe`, or a dict of
            its fields, validated; default the v1 recipe). Committed suites keep the recipe they were
            generated with (in their meta).
        reward: ``"shaped"`` (potential-based, default) or ``"sparse"``.
        kappa: weight of the log-progress potential in the shaped reward, in [0, 100] (larger weights would
            swamp the completions and, near the float limit, make the shaped return non-finite).
        history: H, reported log losses per slot in the observation.
        node_speeds: per-node speed multipliers (length N, each in [1e-3, 1e3]) or None for all 1.0. The
            range keeps a step's batches (``batches_per_step × speed``) well above the float resolution of a
            task's position, so progress and interval-mean losses stay exact enough.
        switch_cost: fraction in [0, 1) of a step's batches lost when a task changes node or resumes.
        strict: raise on choices of empty or masked slots instead of treating them as idle.
        max_cycles: hard cap on episode length (truncation); a safety net only.
        render_mode: None, ``"ansi"``, ``"rgb_array"`` or ``"human"`` (prints the ansi table).
    """

    n_nodes: int = 4
    n_slots: int = 16
    arrival_steps: int = 500
    load: Any = "train"
    task_set: Any = "id"
    curve_source: str = "corpus"
    reward: str = "shaped"
    kappa: float = 0.5
    history: int = 8
    node_speeds: Any = None
    switch_cost: float = 0.0
    strict: bool = False
    max_cycles: int = 5000
    render_mode: str | None = None
    recipe: Any = DEFAULT_RECIPE

    def __post_init__(self) -> None:
        self._check_int("n_nodes", 1, 256)
        self._check_int("n_slots", 1, 1024)
        self._check_int("arrival_steps", 1, 10**7)
        self._check_int("history", 1, 4096)
        self._check_int("max_cycles", 1, 10**9)
        load_label(self.load)
        self._check_task_set()
        if self.curve_source not in CURVE_SOURCES:
            raise ValueError(f"unknown curve_source {self.curve_source!r}; expected one of {list(CURVE_SOURCES)}")
        if self.curve_source != "corpus" and self.bank_path is not None:
            raise ValueError(f"curve_source={self.curve_source!r} is for built-in task sets (a prior fitted to the corpus); "
                             "a bank file's curves are its own: leave curve_source='corpus'")
        object.__setattr__(self, "recipe", recipe_from(self.recipe))
        if self.reward not in REWARDS:
            raise ValueError(f"unknown reward {self.reward!r}; expected one of {list(REWARDS)}")
        if not _is_real(self.kappa) or not np.isfinite(self.kappa) or not 0 <= self.kappa <= KAPPA_MAX:
            raise ValueError(f"kappa must be a number in [0, {KAPPA_MAX:g}], got {self.kappa!r}")
        if not _is_real(self.switch_cost) or not 0.0 <= float(self.switch_cost) < 1.0:
            raise ValueError(f"switch_cost must be a fraction in [0, 1), got {self.switch_cost!r}")
        if not isinstance(self.strict, bool):
            raise TypeError(f"strict must be a bool, got {type(self.strict).__name__}")
        if self.render_mode is not None and self.render_mode not in RENDER_MODES:
            raise ValueError(f"unknown render_mode {self.render_mode!r}; expected None or one of {list(RENDER_MODES)}")
        if self.node_speeds is not None:
            speeds = None
            if isinstance(self.node_speeds, Sequence) and any(isinstance(s, (bool, np.bool_)) for s in self.node_speeds):
                raise TypeError(f"node_speeds must be numbers, not bools, got {self.node_speeds!r}")
            if not isinstance(self.node_speeds, str):
                try:
                    speeds = np.asarray(self.node_speeds, dtype=float)
                except (TypeError, ValueError):
                    raise ValueError(f"node_speeds must be numbers, got {self.node_speeds!r}") from None
            if speeds is None or speeds.shape != (self.n_nodes,):
                raise ValueError(f"node_speeds must have length n_nodes={self.n_nodes}, got {self.node_speeds!r}")
            if not np.all(np.isfinite(speeds)) or np.any(speeds <= 0):
                raise ValueError(f"node_speeds must be finite and > 0, got {self.node_speeds!r}")
            slowest, fastest = 1e-3, 1e3  # the documented range (docs/env.md, Arguments)
            if np.any(speeds < slowest) or np.any(speeds > fastest):
                raise ValueError(f"node_speeds must each be in [{slowest}, {fastest}], got {self.node_speeds!r}")
            object.__setattr__(self, "node_speeds", tuple(float(s) for s in speeds))

    def _check_task_set(self) -> None:
        from core_env.curves import IMPORT_HINT, CurveBank, bank_file

        object.__setattr__(self, "_bank_file", None)
        if isinstance(self.task_set, os.PathLike):
            object.__setattr__(self, "task_set", os.fspath(self.task_set))
        if isinstance(self.task_set, bytes):
            raise TypeError("task_set must be a name or a CurveBank (or a bank file's path as str), got bytes")
        if isinstance(self.task_set, str):
            if self.task_set in TASK_SETS:
                return
            if not self.task_set.strip():
                raise ValueError(f"unknown task_set {self.task_set!r}; expected one of {list(TASK_SETS)}, a CurveBank or "
                                 f"the path of a bank file ({IMPORT_HINT})")
            try:
                verified = bank_file(self.task_set)
            except ValueError as exc:
                raise ValueError(f"unknown task_set {self.task_set!r}: not a built-in task set {list(TASK_SETS)} and not "
                                 f"a readable bank file ({exc})") from None
            object.__setattr__(self, "_bank_file", verified)
            return
        if not isinstance(self.task_set, CurveBank):
            raise TypeError(f"task_set must be a name or a CurveBank (or a bank file's path), got {type(self.task_set).__name__}")

    def _check_int(self, name: str, low: int, high: int) -> None:
        value = getattr(self, name)
        if not _is_int(value):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        if not low <= value <= high:
            raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
        object.__setattr__(self, name, int(value))

    @property
    def arrival_intensity(self) -> float:
        """Probability per step that each node's users submit a task (Binomial(N, ·) arrivals per step)."""
        return load_intensity(self.load)

    @property
    def speeds(self) -> np.ndarray:
        """Node speeds as a float64 array of shape (N,)."""
        if self.node_speeds is None:
            return np.ones(self.n_nodes)
        return np.asarray(self.node_speeds, dtype=np.float64)

    @property
    def bank_path(self) -> str | None:
        """The resolved path of the bank file ``task_set`` names (None for a built-in name or a CurveBank)."""
        verified = self.__dict__.get("_bank_file")
        return None if verified is None else verified.path

    @property
    def bank_sha256(self) -> str | None:
        """The sha256 of the bank file ``task_set`` names, as verified when the config was made (else None)."""
        verified = self.__dict__.get("_bank_file")
        return None if verified is None else verified.sha256

    @property
    def task_set_name(self) -> str:
        """A stable name: the built-in name, the CurveBank's name, or the bank file manifest's ``name``."""
        verified = self.__dict__.get("_bank_file")
        if verified is not None:
            return verified.name
        return self.task_set if isinstance(self.task_set, str) else self.task_set.name

    def bank(self, split: str = "train"):
        """The :class:`~core_env.curves.CurveBank` of ``split`` behind the task set: a CurveBank itself (any
        split), a bank file's ``"train"`` / ``"eval"`` / ``"all"`` split (refused if the file changed since
        the config was made), or a corpus task set's bank from ``curve_source``. A constructed scenario
        (``stress``) has no splits: ValueError (its workload's bank is ``core_env.generators.generator_for(config).bank``)."""
        from core_env.curves import CORPUS_TASK_SETS, CurveBank, bank_for

        if isinstance(self.task_set, CurveBank):
            return self.task_set
        verified = self.__dict__.get("_bank_file")
        if verified is not None:
            return verified.bank(split)
        if self.task_set not in CORPUS_TASK_SETS:
            raise ValueError(f"task_set {self.task_set!r} is a constructed scenario without curve splits; the bank of its workload is "
                             "core_env.generators.generator_for(config).bank")
        return bank_for(self.task_set, split, self.curve_source)


def make_config(config: EnvConfig | None = None, **kwargs: Any) -> EnvConfig:
    """An :class:`EnvConfig` from keyword arguments, with a clear error for unknown names."""
    if config is not None:
        if kwargs:
            return dataclasses.replace(config, **kwargs)
        return config
    names = {f.name for f in dataclasses.fields(EnvConfig)}
    unknown = sorted(set(kwargs) - names)
    if unknown:
        raise TypeError(f"unknown environment argument(s) {unknown}; valid names: {sorted(names)}")
    return EnvConfig(**kwargs)
