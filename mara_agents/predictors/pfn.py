"""The PFN predictor (``pfn``): the posterior predictive of a task's remaining demand, from its curve *and*
what its submitter declared, trained on a broad synthetic curve prior.

In the spirit of prior-data fitted networks (LC-PFN, FT-PFN): a network trained on draws from a prior
(:mod:`mara_agents.predictors.curve_prior`, mixed with the ``id`` train curves) to output, in one pass,
the distribution of what it is asked about. Here that is the remaining demand itself, not a future
curve: a categorical distribution over :data:`BIN_WIDTHS` (node-steps 1–8 one by one, then bins of 2,
4, 8 and 16 up to :data:`HORIZON` = 184, at least the longest deadline window of the v1 recipe) plus a
last *censored* bin (not within the horizon, or never). Training minimizes the cross-entropy of the
true bin, so the output is a calibrated posterior predictive for draws like the training data; a
temperature fitted on ``id`` validation curves only corrects what is left (:mod:`train_pfn`).

**Inputs** (:func:`features`, all computed from what a scheduler observes):

* the curve, as the flow-matching predictor reads it (:func:`~mara_agents.predictors.flow_matching.history_features`:
  the last 16 reports relative to the current loss, multi-scale means, noise level, report count);
* the **declared target**: the gap of the current, first and best reported log loss above log target;
* the **deadline window** (deadline − arrival, fixed per task: age + steps to deadline in the
  observation) and the share of it already served (k / window). Under the v1 recipe a long window
  means a large budgeted share of a typical run, which says how hard the target is.

The window is passed as ``windows`` to :meth:`~mara_agents.protocols.Predictor.predict` (the predictor
sets ``uses_window``); the remaining budget only selects where the predicted CDF is read, so a task's
prediction changes only when its history does and observation wrappers can cache it.

**Summary.** Mass is spread evenly over the integers of a bin, so the CDF F(b) = P(demand ≤ b) is exact
at bin edges and linear in between; a q-quantile is the first b with F(b) ≥ q (``inf`` if F(HORIZON) < q)
and ``p_within_budget`` = F(budget). Quantiles are non-decreasing, probabilities lie in [0, 1], and a
prediction is a pure function of (history, target, window): no sampling, no dependence on the batch.
A task with no report yet has no curve to read: it is censored (median inf, p_within_budget 0), as with FM.

**Checkpoint.** ``pfn.pt`` (state_dict) beside ``pfn.json`` (format, config, sha256 of the weights, data
split, prior seed and size, training command and wall time, temperature, validation metrics, and
``digests``: the sha256 of each config key, of the temperature and of the weights' sha256). :func:`load_model`
verifies the sha256 (:func:`mara_agents.checkpoint_files.read_verified`), the format, the config's ranges
(before a model is built), finite weights, standard deviations and temperature > 0 (the manifest's equal to
the weights'), and the digests, so an edited ``resolution``, ``bin_widths`` or ``temperature`` is refused with
a ValueError naming the file and the field; :func:`save_model` refuses bad weights too and writes both files
atomically (:class:`~mara_agents.checkpoint_files.CheckpointKind`, shared with FM).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core_env.curves import LOSS_FLOOR
from core_env.extras import needs
from mara_agents.checkpoint_files import MAX_LAYERS, MAX_WIDTH, SHIPPED_DIR, CheckpointKind, PredictorConfig
from mara_agents.predictors.flow_matching import SUMMARY_FEATURES, STEP_FEATURES, TAIL, FlowConfig, history_features, pack_histories
from mara_agents.protocols import QUANTILE_LEVELS, DemandSummary, Predictor

with needs(__name__):
    import torch
    from torch import nn

#: Node-steps covered by each demand bin (sum = HORIZON); a last, censored bin follows them.
BIN_WIDTHS: tuple[int, ...] = (1,) * 8 + (2,) * 8 + (4,) * 8 + (8,) * 8 + (16,) * 4
HORIZON = int(sum(BIN_WIDTHS))
#: Declared-information features appended to the curve features (see :func:`features`).
DECLARED_FEATURES = 5
FORMAT = "mara_agents.pfn/1"
CHECKPOINT_DIR = SHIPPED_DIR
DEFAULT_CHECKPOINT = CHECKPOINT_DIR / "pfn.pt"


@dataclasses.dataclass(frozen=True)
class PFNConfig(PredictorConfig):
    """Architecture of a :class:`PFNModel` (stored in the checkpoint manifest)."""

    WHAT = "PFN"
    SIZES = {"history_steps": TAIL, "hidden": MAX_WIDTH, "layers": MAX_LAYERS}

    history_steps: int = 16
    hidden: int = 256
    layers: int = 3
    #: Relative log losses enter as asinh(x / resolution), as in the flow-matching predictor.
    resolution: float = 0.05
    bin_widths: tuple[int, ...] = BIN_WIDTHS

    @property
    def inputs(self) -> int:
        return self.history_steps * STEP_FEATURES + SUMMARY_FEATURES + DECLARED_FEATURES

    @property
    def horizon(self) -> int:
        return int(sum(self.bin_widths))



def features(histories: Sequence[np.ndarray], targets: np.ndarray, windows: np.ndarray, config: PFNConfig) -> np.ndarray:
    """(M, config.inputs) float32 model inputs of non-empty histories (see the module docstring)."""
    tail, length, first = pack_histories(histories)
    if np.any(length == 0):
        raise ValueError("PFN features need non-empty histories")
    steps, summary, current = history_features(tail, length, first, FlowConfig(history_steps=config.history_steps, resolution=config.resolution))
    log_target = np.log(np.maximum(np.asarray(targets, dtype=np.float64), LOSS_FLOOR))
    valid = np.arange(TAIL) >= (TAIL - np.minimum(length, TAIL))[:, None]
    best = np.where(valid, tail, np.inf).min(axis=1)
    windows = np.asarray(windows, dtype=np.float64)
    declared = np.column_stack([np.arcsinh((current - log_target) / config.resolution), np.arcsinh((first - log_target) / config.resolution),
                                np.arcsinh((best - log_target) / config.resolution), np.log1p(windows) / 4.0,
                                np.minimum(length / windows, 2.0)])
    return np.concatenate([steps.reshape(len(length), -1), summary, declared.astype(np.float32)], axis=1)


def demand_bins(remaining: np.ndarray, bin_widths: Sequence[int] = BIN_WIDTHS) -> np.ndarray:
    """(M,) int64 the bin of each remaining demand (>= 1; beyond the horizon or inf: the censored bin)."""
    upper = np.cumsum(bin_widths)
    return np.searchsorted(upper, np.asarray(remaining, dtype=np.float64), side="left").astype(np.int64)


def cdf_matrix(bin_widths: Sequence[int] = BIN_WIDTHS) -> np.ndarray:
    """(bins + 1, horizon + 1) float64: entry (j, b) is the share of bin j's mass at demands <= b (mass
    spread evenly over a bin's integers; the censored last bin never counts)."""
    widths = np.asarray(bin_widths)
    low = np.concatenate([[1], np.cumsum(widths)[:-1] + 1])
    b = np.arange(int(widths.sum()) + 1)
    share = np.clip((b[None, :] - low[:, None] + 1) / widths[:, None], 0.0, 1.0)
    return np.vstack([share, np.zeros(b.size)])


class PFNModel(nn.Module):
    """An MLP from :func:`features` to logits over the demand bins and the censored bin.

    Buffers hold the input standardization (set from the training data) and the temperature (fitted on
    validation), so a checkpoint is self-contained.
    """

    def __init__(self, config: PFNConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            layers: list[nn.Module] = []
            width = config.inputs
            for _ in range(config.layers):
                layers += [nn.Linear(width, config.hidden), nn.SiLU()]
                width = config.hidden
            layers.append(nn.Linear(width, len(config.bin_widths) + 1))
            self.net = nn.Sequential(*layers)
        self.register_buffer("mean", torch.zeros(config.inputs))
        self.register_buffer("std", torch.ones(config.inputs))
        self.register_buffer("temperature", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (M, bins + 1), divided by the temperature."""
        return self.net((x - self.mean) / self.std) / self.temperature

    def set_normalization(self, x: torch.Tensor) -> None:
        self.mean.copy_(x.mean(dim=0))
        self.std.copy_(x.std(dim=0).clamp_min(1e-3))

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


class PFNPredictor(Predictor):
    """The ``pfn`` row: a trained :class:`PFNModel` read as a demand distribution (module docstring).

    Example::

        predictor = PFNPredictor.load()                       # the shipped checkpoint
        summary = predictor.predict(histories, targets, budgets, windows=windows)
    """

    name = "pfn"
    uses_window = True

    def __init__(self, model: PFNModel, levels: Sequence[float] = QUANTILE_LEVELS) -> None:
        super().__init__(model.config.horizon, levels)
        self.model = model.eval()
        self._cdf = torch.from_numpy(cdf_matrix(model.config.bin_widths)).float()

    @classmethod
    def load(cls, path: Path | str = DEFAULT_CHECKPOINT, **kwargs: Any) -> PFNPredictor:
        """A predictor on the checkpoint at ``path`` (verified by :func:`load_model`)."""
        return cls(load_model(path)[0], **kwargs)

    def distribution(self, histories: Sequence[np.ndarray], targets: np.ndarray, windows: np.ndarray) -> np.ndarray:
        """(M, bins + 1) float64 probabilities of each demand bin and of censoring (empty histories: censored)."""
        probs = np.zeros((len(histories), len(self.model.config.bin_widths) + 1))
        probs[:, -1] = 1.0
        known = np.flatnonzero([len(h) > 0 for h in histories])
        if known.size:
            x = features([histories[i] for i in known], np.asarray(targets)[known], np.asarray(windows)[known], self.model.config)
            with torch.inference_mode():
                probs[known] = torch.softmax(self.model(torch.from_numpy(x)), dim=1).double().numpy()
        return probs

    def cdf(self, histories: Sequence[np.ndarray], targets: np.ndarray, windows: np.ndarray) -> np.ndarray:
        """(M, horizon + 1) P(demand <= b) for b = 0 … horizon (non-decreasing, 0 at b = 0)."""
        probs = self.distribution(histories, targets, windows)
        return np.clip(np.maximum.accumulate(probs @ self._cdf.double().numpy(), axis=1), 0.0, 1.0)

    def _predict_windowed(self, histories: list[np.ndarray], targets: np.ndarray, budgets: np.ndarray,
                          windows: np.ndarray) -> DemandSummary:
        return DemandSummary.from_cdf(self.cdf(histories, targets, windows), budgets, self.levels)

    def _predict(self, histories, targets, budgets, oracle):  # pragma: no cover - predict() routes to _predict_windowed
        raise NotImplementedError("PFNPredictor.predict needs windows (it sets uses_window)")


# --------------------------------------------------------------------------------------------------
# Checkpoints


def check_temperature(manifest: dict[str, Any], model: PFNModel, where: Path) -> None:
    """ValueError naming ``where`` unless the manifest's ``temperature`` (where present) is a finite number > 0 equal
    to the weights' temperature buffer (the one the logits are divided by; > 0 is checked as a divisor)."""
    if "temperature" not in manifest:
        return
    value = manifest["temperature"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"{where}: temperature must be a finite number > 0, got {value!r}")
    buffer = float(model.temperature)
    if float(np.float32(value)) != buffer:
        raise ValueError(f"{where}: temperature {value!r} differs from the weights' temperature buffer {buffer!r}")


#: PFN checkpoints: the digests cover the format, the config, the calibrated temperature and the weights' sha256;
#: the input standard deviations and the temperature must be > 0.
CHECKPOINT = CheckpointKind("PFN", FORMAT, DEFAULT_CHECKPOINT, PFNConfig, PFNModel, digested=("format", "config", "temperature", "sha256"),
                            divisors=("std", "temperature"), check=check_temperature)


def save_model(model: PFNModel, path: Path | str, info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``path`` (state_dict) and its manifest ``path.with_suffix('.json')`` atomically; return the manifest.
    Refuses (ValueError, writing nothing) weights holding a NaN or an infinity, or a standard deviation or
    temperature <= 0."""
    return CHECKPOINT.save(model, path, info)


def load_model(path: Path | str = DEFAULT_CHECKPOINT) -> tuple[PFNModel, dict[str, Any]]:
    """Load a checkpoint written by :func:`save_model` (:meth:`~mara_agents.checkpoint_files.CheckpointKind.load`).

    Raises:
        ValueError: a missing file or manifest, a checksum mismatch, another format, a config out of range or
            that the weights do not fit, weights holding NaN or inf, a standard deviation or temperature <= 0,
            or a config or temperature edited since the checkpoint was written (each naming the file and the field).
    """
    return CHECKPOINT.load(path)
