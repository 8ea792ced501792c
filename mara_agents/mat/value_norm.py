"""The trainer's value normaliser: an EMA mean/std of returns with bias correction (MAT's ValueNorm with a
faster decay). The value head predicts returns in its normalised units; GAE works in return units."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class ValueNormalizer:
    """EMA mean/std of returns with bias correction (MAT's ValueNorm with a faster decay)."""

    def __init__(self, decay: float) -> None:
        self.decay = decay
        self.mean = self.mean_sq = self.weight = 0.0

    def update(self, x: torch.Tensor) -> None:
        d = self.decay
        self.mean = d * self.mean + (1 - d) * float(x.mean())
        self.mean_sq = d * self.mean_sq + (1 - d) * float((x * x).mean())
        self.weight = d * self.weight + (1 - d)

    @property
    def stats(self) -> tuple[float, float]:
        if self.weight == 0.0:
            return 0.0, 1.0
        mean = self.mean / self.weight
        var = max(self.mean_sq / self.weight - mean * mean, 1e-4)
        return mean, math.sqrt(var)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = self.stats
        return (x - mean) / std

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = self.stats
        return x * std + mean

    def state_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "mean_sq": self.mean_sq, "weight": self.weight}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.mean, self.mean_sq, self.weight = state["mean"], state["mean_sq"], state["weight"]
