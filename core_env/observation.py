"""One parser for core_env observations: named fields instead of offsets.

:func:`parse_observation` splits the flat per-node observation (the layout of
:func:`core_env.features.observations`, documented in :mod:`core_env.features`) into a
:class:`ParsedObservation`; :meth:`ParsedObservation.from_parts` builds the same object from the three
parts directly (per-node features, global features, slot table), as a compact central observation holds
them. The arrays are views of the input where possible (nothing is copied by parsing); the derived
accessors (integers, booleans, targets) are computed on each access.

Shapes below are for a batch, observation (B, N, D); a single env's (N, D) observation gives the same
fields without the leading B. Every node sees the same global features and slot table, so those are
read from node 0's row.

Stored parts:

* ``nodes`` (B, N, 3): the node features (:data:`core_env.features.NODE_FEATURE_NAMES`), as encoded;
* ``global_`` (B, 3): the global features (:data:`core_env.features.GLOBAL_FEATURE_NAMES`), as encoded;
* ``slots`` (B, K, F): the slot table, F = 8 + H features per slot (:func:`core_env.features.slot_feature_names`);
* ``extra`` (B, K, E): per-slot columns appended after the env's observation, E per slot, slot 0's first
  (e.g. the 3 predictor features of :func:`mara_agents.predictors.features.predictor_observations`);
  E = 0 for a plain env observation.

Node fields (B, N): ``node_index`` (int, decoded from index / (N − 1)), ``speed``, ``last_slot`` (int:
the slot the node served last step, −1 when idle). Global fields (B,): ``time`` (t / T_arrive),
``arrival_window_left``, ``active_share`` (active tasks / K), as encoded.

Slot fields (B, K), all zero (``present`` False) for an empty slot:

* ``present``, ``served_last``: bool;
* ``age``, ``steps_to_deadline``, ``node_steps``: int64 step counts, ``rint(feature · TIME_SCALE)``;
* ``last_log_loss``, ``log_target``, ``log_gap``: as encoded (log losses; 0 before the first report);
* ``target``: float64 ``exp(log_target)`` where present, 1.0 elsewhere;
* ``log_losses`` (B, K, H): the last H reported log losses, most recent first (zero-padded);
* ``history``: H, an int.

Example::

    obs, _ = env.reset(seed=0)                                    # PettingZoo parallel env
    rows = np.stack([obs[a]["observation"] for a in env.agents])  # (N, D)
    parsed = parse_observation(rows, env.unwrapped.config.n_slots)
    parsed.steps_to_deadline[parsed.present]                      # budgets of the active tasks
"""

from __future__ import annotations

import dataclasses

import numpy as np

from core_env import features

__all__ = ["ParsedObservation", "parse_observation"]

_NODE_INDEX, _SPEED, _LAST_SLOT = (features.NODE_FEATURE_NAMES.index(name) for name in ("node_index", "speed", "last_slot"))
_TIME, _WINDOW, _SHARE = (features.GLOBAL_FEATURE_NAMES.index(name) for name in ("time", "arrival_window_left", "active_share"))
#: Slot features that are not the loss history (F − H).
_FIXED_SLOT_FEATURES = features.slot_width(0)


def _steps(column: np.ndarray) -> np.ndarray:
    """int64 step counts of a slot feature scaled by 1 / TIME_SCALE (computed in float64)."""
    return np.rint(column.astype(np.float64) * features.TIME_SCALE).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class ParsedObservation:
    """An observation split into its parts, with named accessors (see the module docstring)."""

    nodes: np.ndarray  # (B, N, 3)
    global_: np.ndarray  # (B, 3)
    slots: np.ndarray  # (B, K, F)
    extra: np.ndarray  # (B, K, E)

    @classmethod
    def from_parts(cls, nodes: np.ndarray, global_: np.ndarray, slots: np.ndarray, extra: np.ndarray | None = None) -> ParsedObservation:
        """Build from the parts: nodes (B, N, 3), global_ (B, 3), slots (B, K, F) and optional extra (B, K, E).

        Raises ValueError when the shapes do not fit together or F leaves no room for a loss history.
        """
        nodes, global_, slots = np.asarray(nodes), np.asarray(global_), np.asarray(slots)
        lead = global_.shape[:-1]
        if global_.ndim not in (1, 2) or global_.shape[-1] != features.GLOBAL_FEATURES:
            raise ValueError(f"global_ must have shape (B, {features.GLOBAL_FEATURES}) or ({features.GLOBAL_FEATURES},), got {global_.shape}")
        if nodes.shape[:-2] != lead or nodes.ndim != global_.ndim + 1 or nodes.shape[-1] != features.NODE_FEATURES:
            raise ValueError(f"nodes must have shape {lead + ('N', features.NODE_FEATURES)}, got {nodes.shape}")
        if slots.shape[:-2] != lead or slots.ndim != global_.ndim + 1 or slots.shape[-1] < features.slot_width(1):
            raise ValueError(f"slots must have shape {lead + ('K', 'F')} with F = {_FIXED_SLOT_FEATURES} + H >= "
                             f"{features.slot_width(1)}, got {slots.shape}")
        if extra is None:
            extra = np.zeros(slots.shape[:-1] + (0,), slots.dtype)
        extra = np.asarray(extra)
        if extra.shape[:-1] != slots.shape[:-1] or extra.ndim != slots.ndim:
            raise ValueError(f"extra must have shape {slots.shape[:-1] + ('E',)}, got {extra.shape}")
        return cls(nodes, global_, slots, extra)

    # ------------------------------------------------------------------ sizes
    @property
    def n_nodes(self) -> int:
        return self.nodes.shape[-2]

    @property
    def n_slots(self) -> int:
        return self.slots.shape[-2]

    @property
    def history(self) -> int:
        """H, reported log losses per slot."""
        return self.slots.shape[-1] - _FIXED_SLOT_FEATURES

    # ------------------------------------------------------------------ nodes (B, N)
    @property
    def node_index(self) -> np.ndarray:
        """int64 node indices (decoded from index / (N − 1))."""
        return np.rint(self.nodes[..., _NODE_INDEX].astype(np.float64) * max(self.n_nodes - 1, 0)).astype(np.int64)

    @property
    def speed(self) -> np.ndarray:
        return self.nodes[..., _SPEED]

    @property
    def last_slot(self) -> np.ndarray:
        """int64 slot each node served last step, -1 when idle (decoded from (k + 1) / K)."""
        encoded = self.nodes[..., _LAST_SLOT]
        return np.rint(encoded * encoded.dtype.type(self.n_slots)).astype(np.int64) - 1

    # ------------------------------------------------------------------ global (B,)
    @property
    def time(self) -> np.ndarray:
        """t / T_arrive."""
        return self.global_[..., _TIME]

    @property
    def arrival_window_left(self) -> np.ndarray:
        """max(T_arrive − t, 0) / T_arrive."""
        return self.global_[..., _WINDOW]

    @property
    def active_share(self) -> np.ndarray:
        """active tasks / K."""
        return self.global_[..., _SHARE]

    # ------------------------------------------------------------------ slots (B, K)
    @property
    def present(self) -> np.ndarray:
        """bool: the slot holds an active task."""
        return self.slots[..., features.PRESENT] > 0.5

    @property
    def age(self) -> np.ndarray:
        """int64 steps since the task arrived."""
        return _steps(self.slots[..., features.AGE])

    @property
    def steps_to_deadline(self) -> np.ndarray:
        """int64 steps left before the task's deadline."""
        return _steps(self.slots[..., features.STEPS_TO_DEADLINE])

    @property
    def node_steps(self) -> np.ndarray:
        """int64 node-steps (reports) the task has received."""
        return _steps(self.slots[..., features.NODE_STEPS])

    @property
    def last_log_loss(self) -> np.ndarray:
        return self.slots[..., features.LAST_LOG_LOSS]

    @property
    def log_target(self) -> np.ndarray:
        return self.slots[..., features.LOG_TARGET]

    @property
    def target(self) -> np.ndarray:
        """float64 target loss where present, 1.0 elsewhere."""
        return np.where(self.present, np.exp(self.log_target.astype(np.float64)), 1.0)

    @property
    def log_gap(self) -> np.ndarray:
        """last log loss − log target (0 before the first report)."""
        return self.slots[..., features.LOG_GAP]

    @property
    def log_losses(self) -> np.ndarray:
        """(B, K, H) the last H reported log losses, most recent first (zero-padded)."""
        return self.slots[..., features.HISTORY_START : features.HISTORY_START + self.history]

    @property
    def served_last(self) -> np.ndarray:
        """bool: the task was served last step."""
        return self.slots[..., features.SERVED_LAST] > 0.5


def parse_observation(observation: np.ndarray, n_slots: int, history: int | None = None) -> ParsedObservation:
    """Split an observation (B, N, D) or (N, D) into a :class:`ParsedObservation` (views, no copies).

    Args:
        observation: per-node observations in the :mod:`core_env.features` layout, optionally followed
            by E extra features per slot (K · E columns, slot 0's first).
        n_slots: K.
        history: H. None infers it from D, assuming no extra columns (D = 6 + K · (8 + H)); given, any
            columns beyond the env's D are the extra ones (D = 6 + K · (8 + H + E)).

    Raises ValueError when the shape does not fit the layout.
    """
    observation = np.asarray(observation)
    if observation.ndim not in (2, 3):
        raise ValueError(f"observation must have shape (B, N, D) or (N, D), got {observation.shape}")
    if isinstance(n_slots, bool) or not isinstance(n_slots, (int, np.integer)) or n_slots < 1:
        raise ValueError(f"n_slots must be an int >= 1, got {n_slots!r}")
    D = observation.shape[-1]
    per_slot, rest = divmod(D - features.SLOT_TABLE_START, n_slots)
    if history is None:
        width = per_slot
        fits = not rest and width >= features.slot_width(1)
        layout = f"the core_env layout with K={n_slots} slots (D = {features.SLOT_TABLE_START} + K·({_FIXED_SLOT_FEATURES} + H), H >= 1)"
    else:
        if isinstance(history, bool) or not isinstance(history, (int, np.integer)) or history < 1:
            raise ValueError(f"history must be an int >= 1 or None, got {history!r}")
        width = features.slot_width(history)
        fits = not rest and per_slot >= width
        layout = (f"the core_env layout with K={n_slots} slots and history H={history} "
                  f"(D = {features.obs_dim(n_slots, history)} + K·E extra features)")
    if not fits:
        raise ValueError(f"observation length D={D} does not fit {layout}")
    lead = observation.shape[:-2]
    table = observation[..., 0, features.SLOT_TABLE_START:]
    return ParsedObservation(
        nodes=observation[..., : features.NODE_FEATURES],
        global_=observation[..., 0, features.NODE_FEATURES : features.SLOT_TABLE_START],
        slots=table[..., : n_slots * width].reshape(lead + (n_slots, width)),
        extra=table[..., n_slots * width :].reshape(lead + (n_slots, per_slot - width)),
    )
