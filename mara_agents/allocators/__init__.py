"""Learning-aware baseline allocators (numpy), all behind :class:`mara_agents.protocols.Agent`.

Each reads the observation only: :class:`ObservedTasks` rebuilds the tasks' loss histories, any
:class:`~mara_agents.protocols.Predictor` predicts their remaining demand (cached per task), and a
decision rule built from separate admission (:mod:`.admission`) and ordering (:mod:`.ordering`) pieces
picks the tasks. ``ALLOCATORS`` maps each benchmark name to a factory taking a predictor name
(``"wls"``, ``"dkf"``, ``"fm"``, ``"oracle"``, ...; see ``mara_agents.predictors.PREDICTORS``).
See docs/agents.md for what each one is and where it departs from its source.
"""

from __future__ import annotations

from mara_agents.allocators.base import Estimates, PredictiveAllocator
from mara_agents.allocators.laira import LaiRA
from mara_agents.allocators.lara import LARA
from mara_agents.allocators.posterior import CompletionPlanner, IndexAllocator, _PosteriorAllocator
from mara_agents.allocators.ordered import LLF, SLAQ, EDFAdmission, OrderedAllocator
from mara_agents.observed import ObservedTasks
from mara_agents.predictors import PREDICTORS
from mara_agents.predictors.demand_prior import with_prior


def _with(cls, default: str):
    def make(predictor: str = default, task_set: str | None = None, prior: int = 0, **kwargs):
        if predictor not in PREDICTORS:
            raise ValueError(f"unknown predictor {predictor!r}; choose from {sorted(PREDICTORS)}")
        if prior not in (0, 1) or isinstance(prior, bool):
            raise ValueError(f"prior must be 0 or 1 (1: tasks with no report read the curve-free prior), got {prior!r}")
        if prior and not issubclass(cls, _PosteriorAllocator):
            raise ValueError(f"prior=1 is an option of the posterior allocators (index, plan), not of {cls.__name__}")
        chosen = PREDICTORS[predictor]()
        return cls(with_prior(chosen, task_set) if prior else chosen, **kwargs)

    make.__doc__ = f"{cls.__name__} on the named predictor (default {default!r})."
    return make


ALLOCATORS = {
    "lara": _with(LARA, "wls"),
    "lara-fm": _with(LARA, "fm"),
    "laira": _with(LaiRA, "dkf"),
    "edf-admission": _with(EDFAdmission, "wls"),
    "llf": _with(LLF, "wls"),
    "slaq": _with(SLAQ, "wls"),
    "index": _with(IndexAllocator, "pfn"),
    "plan": _with(CompletionPlanner, "pfn"),
}



def parse_allocator_spec(spec: str) -> tuple[str, str | None, dict[str, int]]:
    """(name, predictor or None, integer options) of ``NAME[:PREDICTOR][,KEY=INT,...]``; ValueError for an
    unknown name or predictor or a malformed option (options are checked by the class when it is built)."""
    head, *options = spec.split(",")
    name, _, predictor = head.partition(":")
    if name not in ALLOCATORS:
        raise ValueError(f"unknown allocator {name!r} in {spec!r}; choose from {sorted(ALLOCATORS)}")
    if predictor and predictor not in PREDICTORS:
        raise ValueError(f"unknown predictor {predictor!r} in {spec!r}; choose from {sorted(PREDICTORS)}")
    kwargs = {}
    for option in options:
        key, _, value = option.partition("=")
        try:
            kwargs[key.strip()] = int(value)
        except ValueError:
            raise ValueError(f"option {option!r} of {spec!r} is not KEY=INT") from None
    return name, predictor or None, kwargs


def make_allocator(spec: str, task_set: str | None = None) -> PredictiveAllocator:
    """The allocator of ``spec`` = ``NAME[:PREDICTOR][,KEY=INT,...]``, e.g. ``"lara:oracle"`` or
    ``"edf-admission:fm,min_reports=5"`` (integer keyword arguments of its class); ValueError otherwise.
    The posterior allocators take ``prior=1``: tasks with no report read the curve-free prior of
    ``task_set`` (:mod:`mara_agents.predictors.demand_prior`), which must then be given."""
    name, predictor, kwargs = parse_allocator_spec(spec)
    try:
        return ALLOCATORS[name](predictor, task_set=task_set, **kwargs) if predictor else ALLOCATORS[name](task_set=task_set, **kwargs)
    except TypeError as error:
        raise ValueError(f"allocator {spec!r}: {error}") from error


__all__ = ["ALLOCATORS", "CompletionPlanner", "make_allocator", "parse_allocator_spec", "EDFAdmission", "Estimates", "IndexAllocator", "LARA", "LLF", "LaiRA", "ObservedTasks", "OrderedAllocator", "PredictiveAllocator", "SLAQ"]
