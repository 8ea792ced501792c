"""core_env: the deadline-constrained discrete-node CoRE-Learning environment.

Importing the package registers the Gymnasium id ``core_env/DiscreteCoRE-v0`` and, where the installed
PettingZoo has a registry (>= 1.27), the PettingZoo ids ``core_env/discrete_core-v0`` (parallel and AEC).
"""

from __future__ import annotations

import gymnasium

from core_env.config import LOADS, TASK_SETS, EnvConfig
from core_env.workload import Workload, load_suite, stress_workload

GYM_ID = "core_env/DiscreteCoRE-v0"
PETTINGZOO_ID = "core_env/discrete_core-v0"


def _register() -> None:
    if GYM_ID not in gymnasium.registry:
        gymnasium.register(GYM_ID, entry_point="core_env.gym_env:DiscreteCoREEnv")
    import pettingzoo

    if hasattr(pettingzoo, "register"):  # PettingZoo >= 1.27
        from pettingzoo.env_registry import registration

        for env_type, entry in (("parallel", "core_env.discrete_core_v0:parallel_env"), ("aec", "core_env.discrete_core_v0:env")):
            registry = registration.parallel_registry if env_type == "parallel" else registration.aec_registry
            if PETTINGZOO_ID not in registry:
                pettingzoo.register(env_type, PETTINGZOO_ID, entry)


_register()

__all__ = ["EnvConfig", "GYM_ID", "LOADS", "PETTINGZOO_ID", "TASK_SETS", "Workload", "load_suite", "stress_workload"]
