"""Train the PFN predictor: ``python -m mara_agents.predictors.train_pfn`` (a few minutes on 2 cores).

**Data** (what may train, tune and choose: nothing of ``rl_ood``, ``vit_ood`` or any evaluation split is read):

* the synthetic prior (:mod:`mara_agents.predictors.curve_prior`): families ``0 … F−1`` of
  :data:`PRIOR_SEED` fit, the next :data:`PRIOR_VALIDATION` families (kinds of run the model never saw)
  validate;
* the ``id`` task set's train split, divided by curve as for FM (every 5th curve validates,
  :func:`~mara_agents.predictors.train_fm.split_bank`).

Examples are simulated as for FM (:func:`~mara_agents.predictors.train_fm.simulate_examples`): tasks
drawn by the environment's recipe on each bank with the bank itself as the reference runs (so targets
and windows are set from a family's other runs, as in every task set), cut after h node-steps, h
uniform in 1 … min(demand, window) − 1. The label is the remaining demand's bin
(:func:`~mara_agents.predictors.pfn.demand_bins`); the window is the task's deadline window. By default each
task gives one example, so at a given h a task that finishes soon weighs as much as one that runs long; a
scheduler meets a task once per node-step it runs, and ``--per-step R`` draws examples that way (Poisson(R ·
(min(demand, window) − 1)) per task, validation sets included), which calibrates P(demand <= budget) at the
points where allocators read it.

**Training**: cross-entropy, AdamW with warm-up and cosine decay, on a ``--prior-share`` mix of prior
and ``id`` examples; ``--budget-loss W`` adds W times the binary cross-entropy of P(demand <= budget) at each
example's budget (:func:`budget_bce`, the decision region weighted beside the bins). **Calibration**: one temperature, chosen on the ``id`` validation examples (NLL
on a grid). **Validation metrics** (both validation sets; FM and WLS scored beside it on the same
examples for the record): NLL, Brier of P(demand <= budget) with budget = window − h, AUC, ECE,
capped MAE (cap 120, FM's horizon).

**Output**: ``--out`` (default ``build/pfn/pfn.pt``) + its manifest ``pfn.json``
(:func:`~mara_agents.predictors.pfn.save_model`). The shipped ``mara_agents/checkpoints/pfn.pt`` is replaced only
with ``--out`` there and ``--overwrite-shipped``. Every flag is range-checked when parsed (the validators of
:mod:`mara_agents.cli_checks`): a bad value exits 2 with argparse's error line naming the flag.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from core_env.curves import bank_for
from core_env.extras import needs
from mara_agents.predictors.curve_prior import RUNS, prior_bank
from mara_agents.checkpoint_files import MAX_LAYERS, MAX_WIDTH
from mara_agents.cli_checks import (BATCH_MAX, BUILD_DIR, EXAMPLES_MAX, SEED_MAX, STEPS_MAX, THREADS_MAX, add_output_flags, float_flag,
                                    int_flag, output_file)
from mara_agents.predictors.pfn import (DEFAULT_CHECKPOINT, PFNConfig, PFNModel, PFNPredictor, cdf_matrix, demand_bins, features,
                                        save_model)
from mara_agents.predictors.train_fm import Examples, simulate_examples, split_bank, fit_loop

with needs(__name__):
    import torch

PRIOR_SEED = 20261202
PRIOR_VALIDATION = 100
TEMPERATURES = np.round(np.arange(0.6, 2.01, 0.05), 2)
#: The most prior families ``--families`` may ask for (each is RUNS curves held in memory).
FAMILIES_MAX = 100_000
CAP = 120


def examples_of(bank, count: int, seed: int, per_step: float = 0.0) -> Examples:
    return simulate_examples(bank, count, np.random.default_rng(seed), (1,), per_step=per_step)


def windows_of(examples: Examples) -> np.ndarray:
    """(n,) deadline windows: the examples' budgets are window − h."""
    return examples.budget + np.array([len(h) for h in examples.histories], dtype=np.float64)


def tensors(examples: Examples, config: PFNConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(features, demand bin, budget): the budget (window − h, clipped to 0 … horizon) is where
    ``--budget-loss`` reads the predicted CDF."""
    x = features(list(examples.histories), examples.target, windows_of(examples), config)
    budget = np.clip(examples.budget, 0, config.horizon).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(demand_bins(examples.remaining, config.bin_widths)), torch.from_numpy(budget)


def _auc(p: np.ndarray, y: np.ndarray) -> float:
    with needs(__name__):
        from scipy.stats import rankdata

    pos = int(y.sum())
    neg = y.size - pos
    if pos == 0 or neg == 0:
        return float("nan")
    ranks = rankdata(p)
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def _ece(p: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    which = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        mine = which == b
        if mine.any():
            total += mine.sum() * abs(p[mine].mean() - y[mine].mean())
    return float(total / p.size)


def scores(summary, examples: Examples, cap: float = CAP) -> dict[str, float]:
    """Brier, AUC and ECE of P(demand <= budget) and the capped MAE of the median."""
    y = examples.remaining <= examples.budget
    p = np.asarray(summary.p_within_budget, dtype=np.float64)
    truth = np.minimum(examples.remaining, cap)
    return {"brier": float(np.mean((p - y) ** 2)), "auc": _auc(p, y), "ece": _ece(p, y),
            "capped_mae": float(np.mean(np.abs(np.minimum(summary.median, cap) - truth)))}


def score_predictor(predictor, examples: Examples) -> dict[str, float]:
    windows = windows_of(examples) if predictor.uses_window else None
    budgets = np.minimum(examples.budget, predictor.horizon)
    return scores(predictor.predict(list(examples.histories), examples.target, budgets, windows=windows), examples)


@torch.no_grad()
def nll(model: PFNModel, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    return float(torch.nn.functional.cross_entropy(model(x), y).item())


def budget_bce(logits: torch.Tensor, y: torch.Tensor, budget: torch.Tensor, cdf: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of P(demand <= budget) (the predicted CDF read at each example's budget) against whether
    the true demand bin lies within it: the decision a scheduler takes, weighted beside the bins' cross-entropy."""
    p = (torch.softmax(logits, dim=1) * cdf[:, budget].T).sum(dim=1).clamp(1e-6, 1 - 1e-6)
    hit = (cdf[y, budget] >= 1.0).float()
    return torch.nn.functional.binary_cross_entropy(p, hit)


def fit(model: PFNModel, x: torch.Tensor, y: torch.Tensor, steps: int, batch: int, lr: float, weight_decay: float, seed: int,
        validation: dict[str, tuple[torch.Tensor, ...]], log_every: int = 1000, progress: bool = True,
        budget: torch.Tensor | None = None, budget_loss: float = 0.0) -> list[dict[str, float]]:
    """Cross-entropy training (AdamW, warm-up then cosine decay, gradient clip 1), plus ``budget_loss`` times
    :func:`budget_bce` where that is > 0 (``budget``: each example's budget); returns the log."""
    model.set_normalization(x)
    cdf = torch.from_numpy(cdf_matrix(model.config.bin_widths)).float()

    def batch_loss(i: int, index: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        logits = model(x[index])
        loss = torch.nn.functional.cross_entropy(logits, y[index])
        if budget_loss > 0:
            loss = loss + budget_loss * budget_bce(logits, y[index], budget[index], cdf)
        if not torch.isfinite(loss):
            raise RuntimeError(f"non-finite training loss at step {i + 1}: stopping without writing a checkpoint")
        return loss

    def validate() -> dict[str, float]:
        return {f"{name}_nll": nll(model, *v[:2]) for name, v in validation.items()}

    return fit_loop(model, x.shape[0], batch_loss, validate, steps=steps, batch=batch, lr=lr, weight_decay=weight_decay,
                    seed=seed, log_every=log_every, train_key="train_nll", desc="pfn", progress=progress, mininterval=2.0)


def fit_temperature(model: PFNModel, x: torch.Tensor, y: torch.Tensor) -> tuple[float, dict[str, float]]:
    """The temperature of :data:`TEMPERATURES` with the lowest NLL on (x, y); sets it on the model."""
    grid = {}
    for t in TEMPERATURES.tolist():
        model.temperature.fill_(t)
        grid[str(t)] = nll(model, x, y)
    best = min(grid, key=grid.get)
    model.temperature.fill_(float(best))
    return float(best), grid


def inference_ms(predictor: PFNPredictor, examples: Examples, count: int = 1024, repeats: int = 11) -> float:
    """Median milliseconds of one predict call on ``count`` validation histories (one torch thread)."""
    index = np.arange(count) % len(examples)
    histories, targets = [examples.histories[i] for i in index], examples.target[index]
    windows, budgets = windows_of(examples)[index], np.minimum(examples.budget[index], predictor.horizon)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        predictor.predict(histories, targets, budgets, windows=windows)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            predictor.predict(histories, targets, budgets, windows=windows)
            times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return 1000.0 * float(np.median(times))


def validation_table(manifest: dict[str, Any]) -> str:
    """The manifest's selection metrics as Markdown: per validation set (held-out prior families, ``id``
    validation curves) and row, capped MAE, Brier, ECE and AUC (docs/prediction.md quotes this table)."""
    lines = ["| validation set | predictor | capped MAE | Brier | ECE | AUC |", "|---|---|---|---|---|---|"]
    for name, rows in manifest["validation"].items():
        for row, m in rows.items():
            lines.append(f"| {name} | {row} | {m['capped_mae']:.1f} | {m['brier']:.3f} | {m['ece']:.3f} | {m['auc']:.3f} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m mara_agents.predictors.train_pfn`` (every value range-checked when parsed)."""
    parser = argparse.ArgumentParser(prog="python -m mara_agents.predictors.train_pfn", description=__doc__.split("\n")[0])
    count = int_flag(1, EXAMPLES_MAX)
    parser.add_argument("--families", type=int_flag(1, FAMILIES_MAX), default=800, help="prior families that train (default 800)")
    parser.add_argument("--prior-examples", type=count, default=600_000)
    parser.add_argument("--id-examples", type=count, default=200_000)
    parser.add_argument("--validation-examples", type=count, default=40_000)
    parser.add_argument("--prior-share", type=float_flag(0.0, 1.0), default=0.7, help="share of each batch drawn from the prior examples")
    parser.add_argument("--no-prior", action="store_true", help="train on the id examples only (the ablation)")
    parser.add_argument("--per-step", type=float_flag(0.0), default=0.0,
                        help="examples per node-step a task runs (> 0: weighted as a scheduler meets them; default 0: one per task)")
    parser.add_argument("--budget-loss", type=float_flag(0.0), default=0.0,
                        help="weight of the cross-entropy of P(demand <= budget) beside the bins' (default 0)")
    parser.add_argument("--steps", type=int_flag(1, STEPS_MAX), default=30_000)
    parser.add_argument("--batch", type=int_flag(1, BATCH_MAX), default=1024)
    parser.add_argument("--lr", type=float_flag(0.0, low_open=True), default=2e-3)
    parser.add_argument("--weight-decay", type=float_flag(0.0), default=1e-4)
    parser.add_argument("--hidden", type=int_flag(1, MAX_WIDTH), default=256)
    parser.add_argument("--layers", type=int_flag(1, MAX_LAYERS), default=3)
    parser.add_argument("--threads", type=int_flag(1, THREADS_MAX), default=2)
    parser.add_argument("--seed", type=int_flag(0, SEED_MAX), default=0)
    add_output_flags(parser, BUILD_DIR / "pfn" / DEFAULT_CHECKPOINT.name)
    parser.add_argument("--no-progress", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out = output_file(parser, args, DEFAULT_CHECKPOINT.name)
    torch.set_num_threads(args.threads)
    started = time.time()
    config = PFNConfig(hidden=args.hidden, layers=args.layers)
    id_fit, id_val = split_bank(bank_for("id", "train"))
    print(f"banks: id fit {len(id_fit)} curves, id validation {len(id_val)}", flush=True)
    data = {"id_validation": examples_of(id_val, args.validation_examples, args.seed + 2, args.per_step),
            "prior_validation": examples_of(prior_bank(PRIOR_VALIDATION, PRIOR_SEED, first=args.families, name="prior-validation"),
                                            args.validation_examples, args.seed + 3, args.per_step)}
    id_examples = examples_of(id_fit, args.id_examples, args.seed, args.per_step)
    x_id, y_id, b_id = tensors(id_examples, config)
    if args.no_prior:
        x, y, budget, share = x_id, y_id, b_id, 0.0
    else:
        prior = prior_bank(args.families, PRIOR_SEED)
        print(f"prior: {args.families} families x {RUNS} runs ({prior.values.size} points), {time.time() - started:.0f} s", flush=True)
        x_prior, y_prior, b_prior = tensors(examples_of(prior, args.prior_examples, args.seed + 1, args.per_step), config)
        # one pool whose draw probabilities give the requested share: repeat the smaller part
        n_prior = int(round(len(y_id) * args.prior_share / max(1e-9, 1 - args.prior_share))) if args.prior_share < 1 else len(y_prior)
        reps = max(1, math.ceil(n_prior / len(y_prior)))
        pick = torch.arange(len(y_prior)).repeat(reps)[:n_prior]
        x, y, share = torch.cat([x_prior[pick], x_id]), torch.cat([y_prior[pick], y_id]), args.prior_share
        budget = torch.cat([b_prior[pick], b_id])
    validation = {name: tensors(ex, config) for name, ex in data.items()}
    print(f"examples: {len(y)} training ({share:.0%} prior), features {config.inputs}; {time.time() - started:.0f} s", flush=True)
    model = PFNModel(config, seed=args.seed)
    log = fit(model, x, y, args.steps, args.batch, args.lr, args.weight_decay, args.seed, validation, progress=not args.no_progress,
              budget=budget, budget_loss=args.budget_loss)
    temperature, grid = fit_temperature(model, *validation["id_validation"][:2])
    predictor = PFNPredictor(model)
    metrics: dict[str, Any] = {name: {"pfn": {**score_predictor(predictor, ex), "nll": nll(model, *validation[name][:2])}} for name, ex in data.items()}
    from mara_agents.predictors import PREDICTORS

    for row in ("fm", "wls"):
        comparison = PREDICTORS[row]()
        for name, ex in data.items():
            metrics[name][row] = score_predictor(comparison, ex)
    timing = inference_ms(predictor, data["id_validation"])
    wall = time.time() - started
    info = {"data": {"task_set": "id", "split": "train", "validation_every": 5, "prior_seed": PRIOR_SEED,
                     "prior_families": 0 if args.no_prior else args.families, "prior_runs_per_family": RUNS,
                     "prior_validation_families": [args.families, args.families + PRIOR_VALIDATION],
                     "prior_share": share, "per_step": args.per_step, "training_examples": int(len(y)), "validation_examples": args.validation_examples,
                     "never_read": ["rl_ood", "vit_ood", "every eval split"]},
            "seed": args.seed, "training": {"steps": args.steps, "batch": args.batch, "lr": args.lr, "weight_decay": args.weight_decay, "budget_loss": args.budget_loss,
                                             "wall_seconds": round(wall, 1), "threads": args.threads, "log": log},
            "temperature": temperature, "temperature_nll_grid": grid, "validation": metrics, "inference_ms_per_1024_one_thread": round(timing, 2),
            "command": "python -m mara_agents.predictors.train_pfn " + " ".join(sys.argv[1:] if argv is None else argv),
            "machine": {"python": platform.python_version(), "torch": torch.__version__, "processor": platform.machine()}}
    save_model(model, out, info)
    print(f"wrote {out} ({wall:.0f} s); temperature {temperature}; predict 1,024 histories {timing:.1f} ms on one thread")
    for name, rows in metrics.items():
        for row, m in rows.items():
            print(f"  {name:17s} {row:4s} " + "  ".join(f"{k} {v:.4f}" for k, v in m.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
