"""Tiny ViT on sklearn digits (8x8 images as 16 patches of 2x2): plateau, then a sudden drop."""

from __future__ import annotations

from typing import Any

from core_env.curves.runs import common as C
from core_env.curves.runs import data as D
from core_env.extras import needs

OPT_PROBS = {"sgd": 0.15, "momentum": 0.25, "adam": 0.3, "adamw": 0.3}
GOOD_LR = {"sgd": 0.1, "momentum": 0.02, "adam": 1e-3, "adamw": 1e-3}
PATCH = 2
MAX_COST = 6144  # cap on batch_size * depth * d_model


def sample_hp(rng) -> dict[str, Any]:
    hp = C.sample_optim(rng, OPT_PROBS, GOOD_LR)
    hp["d_model"] = int(C.choice(rng, [16, 32, 48, 64]))
    hp["depth"] = int(rng.integers(1, 4))
    hp["heads"] = int(C.choice(rng, [2, 4]))
    hp["batch_size"] = int(C.choice(rng, {16: 0.3, 32: 0.35, 64: 0.25, 128: 0.1}))
    while hp["batch_size"] > 16 and hp["batch_size"] * hp["depth"] * hp["d_model"] > MAX_COST:
        hp["batch_size"] //= 2  # keep the per-step cost bounded (CPU budget)
    hp["pool"] = C.choice(rng, ["cls", "mean"])
    hp["schedule"] = C.sample_schedule(rng)
    return hp


def build(hp: dict[str, Any], n_patches: int, patch_dim: int, n_out: int):
    with needs(__name__, "curves"):
        import torch
        import torch.nn as nn

    from core_env.curves.runs.transformer import block_class

    Block = block_class()

    class ViT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = hp["d_model"]
            self.embed = nn.Linear(patch_dim, d)
            self.cls = nn.Parameter(torch.zeros(1, 1, d))
            self.pos = nn.Parameter(0.02 * torch.randn(1, n_patches + 1, d))
            self.blocks = nn.Sequential(*[Block(d, hp["heads"], causal=False) for _ in range(hp["depth"])])
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, n_out)

        def forward(self, x):
            z = self.embed(x)
            z = torch.cat([self.cls.expand(len(z), -1, -1), z], 1) + self.pos
            z = self.ln(self.blocks(z))
            return self.head(z[:, 0] if hp["pool"] == "cls" else z[:, 1:].mean(1))

    return ViT()


def patches(images):
    """(N, 8, 8) -> (N, 16, 4) non-overlapping 2x2 patches."""
    n, h, w = images.shape
    p = images.reshape(n, h // PATCH, PATCH, w // PATCH, PATCH).transpose(0, 1, 3, 2, 4)
    return p.reshape(n, (h // PATCH) * (w // PATCH), PATCH * PATCH).copy()


def run(family: str, seeds: C.RunSeeds, steps: int) -> dict[str, Any]:
    Xtr, ytr, Xte, yte = D.digits_images()
    Ptr, Pte = patches(Xtr), patches(Xte)
    hp = sample_hp(seeds.hp)
    return C.train_classifier(seeds, hp, steps, lambda: build(hp, Ptr.shape[1], Ptr.shape[2], 10), Ptr, ytr, Pte, yte)
