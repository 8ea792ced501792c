"""A minimal pre-LN transformer block shared by the ViT and char-LM families."""

from __future__ import annotations

from core_env.extras import needs


def block_class():
    with needs(__name__, "curves"):
        import torch.nn as nn
        import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, d: int, heads: int, causal: bool, mlp_ratio: int = 4) -> None:
            super().__init__()
            self.h, self.causal = heads, causal
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, mlp_ratio * d), nn.Linear(mlp_ratio * d, d)

        def forward(self, x):
            B, T, D = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
            x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    return Block
