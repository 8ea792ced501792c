"""The simulator calibrated from live measurements: per-family rates, node speeds and a switching cost.

The simulator's service model is ``batches = rate(task) × speed(node) × (1 − switch_cost if switched)``,
where a service is *switched* when the task was last served by another node, or not in the step before
(the rules' definition; a task's first service never is). :func:`calibrate` fits the three from the
services of live episodes (:attr:`core_env.live.LiveSource.records`, wall-clock slices):

- ``rates[f]``: the mean batches a service of family ``f`` trained when not switched;
- ``speeds[n]``: node ``n``'s mean of trained / ``rates[f]`` over its unswitched services;
- ``switch_cost``: 1 − the mean of trained / (``rates[f]`` × ``speeds[n]``) over switched services,
  clipped to [0, 0.99] (0 when no service was switched).

Only physical measurements enter (what a node trained in a slice), never an episode's completions; a
service after which the task's run was over (``finished``: it stopped early) is left out.
:func:`calibrated` applies a calibration to a workload (every task at its family's measured rate, the
hidden demand recomputed on its curve) and to a config (``node_speeds``, ``switch_cost``).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from core_env.config import EnvConfig
from core_env.workload import Workload

#: Largest switching cost a calibration reports (the env takes costs in [0, 1)).
MAX_SWITCH_COST = 0.99


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Measured service model: batches per step by family, node speeds, switching cost, and the services used."""

    rates: dict[str, float]
    speeds: tuple[float, ...]
    switch_cost: float
    services: int
    switched: int

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def switched(episode: Sequence[Mapping[str, Any]]) -> list[bool]:
    """For one episode's services in order, whether the rules would call each switched: the task's previous
    service was on another node or not in the step before (its first service: never)."""
    last: dict[Any, tuple[int, int]] = {}
    out = []
    for record in episode:
        key = (record.get("episode", 0), record["env"], record["task"])  # one source's records may span episodes
        before = last.get(key)
        out.append(before is not None and (before[0] != record["node"] or before[1] != record["t"] - 1))
        last[key] = (record["node"], record["t"])
    return out


def calibrate(episodes: Iterable[Sequence[Mapping[str, Any]]], n_nodes: int) -> Calibration:
    """The service model fitted to live episodes' records (module docstring), each episode's in order.

    Raises:
        ValueError: no unswitched service at all, or a node that never served one.
    """
    rows = [(record, flag) for episode in episodes for record, flag in zip(episode, switched(episode)) if not record.get("finished", False)]
    plain = [record for record, flag in rows if not flag]
    if not plain:
        raise ValueError("no unswitched live service to calibrate from: play longer episodes")
    by_family: dict[str, list[int]] = defaultdict(list)
    for record in plain:
        by_family[record["family"]].append(record["trained"])
    rates = {family: float(np.mean(trained)) for family, trained in sorted(by_family.items())}
    share: dict[int, list[float]] = defaultdict(list)
    for record in plain:
        share[record["node"]].append(record["trained"] / rates[record["family"]] if rates[record["family"]] > 0 else 1.0)
    missing = [n for n in range(n_nodes) if n not in share]
    if missing:
        raise ValueError(f"node(s) {missing} served no unswitched task: no speed can be measured for them")
    speeds = tuple(float(np.mean(share[n])) for n in range(n_nodes))
    lost = [record["trained"] / (rates[record["family"]] * speeds[record["node"]]) for record, flag in rows
            if flag and rates[record["family"]] * speeds[record["node"]] > 0]
    cost = float(np.clip(1.0 - np.mean(lost), 0.0, MAX_SWITCH_COST)) if lost else 0.0
    return Calibration(rates, speeds, cost, len(rows), len(rows) - len(plain))


def calibrated(workload: Workload, families: Sequence[str], calibration: Calibration, config: EnvConfig) -> tuple[Workload, EnvConfig]:
    """``workload`` with every task at its family's measured rate (``families[c]``: the family of curve
    ``c``), its demand recomputed, and ``config`` with the measured node speeds and switching cost.

    Raises:
        ValueError: a task of a family the calibration never measured (no silent nominal rate).
    """
    unmeasured = sorted({families[c] for c in workload.curve.tolist()} - set(calibration.rates))
    if unmeasured:
        raise ValueError(f"the calibration measured no rate for family(ies) {unmeasured}: play episodes that serve them")
    rates = np.array([calibration.rates[families[c]] for c in workload.curve.tolist()], np.float64)
    rates = np.maximum(rates, 1e-6)
    demand = np.array([workload.bank.demand(int(c), float(t), float(r)) for c, t, r in zip(workload.curve, workload.target, rates)])
    changed = dataclasses.replace(workload, batches_per_step=rates, demand=demand)
    return changed, dataclasses.replace(config, node_speeds=calibration.speeds, switch_cost=calibration.switch_cost)
