"""Upper bounds on the completion rate that no scheduler can beat."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core_env.workload import Workload


def independent_feasibility_bound(workload: Workload) -> float:
    """Fraction of the workload's arrived tasks whose hidden demand fits their window.

    Each task alone, served from arrival on every step, can finish iff demand <= deadline - arrival;
    contention only lowers that, so this bounds any scheduler's completion rate (with speed-1 nodes).
    Rejected arrivals count in the denominator, as in the episode statistics.
    """
    return workload.feasibility_bound()


def independent_feasibility_bounds(workloads: Sequence[Workload]) -> np.ndarray:
    """(W,) float64 the bound of each workload."""
    return np.array([independent_feasibility_bound(w) for w in workloads], dtype=np.float64)
