"""Allocators that are one ordering plus (optionally) one admission rule: EDF + admission, LLF, SLAQ.

Each serves the N highest-ranked admitted tasks, one node each; with ``demote`` the tasks that admission
turned away are not dropped but served on nodes left over (best effort, ElasticFlow's "demote").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mara_agents.allocators.admission import predicted_feasible
from mara_agents.allocators.base import Estimates, PredictiveAllocator
from mara_agents.allocators.ordering import by_deadline, by_laxity, by_loss_drop
from mara_agents.heuristics.base import serve_in_order
from mara_agents.protocols import Predictor


class OrderedAllocator(PredictiveAllocator):
    """Serve admitted tasks by ``order`` (lower first); see the module docstring.

    Args:
        predictor: any Predictor.
        order: Estimates -> (B, K) keys.
        admission: Estimates -> (B, K) bool, or None to admit every active task.
        demote: serve non-admitted tasks on spare nodes (after every admitted one) instead of idling.
    """

    def __init__(self, predictor: Predictor, order: Callable[[Estimates], np.ndarray],
                 admission: Callable[[Estimates], np.ndarray] | None = None, demote: bool = False) -> None:
        super().__init__(predictor)
        self.order, self.admission, self.demote = order, admission, bool(demote)

    def decide(self, estimates: Estimates) -> np.ndarray:
        key = self.order(estimates)
        if self.admission is None:
            return serve_in_order(key, estimates.active, estimates.n_nodes)
        admitted = self.admission(estimates)
        if self.demote:
            return serve_in_order(key, estimates.active, estimates.n_nodes, tier=(~admitted).astype(np.int8))
        return serve_in_order(key, admitted, estimates.n_nodes)


class EDFAdmission(OrderedAllocator):
    """EDF over the tasks predicted to fit their budget (ElasticFlow's edf-accessctrl, with a predictor).

    Args:
        predictor: any Predictor.
        min_reports: reports a task needs before its prediction can turn it away (default: 8, chosen on
            training workloads for WLS; 0 for oracle predictors, whose demand needs no warm-up).
        demote: serve turned-away tasks on spare nodes (default) rather than dropping them.
        admit_pct: admit a task only while its predicted P(demand fits the budget) is at least this many
            percent (1–100); default None: while the median demand fits (ElasticFlow's rule).
    """

    def __init__(self, predictor: Predictor, min_reports: int | None = None, demote: bool = True, admit_pct: int | None = None) -> None:
        if min_reports is None:
            min_reports = 0 if predictor.needs_oracle else 8
        if admit_pct is not None and (isinstance(admit_pct, bool) or not isinstance(admit_pct, (int, np.integer)) or not 1 <= admit_pct <= 100):
            raise ValueError(f"admit_pct must be an int percentage in [1, 100] or None, got {admit_pct!r}")
        super().__init__(predictor, by_deadline, lambda e: predicted_feasible(e, min_reports, admit_pct), demote)


class LLF(OrderedAllocator):
    """Predictive least laxity first over every active task (ties by deadline), no admission."""

    def __init__(self, predictor: Predictor) -> None:
        super().__init__(predictor, by_laxity)


class SLAQ(OrderedAllocator):
    """SLAQ-greedy: the largest predicted normalized loss drop first, no admission."""

    def __init__(self, predictor: Predictor) -> None:
        super().__init__(predictor, by_loss_drop)
