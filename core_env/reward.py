"""Team rewards: ``sparse`` (tasks completed this step) and ``shaped`` (potential-based, γ = 1).

Shaped: r' = r + Φ(s') − Φ(s), Φ(s) = κ Σ_active φ_k with the log-progress
φ_k = clip(log(l0_k / l_k) / log(l0_k / eps_k), 0, 1), l0_k the task's first reported loss, l_k its
latest and eps_k its target; φ = 0 before a task's first report and after it leaves. The shaping terms
telescope: the undiscounted shaped return of an episode is its completions + Φ(s_T) − Φ(s_0), and
Φ(s_0) = 0 (no task has reported at reset). A terminated episode ends with no active task (the arrival
window is over and every task has completed or failed), so Φ(s_T) = 0 and the return equals the number
of completions exactly (up to float rounding). An episode truncated by ``max_cycles`` may end with tasks
in progress: its return is completions + Φ(s_T), the potential still held by those tasks (in
[0, κ·K]). Every info reports the current Φ(s) as ``potential`` (0 with ``sparse``), so the return so far
always equals ``completed`` + ``potential`` (up to float rounding). A failing task gives its progress
back when it leaves; a completing one is refunded by +1.
"""

from __future__ import annotations

import numpy as np

from core_env import dynamics
from core_env.sim import Simulator, StepOutcome


def potentials(sim: Simulator, kappa: float) -> np.ndarray:
    """(B,) Φ(s) = κ Σ_k φ_k of every environment (compiled: :func:`core_env.dynamics.potentials`)."""
    out = np.empty(sim.B)
    dynamics.potentials(sim._ints, sim._floats, sim._slot_flags, float(kappa), out)
    return out


class TeamReward:
    """Computes the team reward of each step of a batched simulator."""

    def __init__(self, mode: str, kappa: float) -> None:
        if mode not in ("shaped", "sparse"):
            raise ValueError(f"unknown reward {mode!r}; expected 'shaped' or 'sparse'")
        self.mode, self.kappa = mode, float(kappa)
        self._potential: np.ndarray | None = None

    def potential(self, sim: Simulator) -> np.ndarray:
        """(B,) Φ(s) = κ Σ_k φ_k."""
        return potentials(sim, self.kappa)

    def reset(self, sim: Simulator) -> None:
        self._potential = self.potential(sim) if self.mode == "shaped" else np.zeros(sim.B)

    @property
    def current(self) -> np.ndarray:
        """(B,) Φ of the state after the latest reset or step (zeros with ``"sparse"``: no shaping).

        Read-only: the array is replaced, never written, by the next step.
        """
        if self._potential is None:
            raise RuntimeError("call reset() before reading the potential")
        return self._potential

    def __call__(self, sim: Simulator, outcome: StepOutcome) -> np.ndarray:
        """(B,) float64 team reward of the step that produced ``outcome``."""
        reward = outcome.completed.astype(np.float64)
        if self.mode == "shaped":
            new = self.potential(sim)
            reward = reward + (new - self._potential)
            self._potential = new
        return reward
