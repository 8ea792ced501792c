"""Module calls without the module-call machinery, for the per-decision inference paths.

One joint decision of MARA is a few hundred operations on tiny tensors (N = 4 nodes, K = 16 slots, a
handful of predicted tasks), so the fixed cost of each ``module(x)`` call (hooks, ``forward`` dispatch,
``Sequential`` iteration) is a sizeable share of the decision time. These helpers compute exactly what
the module computes (the same torch kernels, so bitwise the same values) from its parameters.
"""

from __future__ import annotations

from core_env.extras import needs

with needs(__name__):
    import torch
    import torch.nn.functional as F
    from torch import nn


def linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)``."""
    return F.linear(x, layer.weight, layer.bias)


def norm(layer: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)``."""
    return F.layer_norm(x, layer.normalized_shape, layer.weight, layer.bias, layer.eps)


def gru_state(layer: nn.GRU, x: torch.Tensor) -> torch.Tensor:
    """(B, hidden) the final hidden state of a one-layer, unidirectional, batch-first ``layer`` on x (B, T, inputs)
    from a zero state: ``layer(x)[1][0]``."""
    if layer.num_layers != 1 or layer.bidirectional or not layer.batch_first or not layer.bias:
        raise ValueError("gru_state takes a one-layer, unidirectional, batch-first GRU with biases")
    weights = [layer.weight_ih_l0, layer.weight_hh_l0, layer.bias_ih_l0, layer.bias_hh_l0]
    state = x.new_zeros(1, x.shape[0], layer.hidden_size)
    return torch.gru(x, state, weights, True, 1, 0.0, layer.training, False, True)[1][0]
