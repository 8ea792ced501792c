"""Shared pieces of the curve generator: seeding, hyperparameter sampling, training loop, flags.

Every run is a pure function of ``(family, run_index)`` (plus an optional step override used by tests):
the hyperparameters, the data order and the torch initialisation all come from seeds derived from
those two values, and torch runs single-threaded, so the same torch version on the same CPU
reproduces a curve bit for bit.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The flag bits and the rule behind them are public: :mod:`core_env.curves.flags` (re-exported here).
# The trainer stops a run whose finite loss exceeds ``EXPLODE_FACTOR * max(first loss, 1)``.
from core_env.curves.flags import DIVERGED, EXPLODE_FACTOR, NON_LEARNER, NON_LEARNER_RATIO, flag_one, smooth_window  # noqa: F401
from core_env.extras import needs


# --------------------------------------------------------------------------------------------- seeds
def family_key(family: str) -> int:
    """Stable 32-bit integer for a family name (independent of PYTHONHASHSEED)."""
    return int.from_bytes(hashlib.sha256(family.encode("utf-8")).digest()[:4], "little")


@dataclass
class RunSeeds:
    """The independent random streams of one run."""

    family: str
    run_index: int
    hp: np.random.Generator = field(init=False)  # hyperparameter sampling
    data: np.random.Generator = field(init=False)  # mini-batch order / env actions
    torch_seed: int = field(init=False)  # torch.manual_seed for parameter initialisation
    env_seed: int = field(init=False)  # gymnasium reset seed

    def __post_init__(self) -> None:
        base = [family_key(self.family), int(self.run_index)]
        self.hp = np.random.default_rng(np.random.SeedSequence(base + [0]))
        self.data = np.random.default_rng(np.random.SeedSequence(base + [1]))
        self.torch_seed = int(np.random.SeedSequence(base + [2]).generate_state(1, np.uint64)[0] & 0x7FFF_FFFF_FFFF_FFFF)
        self.env_seed = int(np.random.SeedSequence(base + [3]).generate_state(1, np.uint32)[0] & 0x7FFF_FFFF)

    def entropy(self) -> list[int]:
        return [family_key(self.family), int(self.run_index)]


# ------------------------------------------------------------------------------ hyperparameter sampling
def choice(rng: np.random.Generator, options: dict[Any, float] | list[Any]) -> Any:
    """Pick one option; a dict maps option -> probability weight."""
    if isinstance(options, dict):
        keys = list(options)
        p = np.asarray([options[k] for k in keys], dtype=np.float64)
        return keys[int(rng.choice(len(keys), p=p / p.sum()))]
    return options[int(rng.integers(len(options)))]


def log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(10.0 ** rng.uniform(math.log10(lo), math.log10(hi)))


def log_uniform_int(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(round(log_uniform(rng, lo, hi + 0.4999)))


def sample_lr(rng: np.random.Generator, good: float, core: float = 0.75, tail_p: float = 0.15, tail: tuple[float, float] = (-2.0, 1.5)) -> float:
    """Learning rate: mostly within +-``core`` decades of ``good``; with prob. ``tail_p`` a wider range.

    The wide tail keeps a natural share of non-learners (too small) and diverged runs (too large).
    """
    if rng.random() < tail_p:
        return float(good * 10.0 ** rng.uniform(*tail))
    return float(good * 10.0 ** rng.uniform(-core, core))


def sample_optim(rng: np.random.Generator, probs: dict[str, float], good_lr: dict[str, float], **lr_kw: Any) -> dict[str, Any]:
    """Optimizer name, learning rate and weight decay."""
    name = choice(rng, probs)
    lr = sample_lr(rng, good_lr[name], **lr_kw)
    if name == "adamw":
        wd = log_uniform(rng, 1e-3, 1e-1)
    elif rng.random() < 0.3:
        wd = log_uniform(rng, 1e-5, 1e-3)
    else:
        wd = 0.0
    return {"optimizer": name, "lr": lr, "weight_decay": wd}


def sample_schedule(rng: np.random.Generator, probs: dict[str, float] | None = None) -> str:
    return choice(rng, probs or {"constant": 0.6, "cosine": 0.3, "warmup_cosine": 0.1})


def make_optimizer(params: Any, hp: dict[str, Any]):
    with needs(__name__, "curves"):
        import torch

    name, lr, wd = hp["optimizer"], hp["lr"], hp["weight_decay"]
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=wd)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=wd)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    raise ValueError(f"unknown optimizer {name!r}")


def lr_factor(schedule: str, step: int, steps: int) -> float:
    """Multiplier of the base learning rate before optimizer step ``step`` (0-based) of ``steps``."""
    if schedule == "constant":
        return 1.0
    warm = max(1, steps // 20) if schedule == "warmup_cosine" else 0
    if step < warm:
        return (step + 1) / warm
    progress = (step - warm) / max(1, steps - warm)
    if schedule in ("cosine", "warmup_cosine"):
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    if schedule == "linear":
        return 1.0 - progress
    raise ValueError(f"unknown schedule {schedule!r}")


def set_lr(opt: Any, base_lr: float, factor: float) -> None:
    for group in opt.param_groups:
        group["lr"] = base_lr * factor


def torch_setup(seed: int) -> None:
    with needs(__name__, "curves"):
        import torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)


# -------------------------------------------------------------------------------------- training loop
@dataclass
class LossLog:
    """Collects one loss per optimizer step and detects divergence."""

    losses: list[float] = field(default_factory=list)
    diverged: bool = False
    cap: float | None = None
    reason: str = ""

    def add(self, value: float) -> bool:
        """Record ``value``; return False (stop training) on divergence."""
        if not math.isfinite(value):
            self.diverged, self.reason = True, "non-finite loss"
            return False
        if self.cap is None:
            self.cap = EXPLODE_FACTOR * max(abs(value), 1.0)
        if value > self.cap:
            self.losses.append(self.cap)  # clipped
            self.diverged, self.reason = True, f"loss {value:.3g} > {self.cap:.3g}"
            return False
        self.losses.append(value)
        return True


def train_steps(
    steps: int,
    opt: Any,
    hp: dict[str, Any],
    step_loss: Callable[[int], Any],
    params: list[Any] | None = None,
    clip: float | None = None,
) -> LossLog:
    """Run ``steps`` optimizer steps; ``step_loss(step)`` returns the mini-batch loss tensor."""
    log = LossLog()
    for step in range(steps):
        if not optimizer_step(opt, hp, step, steps, step_loss, log, params, clip):
            break
    return log


def optimizer_step(opt: Any, hp: dict[str, Any], step: int, steps: int, step_loss: Callable[[int], Any], log: LossLog,
                   params: list[Any] | None = None, clip: float | None = None) -> bool:
    """Step ``step`` of ``steps`` (also a live task's batch: core_env.live.tasks): the scheduled learning rate,
    the mini-batch loss logged, then, unless it diverged, backward, gradient clipping and the update.
    Returns False on divergence (the update is skipped)."""
    with needs(__name__, "curves"):
        import torch

    set_lr(opt, hp["lr"], lr_factor(hp.get("schedule", "constant"), step, steps))
    loss = step_loss(step)
    if not log.add(float(loss.detach())):
        return False
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()
    return True


class EpochSampler:
    """Mini-batch indices: a fresh permutation per epoch, last partial batch dropped."""

    def __init__(self, n: int, batch_size: int, rng: np.random.Generator) -> None:
        self.n, self.bs, self.rng = n, min(batch_size, n), rng
        self.perm, self.pos = rng.permutation(n), 0

    def next(self) -> np.ndarray:
        if self.pos + self.bs > self.n:
            self.perm, self.pos = self.rng.permutation(self.n), 0
        idx = self.perm[self.pos : self.pos + self.bs]
        self.pos += self.bs
        return idx


# ------------------------------------------------------------------------------------ classifier runs
def train_classifier(seeds: RunSeeds, hp: dict[str, Any], steps: int, make_model: Callable[[], Any],
                     Xtr: np.ndarray, ytr: np.ndarray, Xte: np.ndarray, yte: np.ndarray) -> dict[str, Any]:
    """The training tail shared by the classifier families (mlp, cnn1d, vit), after their hyperparameters.

    In the corpus order: seed torch, build the model (``make_model()``), its optimizer, then ``steps``
    cross-entropy steps on :class:`EpochSampler` mini-batches of ``(Xtr, ytr)`` drawn from ``seeds.data``;
    the model in eval mode, its test loss and accuracy on ``(Xte, yte)``. Returns the run's result dict.
    """
    with needs(__name__, "curves"):
        import torch
        import torch.nn.functional as F

    torch_setup(seeds.torch_seed)
    model = make_model()
    opt = make_optimizer(model.parameters(), hp)
    X, y = torch.from_numpy(Xtr), torch.from_numpy(ytr)
    sampler = EpochSampler(len(ytr), hp["batch_size"], seeds.data)

    def step_loss(step: int):
        idx = torch.from_numpy(sampler.next())
        return F.cross_entropy(model(X[idx]), y[idx])

    log = train_steps(steps, opt, hp, step_loss)
    model.eval()
    return run_result(log, hp, model.parameters(), evaluate_classifier(model, Xte, yte))


def evaluate_classifier(model: Any, Xte: np.ndarray, yte: np.ndarray) -> dict[str, float]:
    """Test cross-entropy loss and accuracy of ``model`` on ``(Xte, yte)``, without gradients."""
    with needs(__name__, "curves"):
        import torch
        import torch.nn.functional as F

    with torch.no_grad():
        logits = model(torch.from_numpy(Xte))
        y = torch.from_numpy(yte)
        return {"test_loss": float(F.cross_entropy(logits, y)), "test_acc": float((logits.argmax(1) == y).float().mean())}


def run_result(log: LossLog, hp: dict[str, Any], params: Any, evaluation: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A run's result dict: its loss log, hyperparameters, evaluation, parameter count and ``extra`` entries."""
    return {"losses": log.losses, "diverged": log.diverged, "reason": log.reason, "hp": hp,
            "eval": evaluation, **extra, "n_params": sum(p.numel() for p in params)}


# ------------------------------------------------------------------------------------------ finishing
def finalize(losses: list[float] | np.ndarray, diverged: bool) -> tuple[np.ndarray, int, dict[str, float]]:
    """float32 values, flag bits and summary statistics of a finished run.

    Flags come from the public rule (:func:`core_env.curves.flags.flag_runs`) applied to the finite,
    clipped values, with ``stopped=diverged`` (the trainer's own divergence report).
    """
    values = np.asarray(losses, dtype=np.float64)
    values = values[np.isfinite(values)] if values.size else values
    stats: dict[str, float] = {}
    if values.size:
        values = np.clip(values, 0.0, np.finfo(np.float32).max / 2)
        w = smooth_window(values.size)
        initial, final = float(values[:w].mean()), float(values[-w:].mean())
        stats = {"initial_smoothed": initial, "final_smoothed": final, "min_loss": float(values.min())}
    flags = flag_one(values, stopped=bool(diverged))
    return values.astype(np.float32), int(flags), stats
