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
    est_seconds: float  # measured seconds per run on the reference 2-core machine (threads=1)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in [
        Family("mlp_digits", "mlp", 2000, "id", 150, 1.0),
        Family("mlp_wine", "mlp", 2000, "id", 100, 0.8),
        Family("mlp_breast_cancer", "mlp", 2000, "id", 100, 0.8),
        Family("mlp_synth", "mlp", 2000, "id", 200, 1.4),
        Family("cnn_mnist1d", "cnn1d", 1500, "id", 300, 2.5),
        Family("charlm", "charlm", 1000, "id", 180, 12.0),
        Family("vit_digits", "vit", 1000, "vit_ood", 200, 12.0),
        Family("rl_cartpole", "rl", 300, "rl_ood", 200, 6.0),
        Family("rl_acrobot", "rl", 300, "rl_ood", 100, 13.0),
    ]
}
