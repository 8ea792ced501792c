"""A broad synthetic prior of loss curves, the training data that teaches the PFN predictor to read curves
of kinds it has never seen (``python -m mara_agents.predictors.curve_prior --figure PATH`` draws samples).

A curve is drawn in two stages, like the real corpus: a **family** (one kind of training run: its shape,
loss scale, speed, noise and misbehaviour) and then **runs** of that family, each jittering the family's
parameters, so that the environment's recipe (:mod:`core_env.recipe`) can set targets and deadlines from
a family's other runs exactly as it does for real task sets.

Shapes (:data:`SHAPES`). With x = n / L (n the batch, L the run's length), the clean loss is
``c + (l0 − c) · s(x)`` where s falls from 1 towards 0 at the family's time scale t and sharpness d:

* the parametric families of the learning-curve extrapolation literature: ``pow3`` (1 + x/t)^−d,
  ``pow4`` (1 + (x/t)^d)^(−a/d), ``mmf`` 1 / (1 + (x/t)^d), ``janoschek`` / ``weibull`` exp(−(x/t)^d) (with
  d below / above 1), ``exponential`` exp(−x/t), ``log_power`` 1 / (1 + log(1 + x/t)^d), ``ilog2``
  log 2 / log(2 + x/t);
* ``plateau_drop``: flat until a random point, then a Weibull drop (ViT-like); ``slow_start``: a steep
  sigmoid in log time (a late take-off); ``two_phase``: two drops at two time scales; ``linear``:
  (1 − x/t)_+^d.

Misbehaviour (:data:`MODIFIERS`, each drawn per family with its probability, then per run): ``spikes``
(sudden multiplicative jumps that decay), ``collapse`` (the loss climbs back towards its start, and
recovers in half the cases), ``divergence`` (exponential growth after a point), and **non-learners**
(flat noisy curves; a family has a share of them).

Noise (:data:`NOISES`, one per family): ``log_gauss`` (multiplicative), ``hetero`` (additive and
proportional to the distance above the asymptote, the form of :mod:`core_env.curves.prior`), ``ar1``
(correlated multiplicative), ``stepwise`` (piecewise-constant levels, like RL evaluations) and ``rl``
(large additive noise on the linear scale, clipped at the loss floor: the dips to 1e-6 of RL runs).

Targets that are never reached follow from the recipe: a target is a quantile of a family's reference
runs, so slow, collapsing, diverging and non-learning runs miss it.

Nothing here reads the corpus: the prior is a pure function of its seed (family ``i`` of seed ``s`` is
drawn from ``numpy.random.default_rng([s, i])``, independent of how many families are drawn).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from core_env.curves import LOSS_FLOOR, CurveBank
from core_env.curves.bank import NON_LEARNER
from core_env.extras import needs

SHAPES = ("pow3", "pow4", "mmf", "janoschek", "weibull", "exponential", "log_power", "ilog2", "plateau_drop",
          "slow_start", "two_phase", "linear")
NOISES = ("log_gauss", "hetero", "ar1", "stepwise", "rl")
#: Misbehaviours and the probability that a family has each (its runs then show it with probability 1/2).
MODIFIERS = {"spikes": 0.2, "collapse": 0.1, "divergence": 0.08}
#: Runs per family in :func:`prior_bank` (the recipe's reference runs are the family's runs).
RUNS = 24


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


@dataclasses.dataclass(frozen=True)
class Family:
    """One kind of training run: the parameters its runs jitter (see the module docstring)."""

    shape: str
    noise: str
    length: int  # batches per run
    l0: float  # initial loss
    floor_ratio: float  # asymptote c / l0
    scale: float  # time scale t (share of the run)
    sharpness: float  # d
    power: float  # a (pow4), the second time scale's share (two_phase)
    onset: float  # plateau_drop: where the drop starts (share of the run)
    sigma: float  # noise level
    jitter: float  # per-run log-normal spread of the shape parameters
    non_learner_share: float
    modifiers: tuple[str, ...]

    @classmethod
    def draw(cls, rng: np.random.Generator) -> Family:
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        noise = NOISES[int(rng.integers(len(NOISES)))]
        sharpness = {"janoschek": (0.2, 1.0), "weibull": (1.0, 4.0), "slow_start": (3.0, 10.0)}.get(shape, (0.3, 3.0))
        sigma = {"rl": (0.02, 0.4), "hetero": (0.01, 0.5), "stepwise": (0.02, 0.5)}.get(noise, (0.003, 0.3))
        return cls(shape=shape, noise=noise, length=int(round(_log_uniform(rng, 150, 1500))), l0=_log_uniform(rng, 0.05, 20.0),
                   floor_ratio=_log_uniform(rng, 1e-4, 0.8), scale=_log_uniform(rng, 0.01, 1.0),
                   sharpness=_log_uniform(rng, *sharpness), power=_log_uniform(rng, 0.2, 3.0), onset=float(rng.uniform(0.05, 0.8)),
                   sigma=_log_uniform(rng, *sigma), jitter=float(rng.uniform(0.05, 0.5)),
                   non_learner_share=float(rng.uniform(0.0, 0.3)) if rng.random() < 0.3 else 0.0,
                   modifiers=tuple(m for m, p in MODIFIERS.items() if rng.random() < p))


def progress_left(shape: str, x: np.ndarray, t: float, d: float, a: float, onset: float) -> np.ndarray:
    """s(x): the share of the initial excess loss left at run share x (1 at x = 0, falling)."""
    u = x / t
    if shape == "pow3":
        return (1.0 + u) ** -d
    if shape == "pow4":
        return (1.0 + u**d) ** (-a / d)
    if shape in ("mmf", "slow_start"):
        return 1.0 / (1.0 + u**d)
    if shape in ("janoschek", "weibull"):
        return np.exp(-(u**d))
    if shape == "exponential":
        return np.exp(-u)
    if shape == "log_power":
        return 1.0 / (1.0 + np.log1p(u) ** d)
    if shape == "ilog2":
        return np.log(2.0) / np.log(2.0 + u)
    if shape == "plateau_drop":
        return np.exp(-((np.maximum(x - onset, 0.0) / t) ** d))
    if shape == "two_phase":
        w = min(a / 3.0, 0.9)
        return w / (1.0 + u**d) + (1.0 - w) * np.exp(-np.maximum(x - onset, 0.0) / min(1.0, 4.0 * t))
    if shape == "linear":
        return np.clip(1.0 - u, 0.0, 1.0) ** d
    raise ValueError(f"unknown shape {shape!r}; shapes are {list(SHAPES)}")


def _noise(family: Family, clean: np.ndarray, c: float, l0: float, rng: np.random.Generator) -> np.ndarray:
    n, s = clean.size, family.sigma
    if family.noise == "log_gauss":
        return clean * np.exp(s * rng.standard_normal(n))
    if family.noise == "hetero":
        return np.maximum(clean + s * (clean - c + 0.15 * c) * rng.standard_normal(n), 1e-3 * clean)
    if family.noise == "ar1":
        phi = float(rng.uniform(0.5, 0.98))
        shocks = rng.standard_normal(n) * np.sqrt(1.0 - phi**2)
        a = np.empty(n)
        a[0] = rng.standard_normal()
        for i in range(1, n):  # n <= a few thousand
            a[i] = phi * a[i - 1] + shocks[i]
        return clean * np.exp(s * a)
    if family.noise == "stepwise":
        cuts = np.flatnonzero(rng.random(n) < 1.0 / float(rng.uniform(5, 40)))
        levels = rng.standard_normal(cuts.size + 1)
        return clean * np.exp(s * levels[np.searchsorted(cuts, np.arange(n), side="right")])
    if family.noise == "rl":
        return np.maximum(clean + s * l0 * rng.standard_normal(n) * np.sqrt(np.maximum(clean, c) / l0), LOSS_FLOOR)
    raise ValueError(f"unknown noise {family.noise!r}; noises are {list(NOISES)}")


def sample_run(family: Family, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """One run of ``family``: (per-batch losses, flag bits)."""
    j = family.jitter
    length = max(20, int(round(family.length * np.exp(0.2 * j * rng.standard_normal()))))
    l0 = family.l0 * np.exp(j * rng.standard_normal())
    n = np.arange(1, length + 1, dtype=np.float64)
    if rng.random() < family.non_learner_share:
        drift = 1.0 - 0.05 * rng.random() * n / length
        return np.clip(_noise(family, l0 * drift, 0.9 * l0, l0, rng), LOSS_FLOOR, None), NON_LEARNER
    c = l0 * min(family.floor_ratio * np.exp(j * rng.standard_normal()), 0.95)
    x = n / length
    t = family.scale * np.exp(j * rng.standard_normal())
    d = family.sharpness * np.exp(0.5 * j * rng.standard_normal())
    onset = float(np.clip(family.onset + 0.1 * j * rng.standard_normal(), 0.0, 0.95))
    clean = c + (l0 - c) * progress_left(family.shape, x, t, d, family.power, onset)
    for modifier in family.modifiers:
        if rng.random() < 0.5:
            clean = _modify(modifier, clean, l0, rng)
    return np.clip(_noise(family, clean, c, l0, rng), LOSS_FLOOR, 1e6), 0


def _modify(modifier: str, clean: np.ndarray, l0: float, rng: np.random.Generator) -> np.ndarray:
    n = np.arange(clean.size, dtype=np.float64)
    if modifier == "spikes":
        out = clean.copy()
        for start in rng.choice(clean.size, size=1 + rng.poisson(clean.size / 200), replace=False):
            size, decay = _log_uniform(rng, 1.2, 8.0), _log_uniform(rng, 2.0, 50.0)
            out *= 1.0 + (size - 1.0) * np.where(n >= start, np.exp(-np.maximum(n - start, 0.0) / decay), 0.0)
        return out
    if modifier == "collapse":
        at, tau = float(rng.uniform(0.2, 0.9)) * clean.size, _log_uniform(rng, 2.0, 30.0)
        rise = np.where(n >= at, 1.0 - np.exp(-np.maximum(n - at, 0.0) / tau), 0.0)
        if rng.random() < 0.5:  # recovers: the excess decays again over a longer time
            rise *= np.where(n >= at, np.exp(-np.maximum(n - at, 0.0) / (10.0 * tau + clean.size * 0.2)), 0.0)
        return clean + (l0 - clean) * rise
    if modifier == "divergence":
        at, growth = float(rng.uniform(0.3, 0.9)) * clean.size, float(rng.uniform(2.0, 12.0))
        return np.minimum(clean * np.exp(growth * np.maximum(n - at, 0.0) / clean.size), 1e6)
    raise ValueError(f"unknown modifier {modifier!r}; modifiers are {list(MODIFIERS)}")


def sample_family(seed: int, index: int, runs: int = RUNS) -> tuple[Family, list[np.ndarray], list[int]]:
    """Family ``index`` of prior ``seed`` and its ``runs`` runs (curves, flags)."""
    rng = np.random.default_rng([int(seed), int(index)])
    family = Family.draw(rng)
    drawn = [sample_run(family, rng) for _ in range(runs)]
    return family, [curve for curve, _ in drawn], [flag for _, flag in drawn]


def prior_bank(families: int, seed: int = 0, runs: int = RUNS, first: int = 0, name: str = "prior") -> CurveBank:
    """A :class:`CurveBank` of ``families`` synthetic families (indices ``first`` ...), ``runs`` runs each,
    labelled ``SHAPE/NOISE/INDEX``."""
    if isinstance(families, bool) or not isinstance(families, (int, np.integer)) or families < 1:
        raise ValueError(f"families must be an int >= 1, got {families!r}")
    if isinstance(runs, bool) or not isinstance(runs, (int, np.integer)) or runs < 2:
        raise ValueError(f"runs must be an int >= 2 (a family's targets come from its other runs), got {runs!r}")
    curves, labels, flags = [], [], []
    for i in range(first, first + families):
        family, runs_i, flags_i = sample_family(seed, i, runs)
        curves += runs_i
        flags += flags_i
        labels += [f"{family.shape}/{family.noise}/{i}"] * len(runs_i)
    return CurveBank(name, curves, labels, flags)


def figure(seed: int = 0, runs: int = 4):
    """One family per shape (``runs`` runs each), log loss against batches."""
    with needs(__name__):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 4, figsize=(13, 8.5), sharex=False)
    found: dict[str, int] = {}
    i = 0
    while len(found) < len(SHAPES) and i < 10_000:
        shape = Family.draw(np.random.default_rng([seed, i])).shape
        found.setdefault(shape, i)
        i += 1
    for ax, shape in zip(axes.flat, SHAPES):
        family, curves, flags = sample_family(seed, found[shape], runs)
        for curve, flag in zip(curves, flags):
            ax.plot(np.arange(1, curve.size + 1), curve, lw=0.7, ls="--" if flag else "-")
        ax.set_yscale("log")
        extra = f", {'+'.join(family.modifiers)}" if family.modifiers else ""
        ax.set_title(f"{shape} ({family.noise}{extra})", fontsize=9)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"Synthetic curve prior: one family per shape, {runs} runs each (seed {seed}; dashed: non-learners)")
    fig.supxlabel("batch")
    fig.supylabel("training loss")
    fig.tight_layout()
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mara_agents.predictors.curve_prior", description=__doc__.split("\n")[0])
    parser.add_argument("--figure", type=Path, required=True, help="write a PNG of sample curves here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    fig = figure(args.seed)
    args.figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.figure, dpi=90)
    print(f"wrote {args.figure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
