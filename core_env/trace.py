"""Trace-driven workloads: replay the arrivals (and deadlines, targets, rates where given) of a CSV job trace.

:func:`read_trace` reads a job trace into a :class:`Trace` (one row per job, in arrival order, times
already mapped to environment steps); :func:`trace_workload` turns it into a :class:`core_env.workload.Workload`
on a curve bank, drawing every field the trace lacks by the v1 task recipe (:mod:`core_env.recipe`) from a
seeded generator. The workload replays like any other: ``env.reset(options={"workload": w})``,
``Simulator.reset([w])`` or ``benchmarks.rollout.run_agent(agent, [w], config)``.

Layouts (``layout=``; column names are matched exactly, after stripping spaces; other columns are kept in
:attr:`Trace.extra` as strings and not used):

* ``"elasticflow"``: the ElasticFlow (ASPLOS '23) simulator's job traces, ``job_id, submission_time,
  num_iteration, model_name, deadline, batch_size, num_gpu, duration``. ElasticFlow's own spellings
  ``submit_time``, ``ddl`` and ``iteration`` (used by the traces it ships, e.g.
  ``traces_for_ElasticFlow/philly_103959.csv``) are accepted for ``submission_time``, ``deadline`` and
  ``num_iteration``. Required: ``job_id``, the submission time, the deadline, ``model_name`` and
  ``duration``; ``num_iteration``, ``batch_size`` and ``num_gpu`` are kept in :attr:`Trace.extra` (an
  iteration of a real model is not a batch of a bank curve, and this environment serves a task on one node
  at a time). Times are **seconds**. The deadline is **absolute**, on the same clock as the submission time
  (ElasticFlow's scheduler admits a job when ``now + iterations / throughput <= ddl``, and its shipped traces
  have ``ddl > submit_time``). A row with ``best_effort`` = 1 (ElasticFlow's best-effort jobs, no deadline)
  or an empty deadline cell has no deadline: the recipe draws one.
* ``"blox"``: the Blox (EuroSys '24) toolkit's job traces, ``job_id, num_gpus, submit_time, duration,
  model, batch_size`` (all seconds). Required: ``job_id``, ``submit_time``, ``duration``, ``model``. Blox
  traces have no deadlines: the recipe draws them.
* ``"generic"`` (default): ``task_id, arrival[, deadline][, target][, rate][, family]``. Times are
  **steps** (``step_seconds=None``; origin 0, so ``arrival`` 3 is step 3), or **seconds** when
  ``step_seconds`` is given. ``deadline`` is absolute (a time on the arrival's clock, not a window),
  ``target`` a target loss (> 0), ``rate`` the batches one node-step of speed 1 trains (the Workload's
  ``batches_per_step``), ``family`` a curve-bank family label. Every optional column may be absent or have
  empty cells: those tasks get the recipe's value.

Time-to-step mapping (every layout; documented on :func:`read_trace`): a trace time ``t`` maps to step
``floor((t - origin) / step_seconds)``, where ``origin`` defaults to the earliest submission time (so the
first job arrives at step 0; for generic traces in steps, 0) and step ``s`` covers trace times
``[origin + s·step_seconds, origin + (s+1)·step_seconds)``. A deadline ``D`` maps the same way, to the last
step boundary at or before ``D``: a task with deadline step ``d`` may be served in steps ``a, ..., d - 1``
(the environment's timing convention), which all end by ``D``. A deadline that falls inside its own arrival
step (``d <= a``) becomes ``a + 1``, the shortest window. Default ``step_seconds`` for seconds-based layouts
with durations: ``median(duration) / typical_run_steps`` (60 by the v1 recipe), so that a job of the
trace's median duration lasts as many steps as a typical run of the recipe (a whole typical run of any
family takes 60 node-steps at its reference rate): trace deadlines and inter-arrival gaps then sit on the
same time scale as the recipe's demands and windows.

Filling in (:func:`trace_workload`): the recipe draws, for the replayed tasks, exactly what
:func:`core_env.workload.draw_workload` draws (:func:`core_env.recipe.draw_tasks`, same generator
calls): curve, target, compute rate and deadline window; then the trace's own deadlines, targets and
rates replace the drawn ones where present, and the hidden demand emerges from curve × target × rate
(:meth:`core_env.curves.CurveBank.demands`) as usual. Without a family column (or with no name that
matches), the draw is ``draw_tasks(bank, reference, M, rng)`` itself. A model / family name that equals a
bank family label (after ``family_map``, if given) pins the task's curve to that family: those tasks are
drawn by the same recipe on the family's curves alone (one :func:`draw_tasks` call per family, after the
unpinned tasks, families in sorted order); other names are ignored and the curve is drawn uniformly over
the bank, as the recipe does. ``rate_from_duration=True`` sets the compute rate of tasks with a trace
duration (and no ``rate``) so that a whole typical run of their family takes the job's duration in steps:
``reference rate × typical_run_steps / (duration / step_seconds)``; the job sizes of the trace then carry
over (family-level knowledge and the trace only, never the task's own curve).

Errors name the file and the line: missing columns for the layout, duplicate columns, rows with the wrong
number of fields, empty or non-numeric values, non-finite, negative or pre-origin times, decreasing
submission times with ``sort=False``, deadlines not later than their submission, non-positive targets,
durations below :data:`MIN_DURATION` (1 ms), rates outside [:data:`MIN_BATCHES_PER_STEP`, 1e18], a job id
that appears twice, a time that maps beyond :data:`MAX_STEP` (10^6 steps: the longest trace an episode
replays), and an empty file or one without job rows.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import math
import numbers
import os

import numpy as np

from core_env.curves import CurveBank
from core_env.recipe import DEFAULT_RECIPE, TaskRecipe, draw_tasks, quantize
from core_env.workload import MAX_BATCHES_PER_STEP, Workload, _reference_of

LAYOUTS = ("generic", "elasticflow", "blox")
#: The latest step a trace time may map to: an episode replays every step up to the last deadline, so a
#: trace spanning more steps than this would run for hours (choose a larger ``step_seconds`` or cut it).
MAX_STEP = 10**6
#: Fewest batches one node-step may train (a trace ``rate`` below it would make demands overflow).
MIN_BATCHES_PER_STEP = 1e-6
#: Shortest job duration (seconds) a trace may give: the default step length is median(duration) / 60,
#: and durations far below any real job's only make every step length degenerate.
MIN_DURATION = 1e-3

# Per layout, per field: the accepted column names (first present wins), and which fields are required.
_COLUMNS: dict[str, dict[str, tuple[str, ...]]] = {
    "generic": {"job_id": ("task_id",), "time": ("arrival",), "deadline": ("deadline",), "target": ("target",),
                "rate": ("rate",), "family": ("family",)},
    "elasticflow": {"job_id": ("job_id",), "time": ("submission_time", "submit_time"), "deadline": ("deadline", "ddl"),
                    "family": ("model_name",), "duration": ("duration",), "best_effort": ("best_effort",)},
    "blox": {"job_id": ("job_id",), "time": ("submit_time",), "duration": ("duration",), "family": ("model",)},
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "generic": ("job_id", "time"),
    "elasticflow": ("job_id", "time", "deadline", "family", "duration"),
    "blox": ("job_id", "time", "duration", "family"),
}
_SECONDS = {"generic": False, "elasticflow": True, "blox": True}  # generic: steps unless step_seconds is given


@dataclasses.dataclass(frozen=True, eq=False)
class Trace:
    """A job trace read by :func:`read_trace`: one entry per job, sorted by submission time (all (M,)).

    Attributes:
        path: the file read.
        layout: ``"generic"``, ``"elasticflow"`` or ``"blox"``.
        unit: ``"second"`` or ``"step"``: the unit of the file's times.
        step_seconds: trace time units per environment step (1.0 for generic traces in steps).
        origin: the trace time of the start of step 0.
        job_id: str job ids as written.
        line: int64 line of each job's row in the file (the header is line 1).
        time: float64 submission times as written.
        arrival: int64 arrival steps, ``floor((time - origin) / step_seconds)``, non-decreasing.
        deadline: int64 deadline steps (> arrival), -1 where the trace has none.
        target: float64 target losses, NaN where the trace has none.
        rate: float64 batches per node-step, NaN where the trace has none.
        family: str model / family names as written, ``""`` where the trace has none.
        duration: float64 job durations in seconds, NaN where the trace has none.
        extra: the file's other columns, name -> (M,) str array (e.g. ``num_gpu``, ``batch_size``).
    """

    path: str
    layout: str
    unit: str
    step_seconds: float
    origin: float
    job_id: np.ndarray
    line: np.ndarray
    time: np.ndarray
    arrival: np.ndarray
    deadline: np.ndarray
    target: np.ndarray
    rate: np.ndarray
    family: np.ndarray
    duration: np.ndarray
    extra: dict[str, np.ndarray]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                value.setflags(write=False)
        for value in self.extra.values():
            value.setflags(write=False)

    def __len__(self) -> int:
        return int(self.arrival.size)


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _number(path: str, line: int, column: str, cell: str) -> float:
    if cell == "":
        raise ValueError(f"{path}: line {line}: column {column!r} is empty")
    try:
        value = float(cell)
    except ValueError:
        raise ValueError(f"{path}: line {line}: column {column!r}: {cell!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{path}: line {line}: column {column!r}: {cell!r} is not a finite number")
    return value


def _read_rows(path: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        header = None
        rows = []
        for fields in reader:
            if not fields or all(not f.strip() for f in fields):
                continue  # blank line
            if header is None:
                header = [f.strip() for f in fields]
                continue
            if len(fields) != len(header):
                raise ValueError(f"{path}: line {reader.line_num}: {len(fields)} fields, but the header has {len(header)}")
            rows.append((reader.line_num, [f.strip() for f in fields]))
    if header is None:
        raise ValueError(f"{path}: the file is empty (no header row)")
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise ValueError(f"{path}: line 1: duplicate column(s) {duplicates}")
    if not rows:
        raise ValueError(f"{path}: no job rows after the header")
    return header, rows


def _step(path: str, line: int, what: str, value: float, origin: float, step_seconds: float) -> int:
    step = (value - origin) / step_seconds
    if not math.isfinite(step) or step > MAX_STEP:
        raise ValueError(f"{path}: line {line}: {what} {value:g} maps to step {step:g}, beyond the longest trace an episode "
                         f"replays ({MAX_STEP:,} steps); choose a larger step_seconds (now {step_seconds:g} s) or cut the trace")
    return int(math.floor(step))


def read_trace(path: str | os.PathLike, layout: str = "generic", step_seconds: float | None = None,
               origin: float | None = None, sort: bool = True,
               typical_run_steps: float = DEFAULT_RECIPE.typical_run_steps) -> Trace:
    """Read a CSV job trace and map its times to environment steps.

    Mapping: ``step = floor((t - origin) / step_seconds)`` for submission times and deadlines alike (a
    deadline inside its arrival step becomes arrival + 1; module docstring).

    Args:
        path: the CSV file (header row first; blank lines skipped; UTF-8, optional BOM).
        layout: ``"generic"``, ``"elasticflow"`` or ``"blox"`` (module docstring: columns and units).
        step_seconds: trace seconds per step. Default: ``median(duration) / typical_run_steps`` for the
            ElasticFlow and Blox layouts (a median-length job lasts a typical run); for the generic layout,
            None means its times are already steps (``step_seconds`` 1, origin 0) and a number means they
            are seconds.
        origin: the trace time of the start of step 0. Default: the earliest submission time (0 for
            generic traces in steps). No time may lie before it.
        sort: sort the jobs by submission time (stable: ties keep file order), as ElasticFlow does with
            its traces; with False, a submission time earlier than the previous row's raises.
        typical_run_steps: node-steps of a typical run, for the default ``step_seconds`` (the recipe's,
            :attr:`core_env.recipe.TaskRecipe.typical_run_steps`).

    Raises:
        ValueError: naming the file and line (module docstring lists the checks).
    """
    path = os.fspath(path)
    if layout not in LAYOUTS:
        raise ValueError(f"unknown trace layout {layout!r}; expected one of {list(LAYOUTS)}")
    if step_seconds is not None and (not _is_real(step_seconds) or not math.isfinite(step_seconds) or step_seconds <= 0):
        raise ValueError(f"step_seconds must be a finite number > 0, got {step_seconds!r}")
    if origin is not None and (not _is_real(origin) or not math.isfinite(origin)):
        raise ValueError(f"origin must be a finite number, got {origin!r}")
    if not isinstance(sort, bool):
        raise TypeError(f"sort must be a bool, got {type(sort).__name__}")
    if not _is_real(typical_run_steps) or not 1.0 <= typical_run_steps <= 1e6:
        raise ValueError(f"typical_run_steps must be a number in [1, 1e6], got {typical_run_steps!r}")
    header, rows = _read_rows(path)

    spec = _COLUMNS[layout]
    column = {field: next((name for name in names if name in header), None) for field, names in spec.items()}
    missing = [" or ".join(repr(n) for n in spec[field]) for field in _REQUIRED[layout] if column[field] is None]
    if missing:
        raise ValueError(f"{path}: the {layout} layout needs column(s) {', '.join(missing)}; the header has {header}")
    index = {field: header.index(name) for field, name in column.items() if name is not None}
    used = {column[field] for field in index}

    m = len(rows)
    line = np.array([n for n, _ in rows], dtype=np.int64)
    time, deadline, target, rate, duration = (np.full(m, np.nan) for _ in range(5))
    family = np.full(m, "", dtype=object)
    job_id = np.array([fields[index["job_id"]] for _, fields in rows], dtype=object)
    first_line: dict[str, int] = {}
    for i, (n, fields) in enumerate(rows):
        if job_id[i] == "":
            raise ValueError(f"{path}: line {n}: column {column['job_id']!r} is empty")
        if job_id[i] in first_line:
            raise ValueError(f"{path}: line {n}: job {job_id[i]!r} appears again (first on line {first_line[job_id[i]]}); each job once")
        first_line[job_id[i]] = n
        t = time[i] = _number(path, n, column["time"], fields[index["time"]])
        if t < 0:
            raise ValueError(f"{path}: line {n}: column {column['time']!r}: submission time {t:g} is negative")
        if "duration" in index:
            cell = fields[index["duration"]]
            if cell != "" or "duration" in _REQUIRED[layout]:
                d = duration[i] = _number(path, n, column["duration"], cell)
                if d <= 0 or d < MIN_DURATION:
                    raise ValueError(f"{path}: line {n}: column {column['duration']!r}: duration {d:g} must be >= {MIN_DURATION:g}")
        best_effort = "best_effort" in index and fields[index["best_effort"]] != "" and \
            _number(path, n, column["best_effort"], fields[index["best_effort"]]) == 1
        if "deadline" in index and fields[index["deadline"]] != "" and not best_effort:
            d = deadline[i] = _number(path, n, column["deadline"], fields[index["deadline"]])
            if d <= t:
                raise ValueError(f"{path}: line {n}: column {column['deadline']!r}: deadline {d:g} is not later than "
                                 f"the submission time {t:g}")
        if "target" in index and fields[index["target"]] != "":
            v = target[i] = _number(path, n, column["target"], fields[index["target"]])
            if v <= 0:
                raise ValueError(f"{path}: line {n}: column {column['target']!r}: target loss {v:g} must be > 0")
        if "rate" in index and fields[index["rate"]] != "":
            v = rate[i] = _number(path, n, column["rate"], fields[index["rate"]])
            if not MIN_BATCHES_PER_STEP <= v <= MAX_BATCHES_PER_STEP:
                raise ValueError(f"{path}: line {n}: column {column['rate']!r}: rate {v:g} must be in [{MIN_BATCHES_PER_STEP:g}, {MAX_BATCHES_PER_STEP:g}]")
        if "family" in index:
            family[i] = fields[index["family"]]
    if not sort:
        for i in range(1, m):
            if time[i] < time[i - 1]:
                raise ValueError(f"{path}: line {line[i]}: submission time {time[i]:g} is earlier than the previous row's "
                                 f"{time[i - 1]:g} (pass sort=True to sort the jobs by submission time)")

    in_seconds = _SECONDS[layout] or step_seconds is not None
    if step_seconds is None:
        step_seconds = float(np.median(duration)) / float(typical_run_steps) if in_seconds else 1.0
    step_seconds = float(step_seconds)
    if origin is None:
        origin = float(time.min()) if in_seconds else 0.0
    origin = float(origin)
    early = np.flatnonzero(time < origin)
    if early.size:
        i = int(early[0])
        raise ValueError(f"{path}: line {line[i]}: submission time {time[i]:g} is before the origin {origin:g}")

    arrival = np.array([_step(path, int(n), "submission time", t, origin, step_seconds) for n, t in zip(line, time)], dtype=np.int64)
    deadline_step = np.full(m, -1, dtype=np.int64)
    for i in np.flatnonzero(np.isfinite(deadline)).tolist():
        deadline_step[i] = max(arrival[i] + 1, _step(path, int(line[i]), "deadline", deadline[i], origin, step_seconds))

    order = np.argsort(time, kind="stable") if sort else np.arange(m)
    extra = {name: np.array([fields[j] for _, fields in rows], dtype=str)[order]
             for j, name in enumerate(header) if name not in used}
    return Trace(path=path, layout=layout, unit="second" if in_seconds else "step", step_seconds=step_seconds, origin=origin,
                 job_id=np.asarray(job_id[order], dtype=str), line=line[order], time=time[order], arrival=arrival[order],
                 deadline=deadline_step[order], target=target[order], rate=rate[order],
                 family=np.asarray(family[order], dtype=str), duration=duration[order], extra=extra)


#: Steps a replayed episode may run past its last possible deadline before it is truncated (:func:`trace_horizon`).
HORIZON_MARGIN = 100


def trace_horizon(trace: Trace, recipe: TaskRecipe = DEFAULT_RECIPE, margin: int = HORIZON_MARGIN) -> int:
    """A step count no episode replaying ``trace`` outlasts: the last arrival + the longest deadline window
    (the trace's own deadlines, or the longest window ``recipe`` can draw, ``ceil(slack_hi · share_hi ·
    typical_run_steps)``) + ``margin``. A long trace needs ``EnvConfig(max_cycles=...)`` at least this large,
    or its episodes are truncated before the last tasks arrive or end."""
    if not isinstance(trace, Trace):
        raise TypeError(f"trace must be a Trace (from read_trace), got {type(trace).__name__}")
    drawn = math.ceil(recipe.slack[1] * recipe.budget_share[1] * recipe.typical_run_steps)
    given = trace.deadline - trace.arrival
    longest = max(drawn, int(given[trace.deadline >= 0].max(initial=0)))
    return int(trace.arrival.max()) + longest + int(margin)


@functools.lru_cache(maxsize=16)
def _read_once(path: str, sha256: str, layout: str, step_seconds: float | None) -> Trace:
    return read_trace(path, layout, step_seconds)


def trace_file(path: str | os.PathLike, layout: str = "generic", step_seconds: float | None = None) -> tuple[str, Trace]:
    """(sha256, :func:`read_trace` of the file) for the trace file at ``path``, read once per file content
    and options (a changed file is read again)."""
    from core_env.curves import file_sha256

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"no trace file at {path!r} ({'a directory' if os.path.isdir(path) else 'no such file'})")
    sha = file_sha256(path)
    return sha, _read_once(path, sha, layout, step_seconds)


@functools.lru_cache(maxsize=32)
def _family_bank(bank: CurveBank, family: str) -> tuple[CurveBank, np.ndarray]:
    """The curves of one family of ``bank`` as a bank of their own, and their indices in ``bank``."""
    members = np.flatnonzero(bank.family == family)
    sub = CurveBank(f"{bank.name}[{family}]", [bank.curve(int(i)) for i in members], [family] * members.size, bank.flags[members])
    return sub, members


def trace_workload(trace: Trace, bank: CurveBank, rng: np.random.Generator, recipe: TaskRecipe = DEFAULT_RECIPE,
                   n_nodes: int = 4, reference: CurveBank | None = None, max_tasks: int | None = None,
                   family_map: dict[str, str] | None = None, rate_from_duration: bool = False) -> Workload:
    """The workload of a trace's jobs on ``bank``: the trace's arrivals, and its deadlines, targets and
    rates where it has them; everything else drawn by ``recipe`` from ``rng`` (module docstring).

    Args:
        trace: from :func:`read_trace`.
        bank: the curves the tasks train on.
        rng: the generator of the recipe's draws (same seed ⇒ same workload).
        recipe: the v1 task recipe (:class:`core_env.recipe.TaskRecipe`).
        n_nodes: accepted for symmetry with :func:`core_env.workload.draw_workload`, where it only sets the
            arrival process; a trace fixes the arrivals, so it changes nothing here.
        reference: the runs the submitters know (targets, reference rates); default ``bank`` itself.
        max_tasks: replay only the first ``max_tasks`` jobs (in arrival order); default all.
        family_map: trace model name -> bank family label (e.g. ``{"gpt2": "charlm"}``); names not in it are
            matched as written. Every value must be a family of ``bank``.
        rate_from_duration: derive the compute rate of tasks with a trace duration and no rate from that
            duration (a whole typical run of the family takes ``duration / step_seconds`` steps).

    Returns:
        A :class:`Workload` with ``arrival_steps`` = last arrival + 1 (the episode ends once the replayed
        tasks have drained).
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"trace must be a Trace (from read_trace), got {type(trace).__name__}")
    if not isinstance(bank, CurveBank):
        raise TypeError(f"bank must be a CurveBank, got {type(bank).__name__}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)) or n_nodes < 1:
        raise ValueError(f"n_nodes must be an int >= 1, got {n_nodes!r}")
    m = len(trace)
    if max_tasks is not None:
        if isinstance(max_tasks, bool) or not isinstance(max_tasks, (int, np.integer)) or max_tasks < 1:
            raise ValueError(f"max_tasks must be an int >= 1 or None, got {max_tasks!r}")
        m = min(m, int(max_tasks))
    families = set(bank.family.tolist())
    family_map = dict(family_map or {})
    unknown = sorted({v for v in family_map.values() if v not in families})
    if unknown:
        raise ValueError(f"family_map maps to {unknown}, which are not families of bank {bank.name!r}: {sorted(families)}")
    ref = _reference_of(reference if reference is not None else bank, recipe)

    names = [family_map.get(name, name) for name in trace.family[:m].tolist()]
    pinned = np.array([name in families for name in names], dtype=bool)
    curve = np.zeros(m, np.int64)
    target, rate = np.zeros(m), np.zeros(m)
    window = np.zeros(m, np.int64)
    groups: list[tuple[np.ndarray, CurveBank, np.ndarray | None]] = [(np.flatnonzero(~pinned), bank, None)]
    for f in sorted({n for n, p in zip(names, pinned) if p}):
        sub, members = _family_bank(bank, f)
        groups.append((np.flatnonzero(np.array(names, dtype=object) == f), sub, members))
    for idx, group_bank, members in groups:
        if idx.size == 0:
            continue
        drawn = draw_tasks(group_bank, ref, idx.size, rng)
        curve[idx] = drawn["curve"] if members is None else members[drawn["curve"]]
        target[idx], rate[idx], window[idx] = drawn["target"], drawn["batches_per_step"], drawn["window"]

    arrival = trace.arrival[:m]
    deadline = np.where(trace.deadline[:m] >= 0, trace.deadline[:m], arrival + window)
    target = np.where(np.isfinite(trace.target[:m]), trace.target[:m], target)
    if rate_from_duration:
        duration_steps = trace.duration[:m] / trace.step_seconds
        has = np.isfinite(duration_steps) & np.isnan(trace.rate[:m])
        if has.any():
            family_rate = np.array([ref.rate[f] for f in bank.family[curve[has]].tolist()])
            derived = quantize(family_rate * recipe.typical_run_steps / duration_steps[has])
            rate[has] = np.clip(derived, np.finfo(np.float64).tiny, MAX_BATCHES_PER_STEP)
    rate = np.where(np.isfinite(trace.rate[:m]), trace.rate[:m], rate)
    demand = bank.demands(curve, target, rate)
    return Workload(bank, arrival, deadline, target, rate, curve, demand, int(arrival[-1]) + 1)


__all__ = ["HORIZON_MARGIN", "LAYOUTS", "MAX_STEP", "MIN_BATCHES_PER_STEP", "MIN_DURATION", "Trace", "read_trace", "trace_file", "trace_horizon", "trace_workload"]

