"""1-D CNN on MNIST-1D (generated offline with ``mnist1d.data.make_dataset`` defaults)."""

from __future__ import annotations

from typing import Any

from core_env.curves.runs import common as C
from core_env.curves.runs import data as D
from core_env.extras import needs

OPT_PROBS = {"sgd": 0.2, "momentum": 0.3, "adam": 0.3, "adamw": 0.2}
GOOD_LR = {"sgd": 0.1, "momentum": 0.02, "adam": 3e-3, "adamw": 3e-3}


def sample_hp(rng) -> dict[str, Any]:
    hp = C.sample_optim(rng, OPT_PROBS, GOOD_LR)
    hp["depth"] = int(rng.integers(2, 5))  # conv layers
    hp["width"] = int(C.choice(rng, [16, 24, 32, 48]))
    hp["kernel"] = int(C.choice(rng, {3: 0.35, 5: 0.45, 7: 0.2}))
    hp["batch_size"] = int(C.choice(rng, {32: 0.35, 64: 0.45, 128: 0.2}))
    hp["activation"] = C.choice(rng, {"relu": 0.7, "gelu": 0.3})
    hp["schedule"] = C.sample_schedule(rng)
    return hp


def build(length: int, n_out: int, hp: dict[str, Any]):
    with needs(__name__, "curves"):
        import torch.nn as nn

    act = {"relu": nn.ReLU, "gelu": nn.GELU}[hp["activation"]]
    layers, c, L = [], 1, length
    for i in range(hp["depth"]):
        stride = 2 if 0 < i <= 3 else 1
        layers += [nn.Conv1d(c, hp["width"], hp["kernel"], stride=stride, padding=hp["kernel"] // 2), act()]
        c, L = hp["width"], (L + 2 * (hp["kernel"] // 2) - hp["kernel"]) // stride + 1
    layers += [nn.Flatten(), nn.Linear(c * L, n_out)]
    return nn.Sequential(*layers)


def run(family: str, seeds: C.RunSeeds, steps: int) -> dict[str, Any]:
    Xtr, ytr, Xte, yte = D.mnist1d()
    Xtr, Xte = Xtr[:, None, :], Xte[:, None, :]
    hp = sample_hp(seeds.hp)
    return C.train_classifier(seeds, hp, steps, lambda: build(Xtr.shape[-1], 10, hp), Xtr, ytr, Xte, yte)
