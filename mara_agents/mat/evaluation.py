"""The trainer's evaluations and baselines, on fixed seeded *training-curve* workloads (never the evaluation suites).

:func:`evaluation_workloads` draws them from :data:`EVAL_SEED`, the same for every training seed;
:func:`policy_completion` is the deterministic policy's mean completion rate on them (every few minutes,
once at the start on the random initialisation, once after the warm start), :func:`baseline_completions`
that of EDF, random and the teacher (once per run, stored in the state and the policy's manifest).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core_env.extras import needs
from core_env.vector import DiscreteCoREVectorEnv
from core_env.workload import Workload
from mara_agents import rollout
from mara_agents.mat.model import MATConfig, MATModel, observation_tokens
from mara_agents.predictors.features import predictor_observation

with needs(__name__):
    import torch

#: Seed of the fixed evaluation workloads (training curves), the same for every training seed.
EVAL_SEED = 20260901


def evaluation_workloads(workload_fn: Callable[[np.random.Generator], Workload], episodes: int) -> list[Workload]:
    """``episodes`` workloads of ``workload_fn``, the i-th drawn from the seed ``[EVAL_SEED, i]``."""
    return [workload_fn(np.random.default_rng([EVAL_SEED, i])) for i in range(episodes)]


def play(model: MATModel, model_config: MATConfig, envs: DiscreteCoREVectorEnv, workloads: list[Workload],
         deterministic: bool = True, generator: torch.Generator | None = None) -> dict[str, np.ndarray]:
    """Play ``workloads`` to the end with the model (with the envs' predictor features); final statistics."""
    K = envs.batch.K

    def act(observation: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return model.decide(observation_tokens(observation, K, model_config), torch.from_numpy(mask.astype(bool)), deterministic, generator).numpy()

    with torch.inference_mode():
        return rollout.final_statistics(rollout.play(envs, act, workloads, observe=predictor_observation))


def policy_completion(model: MATModel, model_config: MATConfig, envs: DiscreteCoREVectorEnv, workloads: list[Workload]) -> float:
    """Mean completion rate of the deterministic policy on ``workloads`` (``envs``: one environment each)."""
    return float(play(model, model_config, envs, workloads)["completion_rate"].mean())


def baseline_completions(envs: DiscreteCoREVectorEnv, workloads: list[Workload], teacher: str = "") -> dict[str, float]:
    """Mean completion rates of EDF, random and (when given) the teacher ``teacher`` on ``workloads``."""
    from mara_agents.heuristics import EDF, RandomAgent
    from mara_agents.mat.imitation import make_teacher

    agents = [("edf", EDF()), ("random", RandomAgent(seed=0))] + ([(teacher, make_teacher(teacher))] if teacher else [])
    return {name: float(rollout.play(envs, agent, workloads).infos["completion_rate"].mean()) for name, agent in agents}
