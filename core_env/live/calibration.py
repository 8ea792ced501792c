"""The simulator calibrated from live measurements: per-family rates, node speeds and a switching cost.

The simulator's service model is ``batches = rate(task) × speed(node) × (1 − switch_cost if switched)``,
where a service is *switched* when the task was last served by another node, or not in the step before
(the rules' definition; a task's first service never is). :func:`calibrate` fits the three from the
services of live episodes (:attr:`core_env.live.LiveSource.records`, wall-clock slices):

- ``rates[f]``: the mean batches a service of family ``f`` trained when not switched;
- ``speeds[n]``: node ``n``'s mean of trained / ``rates[f]`` over its unswitched services;
- ``switch_cost``: 1 − the mean of trained / (``rates[f]`` × ``speeds[n]``) over switched services,
  clipped to [0, 0.99] (0 when no service was switched);
- ``spread``: the spread around that model by kind of service (:data:`KINDS`: a task's ``"first"``
  service, which also builds the task on its node; a later unswitched one, ``"plain"``; a
  ``"switched"`` one): the quantiles (:data:`SPREAD_POINTS`, evenly spaced from 0 to 1) of trained / the
  model's batches. The means above are what :func:`calibrated` gives the simulator;
  :class:`core_env.live.replay.SpreadSource` also draws each service's batches from the spread of its
  kind (live, a service's batches vary from slice to slice, and a first service trains less).

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
#: Quantiles kept of each kind of service's spread around the model (0, 1/40, ..., 1).
SPREAD_POINTS = 41
#: The kinds of service a spread is measured for (:func:`service_kinds`).
KINDS = ("first", "plain", "switched")


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Measured service model: batches per step by family, node speeds, switching cost, the spread around
    them by kind of service (:data:`KINDS`: :data:`SPREAD_POINTS` quantiles each), and the services used."""

    rates: dict[str, float]
    speeds: tuple[float, ...]
    switch_cost: float
    services: int
    switched: int
    spread: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def service_kind(before: tuple[int, int] | None, node: int, t: int) -> str:
    """A service's kind (:data:`KINDS`) given the (node, t) of its task's previous service (None: none):
    ``"switched"`` by the rules' definition (another node, or not the step before), else ``"first"`` or ``"plain"``."""
    if before is None:
        return "first"
    return "switched" if before[0] != node or before[1] != t - 1 else "plain"


def service_kinds(episode: Sequence[Mapping[str, Any]]) -> list[str]:
    """For one episode's services in order, each one's kind (:func:`service_kind`)."""
    last: dict[Any, tuple[int, int]] = {}
    out = []
    for record in episode:
        key = (record.get("episode", 0), record["env"], record["task"])  # one source's records may span episodes
        out.append(service_kind(last.get(key), record["node"], record["t"]))
        last[key] = (record["node"], record["t"])
    return out


def switched(episode: Sequence[Mapping[str, Any]]) -> list[bool]:
    """For one episode's services in order, whether the rules would call each switched: the task's previous
    service was on another node or not in the step before (its first service: never)."""
    return [kind == "switched" for kind in service_kinds(episode)]


def calibrate(episodes: Iterable[Sequence[Mapping[str, Any]]], n_nodes: int) -> Calibration:
    """The service model fitted to live episodes' records (module docstring), each episode's in order.

    Raises:
        ValueError: no unswitched service at all, or a node that never served one.
    """
    rows = [(record, kind) for episode in episodes for record, kind in zip(episode, service_kinds(episode)) if not record.get("finished", False)]
    unswitched = [record for record, kind in rows if kind != "switched"]
    if not unswitched:
        raise ValueError("no unswitched live service to calibrate from: play longer episodes")
    by_family: dict[str, list[int]] = defaultdict(list)
    for record in unswitched:
        by_family[record["family"]].append(record["trained"])
    rates = {family: float(np.mean(trained)) for family, trained in sorted(by_family.items())}
    share: dict[int, list[float]] = defaultdict(list)
    for record in unswitched:
        share[record["node"]].append(record["trained"] / rates[record["family"]] if rates[record["family"]] > 0 else 1.0)
    missing = [n for n in range(n_nodes) if n not in share]
    if missing:
        raise ValueError(f"node(s) {missing} served no unswitched task: no speed can be measured for them")
    speeds = tuple(float(np.mean(share[n])) for n in range(n_nodes))
    lost = [record["trained"] / (rates[record["family"]] * speeds[record["node"]]) for record, kind in rows
            if kind == "switched" and rates[record["family"]] * speeds[record["node"]] > 0]
    cost = float(np.clip(1.0 - np.mean(lost), 0.0, MAX_SWITCH_COST)) if lost else 0.0
    ratios: dict[str, list[float]] = {kind: [] for kind in KINDS}  # each service's batches relative to what the model plans for it
    for record, kind in rows:
        planned = rates[record["family"]] * speeds[record["node"]] * (1.0 - cost if kind == "switched" else 1.0)
        if planned > 0:
            ratios[kind].append(record["trained"] / planned)
    pooled = [ratio for kind in KINDS for ratio in ratios[kind]]  # a kind never measured: the spread of all
    grid = np.linspace(0.0, 1.0, SPREAD_POINTS)
    spread = {kind: tuple(float(q) for q in np.quantile(ratios[kind] or pooled, grid)) for kind in KINDS}
    return Calibration(rates, speeds, cost, len(rows), len(rows) - len(unswitched), spread)


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
