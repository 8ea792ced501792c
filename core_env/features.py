"""Observation, action-mask and state features built from the simulator (batched).

Per-node observation (D = 3 + 3 + K·F floats, F = 8 + H):

* node features (:data:`NODE_FEATURE_NAMES`): node index / (N − 1) (0 when N = 1, so D does not depend on
  N), speed, slot it served last step as (k + 1) / K (0 when idle);
* global features (:data:`GLOBAL_FEATURE_NAMES`): t / T_arrive, arrival window left
  (max(T_arrive − t, 0) / T_arrive), active tasks / K;
* per slot (:func:`slot_feature_names`; all zero when the slot is empty): present, age / 100, steps to
  deadline / 100, node-steps received / 100, last reported log loss, log target, log-loss gap to target
  (last − target), the last H reported log losses (most recent first, zero-padded), served-last-step
  flag. The index constants (:data:`AGE`, :data:`STEPS_TO_DEADLINE`, ..., :data:`HISTORY_START`,
  :data:`SERVED_LAST`) address one slot's features; :data:`SLOT_TABLE_START` is where slot 0 starts in
  an observation (and :data:`GLOBAL_FEATURES` in the state).

Before a task's first report its loss features are 0. Every feature is clipped to ±OBS_BOUND, and log
losses use losses clipped to [1e-6, 1e6], so no NaN or inf ever reaches an observation. Nothing hidden
(demand, future curve) is encoded. The state (for centralized critics) is the global features plus the
slot table (3 + K·F floats).

Speed: the features are computed from the simulator's arrays by plain loops compiled with numba
(:func:`shared_row` for the global features and slot table of one environment, :func:`node_row` for a
node's own features), for any H: the last H losses are read straight from the loss histories. The
simulator's compiled step (:mod:`core_env.sim`) fills the observation rows with them after each step;
views also call :func:`observations`, :func:`shared` or :func:`state` directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from core_env import dynamics
from core_env.curves import LOSS_FLOOR
from core_env.jit import compiled, inlined, unowned
from core_env.state import EnvRow, SlotFlag, SlotFloat, SlotInt

if TYPE_CHECKING:
    from core_env.sim import Simulator

OBS_BOUND = 1000.0
TIME_SCALE = 100.0

#: Node features at the start of every observation, in order.
NODE_FEATURE_NAMES = ("node_index", "speed", "last_slot")
#: Global features after the node features (and at the start of the state), in order.
GLOBAL_FEATURE_NAMES = ("time", "arrival_window_left", "active_share")
NODE_FEATURES = len(NODE_FEATURE_NAMES)
GLOBAL_FEATURES = len(GLOBAL_FEATURE_NAMES)
#: Where slot 0's features start in an observation (slot k's start at SLOT_TABLE_START + k·F).
SLOT_TABLE_START = NODE_FEATURES + GLOBAL_FEATURES
#: Per-slot features before the loss history, in order.
SLOT_FEATURES = ("present", "age", "steps_to_deadline", "node_steps", "last_log_loss", "log_target", "log_gap")
PRESENT, AGE, STEPS_TO_DEADLINE, NODE_STEPS, LAST_LOG_LOSS, LOG_TARGET, LOG_GAP = range(len(SLOT_FEATURES))
SLOT_BASE = len(SLOT_FEATURES)  # per-slot features before the loss history
#: The last H reported log losses of a slot are at HISTORY_START .. HISTORY_START + H - 1 (most recent first).
HISTORY_START = SLOT_BASE
#: The served-last-step flag is the last feature of a slot (index F - 1, or -1).
SERVED_LAST = -1


def slot_width(history: int) -> int:
    """F, features per slot."""
    return SLOT_BASE + history + 1


def slot_feature_names(history: int) -> tuple[str, ...]:
    """The F names of one slot's features, in order."""
    return SLOT_FEATURES + tuple(f"log_loss_{j}" for j in range(history)) + ("served_last",)


def obs_dim(n_slots: int, history: int) -> int:
    """D, the per-node observation length."""
    return SLOT_TABLE_START + n_slots * slot_width(history)


def state_dim(n_slots: int, history: int) -> int:
    return GLOBAL_FEATURES + n_slots * slot_width(history)


def shared_dim(n_slots: int, history: int) -> int:
    """Length of the part every node's observation shares: the global features and the slot table."""
    return GLOBAL_FEATURES + n_slots * slot_width(history)


@inlined
def _bounded(value):
    return min(max(value, -OBS_BOUND), OBS_BOUND)


@inlined
def shared_row(b, t, arrival_steps, n_active, ints, floats, slot_flags, choices, history, recent, H, out):
    """Env b's global features and slot table into ``out`` (3 + K·F, any float dtype), clipped. The last H
    log losses come from the simulator's ``recent`` ring when H fits it, else from the full ``history``."""
    K = slot_flags.shape[2]
    T = float(arrival_steps[b])
    now = t[b]
    out[0] = _bounded(now / T)
    out[1] = _bounded(max(T - now, 0.0) / T)
    out[2] = _bounded(n_active[b] / K)
    if H <= recent.shape[2]:
        _slots_from_ring(b, now, ints, floats, slot_flags, choices, recent, H, out)
    else:
        _slots_from_history(b, now, ints, floats, slot_flags, choices, history, recent, H, out)


@inlined
def _slots_from_ring(b, now, ints, floats, slot_flags, choices, recent, H, out):
    """:func:`shared_row`'s slot table when the last H log losses are in the ``recent`` ring. Every feature
    of every slot is written (zero where the slot is empty, or before the reports it would show), each as a
    choice between its value and 0 rather than behind a branch: the same numbers as
    :func:`_slots_from_history`, without a misprediction per slot."""
    K = slot_flags.shape[2]
    F = SLOT_BASE + H + 1
    for k in range(K):
        present = choices[b, k + 1]
        row = GLOBAL_FEATURES + k * F
        i = b * K + k
        steps = ints[i, SlotInt.STEPS]
        log_target = floats[i, SlotFloat.LOG_TARGET]
        last = recent[b, k, 0]  # (the ring has >= 1 column: config.history >= 1)
        reported = present and steps > 0
        out[row + PRESENT] = 1.0 if present else 0.0
        out[row + AGE] = _bounded((now - ints[i, SlotInt.ARRIVAL]) / TIME_SCALE) if present else 0.0
        out[row + STEPS_TO_DEADLINE] = _bounded((ints[i, SlotInt.DEADLINE] - now) / TIME_SCALE) if present else 0.0
        out[row + NODE_STEPS] = _bounded(steps / TIME_SCALE) if present else 0.0
        # log losses need no clipping: losses are floored at LOSS_FLOOR and float64, so |log| < 710 < OBS_BOUND
        out[row + LAST_LOG_LOSS] = last if reported else 0.0
        out[row + LOG_TARGET] = log_target if present else 0.0
        out[row + LOG_GAP] = last - log_target if reported else 0.0
        known = min(steps, H) if present else 0  # the last H reported log losses, most recent first
        start = row + HISTORY_START
        for j in range(H):
            out[start + j] = recent[b, k, j] if j < known else 0.0
        out[row + F - 1] = 1.0 if present and slot_flags[SlotFlag.SERVED_LAST, b, k] else 0.0


@inlined
def _slots_from_history(b, now, ints, floats, slot_flags, choices, history, recent, H, out):
    """:func:`shared_row`'s slot table for an H longer than the ``recent`` ring: the log losses are taken
    from the full loss ``history`` (the latest from the ring)."""
    K = slot_flags.shape[2]
    F = SLOT_BASE + H + 1
    out[GLOBAL_FEATURES:] = 0.0  # empty slots, and history entries before a task's first reports, stay zero
    for k in range(K):
        if not choices[b, k + 1]:
            continue
        row = GLOBAL_FEATURES + k * F
        i = b * K + k
        steps = ints[i, SlotInt.STEPS]
        log_target = floats[i, SlotFloat.LOG_TARGET]
        out[row + PRESENT] = 1.0
        out[row + AGE] = _bounded((now - ints[i, SlotInt.ARRIVAL]) / TIME_SCALE)
        out[row + STEPS_TO_DEADLINE] = _bounded((ints[i, SlotInt.DEADLINE] - now) / TIME_SCALE)
        out[row + NODE_STEPS] = _bounded(steps / TIME_SCALE)
        out[row + LOG_TARGET] = log_target
        if steps > 0:
            last = recent[b, k, 0]
            out[row + LAST_LOG_LOSS] = last
            out[row + LOG_GAP] = last - log_target
        start = row + HISTORY_START
        for j in range(min(steps, H)):
            out[start + j] = np.log(max(history[b, k, steps - 1 - j], LOSS_FLOOR))
        if slot_flags[SlotFlag.SERVED_LAST, b, k]:
            out[row + F - 1] = 1.0


@inlined
def env_shared(b, a, H, out):
    """:func:`shared_row` of env b from the state's arrays ``a`` (core_env.state.Arrays)."""
    env = a.env
    shared_row(b, env[EnvRow.T], env[EnvRow.ARRIVAL_STEPS], env[EnvRow.N_ACTIVE], a.ints, a.floats, a.slot_flags, a.choices, a.history,
               a.recent, H, out)


@inlined
def node_row(n, N, K, speeds, node_slot, out):
    """Node n's own features (node index, speed, last slot) into ``out`` (3,)."""
    out[0] = n / max(N - 1, 1)
    out[1] = _bounded(speeds[n])
    out[2] = (node_slot + 1) / K


@inlined
def node_rows(b, K, speeds, node_slot, out):
    """Env b's nodes' own features into ``out[b, n, :3]`` (of a (B, N, ·) array)."""
    N = node_slot.shape[1]
    for n in range(N):
        node_row(n, N, K, speeds, node_slot[b, n], out[b, n])


@inlined
def mask_rows(b, choices, mask):
    """Env b's (N, K + 1) int8 action masks: every node may take the actions ``choices[b]`` allows."""
    for n in range(mask.shape[1]):
        for action in range(mask.shape[2]):
            mask[b, n, action] = choices[b, action]


@inlined
def observe_env(b, a, H, obs, mask):
    """Env b's (N, D) per-node observations and masks: the shared part is written once, into node 0's
    row, and copied from there to the other nodes (element by element: a slice copy within one array
    would go through a temporary; and indexed ``NODE_FEATURES + j`` for j from 0: written with j over
    ``range(NODE_FEATURES, D)`` the compiled copy took twice as long)."""
    env_shared(b, a, H, obs[b, 0, NODE_FEATURES:])
    N, D = obs.shape[1], obs.shape[2]
    for n in range(1, N):
        for j in range(D - NODE_FEATURES):
            obs[b, n, NODE_FEATURES + j] = obs[b, 0, NODE_FEATURES + j]
    node_rows(b, a.served.shape[1], a.speeds, a.node_slot, obs)
    mask_rows(b, a.choices, mask)


@inlined
def compact_env(b, a, H, nodes, shared, mask):
    """Env b's compact observation: its nodes' own features, its shared part once, its masks."""
    env_shared(b, a, H, shared[b])
    node_rows(b, a.served.shape[1], a.speeds, a.node_slot, nodes)
    mask_rows(b, a.choices, mask)


@unowned
def fill_shared(a, H, out):
    """(B, 3 + K·F) the shared part of every environment (the state)."""
    for b in range(out.shape[0]):
        env_shared(b, a, H, out[b])


@unowned
def fill_nodes(speeds, node_slot, K, out):
    """(B, N, 3) every node's own features."""
    for b in range(node_slot.shape[0]):
        node_rows(b, K, speeds, node_slot, out)


@unowned
def fill_masks(choices, mask):
    """(B, N, K + 1) int8 action masks."""
    for b in range(mask.shape[0]):
        mask_rows(b, choices, mask)


@unowned
def fill_observations(a, H, obs, mask):
    """(B, N, D) per-node observations and (B, N, K + 1) masks (:func:`observe_env` for every env)."""
    for b in range(obs.shape[0]):
        observe_env(b, a, H, obs, mask)


@unowned
def fill_compact(a, H, nodes, shared, mask):
    """The compact observation of every env (:func:`compact_env`)."""
    for b in range(nodes.shape[0]):
        compact_env(b, a, H, nodes, shared, mask)


@compiled
def shared_of(s, H, out):
    """:func:`fill_shared` from a simulator's :class:`core_env.dynamics.State`."""
    fill_shared(dynamics.arrays_of(s), H, out)


@compiled
def observations_of(s, H, obs, mask):
    """:func:`fill_observations` from a simulator's :class:`core_env.dynamics.State`."""
    fill_observations(dynamics.arrays_of(s), H, obs, mask)


@compiled
def compact_of(s, H, nodes, shared, mask):
    """The compact observation from a :class:`core_env.dynamics.State`: every node's own features (B, N, 3),
    the shared part once per env (B, 3 + K·F) and the masks (B, N, K + 1)."""
    fill_compact(dynamics.arrays_of(s), H, nodes, shared, mask)


def compact(sim: Simulator, history: int) -> dict[str, np.ndarray]:
    """The compact observation of every env: ``nodes`` (B, N, 3), ``global`` (B, 3), ``slots`` (B, K, F),
    ``action_mask`` (B, N, K + 1); fresh arrays (``global`` and ``slots`` are views of one)."""
    nodes, shared_part, mask = empty_compact(sim.B, sim.N, sim.K, history)
    compact_of(sim.engine_state, int(history), nodes, shared_part, mask)
    return compact_dict(nodes, shared_part, mask, sim.K)


def empty_compact(B: int, N: int, K: int, history: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.empty((B, N, NODE_FEATURES), np.float32), np.empty((B, shared_dim(K, history)), np.float32),
            np.empty((B, N, K + 1), np.int8))


def compact_dict(nodes: np.ndarray, shared_part: np.ndarray, mask: np.ndarray, K: int) -> dict[str, np.ndarray]:
    B = shared_part.shape[0]
    return {"nodes": nodes, "global": shared_part[:, :GLOBAL_FEATURES], "slots": shared_part[:, GLOBAL_FEATURES:].reshape(B, K, -1),
            "action_mask": mask}


def shared(sim: Simulator, history: int, dtype=np.float32) -> np.ndarray:
    """(B, 3 + K·F) the global features and slot table of every environment (what every node's
    observation shares after its node features), clipped to ±OBS_BOUND."""
    out = np.empty((sim.B, shared_dim(sim.K, history)), dtype)
    shared_of(sim.engine_state, int(history), out)
    return out


def slot_table(sim: Simulator, history: int) -> np.ndarray:
    """(B, K, F) float64 per-slot features (any H), clipped to ±OBS_BOUND."""
    return shared(sim, history, np.float64)[:, GLOBAL_FEATURES:].reshape(sim.B, sim.K, slot_width(history))


def global_features(sim: Simulator) -> np.ndarray:
    """(B, 3) float64."""
    return shared(sim, 0, np.float64)[:, :GLOBAL_FEATURES]


def node_features(sim: Simulator) -> np.ndarray:
    """(B, N, 3) float32 every node's own features."""
    out = np.empty((sim.B, sim.N, NODE_FEATURES), np.float32)
    fill_nodes(sim.speeds, sim.node_slot, sim.K, out)
    return out


def observations(sim: Simulator, history: int) -> tuple[np.ndarray, np.ndarray]:
    """(B, N, D) float32 observations and (B, N, K+1) int8 action masks (fresh arrays)."""
    obs = np.empty((sim.B, sim.N, obs_dim(sim.K, history)), np.float32)
    mask = np.empty((sim.B, sim.N, sim.K + 1), np.int8)
    observations_of(sim.engine_state, int(history), obs, mask)
    return obs, mask


def action_masks(sim: Simulator) -> np.ndarray:
    """(B, N, K+1) int8: column 0 (idle) is always 1; column k is 1 iff slot k-1 holds an active task."""
    mask = np.empty((sim.B, sim.N, sim.K + 1), dtype=np.int8)
    fill_masks(sim.action_choices, mask)
    return mask


def state(sim: Simulator, history: int) -> np.ndarray:
    """(B, 3 + K·F) float32 global state."""
    return shared(sim, history)
