"""core_env: the deadline-constrained discrete-node CoRE-Learning environment.

Importing the package registers the Gymnasium id ``core_env/DiscreteCoRE-v1`` (``gymnasium.make`` for the
centralized single env, ``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")`` for the
vector env :class:`core_env.vector.DiscreteCoREVectorEnv`) and, where the installed
PettingZoo has a registry (>= 1.27), the PettingZoo ids ``core_env/discrete_core-v1`` (parallel and AEC).
The v0 ids stay registered only to raise :class:`gymnasium.error.DeprecatedEnv` saying why v0 was removed
(its deadlines gave the hidden demand away) and that v1 replaces it; ``core_env.discrete_core_v0`` raises
ImportError the same way.
"""

from __future__ import annotations

import gymnasium

from core_env.config import LOADS, TASK_SETS, EnvConfig
from core_env.workload import Workload, load_suite, stress_workload

GYM_ID = "core_env/DiscreteCoRE-v1"
PETTINGZOO_ID = "core_env/discrete_core-v1"
REMOVED_GYM_ID = "core_env/DiscreteCoRE-v0"
REMOVED_PETTINGZOO_ID = "core_env/discrete_core-v0"
V0_REMOVED = ("discrete_core_v0 was removed: its workloads derived each deadline from the task's hidden demand, so the "
              "deadline window gave the demand away (docs/env.md, version history). Use discrete_core_v1: "
              f"gym.make({GYM_ID!r}) or `from core_env import discrete_core_v1`.")


def removed_v0(**kwargs: object) -> None:
    """Entry point of the v0 ids: always raises :class:`gymnasium.error.DeprecatedEnv` pointing to v1."""
    raise gymnasium.error.DeprecatedEnv(V0_REMOVED)


def _register() -> None:
    if GYM_ID not in gymnasium.registry:
        # order_enforce / env checker off: gym.make returns the env itself, so env.action_masks() (sb3-contrib) is
        # reachable (Gymnasium 1.x wrappers do not forward attributes); the env enforces reset-before-step itself
        # and passes Gymnasium's check_env (tests). gym.make(GYM_ID, disable_env_checker=False) adds the checker.
        gymnasium.register(GYM_ID, entry_point="core_env.gym_env:DiscreteCoREEnv", vector_entry_point="core_env.vector:DiscreteCoREVectorEnv",
                           order_enforce=False, disable_env_checker=True)
    if REMOVED_GYM_ID not in gymnasium.registry:
        gymnasium.register(REMOVED_GYM_ID, entry_point="core_env:removed_v0")
    import pettingzoo

    if hasattr(pettingzoo, "register"):  # PettingZoo >= 1.27
        from pettingzoo.env_registry import registration

        for env_type, entry in (("parallel", "core_env.discrete_core_v1:parallel_env"), ("aec", "core_env.discrete_core_v1:env")):
            registry = registration.parallel_registry if env_type == "parallel" else registration.aec_registry
            if PETTINGZOO_ID not in registry:
                pettingzoo.register(env_type, PETTINGZOO_ID, entry)
            if REMOVED_PETTINGZOO_ID not in registry:
                pettingzoo.register(env_type, REMOVED_PETTINGZOO_ID, "core_env:removed_v0")


_register()

__all__ = ["EnvConfig", "GYM_ID", "LOADS", "PETTINGZOO_ID", "TASK_SETS", "Workload", "load_suite", "stress_workload"]
