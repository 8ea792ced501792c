"""LARA (Wang, Yu, Zhao, Zhou, ICML 2024), reconstructed for discrete nodes (docs/agents.md, learning-aware allocators: what is LARA's and what is ours).

LARA predicts each task's remaining demand from its loss curve (WLS on the log–log curve), treats
allocation as an optimization over those predictions, explores new tasks for a fixed phase before
trusting their estimates, and re-estimates and re-allocates at high frequency. Ours, every step:

1. tasks with fewer than ``explore_steps`` reports are *exploring*; they get nodes first (the fixed
   exploration phase), the least-served first, then by deadline;
2. explored tasks whose predicted demand fits their budget are admitted one by one in EDF order while the
   admitted set stays schedulable on the nodes the exploration leaves (:func:`admit_schedulable`);
3. admitted tasks are served by least laxity; nodes still free go to explored tasks that were not admitted
   (best effort, the smallest predicted shortfall first) when ``serve_rest`` is set.

LARA-FM is the same allocator on the flow-matching predictor.
"""

from __future__ import annotations

import numpy as np

from mara_agents.allocators.admission import admit_schedulable
from mara_agents.allocators.base import Estimates, PredictiveAllocator
from mara_agents.allocators.ordering import by_deadline, by_laxity
from mara_agents.heuristics.base import serve_in_order
from mara_agents.protocols import Predictor

#: Tiers of :func:`serve_in_order`: exploring tasks, admitted tasks, the rest.
EXPLORING, ADMITTED, REST = range(3)


class LARA(PredictiveAllocator):
    """LARA's allocator on any predictor (see the module docstring).

    Args:
        predictor: WLS for LARA, the flow-matching predictor for LARA-FM, the oracle for its bound.
        explore_steps: reports a task gets before its estimate is trusted.
        serve_rest: give nodes left over to explored tasks that were not admitted.
    """

    def __init__(self, predictor: Predictor, explore_steps: int = 3, serve_rest: bool = True) -> None:
        super().__init__(predictor)
        if isinstance(explore_steps, bool) or not isinstance(explore_steps, (int, np.integer)) or explore_steps < 0:
            raise ValueError(f"explore_steps must be an int >= 0, got {explore_steps!r}")
        self.explore_steps, self.serve_rest = int(explore_steps), bool(serve_rest)

    def decide(self, estimates: Estimates) -> np.ndarray:
        active, n_nodes = estimates.active, estimates.n_nodes
        exploring = active & (estimates.steps < self.explore_steps)
        explored = active & ~exploring
        spare = np.maximum(n_nodes - exploring.sum(axis=1), 0)  # nodes the exploration leaves, per env
        admitted = admit_schedulable(estimates, explored & estimates.feasible, by_deadline(estimates), capacity=spare)
        tier = np.where(exploring, EXPLORING, np.where(admitted, ADMITTED, REST))
        key = np.where(exploring, estimates.steps * 1e4 + estimates.budget,
                       np.where(admitted, by_laxity(estimates), np.ceil(np.minimum(estimates.demand, 1e6)) - estimates.budget))
        servable = exploring | admitted | (explored if self.serve_rest else False)
        return serve_in_order(key, servable, n_nodes, tier=tier)
