"""Fit the parametric prior to the real-curve corpus (offline tool; needs scipy, in the ``curves`` extra).

Each learner curve of the corpus's *train* split is fitted, in log-loss space on ~120 log-spaced
points of its smoothed curve, with the plateau-then-power-law model of ../research/curves.md §3.5:

    l(n) = l_inf + (l0 - l_inf) / (1 + (n / n_c) ** delta) ** (alpha / delta)

and its heteroscedastic per-batch noise level ``rel_noise = std(raw - model) / (model - l_inf + 0.15 l_inf)``.
The fitted parameter vectors, the lengths and the non-learner share of every family are written to
``core_env/data/corpus/prior_fit.json``; :mod:`core_env.curves.prior` samples from them (numpy only).
Fit quality (R² in log space, median absolute log error) is recorded per family.

Usage: ``python -m core_env.curves.fit`` (after packing the corpus).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from core_env.curves.bank import NON_LEARNER
from core_env.curves.corpus import CORPUS_DIR, SPLIT_CODES, _sha256, read_family, read_manifest
from core_env.extras import needs

FIT_PATH = CORPUS_DIR / "prior_fit.json"
PARAMS = ("l0", "l_inf", "n_c", "alpha", "delta", "rel_noise")


def model(n: np.ndarray, l0: float, l_inf: float, n_c: float, alpha: float, delta: float) -> np.ndarray:
    """The plateau-then-power-law curve (losses at batch positions ``n``)."""
    return l_inf + (l0 - l_inf) / (1.0 + (n / n_c) ** delta) ** (alpha / delta)


def _smooth(raw: np.ndarray) -> np.ndarray:
    window = int(min(raw.size, max(5, raw.size // 50)))
    kernel = np.ones(window) / window
    padded = np.concatenate([np.full(window // 2, raw[0]), raw, np.full(window - 1 - window // 2, raw[-1])])
    return np.convolve(padded, kernel, mode="valid")


def fit_curve(raw: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(l0, l_inf, n_c, alpha, delta, rel_noise), R² and median |log error| of one curve's fit."""
    with needs(__name__, "curves"):
        from scipy.optimize import least_squares

    smooth = np.maximum(_smooth(raw), 1e-6)
    n = np.unique(np.geomspace(1, raw.size, 120).astype(int)) - 1
    y = np.log(smooth[n])
    x = n.astype(float) + 1.0
    lo_l0, hi = float(smooth[: max(3, raw.size // 50)].mean()), float(smooth.max())
    floor0 = max(float(smooth[-max(3, raw.size // 20) :].mean()) * 0.9, 1e-6)

    def residual(theta: np.ndarray) -> np.ndarray:
        l0, l_inf, n_c, alpha, delta = np.exp(theta)
        return np.log(np.maximum(model(x, l0, l_inf, n_c, alpha, delta), 1e-9)) - y

    start = np.log([lo_l0, floor0, max(raw.size / 20, 2.0), 0.7, 2.0])
    lower = np.log([1e-6, 1e-7, 0.5, 0.05, 0.3])
    upper = np.log([max(hi * 2, 1e-5), max(hi, 1e-5), raw.size * 10.0, 5.0, 20.0])
    start = np.clip(start, lower + 1e-6, upper - 1e-6)
    result = least_squares(residual, start, bounds=(lower, upper), max_nfev=400)
    l0, l_inf, n_c, alpha, delta = np.exp(result.x)
    err = result.fun
    r2 = 1.0 - float(np.sum(err**2)) / max(float(np.sum((y - y.mean()) ** 2)), 1e-12)
    clean = model(np.arange(raw.size, dtype=float) + 1.0, l0, l_inf, n_c, alpha, delta)
    rel_noise = float(np.std((raw - clean) / (clean - l_inf + 0.15 * l_inf)))
    return np.array([l0, l_inf, n_c, alpha, delta, rel_noise]), r2, float(np.median(np.abs(err)))


def fit_corpus(directory: Path = CORPUS_DIR) -> dict:
    """Fit every family of the corpus (train split) and return the JSON-ready result."""
    manifest = read_manifest(directory)
    out = {"model": "l_inf + (l0 - l_inf) / (1 + (n / n_c)^delta)^(alpha / delta), n = batch + 1", "params": list(PARAMS), "families": {}}
    for family in sorted(manifest["families"]):
        arrays = read_family(family, directory)
        values, offsets = arrays["values"].astype(np.float64), arrays["offsets"]
        train = np.flatnonzero(arrays["split"] == SPLIT_CODES["train"])
        learners = [i for i in train if not arrays["flags"][i] & NON_LEARNER and offsets[i + 1] - offsets[i] >= 20]
        rows, r2s, errs, lengths = [], [], [], []
        for i in learners:
            raw = values[offsets[i] : offsets[i + 1]]
            params, r2, err = fit_curve(raw)
            rows.append([float(f"{p:.6g}") for p in params])
            r2s.append(r2)
            errs.append(err)
            lengths.append(int(raw.size))
        non_learners = [i for i in train if arrays["flags"][i] & NON_LEARNER]
        levels = [float(np.median(values[offsets[i] : offsets[i] + max(5, (offsets[i + 1] - offsets[i]) // 20)])) for i in non_learners]
        out["families"][family] = {
            "task_set": manifest["families"][family]["task_set"],
            "runs": int(train.size),
            "non_learner_share": float(len(non_learners) / max(train.size, 1)),
            "non_learner_levels": [float(f"{v:.6g}") for v in levels],
            "params": rows,
            "lengths": lengths,
            "fit": {"median_r2": float(np.median(r2s)) if r2s else None, "p10_r2": float(np.percentile(r2s, 10)) if r2s else None,
                    "median_abs_log_error": float(np.median(errs)) if errs else None},
        }
    return out


def main() -> None:
    result = fit_corpus()
    FIT_PATH.write_text(json.dumps(result, sort_keys=True, separators=(",", ":")) + "\n")
    manifest_path = CORPUS_DIR / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"][FIT_PATH.name] = _sha256(FIT_PATH)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    read_manifest.cache_clear()
    print(f"{'family':>18} {'runs':>5} {'fitted':>6} {'median R2':>9} {'p10 R2':>7} {'med |log err|':>13} {'non-learners':>12}")
    for family, info in result["families"].items():
        fit = info["fit"]
        print(f"{family:>18} {info['runs']:>5} {len(info['params']):>6} {fit['median_r2'] or float('nan'):>9.3f} "
              f"{fit['p10_r2'] or float('nan'):>7.3f} {fit['median_abs_log_error'] or float('nan'):>13.4f} {info['non_learner_share']:>12.2f}")
    print(f"wrote {FIT_PATH}")


if __name__ == "__main__":
    main()
