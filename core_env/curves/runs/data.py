"""Offline datasets for the curve families (cached per process; nothing is downloaded)."""

from __future__ import annotations

import functools
import sysconfig
from pathlib import Path

import numpy as np

from core_env.extras import needs


def _split_standardize(X: np.ndarray, y: np.ndarray, test_frac: float = 0.2, seed: int = 0):
    """Fixed train/test split (seeded) and per-feature standardisation with train statistics."""
    perm = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(test_frac * len(y)))
    te, tr = perm[:n_test], perm[n_test:]
    X = X.astype(np.float64)
    mu, sd = X[tr].mean(0), X[tr].std(0)
    sd[sd < 1e-8] = 1.0
    X = ((X - mu) / sd).astype(np.float32)
    return X[tr], y[tr].astype(np.int64), X[te], y[te].astype(np.int64)


@functools.lru_cache(maxsize=None)
def tabular(name: str):
    """(X_train, y_train, X_test, y_test, n_classes) for an sklearn dataset."""
    with needs(__name__, "curves"):
        from sklearn import datasets

    if name == "digits":
        X, y = datasets.load_digits(return_X_y=True)
    elif name == "wine":
        X, y = datasets.load_wine(return_X_y=True)
    elif name == "breast_cancer":
        X, y = datasets.load_breast_cancer(return_X_y=True)
    elif name == "synth":
        X, y = datasets.make_classification(
            n_samples=5000, n_features=40, n_informative=12, n_redundant=8, n_classes=5,
            n_clusters_per_class=2, flip_y=0.05, class_sep=1.0, random_state=0,
        )
    else:
        raise ValueError(f"unknown tabular dataset {name!r}")
    Xtr, ytr, Xte, yte = _split_standardize(X, y)
    return Xtr, ytr, Xte, yte, int(y.max()) + 1


@functools.lru_cache(maxsize=None)
def digits_images():
    """sklearn digits as (N, 8, 8) float32 in [0, 1], fixed 80/20 split."""
    with needs(__name__, "curves"):
        from sklearn import datasets

    X, y = datasets.load_digits(return_X_y=True)
    perm = np.random.default_rng(0).permutation(len(y))
    n_test = int(round(0.2 * len(y)))
    te, tr = perm[:n_test], perm[n_test:]
    X = (X / 16.0).astype(np.float32).reshape(-1, 8, 8)
    return X[tr], y[tr].astype(np.int64), X[te], y[te].astype(np.int64)


@functools.lru_cache(maxsize=None)
def mnist1d():
    """MNIST-1D generated offline with the package defaults (4,000 train / 1,000 test, length 40)."""
    with needs(__name__, "curves"):
        from mnist1d.data import get_dataset_args, make_dataset

    state = np.random.get_state()  # make_dataset reseeds numpy's global RNG; restore it afterwards
    try:
        d = make_dataset(get_dataset_args())
    finally:
        np.random.set_state(state)
    return (d["x"].astype(np.float32), d["y"].astype(np.int64), d["x_test"].astype(np.float32), d["y_test"].astype(np.int64))


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


@functools.lru_cache(maxsize=None)
def stdlib_text() -> tuple[np.ndarray, np.ndarray, dict]:
    """Bytes of the running Python's top-level stdlib ``*.py`` files (sorted by name), as uint8.

    Returns (train, valid, info): the last 5 % of the stream is held out for validation.
    """
    files = sorted(stdlib_dir().glob("*.py"), key=lambda p: p.name)
    blob = b"\n".join(p.read_bytes() for p in files)
    data = np.frombuffer(blob, dtype=np.uint8)
    cut = int(len(data) * 0.95)
    info = {"n_files": len(files), "n_bytes": int(len(data)), "stdlib_dir": str(stdlib_dir())}
    return data[:cut], data[cut:], info
