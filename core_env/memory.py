"""How many environments one process can hold: the bound on ``num_envs`` of the vector env (and of every
batch built on it, e.g. TorchRL's ``NodeBatchEnv``), checked before anything is allocated (docs/env.md,
Vector env)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from core_env import features
from core_env.config import EnvConfig
from core_env.state import SlotFloat, SlotInt


#: The most envs one vector env holds (docs/env.md, Vector env): more envs belong in more processes.
MAX_NUM_ENVS = 2**16


def bytes_per_env(config: EnvConfig, observation: str = "per_node") -> int:
    """A lower estimate of one env's memory in a vector env: three copies of its observation (the
    observation space's bounds and one observation), its slot rows, the rows of the tasks a seeded draw
    brings on average, and its rng (measured: about 66 KiB at the defaults, docs/benchmarks.md)."""
    n, k, h = config.n_nodes, config.n_slots, config.history
    if observation == "compact":
        floats = n * features.NODE_FEATURES + features.GLOBAL_FEATURES + k * features.slot_width(h)
    else:
        floats = n * features.obs_dim(k, h)
    row = 8 * (len(SlotInt) + len(SlotFloat))
    tasks = int(n * config.arrival_intensity * min(config.arrival_steps, config.max_cycles))
    return 3 * (4 * floats + n * (k + 1)) + k * (row + 8 * h) + tasks * row + 1024


def physical_memory() -> int | None:
    """This machine's memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def check_num_envs(num_envs: Any, config: EnvConfig, observation: str = "per_node") -> int:
    """``num_envs`` as an int in [1, :data:`MAX_NUM_ENVS`] whose estimated memory (:func:`bytes_per_env`)
    fits this machine, checked before anything is allocated; TypeError / ValueError naming it otherwise."""
    if isinstance(num_envs, (bool, np.bool_)) or not isinstance(num_envs, (int, np.integer)):
        raise TypeError(f"num_envs must be an int in [1, {MAX_NUM_ENVS}], got {type(num_envs).__name__} {num_envs!r}")
    if not 1 <= num_envs <= MAX_NUM_ENVS:
        raise ValueError(f"num_envs must be in [1, {MAX_NUM_ENVS}] (one vector env in one process; run more processes for more "
                         f"envs), got {num_envs}")
    need, have = int(num_envs) * bytes_per_env(config, observation), physical_memory()
    if have is not None and need > have:
        raise ValueError(f"num_envs={num_envs} needs at least {need / 2**30:.1f} GiB for this configuration (n_nodes={config.n_nodes}, "
                         f"n_slots={config.n_slots}, history={config.history}, observation={observation!r}; about "
                         f"{bytes_per_env(config, observation) / 2**10:.0f} KiB per env), more than this machine's "
                         f"{have / 2**30:.1f} GiB: use fewer envs or a smaller configuration")
    return int(num_envs)
