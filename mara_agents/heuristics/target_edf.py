"""Target-EDF: a second leak probe. Window-EDF's admission, but tasks with the highest target served first.

It sees no loss value either: only each task's target (a higher target is an easier one) and its
deadline window. A fresh reviewer found that ordering by target alone recovers part of what the
curve-aware allocators gain on ``vit_ood`` (docs/benchmarks.md), so this rule stands beside
:class:`~mara_agents.heuristics.window_edf.WindowEDF` as a permanent row: a curve-aware agent's margin
is only its own beyond the better of the two probes. Ties go by earliest deadline.
"""

from __future__ import annotations

import numpy as np

from core_env.observation import parse_observation
from mara_agents.heuristics.window_edf import WindowEDF


class TargetEDF(WindowEDF):
    """Window-EDF admission; among admitted tasks, the highest target first, then the earliest deadline."""

    def priority(self, observation: np.ndarray, n_slots: int) -> np.ndarray:
        parsed = parse_observation(observation, n_slots)
        order = np.lexsort((parsed.steps_to_deadline, -parsed.log_target), axis=1)  # highest target first, then earliest deadline
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.broadcast_to(np.arange(n_slots), order.shape).copy(), axis=1)
        return rank
