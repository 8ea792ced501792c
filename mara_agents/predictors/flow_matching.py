"""MARA's demand predictor: conditional flow matching (CFM) over a task's future loss trajectory.

From a task's reported-loss history (one interval-averaged loss per node-step it received), the model
samples S plausible futures and decodes each into the node-steps still needed to reach a target.

**Target (threshold-independent).** A future is ``NUM_BINS = 32`` bins covering the next
``HORIZON = 120`` node-steps (:data:`BIN_WIDTHS`: 8 bins of 1 step, 8 of 2, 8 of 4, 8 of 8; fine where
deadlines are decided, coarse far out). Bin j holds the mean of the reported log losses of its steps
minus the current (last reported) log loss, so one sampled future serves every target.

**Model.** A GRU over the last ``history_steps`` reports (per step: log loss relative to the current
one, its change from the previous report, a present flag) and summary features of the whole history
(:func:`history_features`: report count, current log loss, drop since the first report, mean relative
log loss over the last 2..64 reports, noise level, lowest relative log loss) give a context c.
Relative log losses enter as asinh(x / resolution) (resolution 0.05): linear where a scheduler needs
precision (a few percent of loss), logarithmic for the e^10 drops some curves make. A small MLP
v(z_u, u, c) is trained on the linear path z_u = (1 - u) z0 + u z1 (z0 ~ N(0, I); z1 the future,
squashed the same way and standardized per bin) with loss ``||v - (z1 - z0)||^2`` (rectified flow;
torchcfm's ``ConditionalFlowMatcher(sigma=0)``). c and u enter both hidden layers as biases, computed
once per history and once per ODE step, so a sample costs three small matmuls per velocity evaluation.

**Sampling.** Fixed steps of Euler (one velocity evaluation per step) or midpoint (two) from u = 0 to
1, from S noise vectors drawn once from the predictor's seed and shared by every history: a prediction
is a pure function of its history (deterministic, independent of the batch and of call order), which
lets observation wrappers cache it. The shipped setting (S = 32, midpoint x 2 steps: four velocity
evaluations) is in the checkpoint manifest; :func:`inference_seconds` times any setting.

**Decoding** (:func:`decode_crossings`). A future is read as the polyline through (0, 0) (now, at the
current loss) and (x_j, y_j), x_j the centre of bin j in node-steps (bin j covering steps a+1..b has
x_j = (a + 1 + b) / 2, so a 1-step bin sits exactly on its step). With the threshold
tau = log(target) - log(current loss), the first bin with y_j <= tau crosses; the crossing point is
interpolated linearly on the segment before it and rounded up to whole node-steps (at least 1: the
next report is the first that can reach the target). This is exact for the 1-step bins and for
futures that are straight lines; elsewhere it interpolates. A future that does not cross within the
horizon is censored (remaining = inf).

**Summary** (:func:`summarize_samples`). Median and quantiles of the S decoded samples by (weighted)
nearest rank (the smallest sample whose cumulative weight reaches the level; inf when that sample is
censored) and p_within_budget = the weight of the samples that cross within the budget. The futures
are drawn without knowing the target, and whether a target is reachable at all is the model's own
crossing probability, learned from data (the shipped checkpoint: ``reachable=None``; v1 targets are
set by a family-level rule, and some are never reached). ``reachable = r`` instead conditions the
samples on a prior (:func:`reachability_weights`: crossing samples share weight r, censored ones
1 - r); it is how v0 checkpoints were tuned, when every target lay on its task's own curve, and on v1
it makes validation worse (the checkpoint manifest scores the grid). A task with no report yet has no current loss to predict from: it
is censored (median and quantiles inf, p_within_budget 0).

**Checkpoint.** ``NAME.pt`` (torch state_dict, weights only) beside ``NAME.json`` (format, config, sha256 of
the weights file, data split, seed, training wall time, validation metrics, sampling settings, and
``digests``: the sha256 of each config key, of each sampling setting and of the weights' sha256).
:func:`load_model` checks the sha256, the format, the config's ranges (before a model is built), finite
weights, standard deviations > 0 and the digests, and raises ValueError naming the file and the field: an
edited config or sampling setting, or weights other than those the manifest was written with, are refused,
not read silently (:class:`~mara_agents.checkpoint_files.CheckpointKind`, shared with the PFN predictor).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core_env.curves import LOSS_FLOOR
from core_env.extras import needs
from mara_agents.checkpoint_files import MAX_WIDTH, SHIPPED_DIR, CheckpointKind, PredictorConfig
from mara_agents.functional import gru_state, linear
from mara_agents.protocols import QUANTILE_LEVELS, DemandSummary, Predictor

with needs(__name__):
    import torch
    import torch.nn.functional as F
    from torch import nn

#: Node-steps covered by each of the 32 future bins (sum = HORIZON).
BIN_WIDTHS: tuple[int, ...] = (1,) * 8 + (2,) * 8 + (4,) * 8 + (8,) * 8
NUM_BINS = len(BIN_WIDTHS)
HORIZON = int(sum(BIN_WIDTHS))
#: Most recent reports summarised per history (the GRU sees the last ``history_steps`` of them).
TAIL = 64
#: Windows (most recent reports) of the mean relative log loss summary features.
SCALES: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
_SCALES = np.array(SCALES)
_SCALE_SEGMENTS = np.array((0,) + SCALES[:-1])  # the most recent reports first: [0, 2), [2, 4), ..., [32, 64)
_TAIL_INDEX = np.arange(TAIL)
STEP_FEATURES = 3
SUMMARY_FEATURES = 5 + len(SCALES)
#: Relative log losses are clipped to ±REL_CLIP (a factor of e^10 either way).
REL_CLIP = 10.0
TIME_FEATURES = 16
#: ODE solvers for sampling (see :meth:`FlowModel.sample`).
SOLVERS = ("euler", "midpoint")
#: A bin within this relative distance of the threshold counts as crossed (float64 rounding of the log
#: differences: a report exactly at its target must cross).
CROSSING_TOLERANCE = 1e-9
FORMAT = "mara_agents.flow_matching/1"
CHECKPOINT_DIR = SHIPPED_DIR
DEFAULT_CHECKPOINT = CHECKPOINT_DIR / "flow_matching.pt"


#: The most samples and ODE steps of a :class:`FlowMatchingPredictor` (its noise is samples x bins floats and
#: every prediction costs samples x ode_steps velocity evaluations per history).
MAX_SAMPLES = 4096
MAX_ODE_STEPS = 1024


@dataclasses.dataclass(frozen=True)
class FlowConfig(PredictorConfig):
    """Architecture of a :class:`FlowModel` (stored in the checkpoint manifest)."""

    WHAT = "flow-matching"
    SIZES = {"history_steps": TAIL, "gru_hidden": MAX_WIDTH, "context": MAX_WIDTH, "velocity_hidden": MAX_WIDTH}

    history_steps: int = 16
    gru_hidden: int = 32
    context: int = 64
    velocity_hidden: int = 48
    #: Relative log losses enter and leave the model as asinh(x / resolution): linear (fine) below
    #: about ``resolution``, logarithmic (compressed) far beyond it.
    resolution: float = 0.05
    bin_widths: tuple[int, ...] = BIN_WIDTHS

    @property
    def bin_centers(self) -> np.ndarray:
        return bin_centers(self.bin_widths)


def bin_centers(bin_widths: Sequence[int]) -> np.ndarray:
    """(B,) centre of each bin in node-steps from now: (a + 1 + b) / 2 for a bin covering steps a+1..b."""
    return _bin_layout(tuple(bin_widths))[0].copy()


@functools.lru_cache(maxsize=8)
def _bin_layout(bin_widths: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Bin centres and the start of each bin's interpolation segment (0 for the first bin), read-only."""
    widths = np.asarray(bin_widths, dtype=np.float64)
    centers = np.cumsum(widths) - (widths - 1.0) / 2.0
    starts = np.concatenate([[0.0], centers[:-1]])
    centers.flags.writeable = starts.flags.writeable = False
    return centers, starts


def _clip(x: np.ndarray | float, limit: float) -> np.ndarray:
    """x clipped to [-limit, limit] (np.clip costs several times more on the small arrays of one decision)."""
    return np.minimum(np.maximum(x, -limit), limit)


# --------------------------------------------------------------------------------------------------
# Histories -> features


def pack_histories(histories: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reported-loss histories (variable length, oldest first) -> the arrays :func:`history_features` reads.

    Returns:
        tail: (M, TAIL) float64 log losses of the last TAIL reports, right-aligned (most recent in the
            last column), 0 where a history is shorter.
        length: (M,) int64 reports per history.
        first: (M,) float64 log of each history's first report (0 when empty).
    """
    m = len(histories)
    length = np.fromiter((len(h) for h in histories), dtype=np.int64, count=m)
    tail = np.zeros((m, TAIL))
    if m == 0 or not length.any():
        return tail, length, np.zeros(m)
    flat = np.concatenate([np.asarray(h, dtype=np.float64)[-TAIL:] for h in histories])
    if not np.all(np.isfinite(flat)):
        raise ValueError("reported-loss histories must be finite")
    # Row-major boolean assignment fills each row's last min(length, TAIL) columns, oldest first.
    tail[_TAIL_INDEX >= TAIL - np.minimum(length, TAIL)[:, None]] = np.log(np.maximum(flat, LOSS_FLOOR))
    first = np.log(np.maximum([h[0] if len(h) else 1.0 for h in histories], LOSS_FLOOR))  # log 1 = 0 when empty
    return tail, length, first


def history_features(tail: np.ndarray, length: np.ndarray, first: np.ndarray,
                     config: FlowConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Encoder inputs from packed log-loss histories (see :func:`pack_histories`).

    Every relative log-loss quantity x enters as asinh(x / config.resolution).

    Returns:
        steps: (M, history_steps, STEP_FEATURES) float32 per report, left-padded with zeros: log loss
            relative to the current one, change from the previous report, present flag.
        summary: (M, SUMMARY_FEATURES) float32: log1p(reports) / 4, current log loss / 4, drop since the
            first report, mean relative log loss over the last k reports for k in SCALES, rms of the
            last 16 changes, lowest relative log loss in the tail.
        current: (M,) float64 current (last reported) log loss (0 for an empty history).
    """
    count = np.minimum(length, TAIL)
    valid = _TAIL_INDEX >= (TAIL - count)[:, None]
    current = tail[:, -1]
    rel = np.where(valid, _clip(tail - current[:, None], REL_CLIP), 0.0)
    change = np.zeros_like(rel)
    change[:, 1:] = np.where(valid[:, :-1], rel[:, 1:] - rel[:, :-1], 0.0)
    m, recent = len(tail), slice(TAIL - config.history_steps, TAIL)
    steps = np.empty((m, config.history_steps, STEP_FEATURES), np.float32)
    steps[..., :2] = np.arcsinh(np.stack([rel[:, recent], change[:, recent]], axis=-1) / config.resolution)
    steps[..., 2] = valid[:, recent]
    relative = np.empty((m, 3 + len(SCALES)))
    relative[:, 0] = _clip(first - current, REL_CLIP)
    sums = np.cumsum(np.add.reduceat(rel[:, ::-1], _SCALE_SEGMENTS, axis=1), axis=1)  # sums of the last k reports, k in SCALES
    relative[:, 1 : 1 + len(SCALES)] = sums / np.minimum(np.maximum(count, 1)[:, None], _SCALES)
    relative[:, -2] = np.sqrt((change[:, -16:] ** 2).sum(axis=1) / np.minimum(np.maximum(count - 1, 1), 16))
    relative[:, -1] = rel.min(axis=1)
    summary = np.empty((m, SUMMARY_FEATURES), np.float32)
    summary[:, 0] = np.log1p(length) / 4.0
    summary[:, 1] = _clip(current, 4 * REL_CLIP) / 4.0
    summary[:, 2:] = np.arcsinh(relative / config.resolution)
    return steps, summary, current

# --------------------------------------------------------------------------------------------------
# The model


def _time_features(u: torch.Tensor) -> torch.Tensor:
    """(R,) flow times in [0, 1] -> (R, TIME_FEATURES) sinusoidal features."""
    freqs = math.pi * 2.0 ** torch.arange(TIME_FEATURES // 2, dtype=torch.float32)
    angle = u[:, None] * freqs
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)


class FlowModel(nn.Module):
    """Context encoder (GRU + summary MLP) and velocity network v(z_u, u, c) of the CFM predictor.

    Buffers hold the standardization of summary features and of future bins (set by training from
    the fit data), so a checkpoint is self-contained.
    """

    def __init__(self, config: FlowConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        bins, hidden = len(config.bin_widths), config.velocity_hidden
        with torch.random.fork_rng(devices=[]):  # torch's own initialization draws from the global generator
            self.gru = nn.GRU(STEP_FEATURES, config.gru_hidden, batch_first=True)
            self.encoder = nn.Sequential(nn.Linear(config.gru_hidden + SUMMARY_FEATURES, config.context), nn.SiLU(),
                                         nn.Linear(config.context, config.context), nn.SiLU())
            self.context_bias = nn.Linear(config.context, 2 * hidden)  # c -> biases of both hidden layers
            self.time_bias = nn.Linear(TIME_FEATURES, 2 * hidden, bias=False)
            self.z_in = nn.Linear(bins, hidden, bias=False)
            self.hidden = nn.Linear(hidden, hidden, bias=False)
            self.out = nn.Linear(hidden, bins)
        self.register_buffer("summary_mean", torch.zeros(SUMMARY_FEATURES))
        self.register_buffer("summary_std", torch.ones(SUMMARY_FEATURES))
        self.register_buffer("future_mean", torch.zeros(bins))
        self.register_buffer("future_std", torch.ones(bins))
        self._initialize(torch.Generator().manual_seed(seed))  # the weights come from ``seed`` alone

    @torch.no_grad()
    def _initialize(self, generator: torch.Generator) -> None:
        """PyTorch's default uniform(±1/sqrt(fan_in)) initialization, drawn from ``generator``."""
        for name, parameter in self.named_parameters():
            fan_in = self.config.gru_hidden if name.startswith("gru.") else None
            if fan_in is None:
                module = self.get_submodule(name.rsplit(".", 1)[0])
                fan_in = module.in_features
            bound = 1.0 / math.sqrt(fan_in)
            parameter.uniform_(-bound, bound, generator=generator)

    def encode(self, steps: torch.Tensor, summary: torch.Tensor) -> torch.Tensor:
        """(M, history_steps, STEP_FEATURES), (M, SUMMARY_FEATURES) -> (M, 2 * velocity_hidden) per-history biases."""
        last = gru_state(self.gru, steps)
        normalized = (summary - self.summary_mean) / self.summary_std
        first, _, second, _ = self.encoder._modules.values()  # Linear, SiLU, Linear, SiLU
        context = F.silu(linear(second, F.silu(linear(first, torch.cat([last, normalized], dim=1)))))
        return linear(self.context_bias, context)

    def velocity(self, z: torch.Tensor, bias: torch.Tensor, z_projected: torch.Tensor | None = None) -> torch.Tensor:
        """v at standardized futures ``z`` (..., NUM_BINS); ``bias`` (context + time) broadcasts to (..., 2 * hidden).

        ``z_projected``: the first layer's projection of ``z`` if already known (sampling starts every
        history from the same noise, so its projection is computed once).
        """
        first, second = bias.chunk(2, dim=-1)
        if torch.is_grad_enabled():
            h = F.silu(linear(self.hidden, F.silu(linear(self.z_in, z) + first)) + second)
        else:  # sampling: the same values computed in place (about 40% faster; autograd would need the copies)
            entry = linear(self.z_in, z).add_(first) if z_projected is None else z_projected + first
            h = F.silu(linear(self.hidden, F.silu(entry, inplace=True)).add_(second), inplace=True)
        return linear(self.out, h)

    def loss(self, steps: torch.Tensor, summary: torch.Tensor, future: torch.Tensor, generator: torch.Generator,
             draws: int = 1) -> torch.Tensor:
        """CFM loss ||v(z_u, u, c) - (z1 - z0)||^2 with ``draws`` (u, z0) pairs per history.

        Args:
            future: (M, NUM_BINS) relative log-loss bins (unstandardized).
        """
        bias = self.encode(steps, summary).repeat_interleave(draws, dim=0)
        z1 = self.to_latent(future).repeat_interleave(draws, dim=0)
        z0 = torch.randn(z1.shape, generator=generator)
        u = torch.rand(z1.shape[0], generator=generator)
        zu = (1.0 - u[:, None]) * z0 + u[:, None] * z1
        v = self.velocity(zu, bias + self.time_bias(_time_features(u)))
        return ((v - (z1 - z0)) ** 2).mean()

    def time_biases(self, ode_steps: int) -> torch.Tensor:
        """(2 ode_steps, 2 velocity_hidden) biases of the flow times :meth:`sample` visits: the start of each
        step, then each step's midpoint."""
        dt = 1.0 / ode_steps
        start = torch.arange(ode_steps, dtype=torch.float32) * dt
        return self.time_bias(_time_features(torch.cat([start, start + 0.5 * dt])))

    def sample(self, steps: torch.Tensor, summary: torch.Tensor, noise: torch.Tensor, ode_steps: int,
               solver: str = "euler", time_bias: torch.Tensor | None = None, noise_projected: torch.Tensor | None = None) -> torch.Tensor:
        """Futures (M, S, NUM_BINS) (relative log-loss bins) from noise (S, NUM_BINS).

        Integrates dz/du = v(z, u, c) from u = 0 to 1 in ``ode_steps`` equal steps by ``solver``: "euler"
        (one velocity evaluation per step) or "midpoint" (two: Euler to the half step, then the full
        step with the velocity there). ``time_bias`` (:meth:`time_biases` of ``ode_steps``) and
        ``noise_projected`` (the velocity network's first projection of ``noise``): if already computed
        (an inference caller with frozen weights computes them once).
        """
        if solver not in SOLVERS:
            raise ValueError(f"unknown solver {solver!r}; expected one of {list(SOLVERS)}")
        bias = self.encode(steps, summary)[:, None, :]
        dt = 1.0 / ode_steps
        if time_bias is None:
            time_bias = self.time_biases(ode_steps)
        z = noise[None].expand(bias.shape[0], -1, -1)
        biases = bias + time_bias[:, None, None, :]  # (2 ode_steps, M, 1, 2 hidden): context + time, every time visited
        for i in range(ode_steps):
            v = self.velocity(z, biases[i], noise_projected if i == 0 else None)
            if solver == "midpoint":
                v = self.velocity(torch.add(z, v, alpha=0.5 * dt), biases[ode_steps + i])
            z = torch.add(z, v, alpha=dt)
        return self.from_latent(z)

    def to_latent(self, future: torch.Tensor) -> torch.Tensor:
        """Relative log-loss bins -> the standardized space the flow runs in."""
        return (torch.asinh(future / self.config.resolution) - self.future_mean) / self.future_std

    def from_latent(self, z: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`to_latent`, clipped to ±REL_CLIP (so that no sample is inf or NaN)."""
        limit = math.asinh(REL_CLIP / self.config.resolution)
        return torch.addcmul(self.future_mean, z, self.future_std).clamp_(-limit, limit).sinh_().mul_(self.config.resolution)

    @torch.no_grad()
    def set_normalization(self, summary: torch.Tensor, future: torch.Tensor) -> None:
        """Standardize summary features and (squashed) future bins by the moments of training data."""
        self.summary_mean.copy_(summary.mean(0))
        self.summary_std.copy_(summary.std(0).clamp_min(1e-3))
        squashed = torch.asinh(future / self.config.resolution)
        self.future_mean.copy_(squashed.mean(0))
        self.future_std.copy_(squashed.std(0).clamp_min(1e-3))

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


# --------------------------------------------------------------------------------------------------
# Decoding and the predictor


def decode_crossings(future: np.ndarray, threshold: np.ndarray, bin_widths: Sequence[int] = BIN_WIDTHS) -> np.ndarray:
    """Remaining node-steps at which each future first crosses its threshold (inf if never).

    Args:
        future: (..., B) relative log-loss bins.
        threshold: log(target) - log(current loss), broadcastable to ``future.shape[:-1]``.
        bin_widths: (B,) node-steps per bin.

    Returns:
        float64 array of shape ``future.shape[:-1]``: whole node-steps >= 1, inf where the future
        never crosses (see the module docstring).
    """
    future = np.asarray(future, dtype=np.float64)
    centers, starts = _bin_layout(tuple(bin_widths))
    if future.shape[-1] != centers.size:
        raise ValueError(f"futures have {future.shape[-1]} bins but the layout has {centers.size}")
    lead = future.shape[:-1]
    tau = np.broadcast_to(np.asarray(threshold, dtype=np.float64), lead).reshape(-1)
    flat = future.reshape(-1, centers.size)
    crossed = flat <= (tau + CROSSING_TOLERANCE * np.maximum(np.abs(tau), 1.0))[:, None]
    j = np.argmax(crossed, axis=1)  # the first crossing bin (0 when none crosses)
    rows = np.arange(j.size)
    y_j = flat[rows, j]
    y_p = np.where(j > 0, flat[rows, j - 1], 0.0)  # the segment starts at the previous bin, or at (0, 0)
    drop = y_p - y_j
    fraction = np.minimum(np.maximum(np.divide(y_p - tau, drop, out=np.ones_like(drop), where=drop > 0), 0.0), 1.0)
    x = starts[j] + fraction * (centers[j] - starts[j])
    return np.where(crossed[rows, j], np.maximum(np.ceil(x - 1e-9), 1.0), np.inf).reshape(lead)


def reachability_weights(remaining: np.ndarray, reachable: float | None) -> np.ndarray:
    """(M, S) sample weights conditioning decoded samples on a prior probability that the target is reachable.

    The futures are drawn without knowing the target. When targets are set on the task's own curve
    (as core_env sets them), a target is reachable with a known prior probability ``reachable``
    whatever the history says; Bayes' rule then moves the total weight of the crossing samples to
    ``reachable`` and that of the censored ones to 1 - ``reachable``. Rows where all or no samples
    cross, and ``reachable=None`` (futures as drawn), keep equal weights.
    """
    if reachable is None:
        return np.ones(remaining.shape)
    crossed = np.isfinite(remaining)
    share = np.count_nonzero(crossed, axis=1)[:, None] / remaining.shape[1]
    mixed = (share > 0) & (share < 1)
    share = np.where(mixed, share, 0.5)  # rows that keep equal weights: any share that divides safely
    return np.where(mixed, np.where(crossed, reachable / share, (1.0 - reachable) / (1.0 - share)), 1.0)


def weighted_quantiles(remaining: np.ndarray, weights: np.ndarray, levels: Sequence[float]) -> np.ndarray:
    """(M, S) samples and weights -> (M, Q) nearest-rank quantiles: the smallest sample whose
    cumulative weight share reaches the level (inf-safe; equal weights give the ceil(q S)-th smallest)."""
    order = np.argsort(remaining, axis=1, kind="stable")
    rows = np.arange(remaining.shape[0])[:, None]
    cumulative = np.cumsum(weights[rows, order], axis=1)
    cumulative /= cumulative[:, -1:]
    rank = (cumulative[:, None, :] < np.asarray(levels)[None, :, None] - 1e-9).sum(axis=2)
    return remaining[rows, order[rows, np.minimum(rank, remaining.shape[1] - 1)]]


def equal_weight_quantiles(remaining: np.ndarray, levels: Sequence[float]) -> np.ndarray:
    """:func:`weighted_quantiles` with equal weights: the ranks are the same for every row, so one sort."""
    size = remaining.shape[1]
    cumulative = np.cumsum(np.ones(size)) / size
    rank = (cumulative[None, :] < np.asarray(levels)[:, None] - 1e-9).sum(axis=1)
    return np.sort(remaining, axis=1)[:, np.minimum(rank, size - 1)]


def summarize_samples(remaining: np.ndarray, budgets: np.ndarray, levels: np.ndarray, reachable: float | None = None) -> DemandSummary:
    """DemandSummary of (M, S) decoded samples (weighted by :func:`reachability_weights`).

    ``budgets``: (M,) or (M, J) node-steps; p_within_budget has their shape.
    """
    weights = reachability_weights(remaining, reachable)
    flat = budgets.reshape(budgets.shape[0], -1)
    within = ((remaining[:, None, :] <= flat[:, :, None]) * weights[:, None, :]).sum(axis=2) / weights.sum(axis=1)[:, None]
    # equal weights (reachable=None, the training loop's hot path): the same quantiles by sorting once
    quantiles = equal_weight_quantiles(remaining, (*levels, 0.5)) if reachable is None else weighted_quantiles(remaining, weights, (*levels, 0.5))
    return DemandSummary(levels=levels, median=quantiles[:, -1], quantiles=quantiles[:, :-1],
                         p_within_budget=within.reshape(budgets.shape))


class FlowMatchingPredictor(Predictor):
    """MARA's predictor: a trained :class:`FlowModel` sampled S times per history and decoded.

    Its horizon is the model's (``HORIZON`` = 120 node-steps for the shipped bin layout).

    Args:
        model: a trained FlowModel.
        samples: S futures per history.
        ode_steps: integration steps from noise to a future.
        solver: "euler" (one velocity evaluation per step) or "midpoint" (two).
        seed: seed of the S noise vectors (shared by all histories).
        reachable: prior probability that a target is reachable at all, or None to summarize the futures
            as drawn (see :func:`reachability_weights`).
        levels: quantile levels reported (see :class:`mara_agents.protocols.Predictor`).

    Example::

        predictor = FlowMatchingPredictor.load()              # the shipped checkpoint
        summary = predictor.predict(histories, targets, budgets)
        summary.median, summary.quantiles, summary.p_within_budget   # (M,), (M, Q), (M,)
    """

    name = "fm"

    def __init__(self, model: FlowModel, samples: int = 32, ode_steps: int = 4, solver: str = "euler", seed: int = 0,
                 reachable: float | None = None, levels: Sequence[float] = QUANTILE_LEVELS) -> None:
        super().__init__(int(sum(model.config.bin_widths)), levels)
        if solver not in SOLVERS:
            raise ValueError(f"unknown solver {solver!r}; expected one of {list(SOLVERS)}")
        for label, value, high in (("samples", samples, MAX_SAMPLES), ("ode_steps", ode_steps, MAX_ODE_STEPS)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise ValueError(f"{label} must be an int in [1, {high}], got {value!r}")
        if reachable is not None and not 0.0 <= reachable <= 1.0:
            raise ValueError(f"reachable must be a probability in [0, 1] or None, got {reachable!r}")
        self.model = model.eval()
        self.samples, self.ode_steps, self.solver, self.seed, self.reachable = samples, ode_steps, solver, seed, reachable
        self.noise = torch.randn(samples, len(model.config.bin_widths), generator=torch.Generator().manual_seed(seed))
        with torch.inference_mode():  # the model is frozen for inference: these are computed once
            self._time_bias, self._noise_projected = model.time_biases(ode_steps), linear(model.z_in, self.noise)

    @classmethod
    def load(cls, path: Path | str = DEFAULT_CHECKPOINT, **kwargs: Any) -> FlowMatchingPredictor:
        """A predictor on the checkpoint at ``path`` (verified by :func:`load_model`).

        Samples, ODE steps, solver, noise seed and reachability prior default to the manifest's
        ``inference`` entry (chosen on validation data); keyword arguments override them.
        """
        model, manifest = load_model(path)
        inference = manifest.get("inference", {})
        settings = ("samples", "ode_steps", "solver", "seed", "reachable")
        defaults = {name: inference[name] for name in settings if name in inference}
        return cls(model, **{**defaults, **kwargs})

    def sample_futures(self, histories: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(M, S, NUM_BINS) float64 sampled relative log-loss futures and (M,) current log losses.

        Histories must be non-empty (an empty one has no current loss to be relative to).
        """
        tail, length, first = pack_histories(histories)
        if np.any(length == 0):
            raise ValueError("sample_futures needs non-empty histories")
        steps, summary, current = history_features(tail, length, first, self.model.config)
        with torch.inference_mode():
            futures = self.model.sample(torch.from_numpy(steps), torch.from_numpy(summary), self.noise, self.ode_steps, self.solver,
                                        self._time_bias, self._noise_projected)
        return futures.numpy().astype(np.float64), current

    def decoded_samples(self, histories: Sequence[np.ndarray], targets: np.ndarray) -> np.ndarray:
        """(M, S) remaining node-steps of every sampled future (inf: censored; empty histories: all inf)."""
        remaining = np.full((len(histories), self.samples), np.inf)
        known = np.flatnonzero([len(h) > 0 for h in histories])
        if known.size:
            futures, current = self.sample_futures([histories[i] for i in known])
            threshold = np.log(np.maximum(np.asarray(targets, dtype=np.float64)[known], LOSS_FLOOR)) - current
            remaining[known] = decode_crossings(futures, threshold[:, None], self.model.config.bin_widths)
        return remaining

    def _predict(self, histories: list[np.ndarray], targets: np.ndarray, budgets: np.ndarray,
                 oracle: Mapping[str, np.ndarray] | None) -> DemandSummary:
        return summarize_samples(self.decoded_samples(histories, targets), budgets, self.levels, self.reachable)


# --------------------------------------------------------------------------------------------------
# Checkpoints


#: FM checkpoints: the digests cover the format, the config, the sampling settings
#: :meth:`FlowMatchingPredictor.load` takes from the manifest and the weights' sha256; the standard deviations
#: must be > 0.
CHECKPOINT = CheckpointKind("flow-matching", FORMAT, DEFAULT_CHECKPOINT, FlowConfig, FlowModel,
                            digested=("format", "config", "inference", "sha256"), divisors=("summary_std", "future_std"))


def save_model(model: FlowModel, path: Path | str, info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``path`` (state_dict) and its manifest ``path.with_suffix('.json')`` atomically; return the manifest.
    Refuses (ValueError, writing nothing) weights holding a NaN or an infinity, or a standard deviation <= 0."""
    return CHECKPOINT.save(model, path, info)


def load_model(path: Path | str = DEFAULT_CHECKPOINT) -> tuple[FlowModel, dict[str, Any]]:
    """Load a checkpoint written by :func:`save_model` (:meth:`~mara_agents.checkpoint_files.CheckpointKind.load`).

    Raises:
        ValueError: a missing or unreadable file, another format, a checksum mismatch, a config out of range or
            that the weights do not fit, weights holding NaN or inf or a standard deviation <= 0, or a config or
            sampling setting edited since the checkpoint was written (each naming the file and the field).
    """
    return CHECKPOINT.load(path)


# --------------------------------------------------------------------------------------------------
# Inference timing (called by the training log and by benchmarks)


def synthetic_histories(count: int, seed: int = 0, max_length: int = 120) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """``count`` noisy power-law loss histories of varied length, with targets and budgets (timing inputs)."""
    rng = np.random.default_rng(seed)
    histories = []
    for length in rng.integers(1, max_length + 1, size=count):
        t = np.arange(1, length + 1)
        histories.append(2.0 * (1.0 + t / rng.uniform(2, 20)) ** -rng.uniform(0.2, 1.0) * np.exp(rng.normal(0, 0.03, length)))
    targets = np.array([h[-1] for h in histories]) * rng.uniform(0.3, 0.95, size=count)
    return histories, targets, rng.uniform(1, 100, size=count)


def inference_seconds(predictor: FlowMatchingPredictor, count: int = 1024, repeats: int = 11, seed: int = 0) -> float:
    """Median wall seconds of one :meth:`FlowMatchingPredictor.predict` call on ``count`` histories."""
    histories, targets, budgets = synthetic_histories(count, seed)
    predictor.predict(histories, targets, budgets)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        predictor.predict(histories, targets, budgets)
        times.append(time.perf_counter() - start)
    return float(np.median(times))
