"""The trainer's environments: seeded training workloads (:func:`training_workloads`), vector envs with the
variant's predictor features (:func:`training_envs`) and the staggered groups a run plays (:func:`training_groups`).

Every environment plays seeded workloads drawn from the task set's *train* curves at the training load (never
the evaluation suites); autoreset is disabled, so an ended episode is frozen until its group restarts.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core_env.config import EnvConfig
from core_env.generators import generator_for
from core_env.vector import DiscreteCoREVectorEnv
from core_env.workload import Workload
from mara_agents import rollout

WorkloadFn = Callable[[np.random.Generator], Workload]


def training_workloads(config: EnvConfig) -> WorkloadFn:
    """Seeded workloads of ``config``'s own generator (:func:`core_env.generators.generator_for`: its task
    set's *train* curves at its load, by ``config.recipe``, as ``reset(seed=...)`` draws them)."""
    generator = generator_for(config)
    if not generator.trains:
        raise ValueError(f"task_set={config.task_set!r} is evaluation-only; train on a task set with training curves")
    return generator.workload


def training_envs(config: EnvConfig, batch: int, predictor=None, index: bool = False) -> DiscreteCoREVectorEnv:
    """``batch`` environments of the vector env (autoreset disabled: an ended episode is frozen until the
    trainer resets them all); with a predictor, a :class:`SlotPredictions` observes them and
    :func:`predictor_observation` appends its features to what the model sees (with ``index``, the truncated
    Gittins index as a 4th per slot)."""
    from mara_agents.predictors.features import SlotPredictions

    envs = DiscreteCoREVectorEnv(batch, autoreset_mode="disabled", config=config)
    if predictor is not None:
        SlotPredictions(predictor, index=index).attach(envs.batch)
    return envs


def training_groups(config: EnvConfig, num_envs: int, groups: int, predictor, index: bool, workloads: Callable[[int], list[Workload]],
                    seed: int) -> list[DiscreteCoREVectorEnv]:
    """``groups`` vector envs of ``num_envs // groups`` environments each (:func:`training_envs`), one predictor
    call per step for all of them, their first episodes (``workloads(size)``) staggered in phase: a random
    agent plays group g for g / groups of the arrival window."""
    from mara_agents.heuristics.random import RandomAgent

    size = num_envs // groups
    played = [training_envs(config, size, predictor, index) for _ in range(groups)]
    if predictor is not None and groups > 1:
        from mara_agents.predictors.features import predict_together

        predict_together([envs.batch for envs in played])  # one predictor call per step for every group
    warmup = RandomAgent(seed=seed)
    for g, envs in enumerate(played):  # stagger episode phases
        rollout.play(envs, warmup.act, workloads(size), steps=g * config.arrival_steps // groups)
    return played
