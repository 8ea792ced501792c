"""The engine: the compiled loops that apply the rules of :mod:`core_env.rules` to B environments at once.

This module writes no rule. It holds the state's arrays as one argument (:class:`State`, a numba
StructRef over the simulator's arrays, no copies: a numba call costs per argument, most for arrays of 2
or more dimensions), turns it into the named tuple the rules take (:func:`arrays_of`), and runs the
loops over environments, compiled without reference counting (:data:`core_env.jit.unowned`) with the
per-environment rules inlined into them:

* :func:`step` — every live env's step with the curve task source, and the team rewards
  (:func:`step_arrays`, which the simulator's step that also observes calls on the same arrays; it first
  hints the memory the step will read at random, :func:`prefetch_step`, which changes no value);
* :func:`start_step` / :func:`end_step` — the same step in two halves around the reports, for a task
  source outside compiled code (:meth:`core_env.sim.Simulator.step` with ``source=``): the rules are the
  same functions, so the two paths cannot drift apart (tested step for step).

Its caller is the simulator (:mod:`core_env.sim`), which holds the :class:`State`: the batch, the views and
the task sources go through the simulator's methods (only :mod:`core_env.features`' helpers that take a
simulator still read the State themselves, through :func:`arrays_of`).
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.experimental import structref

from core_env import rules
from core_env.jit import compiled, inlined, prefetch, unowned
from core_env.state import ARRAYS, Arrays, EnvFlag, EnvRow, ParamFloat, SlotFloat, SlotInt

OK, OUT_OF_RANGE, STRICT_INVALID = rules.OK, rules.OUT_OF_RANGE, rules.STRICT_INVALID


@structref.register
class StateType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class State(structref.StructRefProxy):
    """The simulator's arrays as one argument of compiled functions (fields: :class:`core_env.state.Arrays`)."""


structref.define_proxy(State, StateType, list(Arrays._fields))


@compiled
def arrays_of(s):
    """The arrays of a :class:`State` as :class:`core_env.state.Arrays` (in its field order): what the loops
    compiled without reference counting take (they cannot read a StructRef)."""
    return Arrays(s.ints, s.env, s.node_slot, s.task_ints, s.params_i, s.counts, s.chosen, s.floats, s.task_floats, s.history,
                  s.recent, s.speeds, s.potential, s.params_f, s.reward, s.reported, s.batches, s.slot_flags, s.choices, s.flags,
                  s.nodes, s.served, s.cum, s.slope)


@inlined
def prefetch_step(actions, a):
    """Before the loop over environments: a :func:`core_env.jit.prefetch` hint for the memory the step
    reads at random, so that its loads overlap instead of each waiting in turn: the curve bank's entries
    each chosen task's report will read (at the position its batches should reach: the estimate may be
    off, a hint changes no value), and the per-task rows of the tasks that arrive at the next ``t``.
    Reads state only."""
    K = a.served.shape[1]
    switch_cost = a.params_f[ParamFloat.SWITCH_COST]
    for b in range(actions.shape[0]):
        if a.flags[EnvFlag.DONE, b]:
            continue
        for n in range(actions.shape[1]):
            action = actions[b, n]
            if action > 0 and a.choices[b, action]:
                i = b * K + action - 1
                x = a.floats[i, SlotFloat.BATCHES_PER_STEP] * a.speeds[n]
                if switch_cost > 0.0 and a.ints[i, SlotInt.STEPS] > 0 and a.node_slot[b, n] != action - 1:
                    x = x * (1.0 - switch_cost)
                x = a.floats[i, SlotFloat.PROGRESS] + x
                if x >= 0.0:  # (not NaN) the entry rules.integral reads, below the plateau
                    at = a.ints[i, SlotInt.CUM_START] + np.int64(min(x, float(a.ints[i, SlotInt.LENGTH])))
                    prefetch(a.cum, at)
                    prefetch(a.slope, at)
        if a.env[EnvRow.NEXT_ARRIVAL, b] <= a.env[EnvRow.T, b] + 1:  # rules.admit_arrivals will copy this task in
            row = a.env[EnvRow.TASK_BASE, b] + a.env[EnvRow.NEXT_TASK, b]
            prefetch(a.task_ints, row)
            prefetch(a.task_ints, row + 1)  # (the row after it: the next arrival step)
            prefetch(a.task_floats, row)


@unowned
def step_arrays(actions, a):
    """One step of every live environment and the team rewards. Returns (code, flat node index) from
    :func:`core_env.rules.check_actions`; on an error nothing is written."""
    code, where = rules.begin_step(actions, a)
    if code != OK:
        return code, where
    prefetch_step(actions, a)
    for b in range(actions.shape[0]):
        rules.step_env(b, actions, a)
    return OK, -1


@compiled
def step(actions, s):
    """:func:`step_arrays` on a :class:`State`."""
    return step_arrays(actions, arrays_of(s))


@unowned
def _start(actions, a):
    code, where = rules.begin_step(actions, a)
    if code != OK:
        return code, where
    for b in range(actions.shape[0]):
        if not a.flags[EnvFlag.DONE, b]:
            rules.start_env_step(b, actions, a)
    return OK, -1


@compiled
def start_step(actions, s):
    """The first half of a step: check the actions, then each live env's choices and batches
    (``chosen``, ``batches``); the caller's task source then writes ``reported`` for every served slot."""
    return _start(actions, arrays_of(s))


@unowned
def _curve_reports(a):
    for b in range(a.reward.shape[0]):
        if not a.flags[EnvFlag.DONE, b]:
            rules.report_from_curves(b, a)


@compiled
def curve_reports(s):
    """Between :func:`start_step` and :func:`end_step`: every served task's report from the curve bank
    (:class:`core_env.task_source.CurveSource`)."""
    _curve_reports(arrays_of(s))


@unowned
def _end(a):
    for b in range(a.reward.shape[0]):
        if not a.flags[EnvFlag.DONE, b]:
            rules.end_env_step(b, a)
        rules.team_reward(b, a)


@compiled
def end_step(s):
    """The second half of a step begun by :func:`start_step`: the reports kept, completions, deadlines,
    arrivals, episode ends and team rewards."""
    _end(arrays_of(s))


@compiled
def reset_env(b, s):
    """:func:`core_env.rules.reset_env` of env b on a :class:`State`."""
    rules.reset_env(b, arrays_of(s))


def array_layout(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[str, int, tuple[int, ...]]]:
    """(arena, offset, shape) of every array of :data:`core_env.state.ARRAYS` in its arena, given their shapes."""
    used: dict[str, int] = {}
    out = {}
    for name, arena, _ in ARRAYS:
        out[name] = (arena, used.get(arena, 0), shapes[name])
        used[arena] = used.get(arena, 0) + int(np.prod(shapes[name]))
    return out
