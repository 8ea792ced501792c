"""Benchmark rows: a name for every agent a suite can run, and how to build it.

A row is a heuristic (``HEURISTICS``), or an allocator (``ALLOCATORS``) on its default predictor, or
``ALLOCATOR:PREDICTOR`` for the same allocator on another predictor (``lara:oracle`` is LARA's
allocator with exact demands: the part of LARA's gap that is allocation, not prediction), or a learned
row (``LEARNED``: MARA and its variants), loaded from its shipped checkpoint for a training seed, or
``ppo-tianshou`` (the shipped Tianshou masked-PPO policy, :mod:`mara_agents.integrations.tianshou_ppo`).
"""

from __future__ import annotations

import json
from pathlib import Path

from mara_agents.allocators import ALLOCATORS, make_allocator
from mara_agents.heuristics import HEURISTICS
from mara_agents.protocols import Agent

#: Rows of the quick suite, in table order (learned rows: training seed 0).
QUICK_ROWS = ("random", "fifo", "edf", "window-edf", "las", "edf-admission", "llf", "slaq", "laira", "lara", "lara-fm", "edf-admission:fm,min_reports=5",
              "mara-wls", "mara",
              "edf-admission:oracle", "llf:oracle", "laira:oracle", "lara:oracle", "clairvoyant")


#: Learned rows (the MAT variants) and the training seeds whose checkpoints ship.
LEARNED = ("mara", "mara-wls", "mara-sparse", "mat")
LEARNED_SEEDS = (0, 1, 2)
CHECKPOINT_DIR = Path(__file__).resolve().parent.parent / "mara_agents" / "checkpoints" / "mat"


def is_learned(row: str) -> bool:
    return row in LEARNED


def checkpoint_path(row: str, seed: int) -> Path:
    """Where the shipped checkpoint of a learned row and training seed lives."""
    return CHECKPOINT_DIR / f"{row}-seed{seed}.pt"


def available(row: str) -> bool:
    """False only for learned rows some of whose shipped checkpoints are missing."""
    return not is_learned(row) or all(checkpoint_path(row, s).exists() for s in LEARNED_SEEDS)


TIANSHOU_MANIFEST = Path(__file__).resolve().parent.parent / "mara_agents" / "integrations" / "checkpoints" / "tianshou_ppo" / "policy.json"


def weights_id(row: str, seed: int = 0) -> str | None:
    """The sha256 (first 16 hex digits) of the weights behind a learned row and seed, from the checkpoint's
    manifest; None for rows without weights (or whose checkpoint is missing). Benchmark cells include it
    in their key, so retrained checkpoints never reuse cached results."""
    if is_learned(row):
        manifest = checkpoint_path(row, seed).with_suffix(".json")
    elif row == "ppo-tianshou":
        manifest = TIANSHOU_MANIFEST
    else:
        return None
    try:
        return str(json.loads(manifest.read_text())["sha256"])[:16]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def make_agent(row: str, seed: int = 0) -> Agent:
    """The agent of a benchmark row (see the module docstring); ``seed`` seeds the random agent and picks
    a learned row's training seed."""
    if is_learned(row):
        from mara_agents.mat.agent import MATAgent

        path = checkpoint_path(row, seed)
        if not path.exists():
            raise FileNotFoundError(f"no checkpoint for {row!r} seed {seed} at {path}; train it with python -m mara_agents.mat.ppo")
        return MATAgent.load(path)
    if row == "ppo-tianshou":
        from mara_agents.integrations.tianshou_ppo import load_agent

        return load_agent()
    if row in HEURISTICS:
        return HEURISTICS[row](seed) if row == "random" else HEURISTICS[row]()
    if row.split(",")[0].partition(":")[0] in ALLOCATORS:
        return make_allocator(row)
    raise ValueError(f"unknown agent row {row!r}: heuristics {sorted(HEURISTICS)}, allocators {sorted(ALLOCATORS)} "
                     "(optionally ':predictor' and ',key=int' options, e.g. 'lara:oracle', 'edf-admission:fm,min_reports=5')")
