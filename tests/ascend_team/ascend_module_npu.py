"""Module.npu() as Ascend model-zoo scripts use it: the optimizer is often built first."""

import torch
import torch_npu  # noqa: F401


def test_an_optimizer_built_before_module_npu_trains_the_moved_model():
    model = torch.nn.Linear(4, 1)
    weight = model.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.npu()
    assert model.weight is weight and weight.device.type == "npu"
    before = weight.detach().clone()
    model(torch.ones(2, 4).npu()).sum().backward()
    optimizer.step()
    assert not torch.equal(weight.detach(), before), "the optimizer updated stale copies"
    model.cpu()
    assert model.weight is weight and weight.device.type == "cpu"
