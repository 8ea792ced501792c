"""The v1 task recipe: how a task's target, compute rate and deadline are set, and why none leaks its demand.

A task is one training run (a curve of the bank) submitted with a target loss and a deadline. The
submitter has not seen this run's curve; what they know is how runs of the same **family** usually go
(the *reference runs*: the train split of the task set, or a custom bank itself). So, per task:

1. **Curve**: uniform over the bank; its family ``f`` is the bank's label.
2. **Target**: the submitter budgets a share ``u`` of a typical run (log-uniform in
   :attr:`TaskRecipe.budget_share`) and asks for a loss that a share ``q`` of the family's reference
   runs had reached by then (``q`` uniform in :attr:`TaskRecipe.target_quantile`): the target is the
   ``q``-quantile, over reference runs, of the smoothed loss at ``u`` of each run's length. A particular
   run may never reach it (its demand is then infinite): reachability is something to predict.
3. **Compute rate** (batches per node-step): the family's reference rate times a multiplier drawn
   log-uniform in :attr:`TaskRecipe.rate_spread`, independently of the curve and target (hardware,
   batch size, model size). The reference rate is set so that a whole typical run of the family takes
   :attr:`TaskRecipe.typical_run_steps` node-steps.
4. **Deadline**: arrival + ``ceil(slack · u · typical_run_steps)``, with ``slack`` uniform in
   :attr:`TaskRecipe.slack`: the budgeted share of a typical run at the reference rate, times a slack.
   It uses only family-level knowledge, never this task's curve, demand or rate.
5. **Demand** (hidden) then *emerges*: the nominal node-steps until this run's reported loss first
   reaches the target at this task's rate (:meth:`core_env.curves.CurveBank.demands`), heterogeneous,
   heavy-tailed, sometimes infinite.

Reproducibility on any CPU: the only transcendental functions (``exp`` of the log-uniform draws) can
differ by one ulp between SIMD code paths, so every derived float is **quantized** to
:data:`SIGNIFICANT_BITS` significant bits (:func:`quantize`: ``frexp``/``ldexp``, exact on every
machine) before anything depends on it. Targets are quantized too. Everything else is IEEE arithmetic,
sorting and comparisons, which are the same everywhere.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from core_env.curves import CurveBank

#: Significant bits kept by :func:`quantize` (relative grid 2^-12 ≈ 0.024 %).
SIGNIFICANT_BITS = 12


def quantize(x: np.ndarray) -> np.ndarray:
    """Round positive floats to :data:`SIGNIFICANT_BITS` significant bits (exact, machine-independent)."""
    mantissa, exponent = np.frexp(np.asarray(x, dtype=np.float64))
    return np.ldexp(np.round(mantissa * 2.0**SIGNIFICANT_BITS) / 2.0**SIGNIFICANT_BITS, exponent)


def _pair(name: str, value: Any, low: float, high: float) -> tuple[float, float]:
    try:
        a, b = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"TaskRecipe.{name} must be a pair of numbers, got {value!r}") from None
    if not (math.isfinite(a) and math.isfinite(b) and low <= a <= b <= high):
        raise ValueError(f"TaskRecipe.{name} must satisfy {low} <= lo <= hi <= {high}, got {value!r}")
    return a, b


#: Most node-steps a recipe may ask of one task: a whole typical run at its slowest rate, and its longest
#: deadline window (the defaults: 120 and 180). Bounds what a reset can allocate and compute.
MAX_RECIPE_STEPS = 10_000


@dataclasses.dataclass(frozen=True)
class TaskRecipe:
    """How targets, compute rates and deadlines are drawn (module docstring). Validated on creation.

    Attributes:
        budget_share: (lo, hi), 0 < lo <= hi <= 1: the share ``u`` of a typical run the submitter
            budgets, log-uniform.
        target_quantile: (lo, hi) in [0, 1]: the share ``q`` of reference runs that had reached the
            target after ``u`` of their length, uniform.
        typical_run_steps: node-steps a whole typical run of any family takes at its reference rate.
        rate_spread: (lo, hi) > 0: the task's rate multiplier, log-uniform.
        slack: (lo, hi) > 0: deadline slack over the budgeted node-steps, uniform.
    """

    budget_share: tuple[float, float] = (0.15, 1.0)
    target_quantile: tuple[float, float] = (0.4, 0.95)
    typical_run_steps: float = 60.0
    rate_spread: tuple[float, float] = (0.5, 2.0)
    slack: tuple[float, float] = (1.0, 3.0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "budget_share", _pair("budget_share", self.budget_share, 1e-6, 1.0))
        object.__setattr__(self, "target_quantile", _pair("target_quantile", self.target_quantile, 0.0, 1.0))
        object.__setattr__(self, "rate_spread", _pair("rate_spread", self.rate_spread, 1e-6, 1e6))
        object.__setattr__(self, "slack", _pair("slack", self.slack, 1e-6, 1e6))
        steps = self.typical_run_steps
        if isinstance(steps, bool) or not isinstance(steps, (int, float)) or not 1.0 <= float(steps) <= 1e6:
            raise ValueError(f"TaskRecipe.typical_run_steps must be a number in [1, 1e6], got {steps!r}")
        object.__setattr__(self, "typical_run_steps", float(steps))
        slowest = self.typical_run_steps / self.rate_spread[0]  # node-steps to walk a whole run at the slowest rate
        if slowest > MAX_RECIPE_STEPS:
            raise ValueError(f"TaskRecipe: typical_run_steps / rate_spread[0] = {slowest:g} node-steps for a whole run at the slowest "
                             f"rate; at most {MAX_RECIPE_STEPS:,} (every task's demand is found by walking its curve step by step)")
        longest = self.slack[1] * self.budget_share[1] * self.typical_run_steps  # the longest deadline window
        if longest > MAX_RECIPE_STEPS:
            raise ValueError(f"TaskRecipe: slack[1] * budget_share[1] * typical_run_steps = {longest:g} steps of deadline window; "
                             f"at most {MAX_RECIPE_STEPS:,} (the simulator keeps a task's reports over its window)")

    def as_dict(self) -> dict[str, Any]:
        """The recipe as JSON-ready values (recorded in suite files)."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in dataclasses.fields(self)}


DEFAULT_RECIPE = TaskRecipe()


def recipe_from(value: Any) -> TaskRecipe:
    """A :class:`TaskRecipe` from a recipe, a dict of some of its fields (the rest default; e.g. a suite
    meta's ``"recipe"``) or None (the default recipe). Raises ValueError naming unknown or bad fields,
    TypeError for anything else."""
    if value is None:
        return DEFAULT_RECIPE
    if isinstance(value, TaskRecipe):
        return value
    if isinstance(value, dict):
        names = [f.name for f in dataclasses.fields(TaskRecipe)]
        unknown = sorted(str(k) for k in value if k not in names)
        if unknown:
            raise ValueError(f"unknown TaskRecipe field(s) {unknown}; valid fields: {names}")
        return TaskRecipe(**value)
    raise TypeError(f"recipe must be a TaskRecipe or a dict of its fields {[f.name for f in dataclasses.fields(TaskRecipe)]}, "
                    f"got {type(value).__name__}")


class FamilyReference:
    """What a submitter knows about each family: how its reference runs progress at the reference rate.

    For every reference run it holds the running minimum of the losses the run reports when served
    every step at its family's reference rate (:meth:`CurveBank.reported_losses`), so "a share ``q`` of
    runs had reached loss ``ε`` after ``s`` node-steps" is read under the environment's own completion
    rule (a task completes at its first report at or below its target).

    Args:
        bank: the reference runs (a task set's train split, or a custom bank itself).
        recipe: the recipe whose ``typical_run_steps`` sets the reference rates.
    """

    def __init__(self, bank: CurveBank, recipe: TaskRecipe = DEFAULT_RECIPE) -> None:
        self.bank, self.recipe = bank, recipe
        self.families = sorted(set(bank.family.tolist()))
        self.rate = {f: float(np.median(bank.lengths[bank.family == f])) / recipe.typical_run_steps for f in self.families}
        self.steps = int(np.ceil(recipe.typical_run_steps))
        self._best = {}  # family -> (runs, steps) running minimum of reported losses after 1..steps node-steps
        for f in self.families:
            runs = np.flatnonzero(bank.family == f)
            reports = np.stack([bank.reported_losses(int(i), self.rate[f], steps=self.steps) for i in runs])
            self._best[f] = np.minimum.accumulate(reports, axis=1)

    def target(self, family: str, share: float, quantile: float) -> float:
        """The ``quantile`` over reference runs of the best loss reported within ``share`` of a typical run."""
        return float(self.targets(np.array([family]), np.array([share]), np.array([quantile]))[0])

    def targets(self, family: np.ndarray, share: np.ndarray, quantile: np.ndarray) -> np.ndarray:
        """:meth:`target` of many tasks, (m,): one quantile call per family and 256 tasks (the same values as
        one by one: numpy's quantile is elementwise in the levels)."""
        family = np.asarray(family)
        step = np.minimum(self.steps, np.maximum(1, np.ceil(np.asarray(share) * self.recipe.typical_run_steps).astype(np.int64)))
        out = np.empty(family.size)
        for f in np.unique(family).tolist():
            if f not in self._best:
                raise ValueError(f"no reference runs of family {f!r}; reference families: {self.families}")
            for mine in np.array_split(np.flatnonzero(family == f), max(1, -(-int(np.sum(family == f)) // 256))):
                table = np.quantile(self._best[f][:, step[mine] - 1], np.asarray(quantile)[mine], axis=0)  # (q, task), ≤ 256²
                out[mine] = table[np.arange(mine.size), np.arange(mine.size)]
        return out


def draw_tasks(bank: CurveBank, reference: FamilyReference, m: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``m`` tasks by ``reference.recipe``: ``curve``, ``target``, ``batches_per_step``, ``window`` (node-steps from
    arrival to deadline) and the emergent hidden ``demand``, each (m,)."""
    recipe = reference.recipe
    curve = rng.integers(0, len(bank), size=m)
    share = quantize(np.exp(rng.uniform(*np.log(recipe.budget_share), size=m)))
    quantile = rng.uniform(*recipe.target_quantile, size=m)
    multiplier = quantize(np.exp(rng.uniform(*np.log(recipe.rate_spread), size=m)))
    slack = rng.uniform(*recipe.slack, size=m)
    family = bank.family[curve]
    target = quantize(reference.targets(family, share, quantile))
    rate = quantize(np.array([reference.rate[f] for f in family.tolist()]) * multiplier)
    window = np.maximum(1, np.ceil(slack * share * recipe.typical_run_steps)).astype(np.int64)
    demand = bank.demands(curve, target, rate)
    return {"curve": curve, "target": target, "batches_per_step": rate, "window": window, "demand": demand}
