"""A numpy-only live task: least-squares regression trained by mini-batch SGD (``family="toy_regression"``).

It needs no torch, so the worker tests run everywhere (a Ray cluster's workers included) in well under a
second per task. Run ``r`` draws its own problem (weights, noise, learning rate) from ``default_rng(r)``;
one batch is one SGD step on 16 fresh samples; its state is the weights, the step and the data
generator's state, so it resumes exactly on another node.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Features of the regression problem and samples per batch.
FEATURES, BATCH = 8, 16


class ToyRegressionTask:
    """Mini-batch SGD on a random linear problem (module docstring); ``steps``: its length in batches."""

    family = "toy_regression"

    def __init__(self, run_index: int, steps: int = 200) -> None:
        problem = np.random.default_rng(run_index)
        self.true_w = problem.normal(size=FEATURES)
        self.noise = float(problem.uniform(0.05, 0.3))
        self.lr = float(problem.uniform(0.01, 0.05))
        self.data = np.random.default_rng([run_index, 1])
        self.w = np.zeros(FEATURES)
        self.steps, self.step = int(steps), 0
        self.last = float("nan")

    @property
    def finished(self) -> bool:
        return self.step >= self.steps

    def train(self, batches: int) -> np.ndarray:
        out = np.empty(int(batches))
        for i in range(int(batches)):
            if self.step >= self.steps:  # past its length: the last loss, as the curve bank's plateau
                out[i] = self.last
                continue
            x = self.data.normal(size=(BATCH, FEATURES))
            y = x @ self.true_w + self.noise * self.data.normal(size=BATCH)
            error = x @ self.w - y
            self.last = out[i] = float(np.mean(error**2))
            self.w = self.w - self.lr * 2.0 * (x.T @ error) / BATCH
            self.step += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"w": self.w.copy(), "step": self.step, "last": self.last, "data": self.data.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.w, self.step, self.last = np.array(state["w"]), int(state["step"]), float(state["last"])
        self.data.bit_generator.state = state["data"]
