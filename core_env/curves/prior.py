"""Parametric stand-in curves (``source="prior"``), one sampler per shape family.

Until the committed real-curve corpus backs the task sets, the banks are drawn from these samplers. The
shapes follow ../research/curves.md §3.5: a plateau-then-power-law curve with a floor,

    l(n) = l_inf + (l0 - l_inf) / (1 + (n / n_c) ** delta) ** (alpha / delta),

with heteroscedastic multiplicative per-batch noise, plus a non-monotone RL family and a tail of
non-learners (flat curves, flagged, naturally infeasible tasks). Everything is drawn from a seeded
``numpy.random.Generator``: the same seed gives the same bank on every machine.

Families per task set:

* ``id``: ``mlp`` (plateau then drop to a floor), ``cnn`` (short plateau, power law), ``lm`` (power law
  with a high floor, low noise).
* ``vit_ood``: ``vit`` (long plateau, then a sudden drop; occasional loss spikes).
* ``rl_ood``: ``rl`` (loss = 1 - normalized return: sigmoidal progress with collapses and recoveries).
"""

from __future__ import annotations

import zlib

import numpy as np

from core_env.curves.bank import NON_LEARNER, CurveBank

#: Curves per bank and split for the stand-in.
PRIOR_BANK_SIZE = {"train": 400, "eval": 200}

#: Probability that a drawn curve is a non-learner.
NON_LEARNER_SHARE = 0.08


def _plateau_power(n: np.ndarray, l0: float, floor: float, n_c: float, alpha: float, delta: float) -> np.ndarray:
    return floor + (l0 - floor) / (1.0 + (n / n_c) ** delta) ** (alpha / delta)


def _noisy(rng: np.random.Generator, clean: np.ndarray, floor: float, rel_noise: float) -> np.ndarray:
    """Per-batch noise whose scale shrinks with the remaining gap to the floor (heteroscedastic)."""
    scale = rel_noise * (clean - floor + 0.15 * floor)
    return np.maximum(clean + scale * rng.standard_normal(clean.size), 1e-4)


def _mlp(rng: np.random.Generator) -> np.ndarray:
    length = int(rng.integers(1000, 2001))
    n = np.arange(length, dtype=float)
    l0 = float(np.log(rng.choice([2, 3, 5, 10])))
    floor = l0 * float(rng.uniform(0.01, 0.4))
    clean = _plateau_power(n, l0, floor, rng.uniform(10, 300), rng.uniform(0.3, 1.2), rng.uniform(2, 6))
    return _noisy(rng, clean, floor, rng.uniform(0.03, 0.12))


def _cnn(rng: np.random.Generator) -> np.ndarray:
    length = int(rng.integers(1000, 1501))
    n = np.arange(length, dtype=float)
    l0 = float(np.log(10))
    floor = float(rng.uniform(0.2, 0.9))
    clean = _plateau_power(n, l0, floor, rng.uniform(5, 80), rng.uniform(0.4, 1.0), rng.uniform(1.5, 4))
    return _noisy(rng, clean, floor, rng.uniform(0.04, 0.1))


def _lm(rng: np.random.Generator) -> np.ndarray:
    length = 1000
    n = np.arange(length, dtype=float)
    l0 = float(rng.uniform(4.5, 5.2))
    floor = float(rng.uniform(1.8, 2.4))
    clean = _plateau_power(n, l0, floor, rng.uniform(1, 20), rng.uniform(0.5, 0.7), rng.uniform(1, 2))
    return _noisy(rng, clean, floor, rng.uniform(0.02, 0.05))


def _vit(rng: np.random.Generator) -> np.ndarray:
    length = 1000
    n = np.arange(length, dtype=float)
    l0 = float(np.log(10))
    floor = float(rng.uniform(0.02, 0.5))
    clean = _plateau_power(n, l0, floor, rng.uniform(80, 500), rng.uniform(0.6, 0.8), rng.uniform(6, 12))
    curve = _noisy(rng, clean, floor, rng.uniform(0.03, 0.1))
    for _ in range(rng.poisson(1.0)):  # early loss spikes decaying geometrically
        at = int(rng.integers(0, length // 2))
        height = float(rng.uniform(0.5, 3.0)) * l0
        span = np.arange(length - at)
        curve[at:] += height * 0.8**span
    return curve


def _rl(rng: np.random.Generator) -> np.ndarray:
    length = 300
    n = np.arange(length, dtype=float)
    progress = 1.0 / (1.0 + np.exp(-(n - rng.uniform(30, 200)) / rng.uniform(5, 40)))
    ceiling = float(rng.uniform(0.6, 1.0))
    dips = np.ones(length)
    for _ in range(rng.poisson(2.0)):  # collapses with geometric recovery
        at = int(rng.integers(0, length))
        depth = float(rng.uniform(0.2, 0.8))
        dips[at:] *= 1.0 - depth * float(rng.uniform(0.85, 0.97)) ** np.arange(length - at)
    ret = ceiling * progress * dips + float(rng.uniform(0.03, 0.12)) * rng.standard_normal(length)
    return np.clip(1.0 - ret, 2e-3, 1.0)


def _flat(rng: np.random.Generator, like: np.ndarray) -> np.ndarray:
    level = float(np.median(like[: max(5, like.size // 20)]))
    return np.maximum(level * (1.0 + 0.05 * rng.standard_normal(like.size)), 1e-4)


FAMILIES = {"id": {"mlp": _mlp, "cnn": _cnn, "lm": _lm}, "vit_ood": {"vit": _vit}, "rl_ood": {"rl": _rl}}


def prior_bank(task_set: str, split: str = "eval", size: int | None = None, seed: int = 0) -> CurveBank:
    """A bank of stand-in curves for ``task_set`` (``id``, ``rl_ood``, ``vit_ood``) and ``split``."""
    if task_set not in FAMILIES:
        raise ValueError(f"no parametric prior for task set {task_set!r}; expected one of {sorted(FAMILIES)}")
    if split not in PRIOR_BANK_SIZE:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(PRIOR_BANK_SIZE)}")
    size = PRIOR_BANK_SIZE[split] if size is None else int(size)
    rng = np.random.default_rng([seed, zlib.crc32(task_set.encode()), zlib.crc32(split.encode())])
    samplers = FAMILIES[task_set]
    names = sorted(samplers)
    curves, family, flags = [], [], []
    for _ in range(size):
        name = names[int(rng.integers(len(names)))]
        curve = samplers[name](rng)
        flag = 0
        if rng.random() < NON_LEARNER_SHARE:
            curve, flag = _flat(rng, curve), NON_LEARNER
        curves.append(curve)
        family.append(name)
        flags.append(flag)
    return CurveBank(f"{task_set}", curves, family, flags)
