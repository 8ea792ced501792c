"""Observation, action-mask and state features built from the simulator (batched).

Per-node observation (D = 3 + 3 + K·F floats, F = 8 + H):

* node features: node index / (N − 1) (0 when N = 1, so D does not depend on N), speed, slot it served
  last step as (k + 1) / K (0 when idle);
* global features: t / T_arrive, arrival window left (max(T_arrive − t, 0) / T_arrive), active tasks / K;
* per slot (all zero when the slot is empty): present, age / 100, steps to deadline / 100, node-steps
  received / 100, last reported log loss, log target, log-loss gap to target (last − target), the last
  H reported log losses (most recent first, zero-padded), served-last-step flag.

Before a task's first report its loss features are 0. Every feature is clipped to ±OBS_BOUND, and log
losses use losses clipped to [1e-6, 1e6], so no NaN or inf ever reaches an observation. Nothing hidden
(demand, future curve) is encoded. The state (for centralized critics) is the global features plus the
slot table (3 + K·F floats).
"""

from __future__ import annotations

import numpy as np

from core_env.curves import LOSS_FLOOR
from core_env.sim import Simulator

OBS_BOUND = 1000.0
TIME_SCALE = 100.0
SLOT_BASE = 7  # per-slot features before the loss history


def slot_width(history: int) -> int:
    """F, features per slot."""
    return SLOT_BASE + history + 1


def obs_dim(n_slots: int, history: int) -> int:
    """D, the per-node observation length."""
    return 6 + n_slots * slot_width(history)


def state_dim(n_slots: int, history: int) -> int:
    return 3 + n_slots * slot_width(history)


def _log(loss: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(loss, LOSS_FLOOR))


def slot_table(sim: Simulator, history: int) -> np.ndarray:
    """(B, K, F) float64 per-slot features."""
    B, K = sim.B, sim.K
    table = np.zeros((B, K, slot_width(history)))
    present = sim.active
    reported = present & (sim.steps > 0)
    t = sim.t[:, None]
    table[..., 0] = present
    table[..., 1] = (t - sim.arrival) / TIME_SCALE
    table[..., 2] = (sim.deadline - t) / TIME_SCALE
    table[..., 3] = sim.steps / TIME_SCALE
    last = _log(sim.last_loss)
    log_target = _log(sim.target)
    table[..., 4] = last
    table[..., 5] = log_target
    table[..., 6] = last - log_target
    table[..., 4:7] *= reported[..., None]
    table[..., 5] = np.where(present, log_target, 0.0)
    back = sim.steps[..., None] - 1 - np.arange(history)  # (B, K, H) indices into the history
    known = (back >= 0) & present[..., None]
    idx = np.clip(back, 0, sim.max_history - 1)
    table[..., SLOT_BASE : SLOT_BASE + history] = np.where(known, _log(np.take_along_axis(sim.history, idx, axis=2)), 0.0)
    table[..., -1] = sim.served_last & present
    table[..., 1:4] *= present[..., None]
    return table


def global_features(sim: Simulator) -> np.ndarray:
    """(B, 3) float64."""
    horizon = sim.arrival_steps.astype(np.float64)
    return np.stack([sim.t / horizon, np.maximum(horizon - sim.t, 0) / horizon, sim.active.sum(axis=1) / sim.K], axis=1)


def node_features(sim: Simulator) -> np.ndarray:
    """(B, N, 3) float64."""
    B, N, K = sim.B, sim.N, sim.K
    feats = np.empty((B, N, 3))
    feats[..., 0] = np.arange(N) / max(N - 1, 1)
    feats[..., 1] = sim.speeds
    feats[..., 2] = (sim.node_slot + 1) / K
    return feats


def observations(sim: Simulator, history: int) -> tuple[np.ndarray, np.ndarray]:
    """(B, N, D) float32 observations and (B, N, K+1) int8 action masks."""
    shared = np.concatenate([global_features(sim), slot_table(sim, history).reshape(sim.B, -1)], axis=1)
    obs = np.empty((sim.B, sim.N, 3 + shared.shape[1]), dtype=np.float32)
    obs[..., :3] = node_features(sim)
    obs[..., 3:] = shared[:, None, :]
    np.clip(obs, -OBS_BOUND, OBS_BOUND, out=obs)
    return obs, action_masks(sim)


def action_masks(sim: Simulator) -> np.ndarray:
    """(B, N, K+1) int8: column 0 (idle) is always 1; column k is 1 iff slot k-1 holds an active task."""
    mask = np.ones((sim.B, sim.K + 1), dtype=np.int8)
    mask[:, 1:] = sim.active
    return np.repeat(mask[:, None, :], sim.N, axis=1)


def state(sim: Simulator, history: int) -> np.ndarray:
    """(B, 3 + K·F) float32 global state."""
    out = np.concatenate([global_features(sim), slot_table(sim, history).reshape(sim.B, -1)], axis=1)
    return np.clip(out, -OBS_BOUND, OBS_BOUND).astype(np.float32)
