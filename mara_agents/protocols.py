"""The Agent and Predictor interfaces, and the Agent → PettingZoo adapter.

An agent decides for B environments at once: observations (B, N, D) float32 and action masks
(B, N, K+1) int8 in (the layout of :func:`core_env.features.observations`), actions (B, N) int64 out,
0 = idle and k = the task in slot k - 1. Oracle agents (strong heuristics that know the demand, not schedulers a cluster could
run) set ``needs_oracle = True`` and also receive the hidden remaining demand.

A predictor maps M tasks' reported-loss histories, targets and remaining budgets to a summary of their
remaining demand (:class:`DemandSummary`). Units: one reported loss is one node-step of service, so a
history of length L means L node-steps received, and demand and budgets count *nominal node-steps*
(speed 1, no switching cost), the unit of :meth:`core_env.sim.Simulator.remaining_demand`. Batches per
node-step are not observed and predictors never need them.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

#: The oracle key: (B, K) hidden nominal node-steps each slot's task still needs (inf if never, 0 when
#: empty), as returned by :meth:`core_env.sim.Simulator.remaining_demand`.
REMAINING_DEMAND = "remaining_demand"


class Agent(abc.ABC):
    """A batched scheduler: one joint decision for every node of B environments."""

    #: True only for oracle agents; they need ``oracle={"remaining_demand": (B, K) float}``.
    needs_oracle: ClassVar[bool] = False

    def reset(self, batch_size: int, n_nodes: int, n_slots: int) -> None:
        """Called before a batch of B episodes with N nodes and K slots starts (stateless agents ignore it)."""

    @abc.abstractmethod
    def act(self, observation: np.ndarray, action_mask: np.ndarray, oracle: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """Actions for every node.

        Args:
            observation: (B, N, D) float32 per-node observations.
            action_mask: (B, N, K+1) int8; column 0 (idle) is always 1.
            oracle: hidden information for oracle agents (``REMAINING_DEMAND``: (B, K)), else None.

        Returns:
            (B, N) int64 actions in [0, K], each allowed by ``action_mask``.
        """


class PettingZooPolicy:
    """Turns an :class:`Agent` into a per-step policy of a PettingZoo ParallelEnv (B = 1).

    Call it with the dict of per-agent observations ``{"observation": (D,), "action_mask": (K+1,)}`` and,
    for oracle agents, the infos of the last step, each carrying ``"remaining_demand"`` (K,). It returns
    a dict of per-agent int actions. Agents are taken as nodes in the order of the observation dict
    (``node_0`` first in core_env). Call :meth:`reset` at the start of each episode.

    Example::

        policy = PettingZooPolicy(EDF())
        observations, infos = env.reset(seed=0)
        while env.agents:
            observations, rewards, terminations, truncations, infos = env.step(policy(observations, infos))
    """

    def __init__(self, agent: Agent) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"PettingZooPolicy needs an Agent, got {type(agent).__name__}")
        self.agent = agent
        self._fresh = True

    def reset(self) -> None:
        """Start a new episode: the agent is reset on the next call."""
        self._fresh = True

    def __call__(self, observations: Mapping[str, Mapping[str, np.ndarray]], infos: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, int]:
        names = list(observations)
        if not names:
            return {}
        obs = np.stack([observations[a]["observation"] for a in names])[None]
        mask = np.stack([observations[a]["action_mask"] for a in names])[None]
        if self._fresh:
            self.agent.reset(1, len(names), mask.shape[-1] - 1)
            self._fresh = False
        oracle = {REMAINING_DEMAND: self._remaining_demand(names, infos)[None]} if self.agent.needs_oracle else None
        actions = self.agent.act(obs, mask, oracle)[0]
        return {a: int(actions[i]) for i, a in enumerate(names)}

    def _remaining_demand(self, names: list[str], infos: Mapping[str, Mapping[str, Any]] | None) -> np.ndarray:
        info = (infos or {}).get(names[0], {})
        if REMAINING_DEMAND not in info:
            raise ValueError(f"{type(self.agent).__name__} is an oracle agent: pass infos whose entries carry "
                             f"{REMAINING_DEMAND!r} (K,), e.g. from Simulator.remaining_demand()")
        return np.asarray(info[REMAINING_DEMAND], dtype=np.float64)


# --------------------------------------------------------------------------------------------------
# Predictors

#: Default quantile levels of a :class:`DemandSummary` (they include the quartiles the observation
#: wrapper's spread feature uses).
QUANTILE_LEVELS = (0.1, 0.25, 0.5, 0.75, 0.9)
#: Default censoring horizon in nominal node-steps: a crossing predicted further ahead counts as never.
HORIZON = 256


@dataclasses.dataclass(frozen=True)
class DemandSummary:
    """Predicted remaining demand of M tasks, in nominal node-steps.

    The remaining demand of a task is the number of further node-steps of service (one reported loss
    each) until its first report at or below its target: at least 1. A predictor looks ``horizon``
    node-steps ahead; a crossing beyond that is *censored* and reported as ``inf`` (as is a demand the
    predictor thinks is never met). ``p_within_budget`` is the probability that the demand is at most
    the budget; budgets beyond the horizon count as the horizon.
    """

    levels: np.ndarray  # (Q,) float64 increasing quantile levels in (0, 1)
    median: np.ndarray  # (M,) float64 node-steps >= 1, inf when censored
    quantiles: np.ndarray  # (M, Q) float64 node-steps, non-decreasing along Q, inf when censored
    p_within_budget: np.ndarray  # (M,) float64 in [0, 1], or (M, J) for (M, J) budgets

    def quantile(self, level: float) -> np.ndarray:
        """(M,) the quantile at ``level``, which must be one of :attr:`levels`."""
        hit = np.flatnonzero(np.abs(self.levels - level) <= 1e-12)
        if hit.size == 0:
            raise ValueError(f"level {level} is not among the summary's quantile levels {self.levels.tolist()}")
        return self.quantiles[:, hit[0]]

    @classmethod
    def point_mass(cls, demand: np.ndarray, budgets: np.ndarray, levels: np.ndarray, horizon: int) -> DemandSummary:
        """The summary of known demands (M,): every quantile is the demand (censored beyond ``horizon``).

        ``budgets`` are checked budgets (:meth:`Predictor.predict` passes them): (M,) or (M, J) int64 in
        [0, horizon].
        """
        demand = np.asarray(demand, dtype=np.float64)
        demand = np.where(demand > horizon, np.inf, demand)
        column = demand[:, None] if budgets.ndim == 2 else demand
        return cls(levels=levels, median=demand.copy(), quantiles=np.repeat(demand[:, None], levels.size, axis=1),
                   p_within_budget=(column <= budgets).astype(np.float64))

    @classmethod
    def from_cdf(cls, cdf: np.ndarray, budgets: np.ndarray, levels: np.ndarray) -> DemandSummary:
        """The summary of posteriors ``cdf`` (M, H + 1), P(demand ≤ b) for b = 0 … H (non-decreasing): a
        q-quantile is the first b with F(b) ≥ q (``inf`` if F(H) < q), ``p_within_budget`` is F read at each of
        the checked ``budgets`` ((M,) or (M, J) int64 in [0, H])."""
        every = np.append(levels, 0.5)
        reached = (cdf[:, None, :] >= every[None, :, None] - 1e-12)  # (M, Q + 1, H + 1)
        first = reached.argmax(axis=2).astype(np.float64)
        demand = np.where(reached[:, :, -1], first, np.inf)
        flat = budgets.reshape(len(cdf), -1 if len(cdf) else 1)
        p = np.take_along_axis(cdf, flat, axis=1).reshape(budgets.shape)
        return cls(levels=levels, median=demand[:, -1], quantiles=demand[:, :-1], p_within_budget=p)


class Predictor(abc.ABC):
    """Batched remaining-demand predictor (numpy in, :class:`DemandSummary` out).

    Subclasses implement :meth:`_predict` on validated inputs. Oracle predictors (upper bounds only)
    set ``needs_oracle = True`` and receive ``oracle={"remaining_demand": (M,) float}``, the hidden
    nominal remaining demand of each task (:meth:`core_env.sim.Simulator.remaining_demand`).

    Args:
        horizon: censoring horizon in nominal node-steps (>= 1).
        levels: increasing quantile levels in (0, 1) reported in :attr:`DemandSummary.quantiles`.
    """

    #: Short name used in benchmarks and docs.
    name: ClassVar[str] = "predictor"
    #: True only for oracle predictors.
    needs_oracle: ClassVar[bool] = False
    #: True for predictors that read each task's deadline window (``windows`` of :meth:`predict`).
    uses_window: ClassVar[bool] = False

    def __init__(self, horizon: int = HORIZON, levels: Sequence[float] = QUANTILE_LEVELS) -> None:
        if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
            raise ValueError(f"horizon must be an int >= 1 (node-steps), got {horizon!r}")
        levels = np.asarray(levels, dtype=np.float64)
        if levels.ndim != 1 or levels.size == 0 or np.any((levels <= 0) | (levels >= 1)) or np.any(np.diff(levels) <= 0):
            raise ValueError(f"levels must be a non-empty increasing sequence in (0, 1), got {levels.tolist()}")
        self.horizon = int(horizon)
        self.levels = levels
        self.levels.setflags(write=False)

    def predict(self, histories: Sequence[np.ndarray], targets: np.ndarray, budgets: np.ndarray,
                oracle: Mapping[str, np.ndarray] | None = None, windows: np.ndarray | None = None) -> DemandSummary:
        """Remaining demand of M tasks.

        Args:
            histories: M 1-D arrays of reported losses (positive, finite), oldest first; entry i is the
                report of the task's (i + 1)-th node-step of service. May be empty.
            targets: (M,) target losses (positive, finite).
            budgets: (M,) node-steps left until each deadline (steps to deadline with one node), or
                (M, J) to get the probability for J budgets per task at once. Non-negative; fractions
                are floored; values beyond the horizon (``inf`` too) count as the horizon.
            oracle: for oracle predictors, ``{"remaining_demand": (M,)}``; ignored otherwise.
            windows: (M,) each task's deadline window, deadline − arrival in node-steps (declared at
                submission, observable as age + steps to deadline; it never changes while the task waits).
                Required by predictors with ``uses_window``; ignored by the others.

        Returns:
            A :class:`DemandSummary` of the M tasks (``p_within_budget`` has the budgets' shape).
        """
        histories, targets, budgets = self._check(histories, targets, budgets)
        if self.needs_oracle:
            if oracle is None or REMAINING_DEMAND not in oracle:
                raise ValueError(f"{type(self).__name__} is an oracle predictor: pass oracle={{{REMAINING_DEMAND!r}: (M,) array}}")
            demand = np.asarray(oracle[REMAINING_DEMAND], dtype=np.float64)
            if demand.shape != targets.shape:
                raise ValueError(f"oracle[{REMAINING_DEMAND!r}] must have shape (M,) = {targets.shape}, got {demand.shape}")
            oracle = {REMAINING_DEMAND: demand}
        if self.uses_window:
            return self._predict_windowed(histories, targets, budgets, self._check_windows(windows, targets.size))
        return self._predict(histories, targets, budgets, oracle)

    def demand_cdf(self, histories: Sequence[np.ndarray], targets: np.ndarray, oracle: Mapping[str, np.ndarray] | None = None,
                   windows: np.ndarray | None = None) -> np.ndarray:
        """(M, horizon + 1) the posterior of each task's remaining demand on the common grid of node-steps:
        entry [m, b] = P(demand ≤ b) for b = 0 … horizon (non-decreasing, in [0, 1], 0 at b = 0 since demand
        ≥ 1; a censored demand leaves mass above the horizon). Arguments as in :meth:`predict`; the same as
        its ``p_within_budget`` for the budgets 0 … horizon, so consistent with the median and quantiles."""
        grid = np.broadcast_to(np.arange(self.horizon + 1), (len(histories), self.horizon + 1))
        return self.predict(histories, targets, grid, oracle, windows).p_within_budget

    def _predict_windowed(self, histories: list[np.ndarray], targets: np.ndarray, budgets: np.ndarray,
                          windows: np.ndarray) -> DemandSummary:
        """:meth:`predict` of a predictor with ``uses_window`` on checked inputs (``windows``: (M,) float64 >= 1)."""
        raise NotImplementedError(f"{type(self).__name__} sets uses_window but does not implement _predict_windowed")

    def _check_windows(self, windows: np.ndarray | None, m: int) -> np.ndarray:
        """(M,) float64 deadline windows, or a ValueError naming the problem."""
        if windows is None:
            raise ValueError(f"{type(self).__name__} reads each task's deadline window: pass windows=(M,) array "
                             "(deadline − arrival in node-steps, i.e. age + steps to deadline)")
        windows = np.asarray(windows, dtype=np.float64)
        if windows.shape != (m,):
            raise ValueError(f"windows must have shape (M,) = ({m},), got {windows.shape}")
        if not np.all(np.isfinite(windows) & (windows >= 1)):
            raise ValueError("windows must be finite node-step counts >= 1 (deadline − arrival)")
        return windows

    @abc.abstractmethod
    def _predict(self, histories: list[np.ndarray], targets: np.ndarray, budgets: np.ndarray,
                 oracle: Mapping[str, np.ndarray] | None) -> DemandSummary:
        """:meth:`predict` on checked inputs: float64 histories, (M,) float64 targets and int64 budgets in
        [0, horizon] of shape (M,) or (M, J)."""

    def _check(self, histories: Sequence[np.ndarray], targets: np.ndarray, budgets: np.ndarray) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """Validated inputs, or a ValueError naming the problem."""
        histories = [np.asarray(h, dtype=np.float64) for h in histories]
        bad = [i for i, h in enumerate(histories) if h.ndim != 1]
        if bad:
            raise ValueError(f"history {bad[0]} must be 1-D, got shape {histories[bad[0]].shape}")
        losses = np.concatenate(histories) if histories else np.zeros(0)
        if not np.all(np.isfinite(losses) & (losses > 0)):
            raise ValueError("reported losses must be positive and finite")
        return (histories, *self._check_targets_and_budgets(targets, budgets, len(histories)))

    def _check_targets_and_budgets(self, targets: np.ndarray, budgets: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        """(M,) float64 targets and int64 budgets in [0, horizon], or a ValueError naming the problem."""
        targets = np.asarray(targets, dtype=np.float64)
        if targets.shape != (m,):
            raise ValueError(f"targets must have shape (M,) = ({m},), got {targets.shape}")
        if not np.all(np.isfinite(targets) & (targets > 0)):
            raise ValueError("targets must be positive and finite")
        budgets = np.asarray(budgets, dtype=np.float64)
        if budgets.ndim not in (1, 2) or budgets.shape[0] != m:
            raise ValueError(f"budgets must have shape (M,) or (M, J) with M = {m}, got {budgets.shape}")
        if np.any(np.isnan(budgets) | (budgets < 0)):
            raise ValueError("budgets must be non-negative node-step counts")
        return targets, np.floor(np.minimum(budgets, self.horizon)).astype(np.int64)
