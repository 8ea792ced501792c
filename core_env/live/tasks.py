"""Live tasks: real training runs that train a few batches at a time and move between nodes by their state.

A live task follows a small protocol (:class:`LiveTask`): ``train(n)`` runs ``n`` optimizer steps and
returns their ``n`` mini-batch losses; ``state_dict()`` / ``load_state_dict()`` carry everything the
run needs to continue exactly (model, optimizer, data order, step), so a task preempted on one node and
resumed on another reports the same losses as one trained without a pause. A run has a fixed length (its
family's optimizer steps, as in the corpus); past it, or after it diverged, it trains no more and
reports the mean of its last losses, as the curve bank's plateau does.

:class:`TaskSpec` names a run: a corpus family (:data:`core_env.curves.runs.FAMILIES`; the MLP families
so far) and a run index, the same seeds as the corpus's curve of that run, so a live run's losses equal
its recorded curve (tests/test_live.py). :func:`build_task` builds one; a user's own task is a
``"module:factory"`` family whose factory takes the run index.

Needs torch and scikit-learn (the ``curves`` extra).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Protocol

import numpy as np

from core_env.curves.bank import plateau_window


class LiveTask(Protocol):
    """A training run that trains in pieces (module docstring)."""

    def train(self, batches: int) -> np.ndarray:
        """(batches,) float64: the loss of each of the next ``batches`` optimizer steps."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A run: ``family`` (a corpus MLP family, or ``"module:factory"``) and its ``run_index``."""

    family: str
    run_index: int


#: The corpus families a live task can run so far (the others train in one go: issue 32).
LIVE_FAMILIES = ("mlp_digits", "mlp_wine", "mlp_breast_cancer", "mlp_synth")


def build_task(spec: TaskSpec) -> LiveTask:
    """The live task of ``spec``.

    Raises:
        ValueError: an unknown family, or a run index < 0.
        TypeError: a ``"module:factory"`` whose factory does not return a LiveTask.
    """
    if not isinstance(spec.run_index, (int, np.integer)) or isinstance(spec.run_index, bool) or spec.run_index < 0:
        raise ValueError(f"run_index must be an int >= 0, got {spec.run_index!r}")
    if spec.family in LIVE_FAMILIES:
        return CorpusMLPTask(spec.family, int(spec.run_index))
    if ":" in spec.family:
        module, _, name = spec.family.partition(":")
        task = getattr(importlib.import_module(module), name)(int(spec.run_index))
        if not all(callable(getattr(task, method, None)) for method in ("train", "state_dict", "load_state_dict")):
            raise TypeError(f"{spec.family} returned {type(task).__name__}, not a LiveTask (train, state_dict, load_state_dict)")
        return task
    raise ValueError(f"unknown live task family {spec.family!r}; choose from {list(LIVE_FAMILIES)} or give 'module:factory'")


class CorpusMLPTask:
    """A corpus MLP run (:func:`core_env.curves.runs.mlp.run`) trained in pieces: the same seeds,
    hyperparameters, data order and learning-rate schedule, one optimizer step per batch."""

    def __init__(self, family: str, run_index: int, steps: int | None = None) -> None:
        import torch

        from core_env.curves.runs import FAMILIES
        from core_env.curves.runs import common as C
        from core_env.curves.runs import data as D
        from core_env.curves.runs import mlp

        seeds = C.RunSeeds(family, run_index)
        Xtr, ytr, _, _, n_classes = D.tabular(mlp.DATASETS[family])
        self.hp = hp = mlp.sample_hp(seeds.hp)
        hp["batch_size"] = min(hp["batch_size"], len(ytr))
        C.torch_setup(seeds.torch_seed)
        self.model = mlp.build(Xtr.shape[1], n_classes, hp)
        self.optimizer = C.make_optimizer(self.model.parameters(), hp)
        self.X, self.y = torch.from_numpy(Xtr), torch.from_numpy(ytr)
        self.sampler = C.EpochSampler(len(ytr), hp["batch_size"], seeds.data)
        self.log = C.LossLog()
        self.steps = FAMILIES[family].steps if steps is None else int(steps)
        self.step = 0
        self._common = C

    @property
    def finished(self) -> bool:
        """Trained its length, or stopped by divergence."""
        return self.step >= self.steps or self.log.diverged

    def plateau(self) -> float:
        """The loss it reports once finished: the mean of its last losses (the curve bank's plateau)."""
        losses = self.log.losses
        return float(np.mean(losses[-plateau_window(len(losses)):])) if losses else float("nan")

    def train(self, batches: int) -> np.ndarray:
        import torch.nn.functional as F

        C, out = self._common, []
        for _ in range(int(batches)):
            if self.finished:
                out.append(self.plateau())
                continue
            C.set_lr(self.optimizer, self.hp["lr"], C.lr_factor(self.hp.get("schedule", "constant"), self.step, self.steps))
            index = self.sampler.next()
            loss = F.cross_entropy(self.model(self.X[index]), self.y[index])
            self.step += 1
            if not self.log.add(float(loss.detach())):
                out.append(self.log.losses[-1] if self.log.losses else self.plateau())
                continue
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            out.append(self.log.losses[-1])
        return np.asarray(out, dtype=np.float64)

    def state_dict(self) -> dict[str, Any]:
        sampler = self.sampler
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.step,
                "sampler": {"perm": sampler.perm.copy(), "pos": sampler.pos, "rng": sampler.rng.bit_generator.state},
                "log": dataclasses.asdict(self.log)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        self.sampler.perm, self.sampler.pos = np.array(state["sampler"]["perm"]), int(state["sampler"]["pos"])
        self.sampler.rng.bit_generator.state = state["sampler"]["rng"]
        self.log = self._common.LossLog(**state["log"])
