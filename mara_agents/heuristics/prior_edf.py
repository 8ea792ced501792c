"""``prior-edf``: the admission probe built on the curve-free prior (issue 27).

EDF with the admission rule of ``edf-admission``, but the remaining demand it admits by is the ``probe:
prior`` of Table 1 (:class:`mara_agents.predictors.probes.PriorProbe`): boosted trees on what a submitter
declared and the clock shows (log target, log deadline window, steps to deadline, node-steps received),
fitted on decision points of the cell's own task set's *train* workloads (the same fit as Table 1's
row). It never reads a loss value. A task whose predicted remaining demand exceeds its steps to
deadline is demoted to nodes left over; the rest are served earliest deadline first, as ``window-edf``
does with its one-factor guess. It is a permanent leak probe: a curve-aware row's margin over it is
what reading the curve adds beyond the declared target and window.

The fit needs the task set, so the row is built by ``make_agent("prior-edf", task_set=...)`` (the cell
runner passes its cell's); the stress scenario, built from constructed curves, uses the ``id`` fit.
Fits are cached per process and task set (about half a minute each on 2 cores). The fit's rollouts are
of :data:`~mara_agents.decision_points.PROBE_POLICIES`, built from this package
(:func:`~mara_agents.decision_points.policy_agent`), so nothing here imports ``benchmarks``.
"""

from __future__ import annotations

import functools

import numpy as np

from core_env.observation import parse_observation
from mara_agents.heuristics.window_edf import WindowEDF

NAME = "prior-edf"


class PriorEDF(WindowEDF):
    """EDF; tasks whose prior-predicted remaining demand exceeds their steps to deadline are demoted.

    Args:
        probe: a fitted :class:`mara_agents.predictors.probes.PriorProbe` (its absolute-error regressor gives
            the median remaining demand).
    """

    def __init__(self, probe) -> None:
        super().__init__()
        self.probe = probe

    def demoted(self, observation: np.ndarray, admitted: np.ndarray) -> np.ndarray:
        parsed = parse_observation(observation, admitted.shape[1])
        left = parsed.steps_to_deadline
        out = np.zeros_like(admitted, dtype=bool)
        if not admitted.any():
            return out
        window = np.maximum(parsed.age + left, 1)[admitted]
        x = self.probe.inputs(parsed.target[admitted], window.astype(np.float64), left[admitted].astype(np.float64),
                              parsed.node_steps[admitted].astype(np.float64))
        median = np.maximum(self.probe.regressor.predict(x), 1.0)
        out[admitted] = np.ceil(median) > left[admitted]
        return out


@functools.lru_cache(maxsize=None)
def fitted_probe(task_set: str):
    """The ``probe: prior`` of ``task_set`` (a built-in name or a bank file), fitted as Table 1 fits it."""
    from mara_agents.predictors.probes import PriorProbe, train_probes

    return train_probes(task_set, names=(PriorProbe.name,))[0][PriorProbe.name]


def make_prior_edf(task_set: str | None) -> PriorEDF:
    """The ``prior-edf`` agent of a task set (a constructed scenario such as ``stress`` uses the ``id`` fit)."""
    if not isinstance(task_set, str) or not task_set:
        raise ValueError(f"row {NAME!r} is fitted per task set: pass task_set (a built-in name or a bank file), got {task_set!r}")
    from core_env.generators import is_fixed_scenario

    return PriorEDF(fitted_probe("id" if is_fixed_scenario(task_set) else task_set))
