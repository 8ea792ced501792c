"""The rules of a step, as plain loops compiled by numba (``cache=True``): the one implementation.

Every function here works on the struct-of-arrays state of :class:`core_env.sim.Simulator` (which owns
the arrays and documents their layout) and is read as the rules of docs/env.md, "A step":

1. **actions** (:func:`check_actions`, :func:`resolve_choices`): node ``n`` of env ``b`` chooses 0 (idle)
   or ``k`` (slot ``k - 1``); an empty slot is invalid (idle, or an error with ``strict``); the
   lowest-index node choosing a slot wins it, later ones idle (conflicts);
2. **service** (:func:`serve`): ``batches_per_step × speed`` batches, ``(1 − switch_cost)`` of them on a
   switch; the reported loss is the mean of the curve over the new batches (:func:`interval_mean`);
3. **completion**: reported loss ≤ target frees the slot;
4. **deadline** (:func:`expire`): a task still active when ``t + 1`` reaches its deadline fails;
5. **arrivals** (:func:`admit_arrivals`): tasks arriving at the new ``t`` take the lowest free slot or
   are rejected;
6. **episode end** (:func:`update_done`): terminated when the arrival window is over and no task is
   active, truncated at ``max_cycles``; finished environments are frozen.

Compiled with ``error_model="numpy"``: a float division by zero gives inf or nan as in numpy (a loss
of 0, a target equal to the first loss), never an exception mid-step.

A step is all or nothing: :func:`step` checks every action before its first write and returns an error
code instead of writing when one is bad. No floating-point operation here depends on a SIMD path
(additions, products, divisions, comparisons in a fixed order), so the dynamics are bit-identical on
every x86-64 CPU.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.experimental import structref

from core_env import compiled_cache
from core_env.curves import LOSS_FLOOR

compiled_cache.guard()  # before anything compiles: drop cached machine code built from other rule sources

#: The rules called per environment inside a step's loop are inlined into it (numba IR level): a
#: compiled call with array arguments updates their reference counts with atomic instructions on entry
#: and exit, which cost a third of a B = 256 step when each rule was a call per environment.
inlined = njit(cache=True, error_model="numpy", inline="always")
#: The loops over environments allocate nothing and take every array from their caller, so they are
#: compiled without reference counting at all (numba's ``_nrt=False``): the arrays they index stay owned
#: by the caller for the whole call.
unowned = njit(cache=True, error_model="numpy", _nrt=False)

#: Int slot fields: columns of ``Simulator._ints`` (one row per flat slot ``b * K + k``).
TASK, ARRIVAL, DEADLINE, CURVE, CUM_START, LENGTH, EXPIRY, STEPS, LAST_NODE = range(9)
INT_FIELDS = ("task", "arrival", "deadline", "curve", "_cum_start", "_length", "_expiry", "steps", "last_node")
#: Float slot fields: columns of ``Simulator._floats``.
TARGET, BATCHES, DEMAND, PROGRESS, INTEGRAL, LAST_LOSS, FIRST_LOSS, LOG_TARGET, PHI, LOG_SPAN = range(10)
FLOAT_FIELDS = ("target", "batches_per_step", "demand", "progress", "_integral", "last_loss", "first_loss", "log_target", "phi", "_log_span")
#: Episode statistics: rows 0..8 of ``Simulator._env``.
STATS = ("arrived", "completed", "failed", "rejected", "switches", "busy_node_steps", "wasted_node_steps", "conflicts", "invalid_actions")
ARRIVED, COMPLETED, FAILED, REJECTED, SWITCHES, BUSY, WASTED, CONFLICTS, INVALID = range(9)
#: Further per-environment integers: rows of ``Simulator._env`` after the statistics.
ENV_FIELDS = ("t", "next_task", "next_arrival", "n_active", "n_tasks", "arrival_steps", "next_expiry", "task_base")
T, NEXT_TASK, NEXT_ARRIVAL, N_ACTIVE, N_TASKS, ARRIVAL_STEPS, NEXT_EXPIRY, TASK_BASE = range(9, 17)
#: Per-environment flags: rows of ``Simulator._flags``.
DONE, TERMINATED, TRUNCATED = range(3)
#: Per-slot flags: planes of ``Simulator._slot_flags``.
SERVED_LAST, HAS_REPORT = range(2)
#: Outcome counters of one step: rows of the (3, B) outcome array.
OUT_COMPLETED, OUT_FAILED, OUT_REJECTED = range(3)

NEVER = np.iinfo(np.int64).max
#: Positions from here on are integrated on the plateau by :func:`interval_mean` itself (the bank's int64
#: batch index of a position overflows at 2**63).
FAR_POSITION = 2.0**62
#: Error codes of :func:`check_actions` / :func:`step` (the offending flat node index is returned with it).
OK, OUT_OF_RANGE, STRICT_INVALID = 0, 1, 2


@inlined
def integral(cum, slope, start, length, x):
    """The integral of a curve's piecewise-constant loss over batches [0, x) (x >= 0)."""
    if x >= FAR_POSITION:  # past every curve's end: continue on the plateau
        end = min(x, float(length))
        whole = min(np.int64(end), length)
        return cum[start + whole] + (end - whole) * slope[start + whole] + (x - end) * slope[start + length]
    whole = min(np.int64(x), length)
    return cum[start + whole] + (x - whole) * slope[start + whole]


@inlined
def interval_mean(cum, slope, start, length, x0, integral0, x1):
    """(integral at x1, mean loss over [x0, x1)); a step too small to move the position (x1 == x0 in
    float64) reports the loss at x0, the limit of the interval mean, instead of 0/0."""
    value = integral(cum, slope, start, length, x1)
    width = x1 - x0
    if width == 0.0:
        return value, slope[start + np.int64(min(x0, float(length)))]
    return value, (value - integral0) / width


@njit(cache=True, error_model="numpy")
def check_actions(actions, choices, flags, n_slots, strict):
    """(code, flat node index): the first action outside [0, K], else (with ``strict``) the first choice
    of an empty slot in a live environment, else (OK, -1). Reads state only."""
    B, N = actions.shape
    for b in range(B):
        for n in range(N):
            a = actions[b, n]
            if a < 0 or a > n_slots:
                return OUT_OF_RANGE, b * N + n
    if strict:
        for b in range(B):
            if flags[DONE, b]:
                continue
            for n in range(N):
                if not choices[b, actions[b, n]]:
                    return STRICT_INVALID, b * N + n
    return OK, -1


@inlined
def free_slot(b, k, K, ints, slot_flags, choices, env):
    """Empty slot k of env b."""
    i = b * K + k
    choices[b, k + 1] = False
    slot_flags[SERVED_LAST, b, k] = False
    slot_flags[HAS_REPORT, b, k] = False
    ints[i, TASK] = -1
    ints[i, EXPIRY] = NEVER
    env[N_ACTIVE, b] -= 1


@inlined
def earliest_expiry(b, K, ints):
    out = NEVER
    for k in range(K):
        out = min(out, ints[b * K + k, EXPIRY])
    return out


@inlined
def resolve_choices(b, actions, choices, slot, conflicts, invalid):
    """Rule 1 for env b: ``slot[n]`` the slot node n serves (-1 idle); flags conflicts and invalid choices."""
    N = actions.shape[1]
    for n in range(N):
        a = actions[b, n]
        slot[n] = a - 1
        if not choices[b, a]:
            invalid[b, n] = True
            slot[n] = -1
        elif a > 0:
            for m in range(n):
                if slot[m] == a - 1:
                    conflicts[b, n] = True
                    slot[n] = -1
                    break


@inlined
def serve(b, slot, ints, floats, slot_flags, choices, history, recent, node_slot, env, cum, slope, speeds, switch_cost, served, reported):
    """Rules 2–3 for env b: every node with a slot trains it; returns the tasks completed."""
    N, K = slot.shape[0], served.shape[1]
    completed = 0
    for n in range(N):
        k = slot[n]
        if k < 0:
            continue
        i = b * K + k
        steps = ints[i, STEPS]
        had_report = steps > 0
        # a task with reports is switched unless this very node served it last step (a new task in the
        # slot has no reports)
        switched = had_report and node_slot[b, n] != k
        batches = floats[i, BATCHES] * speeds[n]
        if switch_cost > 0.0 and switched:
            batches = batches * (1.0 - switch_cost)
        x0 = floats[i, PROGRESS]
        x1 = x0 + batches
        value, loss = interval_mean(cum, slope, ints[i, CUM_START], ints[i, LENGTH], x0, floats[i, INTEGRAL], x1)
        env[BUSY, b] += 1
        if switched:
            env[SWITCHES, b] += 1
        floats[i, PROGRESS] = x1
        floats[i, INTEGRAL] = value
        history[b, k, steps] = loss
        for j in range(recent.shape[2] - 1, 0, -1):  # the last H log losses, most recent first
            recent[b, k, j] = recent[b, k, j - 1]
        recent[b, k, 0] = np.log(max(loss, LOSS_FLOOR))
        ints[i, STEPS] = steps + 1
        if not had_report:
            floats[i, FIRST_LOSS] = loss
            floats[i, LOG_SPAN] = np.log(loss / floats[i, TARGET])  # log(l0 / eps), fixed from the first report on
            slot_flags[HAS_REPORT, b, k] = True
        floats[i, LAST_LOSS] = loss
        floats[i, PHI] = log_progress(floats[i, FIRST_LOSS], loss, floats[i, LOG_SPAN])
        ints[i, LAST_NODE] = n
        reported[b, k] = loss
        served[b, k] = True
    for n in range(N):  # completions free their slots once every node has trained
        k = slot[n]
        if k >= 0 and reported[b, k] <= floats[b * K + k, TARGET]:
            free_slot(b, k, K, ints, slot_flags, choices, env)
            completed += 1
    return completed


@inlined
def expire(b, K, ints, slot_flags, choices, env):
    """Rule 4 for env b at its (new) t: active tasks whose deadline has come fail; returns how many."""
    failed = 0
    t = env[T, b]
    for k in range(K):
        i = b * K + k
        if ints[i, EXPIRY] <= t:
            env[WASTED, b] += ints[i, STEPS]
            free_slot(b, k, K, ints, slot_flags, choices, env)
            failed += 1
    env[FAILED, b] += failed
    return failed


@inlined
def admit_arrivals(b, K, ints, floats, slot_flags, choices, env, task_ints, task_floats):
    """Rule 5 for env b: tasks arriving at its t take the lowest free slot, in task order; returns the
    arrivals rejected because every slot is full."""
    rejected = 0
    t = env[T, b]
    while env[NEXT_ARRIVAL, b] <= t:
        ti = env[TASK_BASE, b] + env[NEXT_TASK, b]
        env[NEXT_TASK, b] += 1
        env[NEXT_ARRIVAL, b] = task_ints[ti + 1, ARRIVAL]
        env[ARRIVED, b] += 1
        if env[N_ACTIVE, b] >= K:
            rejected += 1
            continue
        k = 0
        while choices[b, k + 1]:
            k += 1
        i = b * K + k
        choices[b, k + 1] = True
        for f in range(ints.shape[1]):  # element loops: a row slice would be a new array (reference counted)
            ints[i, f] = task_ints[ti, f]
        for f in range(floats.shape[1]):
            floats[i, f] = task_floats[ti, f]
        floats[i, LOG_TARGET] = np.log(max(floats[i, TARGET], LOSS_FLOOR))
        slot_flags[SERVED_LAST, b, k] = False
        env[NEXT_EXPIRY, b] = min(env[NEXT_EXPIRY, b], task_ints[ti, DEADLINE])
        env[N_ACTIVE, b] += 1
    env[REJECTED, b] += rejected
    return rejected


@inlined
def update_done(b, env, flags, max_cycles):
    """Rule 6 for env b."""
    t = env[T, b]
    if t >= env[ARRIVAL_STEPS, b] and env[NEXT_TASK, b] >= env[N_TASKS, b] and env[N_ACTIVE, b] == 0:
        flags[TERMINATED, b] = True
    if t >= max_cycles and not flags[TERMINATED, b]:
        flags[TRUNCATED, b] = True
    flags[DONE, b] = flags[TERMINATED, b] or flags[TRUNCATED, b]


@njit(cache=True, error_model="numpy")
def reset_env(b, K, ints, floats, slot_flags, choices, env, flags, task_ints, task_floats, max_cycles):
    """Admit env b's tasks that arrive at t = 0 and mark it done if it has nothing to do."""
    env[NEXT_ARRIVAL, b] = task_ints[env[TASK_BASE, b], ARRIVAL]
    admit_arrivals(b, K, ints, floats, slot_flags, choices, env, task_ints, task_floats)
    update_done(b, env, flags, max_cycles)


@inlined
def begin_step(actions, a):
    """Check every action (:func:`check_actions`) and, when all are good, zero the last step's outcome
    (``counts`` (3, B): completed, failed, rejected; ``nodes`` (2, B, N): conflicts, invalid; ``served``
    and ``reported`` (B, K)). Returns (code, flat node index); on an error nothing is written."""
    choices, flags = a[A_CHOICES], a[A_FLAGS]
    code, where = check_actions(actions, choices, flags, choices.shape[1] - 1, a[A_PARAMS_I][P_STRICT] != 0)
    if code == OK:
        a[A_COUNTS][:] = 0
        a[A_NODES][:] = False
        a[A_SERVED][:] = False
        a[A_REPORTED][:] = 0.0
    return code, where


@inlined
def step_env(b, actions, a, slot):
    """Env b's step, rules 1–6 (nothing when it is done), then its team reward (completions, plus
    Φ(s') − Φ(s) when shaped) into ``reward[b]`` and Φ(s') into ``potential[b]``. ``a``: the state's
    arrays (:func:`arrays_of`), after :func:`begin_step`; ``slot`` (N,) int64 is scratch."""
    ints, floats, slot_flags, choices, env, flags = a[A_INTS], a[A_FLOATS], a[A_SLOT_FLAGS], a[A_CHOICES], a[A_ENV], a[A_FLAGS]
    outcome, node_slot, served = a[A_COUNTS], a[A_NODE_SLOT], a[A_SERVED]
    params_i, params_f = a[A_PARAMS_I], a[A_PARAMS_F]
    N, K = actions.shape[1], served.shape[1]
    if not flags[DONE, b]:
        conflicts, invalid = a[A_NODES][0], a[A_NODES][1]
        resolve_choices(b, actions, choices, slot, conflicts, invalid)
        done = serve(b, slot, ints, floats, slot_flags, choices, a[A_HISTORY], a[A_RECENT], node_slot, env, a[A_CUM], a[A_SLOPE],
                     a[A_SPEEDS], params_f[P_SWITCH_COST], served, a[A_REPORTED])
        outcome[OUT_COMPLETED, b] = done
        env[COMPLETED, b] += done
        for k in range(K):  # completed tasks left their slot
            slot_flags[SERVED_LAST, b, k] = served[b, k] and choices[b, k + 1]
        for n in range(N):
            node_slot[b, n] = slot[n]
            env[CONFLICTS, b] += conflicts[b, n]
            env[INVALID, b] += invalid[b, n]
        env[T, b] += 1
        if env[NEXT_EXPIRY, b] <= env[T, b]:
            outcome[OUT_FAILED, b] = expire(b, K, ints, slot_flags, choices, env)
            env[NEXT_EXPIRY, b] = earliest_expiry(b, K, ints)
        if env[NEXT_ARRIVAL, b] <= env[T, b]:
            outcome[OUT_REJECTED, b] = admit_arrivals(b, K, ints, floats, slot_flags, choices, env, a[A_TASK_INTS], a[A_TASK_FLOATS])
        update_done(b, env, flags, params_i[P_MAX_CYCLES])
    reward, potential = a[A_REWARD], a[A_POTENTIAL]
    reward[b] = outcome[OUT_COMPLETED, b]
    if params_i[P_SHAPED] != 0:
        new = params_f[P_KAPPA] * log_progress_sum(b, K, ints, floats, slot_flags)
        reward[b] += new - potential[b]
        potential[b] = new


@unowned
def step(actions, a, slot):
    """One step of every live environment and the team rewards (:func:`begin_step`, then
    :func:`step_env` for each env). Returns (code, flat node index) from :func:`check_actions`."""
    code, where = begin_step(actions, a)
    if code != OK:
        return code, where
    for b in range(actions.shape[0]):
        step_env(b, actions, a, slot)
    return OK, -1


@inlined
def log_progress(first, last, log_span):
    """φ = clip(log(l0 / l) / log(l0 / eps), 0, 1) of a task with first loss l0, latest l and target eps,
    given ``log_span`` = log(l0 / eps) (kept per slot as ``phi``: it changes only when the slot reports)."""
    return min(max(np.log(first / last) / log_span, 0.0), 1.0)


@inlined
def log_progress_sum(b, K, ints, floats, slot_flags):
    """Σ_k φ_k of env b over its slots with a report."""
    total = 0.0
    for k in range(K):
        if slot_flags[HAS_REPORT, b, k]:
            total += floats[b * K + k, PHI]
    return total


# ---------------------------------------------------------------------- the state as one argument
#: The arrays of a simulator's state: (attribute of the Simulator, arena).
#: The simulator lays them out in three arenas (int64, float64, bool; the step's outcome comes last in
#: each) and hands them to compiled code as one :class:`State` (a numba StructRef holding the same
#: arrays, no copies): a numba call costs per argument, most for arrays of 2 or more dimensions.
STATE = (("_ints", "i"), ("_env", "i"), ("node_slot", "i"), ("_task_ints", "i"), ("_params_i", "i"), ("_counts", "i"),
         ("_floats", "f"), ("_task_floats", "f"), ("history", "f"), ("recent", "f"), ("speeds", "f"), ("horizon", "f"),
         ("potential", "f"), ("_params_f", "f"), ("reward", "f"), ("_reported", "f"),
         ("_slot_flags", "b"), ("action_choices", "b"), ("_flags", "b"), ("_nodes", "b"), ("_served", "b"))
#: Field names of :class:`State`: the arrays of STATE, then the curve bank's ``cum`` and ``slope``.
STATE_FIELDS = tuple({"action_choices": "choices"}.get(name, name.lstrip("_")) for name, _ in STATE) + ("cum", "slope")
#: Rows of ``_params_i`` and ``_params_f``.
P_STRICT, P_MAX_CYCLES, P_SHAPED = range(3)
P_SWITCH_COST, P_KAPPA = range(2)


@structref.register
class StateType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class State(structref.StructRefProxy):
    """The simulator's arrays as one argument of compiled functions (fields: :data:`STATE_FIELDS`)."""


structref.define_proxy(State, StateType, list(STATE_FIELDS))


#: Positions of the state's arrays in the tuple :func:`arrays_of` returns (the order of STATE_FIELDS).
(A_INTS, A_ENV, A_NODE_SLOT, A_TASK_INTS, A_PARAMS_I, A_COUNTS, A_FLOATS, A_TASK_FLOATS, A_HISTORY, A_RECENT, A_SPEEDS, A_HORIZON,
 A_POTENTIAL, A_PARAMS_F, A_REWARD, A_REPORTED, A_SLOT_FLAGS, A_CHOICES, A_FLAGS, A_NODES, A_SERVED, A_CUM, A_SLOPE) = range(len(STATE_FIELDS))


@inlined
def arrays_of(s):
    """The arrays of a :class:`State` as one tuple (indexed by the ``A_*`` positions): what the loops
    compiled without reference counting take (they cannot read a StructRef)."""
    return (s.ints, s.env, s.node_slot, s.task_ints, s.params_i, s.counts, s.floats, s.task_floats, s.history, s.recent, s.speeds,
            s.horizon, s.potential, s.params_f, s.reward, s.reported, s.slot_flags, s.choices, s.flags, s.nodes, s.served, s.cum, s.slope)


@njit(cache=True, error_model="numpy")
def step_and_reward(actions, s):
    """:func:`step` on a :class:`State` (the outcome into its outcome arrays, the team reward into
    ``reward`` and Φ(s') into ``potential``)."""
    return step(actions, arrays_of(s), np.empty(actions.shape[1], np.int64))


@njit(cache=True, error_model="numpy")
def reset_state(b, s):
    """:func:`reset_env` of env b on a :class:`State`."""
    reset_env(b, s.slot_flags.shape[2], s.ints, s.floats, s.slot_flags, s.choices, s.env, s.flags, s.task_ints, s.task_floats,
              s.params_i[P_MAX_CYCLES])



