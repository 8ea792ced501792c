"""CurveBank: a set of hidden loss curves (loss per trained batch) behind a task set.

A curve is a sequence of positive, finite per-batch training losses. The simulator treats it as
piecewise constant over each batch, so training from batch position ``x0`` to ``x1`` (fractional
positions allowed) reports the exact mean of the curve over ``[x0, x1)``. Past the end of the recorded
curve the loss stays at the mean of its last window (a plateau), so a target the curve never reaches is
never reached.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

# Flag bits per curve; the rule that sets them is public: :func:`core_env.curves.flags.flag_runs`.
from core_env.curves.flags import DIVERGED, NON_LEARNER  # noqa: F401  (re-exported)

#: Losses are clipped into [LOSS_FLOOR, LOSS_CEIL] so that logs and means are always finite.
LOSS_FLOOR = 1e-6
LOSS_CEIL = 1e6


def plateau_window(length: int) -> int:
    """Points averaged for the plateau past the end of a curve of ``length`` points."""
    return int(min(length, max(10, length // 20)))


#: Most nominal reports :meth:`CurveBank.demands` walks in one call (~1.6 GB of float64 edges and integrals at the limit).
MAX_DEMAND_WALK = 100_000_000


class CurveBank:
    """Immutable bank of loss curves stored flat (struct of arrays).

    Attributes:
        name: task-set name this bank backs (``"id"``, ``"rl_ood"``, ...).
        values: (P,) float64, every curve concatenated.
        offsets: (C + 1,) int64, curve ``i`` is ``values[offsets[i]:offsets[i + 1]]``.
        lengths: (C,) int64.
        cum: (P + C,) float64 prefix integrals; curve ``i``'s start at ``cum_start[i]`` holds 0.
        cum_start: (C,) int64.
        slope: (P + C,) float64 the loss on batch ``j`` of curve ``i`` at ``cum_start[i] + j`` (``j <= L_i``;
            ``j = L_i`` holds the plateau), aligned with ``cum``.
        plateau: (C,) float64 loss past the end of each curve.
        family: (C,) str family label of each curve (e.g. ``"mlp_digits"``).
        flags: (C,) uint8 bitfield (:data:`DIVERGED`, :data:`NON_LEARNER`; set by
            :func:`core_env.curves.flags.flag_runs`).
    """

    def __init__(
        self,
        name: str,
        curves: Sequence[np.ndarray],
        family: Sequence[str],
        flags: Sequence[int] | None = None,
    ) -> None:
        if len(curves) == 0:
            raise ValueError(f"CurveBank {name!r} needs at least one curve")
        if len(family) != len(curves):
            raise ValueError(f"CurveBank {name!r}: {len(curves)} curves but {len(family)} family labels")
        arrays = []
        for i, curve in enumerate(curves):
            c = np.asarray(curve, dtype=np.float64).ravel()
            if c.size == 0:
                raise ValueError(f"CurveBank {name!r}: curve {i} is empty")
            if not np.all(np.isfinite(c)):
                raise ValueError(f"CurveBank {name!r}: curve {i} has non-finite values")
            arrays.append(np.clip(c, LOSS_FLOOR, LOSS_CEIL))
        self.name = str(name)
        self.lengths = np.array([a.size for a in arrays], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        self.values = np.concatenate(arrays)
        self.cum_start = self.offsets[:-1] + np.arange(len(arrays), dtype=np.int64)
        self.cum = np.concatenate([np.concatenate([[0.0], np.cumsum(a)]) for a in arrays])
        self.plateau = np.array([a[-plateau_window(a.size):].mean() for a in arrays])
        self.slope = np.concatenate([np.append(a, p) for a, p in zip(arrays, self.plateau)])
        self.family = np.asarray(list(family), dtype=str)
        self.flags = np.zeros(len(arrays), np.uint8) if flags is None else np.asarray(flags, dtype=np.uint8)
        if self.flags.shape != (len(arrays),):
            raise ValueError(f"CurveBank {name!r}: flags must have one entry per curve")
        for array in (self.values, self.offsets, self.cum, self.cum_start, self.slope, self.plateau, self.lengths, self.flags):
            array.setflags(write=False)
        digest = hashlib.sha256()
        for part in (self.values, self.offsets, self.flags):
            digest.update(part.tobytes())
        digest.update("\n".join(self.family.tolist()).encode())
        self.fingerprint = digest.hexdigest()
        self._smoothed: dict[int, np.ndarray] = {}  # lazily filled by smoothed()

    def __len__(self) -> int:
        return int(self.lengths.size)

    def __repr__(self) -> str:
        return f"CurveBank({self.name!r}, curves={len(self)}, points={self.values.size})"

    def curve(self, i: int) -> np.ndarray:
        """The raw per-batch losses of curve ``i`` (read-only view)."""
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def integral(self, curve: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Integral of the piecewise-constant loss over batches ``[0, x)``.

        Args:
            curve: int array of curve indices.
            x: float array of batch positions (>= 0), broadcast with ``curve``.
        """
        curve = np.asarray(curve)
        x = np.asarray(x, dtype=np.float64)
        whole = np.minimum(np.floor(x).astype(np.int64), self.lengths[curve])
        at = self.cum_start[curve] + whole
        return self.cum[at] + (x - whole) * self.slope[at]

    def integral_at(self, start: np.ndarray, length: np.ndarray, x: np.ndarray) -> np.ndarray:
        """:meth:`integral` for curves given by ``cum_start`` and ``lengths`` (the simulator caches both).

        ``x`` must be a float64 array of positions >= 0 (then truncation is the floor); the result is
        bit-identical to ``integral(curve, x)``.
        """
        whole = np.minimum(x.astype(np.int64), length)
        at = start + whole
        return self.cum[at] + (x - whole) * self.slope[at]

    def interval_mean(self, curve: np.ndarray, x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
        """Mean loss over batches ``[x0, x1)`` (the reported, interval-averaged loss); x1 > x0."""
        return (self.integral(curve, x1) - self.integral(curve, x0)) / (np.asarray(x1) - np.asarray(x0))

    def reported_losses(self, curve: int, batches_per_step: float, start: float = 0.0, steps: int | None = None) -> np.ndarray:
        """Losses reported by ``steps`` consecutive nominal node-steps from position ``start``.

        Nominal means speed 1 and no switching cost: step m trains ``[start + (m-1)β, start + mβ)``.
        By default, enough steps to pass the end of the curve by one step (the rest is the plateau).
        """
        if steps is None:
            steps = int(np.ceil(max(self.lengths[curve] - start, 0.0) / batches_per_step)) + 1
        edges = start + batches_per_step * np.arange(steps + 1, dtype=np.float64)
        integral = self.integral(np.full(edges.shape, curve), edges)
        return np.diff(integral) / batches_per_step

    def demand(self, curve: int, target: float, batches_per_step: float, start: float = 0.0) -> float:
        """Nominal node-steps from ``start`` until the reported loss first reaches ``target`` (inf if never)."""
        return float(self.demands(np.array([curve]), np.array([target], dtype=np.float64),
                                  np.array([batches_per_step], dtype=np.float64), np.array([start], dtype=np.float64))[0])

    def demands(self, curve: np.ndarray, target: np.ndarray, batches_per_step: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
        """:meth:`demand` of many tasks at once, (M,) float64 (bit-identical to M calls of :meth:`demand`).

        Every task's nominal reports (those of :meth:`reported_losses`, enough steps to pass the end of
        its curve by one) are laid end to end in one array and scanned together.
        """
        curve = np.asarray(curve, dtype=np.int64).ravel()
        target = np.asarray(target, dtype=np.float64).ravel()
        bps = np.asarray(batches_per_step, dtype=np.float64).ravel()
        start = np.zeros(curve.size) if start is None else np.asarray(start, dtype=np.float64).ravel()
        out = np.full(curve.size, np.inf)
        if curve.size == 0:
            return out
        walk = np.ceil(np.maximum(self.lengths[curve] - start, 0.0) / bps)
        if not np.all(np.isfinite(walk)) or walk.sum() > MAX_DEMAND_WALK:
            slow = int(np.argmax(np.where(np.isfinite(walk), walk, np.inf)))
            raise ValueError(f"the demands of these {curve.size} tasks would walk {walk.sum():,.0f} reports (at most {MAX_DEMAND_WALK:,}); "
                             f"the slowest trains {bps[slow]:g} batches per node-step on a curve of {self.lengths[curve[slow]]:g} batches: "
                             "give such tasks larger rates")
        steps = walk.astype(np.int64) + 1
        edges_per_task = steps + 1
        owner = np.repeat(np.arange(curve.size), edges_per_task)
        first_edge = np.cumsum(edges_per_task) - edges_per_task
        local = np.arange(owner.size) - first_edge[owner]  # edge index within its task
        edges = start[owner] + bps[owner] * local.astype(np.float64)
        integral = self.integral(curve[owner], edges)
        owner, local = owner[:-1], local[:-1]  # report m of a task lies between its edges m and m + 1
        losses = (integral[1:] - integral[:-1]) / bps[owner]
        hits = np.flatnonzero((losses <= target[owner]) & (local < steps[owner]))
        if hits.size:
            task = owner[hits]
            first = np.ones(hits.size, bool)
            first[1:] = task[1:] != task[:-1]
            out[task[first]] = local[hits[first]] + 1.0
        return out

    def smoothed(self, curve: int) -> np.ndarray:
        """Moving average of curve ``curve`` (window max(5, L/100)), used to set targets (a copy)."""
        return self._smoothed_view(int(curve)).copy()

    def smoothed_at(self, curve: np.ndarray, at: np.ndarray) -> np.ndarray:
        """(M,) float64 ``smoothed(curve[i])[at[i]]`` for every i (smoothed curves are cached)."""
        return np.array([self._smoothed_view(c)[a] for c, a in zip(np.asarray(curve).tolist(), np.asarray(at).tolist())], dtype=np.float64)

    def _smoothed_view(self, curve: int) -> np.ndarray:
        """:meth:`smoothed`, computed once per curve and cached (read-only)."""
        cached = self._smoothed.get(curve)
        if cached is None:
            raw = self.curve(curve)
            window = int(min(raw.size, max(5, raw.size // 100)))
            padded = np.concatenate([np.full(window - 1, raw[0]), raw])
            c = np.concatenate([[0.0], np.cumsum(padded)])
            cached = (c[window:] - c[:-window]) / window
            cached.setflags(write=False)
            self._smoothed[curve] = cached
        return cached
