"""The trainer's arguments: PPO hyperparameters (:class:`PPOConfig`, each checked against :data:`LIMITS`),
the variants, and the command line that sets them and the environment trained on (:func:`parse_command`:
``--n-nodes``, ``--n-slots``, ``--load``, ``--task-set``, and any EnvConfig field as ``--env`` JSON, as the
integration trainers take it). The first part of :mod:`mara_agents.mat.ppo`, in CleanRL's order (arguments,
environment, model, rollout, advantages, update)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from core_env.config import EnvConfig, make_config, parse_load
from mara_agents.cli_checks import add_overwrite_flag, refuse_shipped
from mara_agents.mat.model import MATConfig

#: variant -> (predictor feature set, reward mode)
VARIANTS: dict[str, tuple[str | None, str]] = {
    "mara": ("fm", "shaped"),
    "mara-wls": ("wls", "shaped"),
    "mara-sparse": ("fm", "sparse"),
    "mat": (None, "shaped"),
    "mara-pfn": ("pfn", "shaped"),
    "mara-post": ("pfn-post", "shaped"),  # PFN features plus each slot's truncated Gittins index (issue 48)
    "mara-post-sparse": ("pfn-post", "sparse"),
}


@dataclasses.dataclass(frozen=True)
class Limit:
    """The values a numeric hyperparameter may take: a finite number (an integer for ``kind="int"``) in
    [low, high], each end open when ``low_open`` / ``high_open``."""

    low: float
    high: float = math.inf
    kind: str = "float"
    low_open: bool = False
    high_open: bool = False

    def __str__(self) -> str:
        left = f"> {self.low}" if self.low_open else f">= {self.low}"
        return left if self.high == math.inf else f"{left} and {'<' if self.high_open else '<='} {self.high}"

    def check(self, name: str, value: object) -> None:
        """ValueError naming ``name`` unless ``value`` lies within the limit."""
        integer = self.kind == "int"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not float(value).is_integer()):
            raise ValueError(f"{name} must be a{'n integer' if integer else ' number'}, got {value!r}")
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        if not math.isfinite(value) or not above or not below:
            raise ValueError(f"{name} must be {'an integer' if integer else 'a finite number'} {self}, got {value!r}")


#: Upper bounds of the integer hyperparameters that keep a run within what one machine can hold (a seed
#: within torch's and numpy's range); the others are unbounded above.
_CAPS = {"seed": 2**32 - 1, "num_envs": 4096, "env_groups": 4096, "rollout": 100_000, "epochs": 1000, "minibatches": 1_000_000,
         "d_model": 4096, "n_heads": 256, "enc_layers": 64, "dec_layers": 64, "eval_episodes": 100_000, "threads": 1024,
         "demo_episodes": 100_000, "bc_batch": 1_000_000, "steps": 10**12, "bc_until": 10**9}

#: The allowed values of every numeric hyperparameter, checked before anything is built, so NaN, inf,
#: negative, zero or oversized values never reach training.
LIMITS: dict[str, Limit] = {
    **{name: Limit(0, low_open=True) for name in ("minutes", "lr", "adam_eps", "clip", "max_grad_norm", "eval_minutes", "save_minutes")},
    **{name: Limit(1, _CAPS.get(name, math.inf), "int") for name in ("steps", "num_envs", "env_groups", "rollout", "epochs", "minibatches",
                                                                     "d_model", "n_heads", "enc_layers", "dec_layers", "eval_episodes",
                                                                     "threads", "demo_episodes", "bc_batch")},
    **{name: Limit(0) for name in ("ent_coef", "vf_coef", "bc_epochs", "bc_coef")},
    "bc_until": Limit(0, _CAPS["bc_until"], "int"),
    "seed": Limit(0, _CAPS["seed"], "int"),
    "gamma": Limit(0, 1, low_open=True),
    "gae_lambda": Limit(0, 1),
    "value_norm_decay": Limit(0, 1, high_open=True),
    "bc_decay": Limit(0, 1),
}


@dataclasses.dataclass
class PPOConfig:
    """Hyperparameters (CLI flags of the same names, with dashes)."""

    variant: str = "mara"
    seed: int = 0
    minutes: float | None = None  # wall-clock budget over all (resumed) runs
    steps: int | None = None  # env-step budget
    # 256 environments in 8 groups of 32 (one batched FM call per step over all of them), 16 steps each per
    # iteration, 2 epochs x 2 minibatches of 2,048 samples: >= 1.5k env-steps/s on 2 cores at d_model 64
    # (d_model 32 is ~1.5x faster but costs 0.4-3.5 completion points; docs/agents.md, trainer throughput)
    num_envs: int = 256
    env_groups: int = 8
    rollout: int = 16  # steps per environment per iteration
    epochs: int = 2
    minibatches: int = 2
    lr: float = 5e-4
    adam_eps: float = 1e-5
    clip: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 1.0
    max_grad_norm: float = 1.0
    gamma: float = 1.0
    gae_lambda: float = 0.95
    value_norm_decay: float = 0.99
    d_model: int = 64
    n_heads: int = 2
    enc_layers: int = 1
    dec_layers: int = 1
    eval_episodes: int = 16
    eval_minutes: float = 3.0  # wall minutes between evaluations
    save_minutes: float = 3.0  # wall minutes between checkpoints
    threads: int = 1
    # Teacher warm start (mara_agents.mat.imitation): "" for none, else an allocator or heuristic name ("lara-fm")
    teacher: str = ""
    demo_episodes: int = 128  # seeded training-curve episodes the teacher plays
    bc_epochs: float = 6.0  # behaviour-cloning passes over the demonstrations
    bc_batch: int = 512
    bc_coef: float = 1.0  # DAPG weight of the demonstrations' cross-entropy during PPO ...
    bc_decay: float = 0.99  # ... multiplied by this every PPO update ...
    bc_until: int = 64  # ... and zero from this PPO update on (pure PPO after it)

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r}; choose from {list(VARIANTS)}")
        if self.minutes is None and self.steps is None:
            raise ValueError("give a stop condition: minutes and/or steps")
        for name, limit in LIMITS.items():
            value = getattr(self, name)
            if value is None and name in ("minutes", "steps"):
                continue
            limit.check(name, value)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be a multiple of n_heads={self.n_heads}")
        if self.num_envs % self.env_groups:
            raise ValueError(f"num_envs={self.num_envs} must be a multiple of env_groups={self.env_groups}")
        if self.num_envs * self.rollout < self.minibatches:
            raise ValueError("num_envs * rollout must be at least minibatches")
        if self.teacher:
            from mara_agents.mat.imitation import check_teacher

            check_teacher(self.teacher)

    @property
    def predictor(self) -> str | None:
        return VARIANTS[self.variant][0]

    @property
    def reward(self) -> str:
        return VARIANTS[self.variant][1]

    def model_config(self, history: int) -> MATConfig:
        return MATConfig(history=history, predictor=self.predictor, d_model=self.d_model, n_heads=self.n_heads,
                         enc_layers=self.enc_layers, dec_layers=self.dec_layers)


#: The command line's description.
DESCRIPTION = "PPO trainer for the MAT allocator (MARA and its ablations), in the spirit of CleanRL's ppo.py."
#: Environment flags of the command line (EnvConfig fields); unset ones keep EnvConfig's defaults.
ENV_FLAGS = {"n_nodes": int, "n_slots": int, "load": str, "task_set": str}
ENV_HELP = ("any EnvConfig fields as a JSON object, as the integration trainers take it, e.g. "
            '\'{"node_speeds": [1, 1, 2, 2], "switch_cost": 0.1, "history": 4}\'; a field is set here or by its flag above, '
            "not both; the reward is the variant's")


def env_json(text: str) -> dict[str, Any]:
    """``--env``: a JSON object of EnvConfig fields (argparse reports anything else as a usage error)."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not JSON ({error}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"a JSON object of EnvConfig fields, got {text!r}")
    return value


def parse_command(argv: list[str] | None = None) -> tuple[PPOConfig, Path, EnvConfig]:
    """(hyperparameters, output directory, environment) of a command line; exit 2 with the reason on bad input,
    or naming ``--out`` when it lies inside the package's shipped checkpoints without ``--overwrite-shipped``."""
    parser = argparse.ArgumentParser(prog="python -m mara_agents.mat.ppo", description=DESCRIPTION)
    parser.add_argument("--out", type=Path, required=True, help="output directory (rerun the same command to resume)")
    add_overwrite_flag(parser)
    for field in dataclasses.fields(PPOConfig):
        default = field.default
        kind = {"minutes": float, "steps": int}.get(field.name, type(default))
        flag = "--" + field.name.replace("_", "-")
        if field.name == "variant":
            parser.add_argument(flag, choices=list(VARIANTS), default=default)
        else:
            parser.add_argument(flag, type=kind, default=default, help=f"default {default}")
    env = parser.add_argument_group("environment (EnvConfig; default: the benchmark's N = 4, K = 16, train load, id task set)")
    for name, kind in ENV_FLAGS.items():
        env.add_argument("--" + name.replace("_", "-"), type=kind, default=None,
                         help="a load name (train, x1.25, x1.5, x2) or an intensity per node in (0, 1]" if name == "load" else None)
    env.add_argument("--env", type=env_json, default=None, metavar="JSON", help=ENV_HELP)
    args = vars(parser.parse_args(argv))
    out = args.pop("out")
    refuse_shipped(parser, "--out", out, args.pop("overwrite_shipped"))
    env_kwargs, flags = dict(args.pop("env") or {}), {name: args.pop(name) for name in ENV_FLAGS}
    for name in (name for name, value in flags.items() if value is not None and name in env_kwargs):
        parser.error(f"{name} is given twice: by --{name.replace('_', '-')} and in --env")
    if flags["load"] is not None:
        try:
            flags["load"] = parse_load(flags["load"], "--load")
        except ValueError as error:
            parser.error(str(error))
    env_kwargs.update({name: value for name, value in flags.items() if value is not None})
    try:
        cfg = PPOConfig(**args)
        if env_kwargs.get("reward", cfg.reward) != cfg.reward:
            raise ValueError(f"--env reward={env_kwargs['reward']!r}: the reward is the variant's ({cfg.variant}: {cfg.reward!r}); "
                             f"choose it with --variant")
        return cfg, out, make_config(**env_kwargs)
    except (ValueError, TypeError) as error:
        parser.error(str(error))


def parse_args(argv: list[str] | None = None) -> tuple[PPOConfig, Path]:
    """(hyperparameters, output directory) of a command line (:func:`parse_command` without the environment)."""
    return parse_command(argv)[:2]
