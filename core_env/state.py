"""The simulator's state, declared once: every table's fields by name, in order, with their shapes.

B environments of N nodes and K slots are stepped together as a struct of arrays (:class:`core_env.sim.Simulator`
owns them). Each table below is an :class:`enum.IntEnum` whose members are the table's columns or rows in
order; their positions are generated from the declaration (:class:`Fields` numbers members 0, 1, …), so no
index is written by hand and the compiled rules read every field by name (``ints[i, SlotInt.STEPS]``;
numba compiles an IntEnum member to its constant). :data:`ARRAYS` declares the state's arrays, their
dtype arena and shape; :class:`Arrays` is the named tuple of them the compiled rules take (``a.ints``,
``a.env``, …: a heterogeneous tuple read by attribute, resolved at compile time).
"""

from __future__ import annotations

import enum
from collections import namedtuple

import numpy as np
from numba.extending import register_jitable


class Fields(enum.IntEnum):
    """Members numbered 0, 1, … in declaration order (the columns or rows of one table)."""

    @staticmethod
    def _generate_next_value_(name, start, count, last_values):  # noqa: ARG004  (enum's signature)
        return count


_ = enum.auto


class SlotInt(Fields):
    """Int columns of the slot table ``ints`` (B·K, ·): one row per flat slot ``b * K + k``; a task's row of
    the per-task table ``task_ints`` (B·M, ·) has the same columns and is copied in when it is admitted."""

    TASK = _()  # workload index of the task in the slot; -1 when empty
    ARRIVAL = _()  # step the task arrived
    DEADLINE = _()  # step at which it fails if not completed
    CURVE = _()  # its learning curve's index in the curve bank
    CUM_START = _()  # where the curve starts in the bank's flat cum/slope arrays
    LENGTH = _()  # the curve's length in batches
    EXPIRY = _()  # the deadline while the slot is active; NEVER when empty
    STEPS = _()  # node-steps received (= reports made)
    LAST_NODE = _()  # node that served it last; -1 before its first service


class SlotFloat(Fields):
    """Float columns of the slot table ``floats`` (B·K, ·) and of the per-task table ``task_floats``."""

    TARGET = _()  # the loss the task must reach
    BATCHES_PER_STEP = _()  # batches one node-step trains at speed 1
    DEMAND = _()  # hidden nominal node-steps to reach the target (oracles only)
    PROGRESS = _()  # batches trained so far
    INTEGRAL = _()  # the curve source's ∫ loss over [0, progress) (the interval mean of the next report)
    LAST_LOSS = _()  # the latest reported loss
    FIRST_LOSS = _()  # the first reported loss, l0
    LOG_TARGET = _()  # log of the target floored at LOSS_FLOOR
    PHI = _()  # φ = clip(log(l0 / l) / log(l0 / target), 0, 1) of the latest report
    LOG_SPAN = _()  # log(l0 / target), fixed from the first report on


class EnvRow(Fields):
    """Rows of the per-environment int table ``env`` (·, B): the episode statistics, then the clock and
    bookkeeping."""

    ARRIVED = _()  # tasks arrived
    COMPLETED = _()  # tasks that reached their target
    FAILED = _()  # tasks whose deadline passed
    REJECTED = _()  # arrivals that found every slot full
    SWITCHES = _()  # services by another node than the task's last, or after a pause
    BUSY_NODE_STEPS = _()  # node-steps that trained a task
    WASTED_NODE_STEPS = _()  # node-steps spent on tasks that then failed
    CONFLICTS = _()  # node choices lost to a lower-index node
    INVALID_ACTIONS = _()  # choices of an empty slot
    T = _()  # the step counter
    NEXT_TASK = _()  # workload index of the next task to arrive
    NEXT_ARRIVAL = _()  # its arrival step
    N_ACTIVE = _()  # slots holding a task
    N_TASKS = _()  # tasks in the episode's workload
    ARRIVAL_STEPS = _()  # the arrival window T_arrive
    NEXT_EXPIRY = _()  # the earliest deadline among active slots
    TASK_BASE = _()  # the env's first row in the per-task tables


#: The episode statistics: the first rows of :class:`EnvRow`, by their info names.
STATS = tuple(row.name.lower() for row in EnvRow if row < EnvRow.T)
#: Episode statistics reported in every info, in order (running values; final at the last step): the
#: counts of :class:`EnvRow` and two rates (:func:`completion_rate`, :func:`node_utilization`).
EPISODE_KEYS = ("arrived", "completed", "failed", "rejected", "completion_rate", "active", "node_utilization",
                "busy_node_steps", "wasted_node_steps", "switches", "conflicts", "invalid_actions", "t")
#: Rows of ``env`` that infos and :meth:`core_env.sim.Simulator.statistics_of` read: the statistics, the
#: clock, …, ``n_active``.
INFO_ROWS = EnvRow.N_ACTIVE + 1


class EnvFlag(Fields):
    """Rows of the per-environment flags ``flags`` (·, B) bool."""

    DONE = _()
    TERMINATED = _()
    TRUNCATED = _()


class SlotFlag(Fields):
    """Planes of the per-slot flags ``slot_flags`` (·, B, K) bool."""

    SERVED_LAST = _()  # served in the last step
    HAS_REPORT = _()  # active and has reported a loss


class NodeFlag(Fields):
    """Planes of the last step's per-node outcome ``nodes`` (·, B, N) bool."""

    CONFLICT = _()  # lost its choice to a lower-index node
    INVALID = _()  # chose an empty slot
    SWITCHED = _()  # its service was a switch (another node served the task last, or nobody did last step)


class Outcome(Fields):
    """Rows of the last step's per-environment outcome ``counts`` (·, B) int."""

    COMPLETED = _()
    FAILED = _()
    REJECTED = _()


class ParamInt(Fields):
    """Entries of ``params_i``: the configuration the rules read."""

    STRICT = _()  # 1: choosing an empty slot is an error
    MAX_CYCLES = _()  # truncation step
    SHAPED = _()  # 1: the team reward adds Φ(s') − Φ(s)


class ParamFloat(Fields):
    """Entries of ``params_f``."""

    SWITCH_COST = _()  # fraction of a step's batches lost on a switch
    KAPPA = _()  # weight of the potential Φ = κ Σ φ


#: The state's arrays: (name, arena, shape), in the order of the tuple the compiled loops take. The
#: simulator lays them out in three arenas (``i`` int64, ``f`` float64, ``b`` bool), the step's outcome
#: (``counts``, ``chosen``; ``reported``, ``batches``; ``nodes``, ``served``) last in each, so that it is
#: copied out (or put back) at once. Shapes name B envs, N nodes, K slots, M per-env task rows (tasks + a sentinel),
#: W the longest window, H the observation's loss history.
ARRAYS = (("ints", "i", "(B·K, SlotInt)"), ("env", "i", "(EnvRow, B)"), ("node_slot", "i", "(B, N) slot each node served last step, -1 idle"),
          ("task_ints", "i", "(B·M, SlotInt)"), ("params_i", "i", "(ParamInt,)"), ("counts", "i", "(Outcome, B)"),
          ("chosen", "i", "(B, N) slot each node trains this step, -1 idle"),
          ("floats", "f", "(B·K, SlotFloat)"), ("task_floats", "f", "(B·M, SlotFloat)"), ("history", "f", "(B, K, W) every reported loss"),
          ("recent", "f", "(B, K, H) the last H log losses, most recent first"), ("speeds", "f", "(N,) node speeds"),
          ("potential", "f", "(B,) Φ of the state"), ("params_f", "f", "(ParamFloat,)"), ("reward", "f", "(B,) the last team reward"),
          ("reported", "f", "(B, K) the loss each served slot reported"), ("batches", "f", "(B, N) batches each node trains this step"),
          ("slot_flags", "b", "(SlotFlag, B, K)"), ("choices", "b", "(B, K + 1) actions that choose a task (column 0, idle, always)"),
          ("flags", "b", "(EnvFlag, B)"), ("nodes", "b", "(NodeFlag, B, N)"), ("served", "b", "(B, K) served this step"))
#: The step's outcome arrays (the end of each arena, from the first of these on).
OUTCOME = ("counts", "reported", "nodes")

#: The state's arrays as the compiled rules take them (:func:`core_env.dynamics.arrays_of`): those of
#: :data:`ARRAYS` by name, then the curve bank's ``cum`` and ``slope`` (its flat per-batch cumulative
#: losses and losses, read by the curve task source).
Arrays = namedtuple("Arrays", [name for name, _, _ in ARRAYS] + ["cum", "slope"])

#: A slot or expiry that never comes.
NEVER = np.iinfo(np.int64).max
#: What an empty slot holds (also a per-task row before its task is written).
EMPTY_INTS = {SlotInt.TASK: -1, SlotInt.LENGTH: 1, SlotInt.EXPIRY: NEVER, SlotInt.LAST_NODE: -1}
EMPTY_FLOATS = {SlotFloat.TARGET: 1.0, SlotFloat.BATCHES_PER_STEP: 1.0}


def empty_row(table: type[Fields], values: dict) -> tuple:
    """A row of ``table`` holding ``values`` (zeros elsewhere), in column order."""
    return tuple(values.get(field, 0) for field in table)


@register_jitable
def completion_rate(completed, arrived):
    """Tasks completed per task arrived (0 before the first arrival): the one formula, in Python and compiled code."""
    return completed / arrived if arrived > 0 else 0.0


@register_jitable
def node_utilization(busy, n_nodes, t):
    """Busy node-steps per node-step played (t counts from 1 for the division)."""
    return busy / (n_nodes * max(t, 1))
