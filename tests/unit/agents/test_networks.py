"""The shared MLP: the same network as ``nn.Sequential``, called layer function by layer
function."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rltrain.agents.nn.networks import MLP, mlp


@pytest.mark.parametrize("activation", [nn.ReLU, nn.ELU, nn.Tanh])
def test_an_mlp_computes_what_nn_sequential_computes_with_the_same_state_dict(
        activation: type[nn.Module]) -> None:
    torch.manual_seed(0)
    net = mlp(5, [16, 8], 3, activation)
    sequential = nn.Sequential(*net)  # the very same layers
    assert isinstance(net, MLP) and list(net.state_dict()) == list(sequential.state_dict())
    x = torch.randn(7, 5, requires_grad=True)
    out, reference = net(x), sequential(x)
    assert torch.equal(out, reference)
    grads = torch.autograd.grad(out.square().sum(), [x, *net.parameters()])
    reference_grads = torch.autograd.grad(reference.square().sum(), [x, *net.parameters()])
    assert all(torch.equal(g, r) for g, r in zip(grads, reference_grads, strict=True))


def test_an_mlp_loads_a_sequential_checkpoint_and_runs_a_hook_registered_on_it() -> None:
    torch.manual_seed(1)
    sequential = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
    net = mlp(4, [6], 2)
    net.load_state_dict(sequential.state_dict())  # checkpoints written before MLP existed
    seen: list[torch.Tensor] = []
    net.register_forward_hook(lambda _module, _inputs, output: seen.append(output))
    x = torch.randn(3, 4)
    assert torch.equal(net(x), sequential(x)) and torch.equal(seen[0], sequential(x))
