"""Family registry of the real learning-curve generator (see :mod:`core_env.curves.generate`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str
    module: str  # module under core_env.curves.runs with run(family, seeds, steps)
    steps: int  # optimizer steps (RL: updates) per run
    task_set: str  # "id", "vit_ood" or "rl_ood"
    default_runs: int
    est_seconds: float  # measured s/run on the reference 2-core machine, 2 workers busy (threads=1)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in [
        Family("mlp_digits", "mlp", 2000, "id", 150, 1.8),
        Family("mlp_wine", "mlp", 2000, "id", 100, 1.6),
        Family("mlp_breast_cancer", "mlp", 2000, "id", 100, 1.4),
        Family("mlp_synth", "mlp", 2000, "id", 200, 2.1),
        Family("cnn_mnist1d", "cnn1d", 1500, "id", 260, 8.2),
        Family("charlm", "charlm", 1000, "id", 140, 16.3),
        Family("vit_digits", "vit", 1000, "vit_ood", 160, 14.3),
        Family("rl_cartpole", "rl", 300, "rl_ood", 180, 7.8),
        Family("rl_acrobot", "rl", 300, "rl_ood", 80, 20.7),
    ]
}
