"""Corpus report for docs/curves.md: per-family statistics, the realism check and sample-curve figures.

Offline tool (needs scipy and matplotlib). Per family: runs, steps, share of non-learners and diverged
runs, the noise-to-drop ratio (std of raw − smoothed over the smoothed curve's total drop, median over
learners), and the realism check of ../research/curves.md §2.2: set the target to the smoothed loss at
80% of the curve, fit a power law with floor (pow3: l = c + a·n^−α) to the first 30%, and count how often
its predicted first-hit step lies within 2× of the true one (non-learners excluded; a fit that never
reaches the target counts as a miss). Figures: ``docs/figures/curves_{family}.png``.

Usage: ``python -m core_env.curves.report`` (prints a Markdown table).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from core_env.curves.bank import DIVERGED, NON_LEARNER
from core_env.curves.corpus import CORPUS_DIR, read_family, read_manifest
from core_env.extras import needs

FIGURES = Path(__file__).resolve().parents[2] / "docs" / "figures"


def _smooth(raw: np.ndarray) -> np.ndarray:
    window = int(min(raw.size, max(5, raw.size // 100)))
    c = np.concatenate([[0.0], np.cumsum(np.concatenate([np.full(window - 1, raw[0]), raw]))])
    return (c[window:] - c[:-window]) / window


def pow3_within_2x(raw: np.ndarray) -> bool:
    """Does a pow3 fit on the first 30% predict the step the smoothed curve first hits its 80% value within 2×?"""
    with needs(__name__, "curves"):
        from scipy.optimize import curve_fit

    smooth = _smooth(raw)
    target = smooth[int(0.8 * raw.size)]
    true_hit = int(np.argmax(smooth <= target)) + 1
    head = max(10, int(0.3 * raw.size))
    n = np.arange(1, head + 1, dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            (c, a, alpha), _ = curve_fit(lambda x, c, a, al: c + a * x ** (-al), n, smooth[:head],
                                         p0=(smooth[head - 1] * 0.5, max(smooth[0], 1e-3), 0.5),
                                         bounds=([0, 0, 0], [np.inf, np.inf, 5]), maxfev=4000)
        except (RuntimeError, ValueError):
            return False
    if target <= c or a <= 0 or alpha <= 0:
        return False
    predicted = ((target - c) / a) ** (-1.0 / alpha)
    return bool(0.5 * true_hit <= predicted <= 2.0 * true_hit)


def family_table(directory: Path = CORPUS_DIR) -> list[dict]:
    rows = []
    for family in sorted(read_manifest(directory)["families"]):
        arrays = read_family(family, directory)
        values, offsets, flags = arrays["values"].astype(np.float64), arrays["offsets"], arrays["flags"]
        lengths = np.diff(offsets)
        learners = [i for i in range(flags.size) if not flags[i] & NON_LEARNER and lengths[i] >= 20]
        ratios, hits = [], []
        for i in learners:
            raw = values[offsets[i] : offsets[i + 1]]
            smooth = _smooth(raw)
            drop = smooth[0] - smooth.min()
            if drop > 0:
                ratios.append(float(np.std(raw - smooth) / drop))
            hits.append(pow3_within_2x(raw))
        rows.append({"family": family, "runs": int(flags.size), "steps": f"{lengths.min()}–{lengths.max()}" if lengths.min() != lengths.max() else str(lengths.min()),
                     "non_learners": float(np.mean(flags & NON_LEARNER > 0)), "diverged": float(np.mean(flags & DIVERGED > 0)),
                     "noise_to_drop": float(np.median(ratios)) if ratios else float("nan"),
                     "pow3_within_2x": float(np.mean(hits)) if hits else float("nan")})
    return rows


def draw_figures(directory: Path = CORPUS_DIR, out: Path = FIGURES, per_family: int = 8) -> list[Path]:
    with needs(__name__):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for family in sorted(read_manifest(directory)["families"]):
        arrays = read_family(family, directory)
        values, offsets = arrays["values"].astype(np.float64), arrays["offsets"]
        picks = np.linspace(0, arrays["run_index"].size - 1, min(per_family, arrays["run_index"].size)).astype(int)
        fig, ax = plt.subplots(figsize=(6, 3.5), dpi=90)
        for i in picks:
            raw = values[offsets[i] : offsets[i + 1]]
            ax.plot(np.arange(1, raw.size + 1), raw, lw=0.4, alpha=0.35)
            ax.plot(np.arange(1, raw.size + 1), _smooth(raw), lw=1.2, label=f"run {arrays['run_index'][i]}" + (" (non-learner)" if arrays["flags"][i] & NON_LEARNER else ""))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("step (mini-batch / RL update)")
        ax.set_ylabel("training loss")
        ax.set_title(f"{family}: {len(picks)} sample curves (raw and smoothed)")
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        path = out / f"curves_{family}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def main() -> None:
    rows = family_table()
    print("| family | runs | steps | non-learners | diverged | noise / drop (median) | pow3 fit within 2× |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['family']} | {r['runs']} | {r['steps']} | {100 * r['non_learners']:.0f}% | {100 * r['diverged']:.1f}% | "
              f"{r['noise_to_drop']:.3f} | {100 * r['pow3_within_2x']:.0f}% |")
    for path in draw_figures():
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
