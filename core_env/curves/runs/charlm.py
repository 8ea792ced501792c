"""Tiny causal transformer character (byte) LM on the running Python's stdlib ``*.py`` sources."""

from __future__ import annotations

from typing import Any

import numpy as np

from core_env.curves.runs import common as C
from core_env.curves.runs import data as D
from core_env.extras import needs

OPT_PROBS = {"adamw": 0.6, "adam": 0.25, "momentum": 0.15}
GOOD_LR = {"adamw": 1.5e-3, "adam": 1.5e-3, "momentum": 0.1}
CTX = 64
VOCAB = 256


def sample_hp(rng) -> dict[str, Any]:
    hp = C.sample_optim(rng, OPT_PROBS, GOOD_LR, core=0.7, tail_p=0.12, tail=(-1.5, 1.2))
    hp["d_model"] = int(C.choice(rng, [32, 48, 64]))
    hp["depth"] = int(rng.integers(1, 3))
    hp["heads"] = int(C.choice(rng, [2, 4]))
    hp["batch_size"] = int(C.choice(rng, [16, 24, 32]))
    hp["ctx"] = CTX
    hp["grad_clip"] = C.choice(rng, {1.0: 0.7, None: 0.3})
    hp["schedule"] = C.sample_schedule(rng, {"constant": 0.4, "cosine": 0.3, "warmup_cosine": 0.3})
    return hp


def build(hp: dict[str, Any]):
    with needs(__name__, "curves"):
        import torch
        import torch.nn as nn

    from core_env.curves.runs.transformer import block_class

    Block = block_class()

    class CharLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = hp["d_model"]
            self.tok = nn.Embedding(VOCAB, d)
            self.pos = nn.Parameter(0.02 * torch.randn(1, hp["ctx"], d))
            self.blocks = nn.Sequential(*[Block(d, hp["heads"], causal=True) for _ in range(hp["depth"])])
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, VOCAB)

        def forward(self, idx):
            z = self.tok(idx) + self.pos[:, : idx.shape[1]]
            return self.head(self.ln(self.blocks(z)))

    return CharLM()


def windows(data: np.ndarray, starts: np.ndarray):
    with needs(__name__, "curves"):
        import torch

    idx = starts[:, None] + np.arange(CTX + 1)[None, :]
    chunk = torch.from_numpy(data[idx].astype(np.int64))
    return chunk[:, :-1], chunk[:, 1:]


def run(family: str, seeds: C.RunSeeds, steps: int) -> dict[str, Any]:
    with needs(__name__, "curves"):
        import torch
        import torch.nn.functional as F

    train, valid, info = D.stdlib_text()
    hp = sample_hp(seeds.hp)
    C.torch_setup(seeds.torch_seed)
    model = build(hp)
    params = list(model.parameters())
    opt = C.make_optimizer(params, hp)
    rng = seeds.data

    def step_loss(step: int):
        x, y = windows(train, rng.integers(0, len(train) - CTX - 1, size=hp["batch_size"]))
        return F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))

    log = C.train_steps(steps, opt, hp, step_loss, params=params, clip=hp["grad_clip"])
    with torch.no_grad():  # fixed validation windows (same for every run)
        starts = np.random.default_rng(0).integers(0, len(valid) - CTX - 1, size=256)
        x, y = windows(valid, starts)
        val = float(F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1)))
    return C.run_result(log, hp, params, {"valid_loss": val}, text=info)
