"""Mixed precision as Ascend's model zoo trains (apex's amp with an NPU fused optimizer, and
torch_npu.optim's fused AdamW), written for an NPU host."""

import pytest
import torch
import torch_npu  # noqa: F401  (torch.npu, .npu())
from apex import amp
from apex.optimizers import NpuFusedSGD
from torch_npu.optim import NpuFusedAdamW

torch.npu.set_device("npu:0")


@pytest.fixture(autouse=True)
def amp_left_behind(monkeypatch):
    """apex's amp changes torch for the whole process (O1's casts, Module.zero_grad), and
    the suite's other files run in this process after this one."""
    monkeypatch.setattr(torch.nn.Module, "zero_grad", torch.nn.Module.zero_grad)
    yield
    torch.set_autocast_enabled("npu", False)


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(x.mean(dim=(2, 3)))


def batches(count):
    """`count` batches of 16 noisy 8x8 images, each tinted with its label's colour."""
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 4, (count, 16), generator=generator)
    colours = torch.randn(4, 3, 1, 1, generator=generator)
    images = torch.randn(count, 16, 3, 8, 8, generator=generator) + 2 * colours[labels]
    return [(x.npu(), y.npu()) for x, y in zip(images, labels, strict=True)]


def test_o2_with_a_fixed_loss_scale_and_an_npu_fused_sgd():
    torch.manual_seed(0)
    model = ConvNet()
    model, optimizer = amp.initialize(
        model.npu(),
        NpuFusedSGD(model.parameters(), lr=0.1, momentum=0.9),
        opt_level="O2",
        loss_scale=128.0,
        combine_grad=True,
    )
    criterion = torch.nn.CrossEntropyLoss().npu()
    data = batches(4)
    losses = []
    for _ in range(5):
        for images, labels in data:
            output = model(images)
            loss = criterion(output, labels)
            optimizer.zero_grad()
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
            losses.append(loss.item())
    first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4  # the first and last epochs
    assert last < first / 2, losses
    assert {p.device.type for p in model.parameters()} == {"npu"}
    assert model.conv.weight.dtype == torch.float16  # O2: the model in float16...
    assert model.bn.weight.dtype == torch.float32  # ...its batch norm in float32
    assert output.dtype == torch.float32
    assert {p.dtype for p in amp.master_params(optimizer)} == {torch.float32}
    assert amp.state_dict() == {"loss_scaler0": {"loss_scale": 128.0, "unskipped": 20}}


def test_o1_with_torch_npus_fused_adamw_and_a_dynamic_loss_scale():
    torch.manual_seed(0)
    model = ConvNet().npu()
    optimizer = NpuFusedAdamW(model.parameters(), lr=1e-2)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", verbosity=0)
    data = batches(2)
    for _ in range(10):
        for images, labels in data:
            optimizer.zero_grad()
            output = model(images)
            loss = torch.nn.functional.cross_entropy(output, labels)
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.clip_grad_norm_fused_(5.0)
            optimizer.step()
    assert output.dtype == torch.float16  # autocast: the Linear ran in float16
    assert model.fc.weight.dtype == torch.float32
    assert loss.item() < 0.8
    assert amp.state_dict()["loss_scaler0"]["loss_scale"] == 2.0**16


def test_an_apex_fused_optimizer_without_amp_fails_at_its_step_as_on_the_npu():
    model = torch.nn.Linear(4, 2).npu()
    optimizer = NpuFusedSGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 4).npu()).sum().backward()
    with pytest.raises(RuntimeError, match="NpuFusedSGD should be used with AMP"):
        optimizer.step()
