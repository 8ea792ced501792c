"""MLP families on small tabular datasets (sklearn digits / wine / breast_cancer / make_classification)."""

from __future__ import annotations

from typing import Any

from core_env.curves.runs import common as C
from core_env.curves.runs import data as D
from core_env.extras import needs

DATASETS = {"mlp_digits": "digits", "mlp_wine": "wine", "mlp_breast_cancer": "breast_cancer", "mlp_synth": "synth"}
OPT_PROBS = {"sgd": 0.25, "momentum": 0.3, "adam": 0.25, "adamw": 0.2}
GOOD_LR = {"sgd": 0.1, "momentum": 0.02, "adam": 2e-3, "adamw": 2e-3}


def sample_hp(rng) -> dict[str, Any]:
    hp = C.sample_optim(rng, OPT_PROBS, GOOD_LR)
    hp["depth"] = int(rng.integers(1, 4))
    hp["width"] = C.log_uniform_int(rng, 16, 256)
    hp["batch_size"] = int(C.choice(rng, [16, 32, 64, 128, 256]))
    hp["activation"] = C.choice(rng, {"relu": 0.6, "tanh": 0.25, "gelu": 0.15})
    hp["schedule"] = C.sample_schedule(rng)
    return hp


def build(n_in: int, n_out: int, hp: dict[str, Any]):
    with needs(__name__, "curves"):
        import torch.nn as nn

    act = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}[hp["activation"]]
    layers, d = [], n_in
    for _ in range(hp["depth"]):
        layers += [nn.Linear(d, hp["width"]), act()]
        d = hp["width"]
    layers.append(nn.Linear(d, n_out))
    return nn.Sequential(*layers)


def run(family: str, seeds: C.RunSeeds, steps: int) -> dict[str, Any]:
    Xtr, ytr, Xte, yte, n_classes = D.tabular(DATASETS[family])
    hp = sample_hp(seeds.hp)
    hp["batch_size"] = min(hp["batch_size"], len(ytr))
    return C.train_classifier(seeds, hp, steps, lambda: build(Xtr.shape[1], n_classes, hp), Xtr, ytr, Xte, yte)


evaluate = C.evaluate_classifier  # test loss and accuracy (kept under its old name)
