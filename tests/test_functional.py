"""The module-call-free helpers compute exactly what the modules compute (the per-decision paths use them)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mara_agents.functional import gru_state, linear, norm


def test_helpers_equal_the_module_calls_bitwise():
    torch.manual_seed(0)
    x = torch.randn(3, 7, 16)
    layer, layer_norm = nn.Linear(16, 8), nn.LayerNorm(16)
    with torch.no_grad():
        layer_norm.weight.normal_()
        layer_norm.bias.normal_()
    assert torch.equal(linear(layer, x), layer(x))
    assert torch.equal(norm(layer_norm, x), layer_norm(x))
    gru = nn.GRU(16, 5, batch_first=True)
    assert torch.equal(gru_state(gru, x), gru(x)[1][0])
    loss = gru_state(gru, x).square().sum()  # gradients flow (the FM predictor trains through it)
    loss.backward()
    assert gru.weight_hh_l0.grad is not None and gru.weight_hh_l0.grad.abs().sum() > 0


@pytest.mark.parametrize("kwargs", [{"num_layers": 2}, {"bidirectional": True}, {"batch_first": False}, {"bias": False}])
def test_gru_state_rejects_other_layouts(kwargs):
    with pytest.raises(ValueError, match="one-layer"):
        gru_state(nn.GRU(4, 3, **{"batch_first": True, **kwargs}), torch.zeros(2, 5, 4))
