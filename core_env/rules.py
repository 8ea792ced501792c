"""The rules of a step, top to bottom: the one implementation of the dynamics (docs/env.md, "A step").

Every function takes an environment ``b`` and the state's arrays ``a`` (:class:`core_env.state.Arrays`,
fields read by name; the tables' columns and rows are the members of :mod:`core_env.state`), and is
compiled by numba and inlined into the engine's loops (:mod:`core_env.dynamics`, which writes no rule).
This is the one description of the rules (the simulator, the views and the docs point here), in the
order of a step:

0. :func:`check_actions` (every action, before any write: a step is all or nothing; an action outside
   [0, K] is an error, and so is the choice of an empty slot with ``strict=True``) and :func:`begin_step`;
1. :func:`choose`: node ``n`` chooses 0 (idle) or ``k`` (slot ``k - 1``); an empty slot is invalid
   (idle); the lowest-index node choosing a slot wins it, later ones idle (conflicts);
2. :func:`plan_service`: each serving node trains ``batches_per_step × speed`` batches, ``(1 −
   switch_cost)`` of them on a switch (the task was served by another node at its previous service, or
   not in the last step; its first service is not a switch); fractional batches accumulate exactly;
   then **the task source** reports the loss of every served task (:func:`curve_report`: the mean of its
   learning curve over the new batches, or the loss at its position when they are too few to move the
   position in float64) — the one place a report comes from, so that another source (real training
   runs) can supply it: :func:`report_from_curves` is what the simulator calls between
   :func:`start_env_step` and :func:`end_env_step`;
   :func:`record_reports` keeps each report (progress, histories, φ);
3. :func:`complete`: a reported loss ≤ target frees the slot;
4. :func:`expire`: a task still active when ``t + 1`` reaches its deadline fails;
5. :func:`admit_arrivals`: at the new ``t`` (:func:`advance` moves the clock), arriving tasks take the
   lowest free slot, or are rejected when every slot is full;
6. :func:`update_done`: terminated when the arrival window is over and no task is active, truncated at
   ``max_cycles``; finished environments are frozen;
7. :func:`team_reward`: completions, plus Φ(s') − Φ(s) when shaped (Φ = κ Σ φ over slots with a report).

No floating-point operation here depends on a SIMD path (additions, products, divisions, comparisons in
a fixed order), so the dynamics are bit-identical on every x86-64 CPU.
"""

from __future__ import annotations

import numpy as np

from core_env.curves import LOSS_FLOOR
from core_env.jit import compiled, inlined
from core_env.state import NEVER, EnvFlag, EnvRow, NodeFlag, Outcome, ParamFloat, ParamInt, SlotFlag, SlotFloat, SlotInt

#: Positions from here on are integrated on the plateau by :func:`interval_mean` itself (the bank's int64
#: batch index of a position overflows at 2**63).
FAR_POSITION = 2.0**62
#: Error codes of :func:`check_actions` (the offending flat node index is returned with it).
OK, OUT_OF_RANGE, STRICT_INVALID = 0, 1, 2


# ---------------------------------------------------------------------- 0. the actions are checked
@compiled
def check_actions(actions, choices, flags, n_slots, strict):
    """(code, flat node index): the first action outside [0, K], else (with ``strict``) the first choice
    of an empty slot in a live environment, else (OK, -1). Reads state only."""
    B, N = actions.shape
    for b in range(B):
        for n in range(N):
            action = actions[b, n]
            if action < 0 or action > n_slots:
                return OUT_OF_RANGE, b * N + n
    if strict:
        for b in range(B):
            if flags[EnvFlag.DONE, b]:
                continue
            for n in range(N):
                if not choices[b, actions[b, n]]:
                    return STRICT_INVALID, b * N + n
    return OK, -1


@inlined
def begin_step(actions, a):
    """Check every action (:func:`check_actions`) and, when all are good, clear the last step's outcome.
    Returns (code, flat node index); on an error nothing is written."""
    code, where = check_actions(actions, a.choices, a.flags, a.choices.shape[1] - 1, a.params_i[ParamInt.STRICT] != 0)
    if code == OK:
        a.counts[:] = 0
        a.nodes[:] = False
        a.served[:] = False
        a.reported[:] = 0.0
        a.batches[:] = 0.0
    return code, where


# ---------------------------------------------------------------------- 1. nodes choose slots
@inlined
def choose(b, actions, a):
    """Rule 1: ``chosen[b, n]`` the slot node n trains (-1 idle); flags conflicts and invalid choices."""
    chosen, choices = a.chosen, a.choices
    for n in range(actions.shape[1]):
        action = actions[b, n]
        chosen[b, n] = action - 1
        if not choices[b, action]:
            a.nodes[NodeFlag.INVALID, b, n] = True
            chosen[b, n] = -1
        elif action > 0:
            for m in range(n):
                if chosen[b, m] == action - 1:
                    a.nodes[NodeFlag.CONFLICT, b, n] = True
                    chosen[b, n] = -1
                    break


# ---------------------------------------------------------------------- 2. served tasks train and report
@inlined
def plan_service(b, a):
    """Rule 2's service: ``batches[b, n]`` each serving node trains, ``(1 − switch_cost)`` of
    ``batches_per_step × speed`` when the task was last served by another node or not last step (a task
    without reports is never switched). Writes nothing but the step's outcome (the statistics are counted
    by :func:`count_choices` once the reports are in)."""
    K = a.served.shape[1]
    switch_cost = a.params_f[ParamFloat.SWITCH_COST]
    for n in range(a.chosen.shape[1]):
        k = a.chosen[b, n]
        if k < 0:
            continue
        i = b * K + k
        switched = a.ints[i, SlotInt.STEPS] > 0 and a.node_slot[b, n] != k
        batches = a.floats[i, SlotFloat.BATCHES_PER_STEP] * a.speeds[n]
        if switch_cost > 0.0 and switched:
            batches = batches * (1.0 - switch_cost)
        a.batches[b, n] = batches
        a.nodes[NodeFlag.SWITCHED, b, n] = switched


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


@inlined
def curve_report(a, i, batches):
    """The curve task source: the loss slot row ``i``'s task reports after training ``batches`` more, the
    mean of its learning curve over them (it keeps the curve's integral up to the new position)."""
    x0 = a.floats[i, SlotFloat.PROGRESS]
    value, loss = interval_mean(a.cum, a.slope, a.ints[i, SlotInt.CUM_START], a.ints[i, SlotInt.LENGTH], x0,
                                a.floats[i, SlotFloat.INTEGRAL], x0 + batches)
    a.floats[i, SlotFloat.INTEGRAL] = value
    return loss


@inlined
def report_from_curves(b, a):
    """Every served task of env b reports through the curve source: ``reported[b, k]``."""
    K = a.served.shape[1]
    for n in range(a.chosen.shape[1]):
        k = a.chosen[b, n]
        if k >= 0:
            a.reported[b, k] = curve_report(a, b * K + k, a.batches[b, n])


@inlined
def log_progress(first, last, log_span):
    """φ = clip(log(l0 / l) / log(l0 / eps), 0, 1) of a task with first loss l0, latest l and target eps,
    given ``log_span`` = log(l0 / eps)."""
    return min(max(np.log(first / last) / log_span, 0.0), 1.0)


@inlined
def record_reports(b, a):
    """Rule 2's bookkeeping: each served task's progress, node-steps, reported-loss histories, first loss
    and φ (kept per slot: it changes only when the slot reports)."""
    K, H = a.served.shape[1], a.recent.shape[2]
    for n in range(a.chosen.shape[1]):
        k = a.chosen[b, n]
        if k < 0:
            continue
        i = b * K + k
        loss = a.reported[b, k]
        steps = a.ints[i, SlotInt.STEPS]
        a.floats[i, SlotFloat.PROGRESS] = a.floats[i, SlotFloat.PROGRESS] + a.batches[b, n]
        a.history[b, k, steps] = loss
        for j in range(H - 1, 0, -1):  # the last H log losses, most recent first
            a.recent[b, k, j] = a.recent[b, k, j - 1]
        a.recent[b, k, 0] = np.log(max(loss, LOSS_FLOOR))
        a.ints[i, SlotInt.STEPS] = steps + 1
        if steps == 0:
            a.floats[i, SlotFloat.FIRST_LOSS] = loss
            a.floats[i, SlotFloat.LOG_SPAN] = np.log(loss / a.floats[i, SlotFloat.TARGET])  # log(l0 / eps), fixed from now on
            a.slot_flags[SlotFlag.HAS_REPORT, b, k] = True
        a.floats[i, SlotFloat.LAST_LOSS] = loss
        a.floats[i, SlotFloat.PHI] = log_progress(a.floats[i, SlotFloat.FIRST_LOSS], loss, a.floats[i, SlotFloat.LOG_SPAN])
        a.ints[i, SlotInt.LAST_NODE] = n
        a.served[b, k] = True


@inlined
def count_choices(b, a):
    """The step's node statistics: busy node-steps, switches, conflicts, invalid choices."""
    for n in range(a.chosen.shape[1]):
        if a.chosen[b, n] >= 0:
            a.env[EnvRow.BUSY_NODE_STEPS, b] += 1
        a.env[EnvRow.SWITCHES, b] += a.nodes[NodeFlag.SWITCHED, b, n]
        a.env[EnvRow.CONFLICTS, b] += a.nodes[NodeFlag.CONFLICT, b, n]
        a.env[EnvRow.INVALID_ACTIONS, b] += a.nodes[NodeFlag.INVALID, b, n]


# ---------------------------------------------------------------------- 3. completions
@inlined
def free_slot(b, k, a):
    """Empty slot k of env b."""
    i = b * a.served.shape[1] + k
    a.choices[b, k + 1] = False
    a.slot_flags[SlotFlag.SERVED_LAST, b, k] = False
    a.slot_flags[SlotFlag.HAS_REPORT, b, k] = False
    a.ints[i, SlotInt.TASK] = -1
    a.ints[i, SlotInt.EXPIRY] = NEVER
    a.env[EnvRow.N_ACTIVE, b] -= 1


@inlined
def complete(b, a):
    """Rule 3, once every node has trained: a served task whose report reached its target completes and
    frees its slot. Counts the completions."""
    K = a.served.shape[1]
    done = 0
    for n in range(a.chosen.shape[1]):
        k = a.chosen[b, n]
        if k >= 0 and a.reported[b, k] <= a.floats[b * K + k, SlotFloat.TARGET]:
            free_slot(b, k, a)
            done += 1
    a.counts[Outcome.COMPLETED, b] = done
    a.env[EnvRow.COMPLETED, b] += done
    # served last: the slots served this step (the nodes' chosen slots) whose task is still there (completed
    # tasks left their slot). Read through the nodes' choices, not as a (K,) row of ``served``: that row was
    # just written byte by byte, and a vector load of it waits for those stores to drain.
    for k in range(K):
        a.slot_flags[SlotFlag.SERVED_LAST, b, k] = False
    for n in range(a.chosen.shape[1]):
        k = a.chosen[b, n]
        if k >= 0:
            a.slot_flags[SlotFlag.SERVED_LAST, b, k] = a.choices[b, k + 1]
    for n in range(a.chosen.shape[1]):  # what the next step's switches are judged by
        a.node_slot[b, n] = a.chosen[b, n]


# ---------------------------------------------------------------------- 4. deadlines
@inlined
def expire(b, a):
    """Rule 4 at env b's (new) t: active tasks whose deadline has come fail and free their slots; their
    node-steps were wasted. Then the next expiry."""
    K = a.served.shape[1]
    t = a.env[EnvRow.T, b]
    failed = 0
    soonest = NEVER
    for k in range(K):
        i = b * K + k
        if a.ints[i, SlotInt.EXPIRY] <= t:
            a.env[EnvRow.WASTED_NODE_STEPS, b] += a.ints[i, SlotInt.STEPS]
            free_slot(b, k, a)
            failed += 1
        soonest = min(soonest, a.ints[i, SlotInt.EXPIRY])
    a.counts[Outcome.FAILED, b] = failed
    a.env[EnvRow.FAILED, b] += failed
    a.env[EnvRow.NEXT_EXPIRY, b] = soonest


# ---------------------------------------------------------------------- 5. arrivals
@inlined
def admit_arrivals(b, a):
    """Rule 5: tasks arriving at env b's t take the lowest free slot, in task order, or are rejected
    when every slot is full; returns how many were rejected."""
    K = a.served.shape[1]
    t = a.env[EnvRow.T, b]
    rejected = 0
    while a.env[EnvRow.NEXT_ARRIVAL, b] <= t:
        row = a.env[EnvRow.TASK_BASE, b] + a.env[EnvRow.NEXT_TASK, b]
        a.env[EnvRow.NEXT_TASK, b] += 1
        a.env[EnvRow.NEXT_ARRIVAL, b] = a.task_ints[row + 1, SlotInt.ARRIVAL]
        a.env[EnvRow.ARRIVED, b] += 1
        if a.env[EnvRow.N_ACTIVE, b] >= K:
            rejected += 1
            continue
        k = 0
        while a.choices[b, k + 1]:
            k += 1
        i = b * K + k
        a.choices[b, k + 1] = True
        for f in range(a.ints.shape[1]):  # element loops: a row slice would be a new array (reference counted)
            a.ints[i, f] = a.task_ints[row, f]
        for f in range(a.floats.shape[1]):
            a.floats[i, f] = a.task_floats[row, f]
        a.floats[i, SlotFloat.LOG_TARGET] = np.log(max(a.floats[i, SlotFloat.TARGET], LOSS_FLOOR))
        a.slot_flags[SlotFlag.SERVED_LAST, b, k] = False
        a.env[EnvRow.NEXT_EXPIRY, b] = min(a.env[EnvRow.NEXT_EXPIRY, b], a.task_ints[row, SlotInt.DEADLINE])
        a.env[EnvRow.N_ACTIVE, b] += 1
    a.env[EnvRow.REJECTED, b] += rejected
    return rejected


# ---------------------------------------------------------------------- 6. the episode's end
@inlined
def update_done(b, a):
    """Rule 6 for env b."""
    t = a.env[EnvRow.T, b]
    if t >= a.env[EnvRow.ARRIVAL_STEPS, b] and a.env[EnvRow.NEXT_TASK, b] >= a.env[EnvRow.N_TASKS, b] and a.env[EnvRow.N_ACTIVE, b] == 0:
        a.flags[EnvFlag.TERMINATED, b] = True
    if t >= a.params_i[ParamInt.MAX_CYCLES] and not a.flags[EnvFlag.TERMINATED, b]:
        a.flags[EnvFlag.TRUNCATED, b] = True
    a.flags[EnvFlag.DONE, b] = a.flags[EnvFlag.TERMINATED, b] or a.flags[EnvFlag.TRUNCATED, b]


@inlined
def advance(b, a):
    """Rules 4–6: the clock moves on, deadlines pass, arrivals come, the episode may end."""
    a.env[EnvRow.T, b] += 1
    if a.env[EnvRow.NEXT_EXPIRY, b] <= a.env[EnvRow.T, b]:
        expire(b, a)
    if a.env[EnvRow.NEXT_ARRIVAL, b] <= a.env[EnvRow.T, b]:
        a.counts[Outcome.REJECTED, b] = admit_arrivals(b, a)
    update_done(b, a)


# ---------------------------------------------------------------------- 7. the team reward
@inlined
def potential(b, a):
    """Φ(s) of env b: κ Σ_k φ_k over its slots with a report."""
    K = a.served.shape[1]
    total = 0.0
    for k in range(K):
        if a.slot_flags[SlotFlag.HAS_REPORT, b, k]:
            total += a.floats[b * K + k, SlotFloat.PHI]
    return a.params_f[ParamFloat.KAPPA] * total


@inlined
def team_reward(b, a):
    """The step's team reward into ``reward[b]``: the completions, plus Φ(s') − Φ(s) when shaped (Φ(s')
    kept in ``potential[b]``)."""
    a.reward[b] = a.counts[Outcome.COMPLETED, b]
    if a.params_i[ParamInt.SHAPED] != 0:
        new = potential(b, a)
        a.reward[b] += new - a.potential[b]
        a.potential[b] = new


# ---------------------------------------------------------------------- the step of one environment
@inlined
def start_env_step(b, actions, a):
    """Rules 1–2 up to the reports: which slot each node trains and how many batches (only the step's
    outcome is written, so a task source that fails leaves the state as it was)."""
    choose(b, actions, a)
    plan_service(b, a)


@inlined
def end_env_step(b, a):
    """Rules 2–6 from the reports on (``reported[b, k]`` of every served slot written by a task source)."""
    count_choices(b, a)
    record_reports(b, a)
    complete(b, a)
    advance(b, a)


@inlined
def step_env(b, actions, a):
    """Env b's step with the curve task source (nothing when it is done), then its team reward. ``a``:
    the state's arrays, after :func:`begin_step`."""
    if not a.flags[EnvFlag.DONE, b]:
        start_env_step(b, actions, a)
        report_from_curves(b, a)
        end_env_step(b, a)
    team_reward(b, a)


@inlined
def reset_env(b, a):
    """Admit env b's tasks that arrive at t = 0 and mark it done if it has nothing to do."""
    a.env[EnvRow.NEXT_ARRIVAL, b] = a.task_ints[a.env[EnvRow.TASK_BASE, b], SlotInt.ARRIVAL]
    admit_arrivals(b, a)
    update_done(b, a)
