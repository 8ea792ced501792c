"""The public rule that flags a loss curve as *diverged* or as a *non-learner*.

One rule, used everywhere a curve gets flags: the curve generator (:func:`core_env.curves.runs.common.finalize`),
the committed corpus (whose flags this rule reproduces exactly from the committed curves; a test checks it)
and curves a user imports (:mod:`core_env.curves.importer`). Flags are bits of a ``uint8``:

* :data:`DIVERGED` (1): the loss became non-finite or exploded;
* :data:`NON_LEARNER` (2): the loss did not come down by more than 10 %.

Both kinds of run are kept in a bank: they are naturally infeasible tasks (a target they never reach),
which a scheduler has to learn to recognise. See :func:`flag_runs` for the exact rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Flag bit: the run diverged (a non-finite loss, or a loss that exploded; :func:`flag_runs`).
DIVERGED = 1
#: Flag bit: the run did not learn (its final smoothed loss is above 0.9 x its initial one).
NON_LEARNER = 2
#: A loss at or above ``EXPLODE_FACTOR * max(|first loss|, 1)`` counts as divergence.
EXPLODE_FACTOR = 100.0
#: A run is a non-learner when its final smoothed loss exceeds this fraction of its initial smoothed loss.
NON_LEARNER_RATIO = 0.9
#: Version of the rule, recorded in the manifests of imported banks. Bump it when the rule changes.
RULE_VERSION = 1


def smooth_window(n: int) -> int:
    """Points averaged at each end of a curve of ``n`` points: ``min(n, max(5, n // 50))``."""
    return int(min(n, max(5, n // 50)))


def finite_prefix(curve: np.ndarray) -> np.ndarray:
    """The values of ``curve`` before its first non-finite (NaN or +-inf) value (a view)."""
    values = np.asarray(curve, dtype=np.float64).ravel()
    bad = np.flatnonzero(~np.isfinite(values))
    return values[: bad[0]] if bad.size else values


def flag_one(curve: np.ndarray, stopped: bool = False) -> int:
    """The flag bits of one curve (:func:`flag_runs` for a single run)."""
    values = np.asarray(curve, dtype=np.float64).ravel()
    prefix = finite_prefix(values)
    flags = 0
    if stopped or prefix.size < values.size:
        flags |= DIVERGED
    if prefix.size == 0:
        return flags | NON_LEARNER
    if float(prefix.max()) >= EXPLODE_FACTOR * max(abs(float(prefix[0])), 1.0):
        flags |= DIVERGED
    w = smooth_window(prefix.size)
    with np.errstate(over="ignore"):
        initial, final = float(prefix[:w].mean()), float(prefix[-w:].mean())
    if not (np.isfinite(initial) and np.isfinite(final)):  # finite losses near 1e308 whose sum overflows: compare scaled means
        scale = float(np.abs(prefix).max())
        initial, final = float((prefix[:w] / scale).mean()), float((prefix[-w:] / scale).mean())
    if final > NON_LEARNER_RATIO * initial:
        flags |= NON_LEARNER
    return flags


def flag_runs(curves: Sequence[np.ndarray], stopped: Sequence[bool] | None = None) -> np.ndarray:
    """Flag bits of every run, (R,) ``uint8``, by one exact rule.

    Each curve is the run's losses in training order (one per logged step), *as logged*: non-finite
    values allowed. Let ``p`` be the curve's *finite prefix*, the values before its first non-finite
    (NaN or +-inf) value, and ``n = len(p)``.

    * **DIVERGED** (bit 1) when any of:

      1. the curve holds a non-finite value (so ``p`` is shorter than the curve);
      2. some value of ``p`` is ``>= EXPLODE_FACTOR * max(|p[0]|, 1)`` (100x the first loss, or 100 if
         the first loss is below 1). The generator stops a run whose loss *exceeds* this cap and records
         the cap itself as its last point, so its stored curve meets this test;
      3. ``stopped[i]`` is true: the trainer itself reported divergence (the generator truncates such
         runs at their last finite point, so the stored curve alone cannot show it).

    * **NON_LEARNER** (bit 2) when ``n == 0``, or when ``mean(p[-w:]) > NON_LEARNER_RATIO * mean(p[:w])``
      (the final smoothed loss is above 0.9 x the initial one) with ``w = min(n, max(5, n // 50))``.

    A run can carry both bits. Values are used as given (no clipping, no smoothing beyond the two end
    means), so apply the rule to raw losses: :mod:`core_env.curves.importer` flags a run on its logged
    points sorted by step, before resampling or clipping.

    Args:
        curves: one 1-D array of losses per run.
        stopped: optional, per run: the trainer reported divergence (default: none did).
    """
    if stopped is not None and len(stopped) != len(curves):
        raise ValueError(f"flag_runs: {len(curves)} curves but {len(stopped)} stopped entries")
    out = np.zeros(len(curves), dtype=np.uint8)
    for i, curve in enumerate(curves):
        out[i] = flag_one(curve, bool(stopped[i]) if stopped is not None else False)
    return out


def describe(flags: int) -> str:
    """``"diverged"``, ``"non-learner"``, ``"diverged, non-learner"`` or ``"-"``."""
    names = [name for bit, name in ((DIVERGED, "diverged"), (NON_LEARNER, "non-learner")) if int(flags) & bit]
    return ", ".join(names) if names else "-"


__all__ = ["DIVERGED", "EXPLODE_FACTOR", "NON_LEARNER", "NON_LEARNER_RATIO", "RULE_VERSION", "describe",
           "finite_prefix", "flag_one", "flag_runs", "smooth_window"]
