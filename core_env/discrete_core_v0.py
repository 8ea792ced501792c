"""Removed: ``discrete_core_v0`` derived each task's deadline from its hidden demand (see docs/env.md,
version history). Use :mod:`core_env.discrete_core_v1`."""

raise ImportError(
    "core_env.discrete_core_v0 was removed: its workloads derived each deadline from the task's hidden demand, "
    "so the deadline window gave the demand away (docs/env.md, version history). "
    "Use `from core_env import discrete_core_v1` or gym.make('core_env/DiscreteCoRE-v1')."
)
