"""Module calls without the module-call machinery, for the per-decision inference paths.

One joint decision of MARA is a few hundred operations on tiny tensors (N = 4 nodes, K = 16 slots, a
handful of predicted tasks), so the fixed cost of each ``module(x)`` call (hooks, ``forward`` dispatch,
``Sequential`` iteration) is a sizeable share of the decision time. These helpers compute exactly what
the module computes (the same torch kernels, so bitwise the same values) from its parameters.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)``."""
    return F.linear(x, layer.weight, layer.bias)


def norm(layer: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)``."""
    return F.layer_norm(x, layer.normalized_shape, layer.weight, layer.bias, layer.eps)
