"""The tasks in the slots, reconstructed from consecutive observations (what a real scheduler sees).

An agent gets only observations, whose slot table holds the last H reported log losses of each task.
:class:`ObservedTasks` rebuilds each task's full reported-loss history from one observation per step:
a task is new in its slot when the slot's age did not advance by exactly one step (a freed slot refilled
in the same step shows age 0), and each step appends the reports the task's node-step counter says it
received, read from the head of the observed history. Losses pass through the observation as float32
log losses, so they match the simulator's to float32 precision.
"""

from __future__ import annotations

import numpy as np

from core_env.observation import parse_observation
from mara_agents.predictors.cache import SlotTasks


class ObservedTasks:
    """Per-slot task state of B environments, updated from each step's observation.

    Call :meth:`reset` before an episode batch and :meth:`update` with every observation, in order.

    Attributes (``(B, K)`` arrays, valid after an update): ``active``, ``task`` (an id per task, fresh
    for every task that enters a slot), ``steps`` (reports received), ``age``, ``budget`` (steps to
    deadline), ``target``, ``first_loss``/``last_loss`` (reported; 0 before the first report) and
    ``history`` ((B, K, L) reported losses, oldest first).
    """

    def __init__(self) -> None:
        self._shape: tuple[int, int] | None = None

    def reset(self, batch_size: int, n_slots: int) -> None:
        B, K = self._shape = (batch_size, n_slots)
        self.active = np.zeros((B, K), bool)
        self.task = np.full((B, K), -1, np.int64)
        self.steps = np.zeros((B, K), np.int64)
        self.age = np.full((B, K), -1, np.int64)
        self.budget = np.zeros((B, K), np.int64)
        self.target = np.ones((B, K))
        self.history = np.ones((B, K, 64))
        self._next_id = 0

    def update(self, observation: np.ndarray, n_slots: int) -> None:
        """Read one step's observation (B, N, D) (:func:`core_env.features.observations` layout)."""
        if np.ndim(observation) != 3:
            raise ValueError(f"observation must have shape (B, N, D), got {np.shape(observation)}")
        if self._shape is None or self._shape != (observation.shape[0], n_slots):
            self.reset(observation.shape[0], n_slots)
        parsed = parse_observation(observation, n_slots)
        history_len = parsed.history
        present, age, steps = parsed.present, parsed.age, parsed.node_steps
        new = present & ~(self.active & (age == self.age + 1))
        if new.any():
            count = int(np.count_nonzero(new))
            self.task[new] = np.arange(self._next_id, self._next_id + count)
            self._next_id += count
            self.steps[new] = 0
        received = np.where(present, steps - self.steps, 0)
        if np.any(received < 0) or np.any(received > history_len):
            raise ValueError("observations skipped a step (a task received more reports than the observed history holds, "
                             "or fewer than before): call update() with every observation")
        if received.any():
            self._append(parsed.log_losses.astype(np.float64), received)
        self.active, self.age, self.steps = present, np.where(present, age, -1), np.where(present, steps, 0)
        self.budget = np.where(present, parsed.steps_to_deadline, 0)
        self.target = parsed.target

    def _append(self, log_losses: np.ndarray, received: np.ndarray) -> None:
        """Append each task's ``received`` newest reports, read from ``log_losses`` (B, K, H) (newest first)."""
        need = int((self.steps + received).max())
        if need > self.history.shape[2]:
            grown = np.ones(self.history.shape[:2] + (max(need, 2 * self.history.shape[2]),))
            grown[..., :self.history.shape[2]] = self.history
            self.history = grown
        for j in range(int(received.max())):  # report j back from the newest, newest first in the table
            b, k = np.nonzero(received > j)
            self.history[b, k, self.steps[b, k] + received[b, k] - 1 - j] = np.exp(log_losses[b, k, j])

    @property
    def last_loss(self) -> np.ndarray:
        """(B, K) the last reported loss (0 before the first report or for empty slots)."""
        last = np.take_along_axis(self.history, np.maximum(self.steps - 1, 0)[..., None], axis=2)[..., 0]
        return np.where(self.steps > 0, last, 0.0)

    @property
    def first_loss(self) -> np.ndarray:
        """(B, K) the first reported loss (0 before the first report or for empty slots)."""
        return np.where(self.steps > 0, self.history[..., 0], 0.0)

    def slot_tasks(self) -> SlotTasks:
        """The slots as a :class:`SlotTasks` for a :class:`PredictionCache`."""
        return SlotTasks(self.active, self.task, self.steps, self.history, self.target, self.budget,
                         np.where(self.active, self.age + self.budget, 0))
