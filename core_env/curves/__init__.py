"""Loss curves behind the task sets: the :class:`CurveBank` interface and the banks per task set.

``bank_for(task_set, split)`` returns the bank a task set draws its tasks from. Evaluation suites use
the ``eval`` split and training workloads (``reset(seed=...)``) the ``train`` split; the two never share
a curve. Until the real-curve corpus lands, every named task set is backed by the parametric stand-in
(:mod:`core_env.curves.prior`).
"""

from __future__ import annotations

import functools

from core_env.curves.bank import DIVERGED, LOSS_FLOOR, NON_LEARNER, CurveBank
from core_env.curves.prior import prior_bank

SPLITS = ("train", "eval")


@functools.lru_cache(maxsize=None)
def bank_for(task_set: str, split: str = "eval", source: str = "prior") -> CurveBank:
    """The curve bank behind a named task set and split (cached; banks are immutable)."""
    if source != "prior":
        raise ValueError(f"unknown curve source {source!r}; available: 'prior'")
    return prior_bank(task_set, split)


__all__ = ["CurveBank", "DIVERGED", "LOSS_FLOOR", "NON_LEARNER", "SPLITS", "bank_for", "prior_bank"]
