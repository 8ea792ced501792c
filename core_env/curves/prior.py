"""The parametric prior (``source="prior"``): curves sampled from per-family fits to the real corpus.

Every family of the corpus was fitted (``python -m core_env.curves.fit``, results committed in
``core_env/data/corpus/prior_fit.json``) with the plateau-then-power-law model of
../research/curves.md §3.5,

    l(n) = l_inf + (l0 - l_inf) / (1 + (n / n_c) ** delta) ** (alpha / delta),

plus heteroscedastic per-batch noise ``rel_noise · (l − l_inf + 0.15 l_inf) · N(0, 1)``. A prior curve
picks a family (weighted by its number of corpus runs), then one fitted parameter vector of that family
(an empirical prior), jitters each shape parameter by a log-normal factor (σ = 0.1), and draws fresh
noise. Non-learners appear with the family's corpus share, as flat noisy curves at a corpus
non-learner's level. What the prior cannot express (spikes, collapses and recoveries of RL curves, noise
correlated across steps) is exactly why the real curves are the default; fit quality per family is in
docs/curves.md. Everything comes from a seeded ``numpy.random.Generator``.
"""

from __future__ import annotations

import functools
import json
import zlib

import numpy as np

from core_env.curves.bank import NON_LEARNER, CurveBank
from core_env.curves.corpus import CORPUS_DIR, CorpusError, _sha256, read_manifest

FIT_PATH = CORPUS_DIR / "prior_fit.json"

#: Curves per prior bank and split (train and eval banks are drawn from different seeds).
PRIOR_BANK_SIZE = {"train": 1000, "eval": 400}
JITTER = 0.1


@functools.lru_cache(maxsize=None)
def read_fit() -> dict:
    if not FIT_PATH.exists():
        raise CorpusError(f"the prior fit {FIT_PATH} is missing; run `python -m core_env.curves.fit`")
    expected = read_manifest()["files"].get(FIT_PATH.name)
    actual = _sha256(FIT_PATH)
    if actual != expected:
        raise CorpusError(f"checksum mismatch for {FIT_PATH.name}: expected sha256 {expected}, got {actual}")
    return json.loads(FIT_PATH.read_text())


def sample_curve(rng: np.random.Generator, params: list[float], length: int) -> np.ndarray:
    """One noisy curve from a fitted parameter vector (l0, l_inf, n_c, alpha, delta, rel_noise)."""
    l0, l_inf, n_c, alpha, delta, rel_noise = params
    l0, l_inf, n_c, alpha, delta = np.array([l0, l_inf, n_c, alpha, delta]) * np.exp(JITTER * rng.standard_normal(5))
    l_inf = min(l_inf, 0.999 * l0)
    n = np.arange(length, dtype=np.float64) + 1.0
    clean = l_inf + (l0 - l_inf) / (1.0 + (n / n_c) ** delta) ** (alpha / delta)
    noise = rel_noise * (clean - l_inf + 0.15 * l_inf) * rng.standard_normal(length)
    return np.maximum(clean + noise, 1e-3 * clean)


def prior_bank(task_set: str, split: str = "eval", size: int | None = None, seed: int = 0) -> CurveBank:
    """A bank of prior curves for ``task_set`` (``id``, ``rl_ood``, ``vit_ood``) and ``split``."""
    if split not in PRIOR_BANK_SIZE:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(PRIOR_BANK_SIZE)}")
    families = {f: info for f, info in read_fit()["families"].items() if info["task_set"] == task_set and info["params"]}
    if not families:
        raise ValueError(f"no fitted prior for task set {task_set!r}")
    names = sorted(families)
    weights = np.array([families[f]["runs"] for f in names], dtype=float)
    size = PRIOR_BANK_SIZE[split] if size is None else int(size)
    rng = np.random.default_rng([seed, zlib.crc32(task_set.encode()), zlib.crc32(split.encode())])
    curves, family, flags = [], [], []
    for _ in range(size):
        name = names[int(rng.choice(len(names), p=weights / weights.sum()))]
        info = families[name]
        row = int(rng.integers(len(info["params"])))
        length = int(info["lengths"][row])
        if info["non_learner_levels"] and rng.random() < info["non_learner_share"]:
            level = info["non_learner_levels"][int(rng.integers(len(info["non_learner_levels"])))]
            curves.append(np.maximum(level * (1.0 + 0.05 * rng.standard_normal(length)), 1e-6))
            flags.append(NON_LEARNER)
        else:
            curves.append(sample_curve(rng, info["params"][row], length))
            flags.append(0)
        family.append(name)
    return CurveBank(task_set, curves, family, flags)
