"""Orderings: (B, K) keys, lower served first. Separate from admission (see :mod:`.admission`).

* :func:`by_deadline`: EDF.
* :func:`by_laxity`: predictive least laxity first, budget − predicted demand, ties by deadline.
* :func:`by_loss_drop`: SLAQ-greedy, the largest predicted normalized loss drop over the next node-step.
"""

from __future__ import annotations

import numpy as np

from mara_agents.allocators.base import Estimates

#: Ties in a composite key: the primary key is scaled by this before the secondary is added.
_TIE = 1e-4


def by_deadline(estimates: Estimates) -> np.ndarray:
    return estimates.budget.astype(np.float64)


def by_laxity(estimates: Estimates, cap: float = 1e6) -> np.ndarray:
    """Laxity (−cap when the demand is censored: those tasks are the most urgent under literal LLF), ties by deadline."""
    return np.maximum(estimates.laxity, -cap) + _TIE * estimates.budget


def by_loss_drop(estimates: Estimates) -> np.ndarray:
    """Minus SLAQ's predicted normalized loss drop of one more node-step.

    SLAQ ranks jobs by (L_t − L̂_{t+1}) / (L_0 − L_target). We read the drop from the demand prediction
    (any predictor): reaching the target in R̂ node-steps on a straight line in log loss drops
    (ln L_t − ln ε) / R̂ per node-step, normalized by the task's whole log-loss gap ln L_0 − ln ε. Tasks
    without reports come first (the largest drops are early in training), censored demands last.
    """
    tasks = estimates.tasks
    with np.errstate(divide="ignore", invalid="ignore"):
        gap_now = np.log(tasks.last_loss) - np.log(tasks.target)
        gap_start = np.log(tasks.first_loss) - np.log(tasks.target)
        drop = np.where(np.isfinite(estimates.demand) & (estimates.demand > 0), gap_now / np.maximum(estimates.demand, 1.0), 0.0)
        drop = np.where(gap_start > 0, drop / gap_start, drop)
    drop = np.where(tasks.steps > 0, np.nan_to_num(drop, nan=0.0, posinf=0.0, neginf=0.0), np.inf)
    return -drop
