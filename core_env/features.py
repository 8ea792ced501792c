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

Speed: the simulator keeps a :class:`SlotFeatureTable` for its configured H up to date as slots are
admitted, served and freed, so an observation only refreshes the time columns; :func:`slot_table` is the
from-scratch computation (over the full loss histories) used for any other H, and the reference the
incremental table must match bit for bit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from core_env.curves import LOSS_FLOOR

try:  # the clip ufunc itself: np.clip's Python wrapper costs more than the clipping of a small array
    from numpy._core.umath import clip as _clip
except ImportError:  # numpy 1.x
    from numpy.core.umath import clip as _clip

if TYPE_CHECKING:
    from core_env.sim import Simulator

OBS_BOUND = 1000.0
TIME_SCALE = 100.0
# 0-d array operands: cheaper in a ufunc call than Python scalars (and the same float64 results here).
_TIME_SCALE, _LOSS_FLOOR, _ZERO, _ONE = np.array(TIME_SCALE), np.array(LOSS_FLOOR), np.array(0.0), np.array(1)

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


def _log(loss: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(loss, LOSS_FLOOR))


def slot_table(sim: Simulator, history: int) -> np.ndarray:
    """(B, K, F) float64 per-slot features, computed from scratch (any H)."""
    B, K = sim.B, sim.K
    table = np.zeros((B, K, slot_width(history)))
    present = sim.active
    reported = present & (sim.steps > 0)
    t = sim.t[:, None]
    table[..., PRESENT] = present
    table[..., AGE] = (t - sim.arrival) / TIME_SCALE
    table[..., STEPS_TO_DEADLINE] = (sim.deadline - t) / TIME_SCALE
    table[..., NODE_STEPS] = sim.steps / TIME_SCALE
    last = _log(sim.last_loss)
    log_target = _log(sim.target)
    table[..., LAST_LOG_LOSS] = last
    table[..., LOG_TARGET] = log_target
    table[..., LOG_GAP] = last - log_target
    table[..., LAST_LOG_LOSS : LOG_GAP + 1] *= reported[..., None]
    table[..., LOG_TARGET] = np.where(present, log_target, 0.0)
    back = sim.steps[..., None] - 1 - np.arange(history)  # (B, K, H) indices into the history
    known = (back >= 0) & present[..., None]
    idx = np.clip(back, 0, sim.max_history - 1)
    table[..., HISTORY_START : HISTORY_START + history] = np.where(known, _log(np.take_along_axis(sim.history, idx, axis=2)), 0.0)
    table[..., SERVED_LAST] = sim.served_last & present
    table[..., AGE : NODE_STEPS + 1] *= present[..., None]
    return table


class SlotFeatureTable:
    """The slot table (and global features) of one simulator for one H, updated as its slots change.

    ``table`` (B, K, F) float64 holds what :func:`slot_table` computes, except the columns that move with
    the clock or with every step (age, steps to deadline, served last step): :meth:`current` fills those
    in. The simulator owns one for its configured H and, after updating its own arrays, calls
    :meth:`admitted`, :meth:`served` and :meth:`freed` for the slots a step changes and :meth:`tick` when
    its clocks advance. Every value is computed with the same float64 arithmetic as :func:`slot_table` and
    :func:`global_features` (signed zeros included), so the two agree bit for bit; no feature needs a pass
    over the loss histories.
    """

    def __init__(self, sim: Simulator, history: int) -> None:
        self.sim, self.history = sim, int(history)
        B, K, N = sim.B, sim.K, sim.N
        F = self.width = slot_width(self.history)
        self.table = np.zeros((B, K, F))
        self._flat = self.table.reshape(-1)
        self._columns = [self.table.reshape(B * K, F)[:, c] for c in range(F)]  # column c of every slot, flat
        self._row_start = np.arange(B * K) * F  # flat slot index -> start of its row in _flat
        self._rows = self.table.reshape(B * K, F)
        self._time = self.table[..., AGE : STEPS_TO_DEADLINE + 1]
        self._served = self.table[..., SERVED_LAST]
        self._clock = np.zeros((B, K, 2), np.int64)  # (t − arrival, deadline − t), advanced by tick()
        self._clock_sign = np.array([1, -1], np.int64)
        self._tick = np.broadcast_to(self._clock_sign, (B, K, 2)).copy()
        self._present2 = np.zeros((B, K, 2))  # present, once per time column
        self._clock2, self._present2_rows = self._clock.reshape(-1, 2), self._present2.reshape(-1, 2)  # per flat slot
        # Global features are numerator / denominator, both float64 holding integers: (t, max(T_arrive − t, 0),
        # active) / (T_arrive, T_arrive, K), the same float64 division as int / int or int / float.
        self._global_num = np.zeros((B, GLOBAL_FEATURES))
        self._global_num[:, 1] = sim.horizon - sim.t
        self._global_den = np.empty((B, GLOBAL_FEATURES))
        self._global_den[:, :2] = sim.horizon[:, None]
        self._global_den[:, 2] = K
        self._global_tick = np.array([1.0, -1.0, 0.0])
        self._ticks, self._clamp_from = 0, int(sim.arrival_steps.min())  # no T_arrive − t < 0 before then
        nodes = np.empty((N, 2), np.float32)
        nodes[:, 0] = np.arange(N) / max(N - 1, 1)
        nodes[:, 1] = sim.speeds
        self.node_constants = _clip(nodes, -OBS_BOUND, OBS_BOUND)  # (N, 2) node index and speed, as observed
        self.slot_codes = (np.arange(K + 1) / K).astype(np.float32)  # node_slot + 1 -> the observed last slot
        # What admitting each task of the workload writes: present, last log loss and log gap (no report
        # yet: signed zeros, as slot_table's products with `reported` give) and log target.
        target = sim._wl["target"].reshape(-1)
        log_target, log_floor = _log(target), _log(np.zeros(1))
        self._admit_cols = np.array([PRESENT, LAST_LOG_LOSS, LOG_TARGET, LOG_GAP])
        self._admit_values = np.empty((target.size, 4))
        self._admit_values[:, 0] = 1.0
        self._admit_values[:, 1] = log_floor * 0.0
        self._admit_values[:, 2] = log_target
        self._admit_values[:, 3] = (log_floor - log_target) * 0.0
        # A task is admitted at its arrival step (the simulator admits every due task at once): age 0,
        # steps to deadline its window.
        self._admit_clock = np.stack([np.zeros_like(target, np.int64), (sim._wl["deadline"] - sim._wl["arrival"]).reshape(-1)], axis=1)
        # Freeing a slot maps its features x to x·0 + z: z = −0.0 keeps the sign of x·0 where slot_table
        # multiplies by `reported` (last log loss, log gap), z = +0.0 gives +0.0 elsewhere.
        self._row = np.arange(F)
        self._free_zero = np.zeros(F)
        self._free_zero[[LAST_LOG_LOSS, LOG_GAP]] = -0.0
        # Start from the from-scratch table (empty slots are not all +0.0: log-loss features are -0.0).
        self.table[...] = slot_table(sim, self.history)
        self._clock[..., 0] = sim.t[:, None] - sim.arrival
        self._clock[..., 1] = sim.deadline - sim.t[:, None]
        self._present2[...] = sim.active[..., None]

    def admitted(self, fi: np.ndarray, ti: np.ndarray) -> None:
        """Empty slots at flat indices ``fi`` received the tasks at flat workload indices ``ti``."""
        self._flat[self._row_start[fi][:, None] + self._admit_cols] = self._admit_values[ti]
        self._clock2[fi] = self._admit_clock[ti]
        self._present2_rows[fi] = 1.0
        self._global_num[:, 2] = self.sim.n_active

    def freed(self, fi: np.ndarray) -> None:
        """The slots at flat indices ``fi`` were emptied."""
        row = self._row_start[fi][:, None] + self._row
        self._flat[row] = self._flat[row] * 0.0 + self._free_zero
        self._present2_rows[fi] = 0.0
        self._global_num[:, 2] = self.sim.n_active

    def tick(self, live: np.ndarray | None = None) -> None:
        """The clock of every environment (of those where ``live``, a (B,) bool array) advanced by one."""
        num = self._global_num
        if live is None:
            self._clock += self._tick
            num += self._global_tick
        else:
            self._clock += self._tick * live[:, None, None]
            num += self._global_tick * live[:, None]
        self._ticks += 1
        if self._ticks > self._clamp_from:
            np.maximum(num[:, 1], _ZERO, out=num[:, 1])

    def global_features(self) -> np.ndarray:
        """(B, 3) float64 the global features of the current step."""
        return self._global_num / self._global_den

    def served(self, fi: np.ndarray, steps: np.ndarray, loss: np.ndarray) -> None:
        """The slots at flat indices ``fi`` (active) reported ``loss`` and have now had ``steps`` reports."""
        col = self._columns
        last = np.log(np.maximum(loss, _LOSS_FLOOR))
        col[NODE_STEPS][fi] = steps / _TIME_SCALE
        col[LAST_LOG_LOSS][fi] = last
        col[LOG_GAP][fi] = last - col[LOG_TARGET][fi]
        if self.history > 1:
            self._rows[fi, HISTORY_START + 1 : HISTORY_START + self.history] = self._rows[fi, HISTORY_START : HISTORY_START + self.history - 1]
        col[HISTORY_START][fi] = last

    def current(self) -> np.ndarray:
        """(B, K, F) the table, with the time and served-last-step columns of the current step."""
        sim = self.sim
        np.multiply(self._clock / _TIME_SCALE, self._present2, out=self._time)
        self._served[...] = sim.served_last  # a subset of the active slots
        return self.table


def global_features(sim: Simulator) -> np.ndarray:
    """(B, 3) float64, computed from scratch."""
    horizon = sim.arrival_steps.astype(np.float64)
    out = np.empty((sim.B, GLOBAL_FEATURES))
    out[:, 0] = sim.t / horizon
    out[:, 1] = np.maximum(horizon - sim.t, 0) / horizon
    out[:, 2] = sim.active.sum(axis=1) / sim.K
    return out


def node_features(sim: Simulator) -> np.ndarray:
    """(B, N, 3) float64."""
    B, N, K = sim.B, sim.N, sim.K
    feats = np.empty((B, N, NODE_FEATURES))
    feats[..., 0] = np.arange(N) / max(N - 1, 1)
    feats[..., 1] = sim.speeds
    feats[..., 2] = (sim.node_slot + 1) / K
    return feats


def _shared(sim: Simulator, history: int) -> np.ndarray:
    """(B, 3 + K·F) float32 global features and slot table, clipped: every node's copy and the state."""
    B, cache = sim.B, sim.slot_features
    table = cache.current() if cache is not None and cache.history == history else slot_table(sim, history)
    out = np.empty((B, GLOBAL_FEATURES + table.shape[1] * table.shape[2]), np.float32)
    out[:, :GLOBAL_FEATURES] = cache.global_features() if cache is not None else global_features(sim)  # cast on assignment
    out[:, GLOBAL_FEATURES:] = table.reshape(B, -1)
    return _clip(out, -OBS_BOUND, OBS_BOUND, out=out)  # float32 rounding is monotonic: clipping commutes with it


def observations(sim: Simulator, history: int) -> tuple[np.ndarray, np.ndarray]:
    """(B, N, D) float32 observations and (B, N, K+1) int8 action masks."""
    shared = _shared(sim, history)
    obs = np.empty((sim.B, sim.N, NODE_FEATURES + shared.shape[1]), dtype=np.float32)
    obs[..., NODE_FEATURES:] = shared[:, None, :]
    cache = sim.slot_features
    if cache is not None:
        obs[..., :2] = cache.node_constants
        obs[..., 2] = cache.slot_codes[sim.node_slot + _ONE]  # (k + 1) / K in [0, 1]: nothing to clip
    else:
        obs[..., :NODE_FEATURES] = node_features(sim)
        _clip(obs[..., :NODE_FEATURES], -OBS_BOUND, OBS_BOUND, out=obs[..., :NODE_FEATURES])
    return obs, action_masks(sim)


def action_masks(sim: Simulator) -> np.ndarray:
    """(B, N, K+1) int8: column 0 (idle) is always 1; column k is 1 iff slot k-1 holds an active task."""
    mask = np.empty((sim.B, sim.N, sim.K + 1), dtype=np.int8)
    mask[...] = sim.action_choices[:, None, :]
    return mask


def state(sim: Simulator, history: int) -> np.ndarray:
    """(B, 3 + K·F) float32 global state."""
    return _shared(sim, history)
