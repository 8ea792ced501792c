"""The trainer's checkpoint I/O and compatibility: what a training state holds, how it is written and read
back, when a resume is refused, and what a policy manifest records of the training data.

``OUT/train_state.pt`` (:data:`STATE_FILE`, format :data:`STATE_FORMAT`) holds everything a resume needs
(model, optimizer, value normaliser, RNG states, counters, elapsed time, evaluations) and the run's
identity (:func:`identity`: hyperparameters but budgets and intervals, model shape, environment). It is
written atomically with a checksum (:func:`mara_agents.checkpoint_files.write_checked`) and never while a
parameter is NaN or infinite; :func:`read_state` refuses a file of another format, a damaged or
non-finite one, or one whose identity differs from this run's, naming the first field that differs.
:func:`trainer_state` and :func:`restore` are what a :class:`~mara_agents.mat.ppo.Trainer` saves and loads;
:func:`policy_manifest` is what its final ``mat.json`` records.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core_env.config import LOADS, EnvConfig
from core_env.recipe import DEFAULT_RECIPE
from mara_agents.checkpoint_files import read_checked, refuse_non_finite, write_checked

if TYPE_CHECKING:
    from mara_agents.mat.model import MATConfig
    from mara_agents.mat.ppo import Trainer
    from mara_agents.mat.ppo_config import PPOConfig

STATE_FORMAT = "mara_agents.mat.train/1"
STATE_FILE, METRICS_FILE = "train_state.pt", "metrics.jsonl"
#: PPOConfig fields a resumed run may change (budgets and intervals): not part of the identity.
RESUMABLE_CHANGES = ("minutes", "steps", "eval_minutes", "save_minutes", "threads")


#: EnvConfig fields added after training states were first saved, with the value a state saved before them
#: implies (a resumed run that predates ``recipe`` drew its workloads by the default recipe).
ADDED_ENV_FIELDS = {"recipe": DEFAULT_RECIPE}


def saved_env(identity: dict[str, Any]) -> dict[str, Any]:
    """The ``env`` part of a saved training identity, with fields it predates (:data:`ADDED_ENV_FIELDS`) at their implied values."""
    implied = {name: json.loads(json.dumps(dataclasses.asdict(value), default=str)) for name, value in ADDED_ENV_FIELDS.items()}
    return {**implied, **identity}


def provenance(config: EnvConfig, cfg: PPOConfig) -> dict[str, Any]:
    """What a policy manifest records of where its training data came from: the environment version, the
    data split (seeded draws on the task set's train curves), the train bank's fingerprint, the sha256 of
    the committed evaluation suites of its task set (never trained on), and the FM checkpoint's sha256
    when the variant sees FM features."""
    from core_env.parallel import DiscreteCoREParallelEnv
    from core_env.workload import suite_sha256

    suites = {}
    for load in LOADS:  # every committed evaluation load of the task set (a custom task set has none)
        try:
            suites[f"{config.task_set_name}/{load}"] = suite_sha256(config.task_set_name, load)
        except (OSError, ValueError, KeyError):
            continue
    out = {"env_version": DiscreteCoREParallelEnv.metadata["name"], "data_split": f"seeded workloads on the {config.task_set_name!r} train curves",
           "train_bank_fingerprint": config.bank("train").fingerprint, "evaluation_suites_sha256": suites}
    from mara_agents.predictors.features import split_feature_set

    base = split_feature_set(cfg.predictor)[0] if cfg.predictor else None
    if base == "fm":
        from mara_agents.predictors.flow_matching import DEFAULT_CHECKPOINT

        out["fm_sha256"] = json.loads(Path(DEFAULT_CHECKPOINT).with_suffix(".json").read_text())["sha256"]
    if base == "pfn":
        from mara_agents.predictors.pfn import DEFAULT_CHECKPOINT as PFN_CHECKPOINT

        out["pfn_sha256"] = json.loads(Path(PFN_CHECKPOINT).with_suffix(".json").read_text())["sha256"]
    return out


def env_summary(config: EnvConfig) -> dict[str, Any]:
    """JSON-able description of an EnvConfig (a custom CurveBank is named by its name)."""
    out = dataclasses.asdict(config)
    out["task_set"] = config.task_set_name
    return out


def identity(cfg: PPOConfig, model_config: MATConfig, env_config: EnvConfig) -> dict[str, Any]:
    """What must match for a resume (as JSON values): hyperparameters but :data:`RESUMABLE_CHANGES`, the
    model's shape and the environment."""
    keep = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in RESUMABLE_CHANGES}
    return json.loads(json.dumps({"ppo": keep, "model": model_config.to_dict(), "env": env_summary(env_config)}, default=str))


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Write a training state (``identity`` and what a resume restores) atomically, with its checksum."""
    write_checked(path, {"format": STATE_FORMAT, **state})


def read_state(path: Path, mine: dict[str, Any]) -> dict[str, Any] | None:
    """The training state at ``path`` (None when there is none), checked against this run's identity ``mine``.

    Raises:
        ValueError: not a MAT training state, damaged (checksum) or non-finite, or trained with other
            settings (the first differing field is named).
    """
    if not path.exists():
        return None
    state = read_checked(path, "a MAT training state")
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"{path} is not a MAT training state (format {found!r}, expected {STATE_FORMAT!r})")
    refuse_non_finite(state["model"], f"training state {path}")
    saved = {**state["identity"], "env": saved_env(state["identity"]["env"])}
    for part in ("ppo", "model", "env"):
        for key in sorted(set(mine[part]) | set(saved[part])):
            if mine[part].get(key) != saved[part].get(key):
                raise ValueError(f"{path} was trained with {part}.{key}={saved[part].get(key)!r}, this run has "
                                 f"{mine[part].get(key)!r}: use another --out or the same settings to resume")
    return state


def trainer_state(t: Trainer) -> dict[str, Any]:
    """What ``t`` saves (:func:`write_state`): its identity and everything a resume restores (:func:`restore`)."""
    return {"format": STATE_FORMAT, "identity": identity(t.cfg, t.model_config, t.env_config),
            "model": t.model.state_dict(), "optimizer": t.optimizer.state_dict(), "value_norm": t.value_norm.state_dict(),
            "workload_rng": t.workload_rng.bit_generator.state, "generator": t.generator.get_state(),
            "counters": {"env_steps": t.env_steps, "updates": t.updates, "episodes": t.episodes, "elapsed": t.elapsed,
                         "pretrained": t.pretrained}, "pretraining": t.pretraining,
            "evals": t.evals, "baselines": t.baselines}


def restore(t: Trainer, state: dict[str, Any]) -> None:
    """Put a saved state (:func:`read_state`) back into the trainer ``t``."""
    t.model.load_state_dict(state["model"])
    t.optimizer.load_state_dict(state["optimizer"])
    t.value_norm.load_state_dict(state["value_norm"])
    t.workload_rng.bit_generator.state = state["workload_rng"]
    t.generator.set_state(state["generator"])
    counters = state["counters"]
    t.env_steps, t.updates, t.episodes, t.elapsed = (counters[k] for k in ("env_steps", "updates", "episodes", "elapsed"))
    t.pretrained, t.pretraining = bool(counters.get("pretrained", False)), dict(state.get("pretraining", {}))
    t.evals, t.baselines = list(state["evals"]), dict(state["baselines"])


def policy_manifest(t: Trainer) -> dict[str, Any]:
    """The manifest entries of the trainer ``t``'s policy checkpoint: what it is, what it was trained on
    (:func:`provenance`), the settings, the counters, the warm start and the evaluations."""
    from mara_agents.mat.evaluation import EVAL_SEED

    cfg = t.cfg
    return {"variant": cfg.variant, "seed": cfg.seed, "predictor": cfg.predictor, "reward": cfg.reward,
            **provenance(t.env_config, cfg), "teacher": cfg.teacher or None,
            "ppo_config": dataclasses.asdict(cfg), "env_config": env_summary(t.env_config),
            "env_steps": t.env_steps, "updates": t.updates, "episodes": t.episodes, "wall_seconds": round(t.elapsed, 1),
            "pretraining": t.pretraining or None,
            "eval": {"workloads": f"{len(t.eval_workloads)} seeded training-curve workloads (seed {EVAL_SEED})",
                     "history": t.evals, "final_completion_rate": t.evals[-1]["completion_rate"] if t.evals else None,
                     "baselines": t.baselines},
            "command": " ".join(sys.argv) if sys.argv and sys.argv[0].endswith("ppo.py") else None}
