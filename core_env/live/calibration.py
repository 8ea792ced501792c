"""The simulator calibrated from live measurements: per-run rates, node speeds, a switching cost, and the spread.

The simulator's service model is ``batches = rate(task) × speed(node) × (1 − switch_cost if switched)``,
where a service is *switched* when the task was last served by another node, or not in the step before
(the rules' definition; a task's first service never is). :func:`calibrate` fits it to the services of
live episodes (:attr:`core_env.live.LiveSource.records`, wall-clock slices):

- ``curve_rates[c]``: the mean batches an unswitched service of a task on curve ``c`` (one recorded run)
  trained; ``rates[f]``, the same by family, stands in for a run never measured. Runs of one family can
  train at very different rates (their model and batch sizes differ), and a task that is slow stays slow,
  so the rate is measured per run;
- ``speeds[n]``: node ``n``'s mean of trained / rate over its unswitched services;
- ``switch_cost``: 1 − the mean of trained / (rate × ``speeds[n]``) over switched services, clipped to
  [0, 0.99] (0 when no service was switched);
- ``paths``: the machine's speed over time, one path per recorded episode: at each step the mean over the
  step's services of trained / the model's batches (each divided by its kind's mean; steps without a
  service carry the last value). A shared machine's speed drifts and is shared by the nodes at a step, so a
  slow step makes every service of it slow, and slow steps come in runs;
- ``spread``: what is left around model × path, by kind of service (:data:`KINDS`: a task's ``"first"``
  service, which also builds the task on its node; a later unswitched one, ``"plain"``; a ``"switched"``
  one): the quantiles (:data:`SPREAD_POINTS`, evenly spaced from 0 to 1) of trained / (model × path),
  times the kind's mean.

The means are what :func:`calibrated` gives the simulator; :class:`core_env.live.replay.SpreadSource` also
draws a recorded path per episode and each service's ratio from the spread of its kind. Only physical
measurements enter (what a node trained in a slice), never an episode's completions; a service after which
the task's run was over (``finished``: it stopped early) is left out. :func:`calibrated` applies a
calibration to a workload (every task at its run's measured rate, else its family's; the hidden demand
recomputed on its curve) and to a config (``node_speeds``, ``switch_cost``).
"""

from __future__ import annotations

import dataclasses
import warnings
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
    """Measured service model: batches per step by family and by run (curve), node speeds, switching cost,
    the spread left around them by kind of service (:data:`KINDS`: :data:`SPREAD_POINTS` quantiles each),
    the machine's speed paths (one per recorded episode, a factor per step), and the services used."""

    rates: dict[str, float]
    speeds: tuple[float, ...]
    switch_cost: float
    services: int
    switched: int
    spread: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
    curve_rates: dict[int, float] = dataclasses.field(default_factory=dict)
    paths: tuple[tuple[float, ...], ...] = ()

    def rate(self, curve: int | None, family: str) -> float:
        """The measured batches per step of a task on ``curve`` (its run's, else its family's). KeyError: neither measured."""
        return self.curve_rates[curve] if curve is not None and curve in self.curve_rates else self.rates[family]

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


def _path(services: Sequence[tuple[int, float]]) -> tuple[float, ...]:
    """A recorded episode's machine speed per step from its services' (t, ratio): each step's mean, steps
    without a service carrying the last value (the first value before it)."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for t, ratio in services:
        by_step[t].append(ratio)
    if not by_step:
        return ()
    path, last = [], float(np.mean(by_step[min(by_step)]))
    for t in range(max(by_step) + 1):
        if t in by_step:
            last = float(np.mean(by_step[t]))
        path.append(last)
    return tuple(path)


def calibrate(episodes: Iterable[Sequence[Mapping[str, Any]]], n_nodes: int) -> Calibration:
    """The service model fitted to live episodes' records (module docstring), each episode's in order.

    Degenerate records are left out with a warning (``warnings.warn``), never divided by: a run whose every
    unswitched service trained 0 batches (left out of the node speeds), and a kind of service whose every
    service trained 0 (left out of the machine's speed paths; its spread is the zeros measured).

    Raises:
        ValueError: no unswitched service at all, or a node that never served one.
    """
    episodes = [list(episode) for episode in episodes]
    rows = [(i, record, kind) for i, episode in enumerate(episodes) for record, kind in zip(episode, service_kinds(episode))
            if not record.get("finished", False)]
    unswitched = [record for _, record, kind in rows if kind != "switched"]
    if not unswitched:
        raise ValueError("no unswitched live service to calibrate from: play longer episodes")
    by_family: dict[str, list[int]] = defaultdict(list)
    by_curve: dict[int, list[int]] = defaultdict(list)
    for record in unswitched:
        by_family[record["family"]].append(record["trained"])
        if record.get("curve") is not None:
            by_curve[int(record["curve"])].append(record["trained"])
    fit = Calibration({family: float(np.mean(trained)) for family, trained in sorted(by_family.items())}, (), 0.0, 0, 0,
                      curve_rates={curve: float(np.mean(trained)) for curve, trained in sorted(by_curve.items())})

    def rate(record: Mapping[str, Any]) -> float:
        return fit.rate(None if record.get("curve") is None else int(record["curve"]), record["family"])

    share: dict[int, list[float]] = defaultdict(list)
    for record in unswitched:
        if rate(record) > 0:
            share[record["node"]].append(record["trained"] / rate(record))
    idle = sorted({(record.get("curve"), record["family"]) for record in unswitched if rate(record) == 0}, key=str)
    if idle:
        warnings.warn(f"calibrate: run(s) {idle} (curve, family) trained 0 batches in every unswitched service (a slow or shared "
                      "machine?): their rate is 0, and their services are left out of the node speeds", stacklevel=2)
    missing = [n for n in range(n_nodes) if n not in share]
    if missing:
        raise ValueError(f"node(s) {missing} served no unswitched task (of a run that trained): no speed can be measured for them")
    speeds = tuple(float(np.mean(share[n])) for n in range(n_nodes))
    lost = [record["trained"] / (rate(record) * speeds[record["node"]]) for _, record, kind in rows
            if kind == "switched" and rate(record) * speeds[record["node"]] > 0]
    cost = float(np.clip(1.0 - np.mean(lost), 0.0, MAX_SWITCH_COST)) if lost else 0.0
    measured = []  # (episode, t, kind, trained / what the model plans for the service)
    for i, record, kind in rows:
        planned = rate(record) * speeds[record["node"]] * (1.0 - cost if kind == "switched" else 1.0)
        if planned > 0:
            measured.append((i, record["t"], kind, record["trained"] / planned))
    kind_mean = {kind: float(np.mean([r for _, _, k, r in measured if k == kind] or [1.0])) for kind in KINDS}
    for kind in KINDS:
        if kind_mean[kind] == 0:
            count = sum(k == kind for _, _, k, _ in measured)
            warnings.warn(f"calibrate: every {kind!r} service ({count}) trained 0 batches (a slow or shared machine?): "
                          f"{kind!r} services are left out of the machine's speed paths, and their spread is all zeros", stacklevel=2)
    services: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for i, t, kind, ratio in measured:
        if kind_mean[kind] > 0:  # a kind whose every service trained nothing (a slow or shared machine) says nothing of the path
            services[i].append((t, ratio / kind_mean[kind]))
    paths = {i: _path(services[i]) for i in sorted({i for i, *_ in measured})}
    left: dict[str, list[float]] = {kind: [] for kind in KINDS}  # each service relative to model x path, times its kind's mean
    for i, t, kind, ratio in measured:
        path = paths[i]
        factor = path[min(t, len(path) - 1)] if path else 1.0  # past the path's last service: its last value
        left[kind].append(ratio / factor if factor > 0 else kind_mean[kind])
    pooled = [ratio for kind in KINDS for ratio in left[kind]]  # a kind never measured: the spread of all
    grid = np.linspace(0.0, 1.0, SPREAD_POINTS)
    spread = {kind: tuple(float(q) for q in np.quantile(left[kind] or pooled, grid)) for kind in KINDS}
    return dataclasses.replace(fit, speeds=speeds, switch_cost=cost, services=len(rows), switched=len(rows) - len(unswitched),
                               spread=spread, paths=tuple(tuple(round(f, 4) for f in path) for path in paths.values() if path))


def calibrated(workload: Workload, families: Sequence[str], calibration: Calibration, config: EnvConfig) -> tuple[Workload, EnvConfig]:
    """``workload`` with every task at its run's measured rate (its family's where the run was never
    measured; ``families[c]``: the family of curve ``c``), its demand recomputed, and ``config`` with the
    measured node speeds and switching cost.

    Raises:
        ValueError: a task of a family the calibration never measured (no silent nominal rate).
    """
    unmeasured = sorted({families[c] for c in workload.curve.tolist() if c not in calibration.curve_rates} - set(calibration.rates))
    if unmeasured:
        raise ValueError(f"the calibration measured no rate for family(ies) {unmeasured}: play episodes that serve them")
    rates = np.array([calibration.rate(c, families[c]) for c in workload.curve.tolist()], np.float64)
    rates = np.maximum(rates, 1e-6)
    demand = np.array([workload.bank.demand(int(c), float(t), float(r)) for c, t, r in zip(workload.curve, workload.target, rates)])
    changed = dataclasses.replace(workload, batches_per_step=rates, demand=demand)
    return changed, dataclasses.replace(config, node_speeds=calibration.speeds, switch_cost=calibration.switch_cost)
