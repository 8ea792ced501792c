"""Train MARA's flow-matching predictor: ``python -m mara_agents.predictors.train_fm``.

**Data.** Only the ``id`` task set's train split is read. It is divided by curve: every
``VALIDATION_EVERY``-th curve in bank order (so every family is represented) is a validation curve, the
rest are fit curves. Evaluation curves and the OOD task sets (``rl_ood``, ``vit_ood``) are never read;
hyperparameters are chosen on the validation curves only.

**Examples** are simulated the way the environment produces histories: tasks are drawn by
:func:`core_env.workload.draw_workload` (the environment's recipe for curve, target, batches per step,
deadline), then a cut after h node-steps, h uniform in {1, ..., min(n*, window) - 1}: the histories a
scheduler queries while a task served every step is still active. History = the h nominal reports;
future = the next HORIZON reports in the 32 bins of :data:`~mara_agents.predictors.flow_matching.BIN_WIDTHS`
relative to the h-th report. Validation examples also carry the truth: remaining demand n* - h and
budget window - h.

**Metrics** (validation curves): capped MAE of the median remaining node-steps (both sides capped at
HORIZON, inf counts as HORIZON), the same for the decoded true future (the floor the bin layout allows),
Brier score of p_within_budget, coverage of the 10-90% quantile band, CFM loss. WLS, DKF and last-slope
(:data:`BASELINES`) are scored on the same examples.

**No hand-set reachability prior.** On v1 workloads a target is set by a family-level rule and some
targets are never reached, so whether a target is reachable is learned from data: p_within_budget is
the share of the model's own sampled futures that cross the target within the budget (summaries with
``reachable=None``). The priors of :data:`REACHABLE_GRID` are scored on validation for the record
only (they were how v0 checkpoints, whose targets lay on each task's own curve, were tuned).

**Selection** (validation curves only): the sampling settings of :data:`SAMPLING_GRID` are scored and
timed for the record, and the shipped one is given on the command line (default S = 32, midpoint x 2
steps: four velocity evaluations, within the 50 ms budget per 1,024 histories).

**Output.** ``--out`` (default ``build/fm/flow_matching.pt``) + ``.json`` (see
:mod:`mara_agents.predictors.flow_matching`), including the measured inference time per 1,024 histories. The
shipped ``mara_agents/checkpoints/flow_matching.pt`` is replaced only with ``--out`` there and
``--overwrite-shipped``. Every flag is range-checked when parsed (:mod:`mara_agents.cli_checks`): a bad
value exits 2 with argparse's error line naming the flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core_env.curves import LOSS_FLOOR, CurveBank
from core_env.curves import corpus as corpus_module
from core_env.extras import needs
from core_env.generators import Drawn
from core_env.workload import DEFAULT_RECIPE, TaskRecipe
from mara_agents.checkpoint_files import MAX_WIDTH, RESOLUTION_RANGE
from mara_agents.cli_checks import (BATCH_MAX, BUILD_DIR, EXAMPLES_MAX, SEED_MAX, STEPS_MAX, THREADS_MAX, add_output_flags, float_flag,
                                    int_flag, output_file)
from mara_agents.predictors import PREDICTORS
from mara_agents.predictors.flow_matching import (
    DEFAULT_CHECKPOINT,
    HORIZON,
    MAX_ODE_STEPS,
    MAX_SAMPLES,
    TAIL,
    FlowConfig,
    FlowMatchingPredictor,
    FlowModel,
    SOLVERS,
    decode_crossings,
    history_features,
    inference_seconds,
    pack_histories,
    save_model,
    summarize_samples,
)

with needs(__name__):
    import torch
    from tqdm import tqdm

TASK_SET = "id"
VALIDATION_EVERY = 5
SIMULATION_CHUNK = 4096
#: Predictors scored beside FM on the validation examples.
BASELINES = ("wls", "dkf", "last_slope")
#: Reachability priors scored on validation for the record (the shipped predictor uses None: futures as drawn).
REACHABLE_GRID: tuple[float | None, ...] = (None, 0.8, 0.9, 0.95, 0.99)
#: Sampling settings (S, solver, steps) scored and timed on validation for the record.
SAMPLING_GRID: tuple[tuple[int, str, int], ...] = ((16, "midpoint", 2), (32, "euler", 4), (32, "euler", 8),
                                                   (32, "midpoint", 2), (32, "midpoint", 4), (64, "midpoint", 2))


@dataclasses.dataclass
class Examples:
    """Simulated (history, future) pairs; all arrays have n rows.

    Attributes:
        histories: (n,) object array of reported-loss histories (float64, oldest first, length >= 1).
        future: (n, NUM_BINS) float64 relative log-loss bins.
        target: (n,) target loss of the task the history came from.
        budget: (n,) node-steps left before its deadline (served every step).
        remaining: (n,) true remaining nominal node-steps (inf if never).
    """

    histories: np.ndarray
    future: np.ndarray
    target: np.ndarray
    budget: np.ndarray
    remaining: np.ndarray

    def __len__(self) -> int:
        return int(self.histories.size)

    def take(self, index: np.ndarray) -> Examples:
        return Examples(**{f.name: getattr(self, f.name)[index] for f in dataclasses.fields(self)})

    @classmethod
    def concatenate(cls, parts: list[Examples]) -> Examples:
        return cls(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(cls)})


def split_bank(bank: CurveBank, every: int = VALIDATION_EVERY) -> tuple[CurveBank, CurveBank]:
    """(fit, validation) banks: every ``every``-th curve of ``bank`` validates, the rest fit."""
    index = np.arange(len(bank))
    parts = []
    for chosen in (index[index % every != every - 1], index[index % every == every - 1]):
        parts.append(CurveBank(bank.name, [bank.curve(i) for i in chosen], bank.family[chosen].tolist(), bank.flags[chosen]))
    return parts[0], parts[1]


def simulate_examples(bank: CurveBank, count: int, rng: np.random.Generator, bin_widths: tuple[int, ...],
                      recipe: TaskRecipe = DEFAULT_RECIPE, per_step: float = 0.0) -> Examples:
    """``count`` examples from tasks drawn like the environment's (see the module docstring).

    By default each task gives one example (h uniform in 1 … min(demand, window) − 1), so a task that finishes
    early weighs as much as a long one. With ``per_step`` > 0 a task gives Poisson(per_step · (min(demand,
    window) − 1)) examples, each with its own h: every (task, node-step served) pair is equally likely, as a
    scheduler meets them (one decision per step a task is still running)."""
    widths = np.asarray(bin_widths)
    horizon = int(widths.sum())
    starts = np.concatenate([[0], np.cumsum(widths)[:-1]])
    parts, total = [], 0
    while total < count:
        tasks = Drawn(bank, 1.0, SIMULATION_CHUNK, recipe, n_nodes=1).workload(rng)
        window = (tasks.deadline - tasks.arrival).astype(np.float64)
        limit = np.minimum(tasks.demand, window) - 1.0
        keep = np.flatnonzero(limit >= 1)
        if per_step > 0:
            keep = np.repeat(keep, rng.poisson(per_step * limit[keep]))
            if keep.size == 0:
                continue
        limit = limit[keep].astype(np.int64)
        h = 1 + np.floor(rng.random(keep.size) * limit).astype(np.int64)
        curve, bps = tasks.curve[keep], tasks.batches_per_step[keep]
        reports = int(h.max()) + horizon
        edges = bps[:, None] * np.arange(reports + 1, dtype=np.float64)
        integral = bank.integral(curve[:, None], edges)
        losses = np.diff(integral, axis=1) / bps[:, None]
        log_loss = np.log(np.maximum(losses, LOSS_FLOOR))
        row = np.arange(keep.size)[:, None]
        ahead = log_loss[row, h[:, None] + np.arange(horizon)]
        future = np.add.reduceat(ahead, starts, axis=1) / widths - log_loss[row, h[:, None] - 1]
        histories = np.empty(keep.size, dtype=object)
        histories[:] = [row_losses[:n] for row_losses, n in zip(losses, h.tolist())]
        parts.append(Examples(histories=histories, future=future, target=tasks.target[keep],
                              budget=window[keep] - h, remaining=tasks.demand[keep] - h))
        total += keep.size
    return Examples.concatenate(parts).take(np.arange(count))


def warmup_cosine(model: torch.nn.Module, steps: int, lr: float, weight_decay: float):
    """(AdamW, schedule): linear warm-up over steps // 50, then cosine decay to 0 at ``steps`` (FM and PFN training)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    warmup = max(1, steps // 50)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: min(1.0, (i + 1) / warmup) * 0.5 * (1.0 + math.cos(math.pi * min(i, steps) / steps)))
    return optimizer, schedule


def _tensors(examples: Examples, config: FlowConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    steps, summary, _ = history_features(*pack_histories(examples.histories), config)
    return torch.from_numpy(steps), torch.from_numpy(summary), torch.from_numpy(examples.future.astype(np.float32))


def fit(model: FlowModel, examples: Examples, steps: int = 6000, batch: int = 256, draws: int = 4, lr: float = 2e-3,
        weight_decay: float = 1e-4, seed: int = 0, progress: bool = True, validation: Examples | None = None,
        log_every: int = 500) -> list[dict[str, float]]:
    """Train ``model`` on ``examples`` by CFM (AdamW, warm-up then cosine decay, gradient clip 1).

    Returns the log: one entry per ``log_every`` steps with the running train loss and, with
    ``validation``, the CFM loss on it.
    """
    steps_in, summary, future = _tensors(examples, model.config)
    model.set_normalization(summary, future)
    val = _tensors(validation, model.config) if validation is not None else None

    def batch_loss(i: int, index: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return model.loss(steps_in[index], summary[index], future[index], generator, draws)

    def validate() -> dict[str, float]:
        return {} if val is None else {"validation_loss": cfm_loss(model, *val, seed=seed)}

    return fit_loop(model, len(examples), batch_loss, validate, steps=steps, batch=batch, lr=lr, weight_decay=weight_decay,
                    seed=seed, log_every=log_every, train_key="train_loss", desc="fm", progress=progress, mininterval=1.0)


def fit_loop(model: torch.nn.Module, n: int, batch_loss: Callable[[int, torch.Tensor, torch.Generator], torch.Tensor],
             validate: Callable[[], dict[str, float]], *, steps: int, batch: int, lr: float, weight_decay: float, seed: int,
             log_every: int, train_key: str, desc: str, progress: bool, mininterval: float) -> list[dict[str, float]]:
    """The training loop of FM and PFN (:func:`fit`, :func:`mara_agents.predictors.train_pfn.fit`): ``steps`` steps of
    AdamW with :func:`warmup_cosine` and gradient clip 1, each on ``batch`` indices drawn uniformly from ``n`` examples
    by a generator seeded with ``seed``; ``batch_loss(i, index, generator)`` is step ``i``'s loss (the model in train
    mode). Every ``log_every`` steps and at the end, a log entry: the step, the mean training loss since the last entry
    under ``train_key``, and ``validate()``'s values. Returns the log, the model left in eval mode."""
    generator = torch.Generator().manual_seed(seed)
    optimizer, schedule = warmup_cosine(model, steps, lr, weight_decay)
    log, running = [], []
    bar = tqdm(range(steps), desc=desc, unit="step", disable=not progress, mininterval=mininterval)
    for i in bar:
        model.train()
        index = torch.randint(n, (batch,), generator=generator)
        loss = batch_loss(i, index, generator)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        running.append(loss.item())
        if (i + 1) % log_every == 0 or i + 1 == steps:
            entry = {"step": i + 1, train_key: float(np.mean(running)), **validate()}
            log.append(entry)
            bar.set_postfix({k: round(v, 4) for k, v in entry.items() if k != "step"})
            running = []
    model.eval()
    return log


@torch.no_grad()
def cfm_loss(model: FlowModel, steps: torch.Tensor, summary: torch.Tensor, future: torch.Tensor, seed: int = 0, draws: int = 4) -> float:
    """Mean CFM loss with fixed (u, z0) draws (comparable across calls)."""
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(seed + 1)
    total = 0.0
    for lo in range(0, steps.shape[0], 4096):
        part = slice(lo, lo + 4096)
        total += model.loss(steps[part], summary[part], future[part], generator, draws).item() * steps[part].shape[0]
    model.train(was_training)
    return total / steps.shape[0]


def demand_metrics(summary: Any, examples: Examples, cap: float = HORIZON) -> dict[str, float]:
    """Capped MAE of the median, Brier score of p_within_budget, 10-90% band coverage (if present)."""
    truth = np.minimum(examples.remaining, cap)
    metrics = {
        "capped_mae": float(np.mean(np.abs(np.minimum(summary.median, cap) - truth))),
        "brier_within_budget": float(np.mean((summary.p_within_budget - (examples.remaining <= examples.budget)) ** 2)),
    }
    if {0.1, 0.9} <= set(summary.levels.tolist()):
        lo, hi = np.minimum(summary.quantile(0.1), cap), np.minimum(summary.quantile(0.9), cap)
        metrics["coverage_10_90"] = float(np.mean((truth >= lo) & (truth <= hi)))
    return metrics


def sampled_metrics(predictor: FlowMatchingPredictor, examples: Examples,
                    reachable: Sequence[float | None]) -> dict[str, dict[str, float]]:
    """Metrics of ``predictor``'s samples (drawn once) summarized with each reachability prior."""
    remaining = predictor.decoded_samples(examples.histories, examples.target)
    budgets = np.floor(np.minimum(examples.budget, predictor.horizon)).astype(np.int64)
    return {str(r): demand_metrics(summarize_samples(remaining, budgets, predictor.levels, r), examples) for r in reachable}


def evaluate(predictor: FlowMatchingPredictor, examples: Examples) -> dict[str, float]:
    """Validation metrics of ``predictor`` (see the module docstring)."""
    metrics = demand_metrics(predictor.predict(examples.histories, examples.target, examples.budget), examples)
    current = np.log(np.maximum([h[-1] for h in examples.histories], LOSS_FLOOR))
    decoded = decode_crossings(examples.future, np.log(examples.target) - current, predictor.model.config.bin_widths)
    metrics["decode_floor_capped_mae"] = float(np.mean(np.abs(np.minimum(decoded, HORIZON) - np.minimum(examples.remaining, HORIZON))))
    metrics["cfm_loss"] = cfm_loss(predictor.model, *_tensors(examples, predictor.model.config))
    return metrics


def baseline_metrics(examples: Examples) -> dict[str, dict[str, float]]:
    """Metrics of the other predictors on the same examples, with their default settings and the FM horizon."""
    results = {}
    for name in BASELINES:
        predictor = PREDICTORS[name](horizon=HORIZON)
        results[name] = demand_metrics(predictor.predict(examples.histories, examples.target, examples.budget), examples)
    return results


def _file_sha256(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _rounded(metrics: dict[str, float]) -> str:
    return json.dumps({k: round(v, 4) for k, v in metrics.items()})


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m mara_agents.predictors.train_fm`` (every value range-checked when parsed)."""
    defaults = FlowConfig()
    parser = argparse.ArgumentParser(prog="python -m mara_agents.predictors.train_fm", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    count, width = int_flag(1, EXAMPLES_MAX), int_flag(1, MAX_WIDTH)
    parser.add_argument("--seed", type=int_flag(0, SEED_MAX), default=0)
    parser.add_argument("--examples", type=count, default=400_000, help="fit examples simulated")
    parser.add_argument("--validation-examples", type=count, default=20_000)
    parser.add_argument("--steps", type=int_flag(1, STEPS_MAX), default=12000, help="optimizer steps")
    parser.add_argument("--batch", type=int_flag(1, BATCH_MAX), default=256, help="histories per step")
    parser.add_argument("--draws", type=int_flag(1, 1024), default=4, help="(u, z0) draws per history per step")
    parser.add_argument("--lr", type=float_flag(0.0, low_open=True), default=2e-3)
    parser.add_argument("--weight-decay", type=float_flag(0.0), default=1e-4)
    parser.add_argument("--history-steps", type=int_flag(1, TAIL), default=defaults.history_steps)
    parser.add_argument("--gru-hidden", type=width, default=defaults.gru_hidden)
    parser.add_argument("--context", type=width, default=defaults.context)
    parser.add_argument("--velocity-hidden", type=width, default=defaults.velocity_hidden)
    parser.add_argument("--resolution", type=float_flag(*RESOLUTION_RANGE), default=defaults.resolution)
    parser.add_argument("--samples", type=int_flag(1, MAX_SAMPLES), default=32, help="S futures per history at inference")
    parser.add_argument("--ode-steps", type=int_flag(1, MAX_ODE_STEPS), default=2, help="ODE steps at inference")
    parser.add_argument("--solver", choices=SOLVERS, default="midpoint", help="ODE solver at inference")
    parser.add_argument("--threads", type=int_flag(1, THREADS_MAX), default=2, help="torch CPU threads")
    parser.add_argument("--corpus", type=Path, default=None, help="corpus directory (default: the committed corpus)")
    add_output_flags(parser, BUILD_DIR / "fm" / DEFAULT_CHECKPOINT.name)
    parser.add_argument("--no-save", action="store_true", help="train and report without writing a checkpoint")
    return parser


def main(argv: list[str] | None = None) -> dict[str, Any]:
    defaults, parser = FlowConfig(), build_parser()
    args = parser.parse_args(argv)
    out = None if args.no_save else output_file(parser, args, DEFAULT_CHECKPOINT.name)

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    corpus_dir = args.corpus or corpus_module.CORPUS_DIR
    bank = corpus_module.corpus_bank(TASK_SET, "train", corpus_dir)
    fit_bank, val_bank = split_bank(bank)
    train = simulate_examples(fit_bank, args.examples, np.random.default_rng([args.seed, 0]), defaults.bin_widths)
    validation = simulate_examples(val_bank, args.validation_examples, np.random.default_rng([args.seed, 1]), defaults.bin_widths)
    print(f"id train curves: {len(fit_bank)} fit / {len(val_bank)} validation; examples: {len(train)} fit / "
          f"{len(validation)} validation ({time.perf_counter() - start:.1f}s)", flush=True)

    config = FlowConfig(history_steps=args.history_steps, gru_hidden=args.gru_hidden, context=args.context,
                        velocity_hidden=args.velocity_hidden, resolution=args.resolution)
    model = FlowModel(config, seed=args.seed)
    monitor = validation.take(np.arange(min(4096, len(validation))))
    log = fit(model, train, steps=args.steps, batch=args.batch, draws=args.draws, lr=args.lr,
              weight_decay=args.weight_decay, seed=args.seed, validation=monitor)
    wall = time.perf_counter() - start

    sampling = {"samples": args.samples, "ode_steps": args.ode_steps, "solver": args.solver, "seed": args.seed}
    reachable = None  # learned: the model's own crossing probability (module docstring)
    table = sampled_metrics(FlowMatchingPredictor(model, **sampling), validation, REACHABLE_GRID)
    for r, values in table.items():
        print(f"reachable={r}: {_rounded(values)}")
    predictor = FlowMatchingPredictor(model, reachable=reachable, **sampling)
    solvers = {}
    for samples, solver, steps in SAMPLING_GRID:
        other = FlowMatchingPredictor(model, samples=samples, ode_steps=steps, solver=solver, seed=args.seed, reachable=reachable)
        key = f"S={samples} {solver} x{steps}"
        solvers[key] = {**sampled_metrics(other, monitor, [reachable])[str(reachable)], "ms_per_1024": 1e3 * inference_seconds(other)}
        print(f"{key}: {_rounded(solvers[key])}")
    metrics = evaluate(predictor, validation)
    baselines = baseline_metrics(validation)
    seconds = inference_seconds(predictor)
    print(f"validation (reachable={reachable}): {_rounded(metrics)}")
    for name, values in baselines.items():
        print(f"baseline {name}: {_rounded(values)}")
    print(f"inference: {seconds * 1e3:.1f} ms per 1,024 histories (S={args.samples}, {args.solver} x{args.ode_steps} steps, "
          f"{torch.get_num_threads()} threads); training wall time {wall:.0f}s; {model.parameter_count()} parameters")
    info = {
        "data": {"task_set": TASK_SET, "split": "train", "validation": f"every {VALIDATION_EVERY}th id train curve (bank order)",
                 "fit_curves": len(fit_bank), "validation_curves": len(val_bank), "fit_examples": len(train),
                 "validation_examples": len(validation), "bank_fingerprint": bank.fingerprint,
                 "corpus_manifest_sha256": _file_sha256(Path(corpus_dir) / "manifest.json")},
        "seed": args.seed,
        "training": {k: getattr(args, k) for k in ("steps", "batch", "draws", "lr", "weight_decay", "threads")},
        "training_wall_s": round(wall, 1),
        "training_log": log,
        "validation_metrics": metrics,
        "baseline_metrics": baselines,
        "selection": {"reachable (scored, not used)": table, "sampling (first 4096 validation examples)": solvers},
        "inference": {**sampling, "reachable": reachable, "ms_per_1024": round(seconds * 1e3, 2), "threads": torch.get_num_threads()},
        "versions": {"torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version()},
        "command": " ".join(["python -m mara_agents.predictors.train_fm", *(sys.argv[1:] if argv is None else argv)]),
    }
    if out is not None:
        manifest = save_model(model, out, info)
        print(f"saved {out} (sha256 {manifest['sha256'][:12]}...) and {out.with_suffix('.json').name}")
    return info


if __name__ == "__main__":
    main()
