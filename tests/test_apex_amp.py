"""The stand-in's apex.amp (devicekit/simulate/ascend_apex.py, apex_scaling.py,
apex_models.py): amp.initialize, scale_loss and state_dict behave as Ascend's apex's do, at
O0, O1 and O2, with a fixed and a dynamic loss scale, and refuse what apex refuses.

These run in this process on CPU tensors: amp takes only models on the NPU, and the tests
point it at the CPU (its arithmetic is the same); tests/ascend_team/ascend_apex_optim.py
trains on the stand-in's npu.
"""

import inspect
import re

import pytest
import torch

from devicekit.simulate import apex_scaling, ascend_apex
from devicekit.simulate import ascend_apex_optim as apex_optim


@pytest.fixture(autouse=True)
def amp_on_the_cpu(monkeypatch):
    """A fresh amp state for models on the CPU; autocast and Module.zero_grad, which amp
    changes for the whole process, as they were afterwards."""
    monkeypatch.setattr(ascend_apex, "_DEVICE_TYPE", "cpu")
    monkeypatch.setattr(ascend_apex, "_amp", ascend_apex._Amp())
    monkeypatch.setattr(torch.nn.Module, "zero_grad", torch.nn.Module.zero_grad)
    autocast = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
    cache = torch.is_autocast_cache_enabled()
    yield
    torch.set_autocast_enabled("cpu", autocast[0])
    torch.set_autocast_dtype("cpu", autocast[1])
    torch.set_autocast_cache_enabled(cache)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def net_and_data():
    torch.manual_seed(0)
    return Net(), torch.randn(16, 4), torch.randn(16, 2)


def train(model, optimizer, x, y, steps=3, scale=True):
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        if scale:
            with ascend_apex.scale_loss(loss, optimizer) as scaled:
                scaled.backward()
        else:
            loss.backward()
        optimizer.step()


def test_o0_trains_in_float32_exactly_as_torch_does():
    model, x, y = net_and_data()
    reference = Net()
    reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = ascend_apex.initialize(model, optimizer, opt_level="O0", verbosity=0)
    loss = torch.nn.functional.mse_loss(model(x), y)
    with ascend_apex.scale_loss(loss, optimizer) as scaled:
        assert torch.equal(scaled, loss)  # O0's loss scale is 1.0
    train(model, optimizer, x, y)
    train(
        reference, torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9), x, y, scale=False
    )
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        assert got.dtype == torch.float32 and torch.equal(got, want)
    assert ascend_apex.state_dict() == {"loss_scaler0": {"loss_scale": 1.0, "unskipped": 0}}


def test_o1_computes_in_float16_under_autocast_and_unscales_the_gradients():
    model, x, y = net_and_data()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = ascend_apex.initialize(model, optimizer, opt_level="O1", verbosity=0)
    output = model(x)
    loss = torch.nn.functional.mse_loss(output, y)
    assert (output.dtype, loss.dtype, model.fc1.weight.dtype) == (
        torch.float16,
        torch.float32,
        torch.float32,
    )
    with ascend_apex.scale_loss(loss, optimizer) as scaled:
        assert scaled.item() == loss.item() * 2.0**16  # the dynamic scale starts at 2**16
        scaled.backward()
    unscaled = [p.grad.clone() for p in model.parameters()]
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    torch.testing.assert_close(unscaled, [p.grad for p in model.parameters()], rtol=1e-3, atol=1e-6)
    ascend_apex.initialize(model, opt_level="O0", verbosity=0)
    assert not torch.is_autocast_enabled("cpu"), "initialized again, O1's autocast is off"


def test_o2_casts_the_model_and_steps_float32_master_weights():
    model, x, y = net_and_data()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = ascend_apex.initialize(
        model, optimizer, opt_level="O2", loss_scale=128.0, verbosity=0
    )
    assert (model.fc1.weight.dtype, model.bn.weight.dtype) == (torch.float16, torch.float32)
    masters = list(ascend_apex.master_params(optimizer))
    assert [p.dtype for p in masters] == [torch.float32] * len(masters)
    assert masters[0] is not model.fc1.weight and torch.equal(masters[0].half(), model.fc1.weight)
    output = model(x)  # a float32 input, cast to float16 by the forward
    assert output.dtype == torch.float32, "O2's forward gives float32 outputs"
    with ascend_apex.scale_loss(torch.nn.functional.mse_loss(output, y), optimizer) as scaled:
        scaled.backward()
    # The model's float16 gradients stay scaled; the masters' are unscaled copies.
    unscaled = model.fc1.weight.grad.float() * (1 / 128.0)
    assert torch.equal(masters[0].grad, unscaled)
    before = masters[0].detach().clone()
    optimizer.step()
    assert torch.equal(masters[0].detach(), before.add(unscaled, alpha=-0.1)), "SGD's update"
    assert torch.equal(model.fc1.weight.detach(), masters[0].detach().half()), "copied back"
    assert masters[0].grad is None


def overflowing(model, optimizer, x):
    """One step whose float16 gradients overflow at a loss scale of 2**16."""
    optimizer.zero_grad()
    with ascend_apex.scale_loss(model(x).sum() * 1000, optimizer) as scaled:
        scaled.backward()
    optimizer.step()


def test_a_dynamic_loss_scale_skips_the_step_of_an_overflow_and_halves(capsys):
    model, x, _ = net_and_data()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    model, optimizer = ascend_apex.initialize(model, optimizer, opt_level="O2", verbosity=1)
    weights = model.fc1.weight.detach().clone()
    overflowing(model, optimizer, x)
    assert torch.equal(model.fc1.weight, weights), "the step was skipped"
    assert (
        "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0"
        in capsys.readouterr().out
    )
    for _ in range(16):  # halved until the gradients fit
        if ascend_apex.state_dict()["loss_scaler0"]["unskipped"]:
            break
        overflowing(model, optimizer, x)
    assert not torch.equal(model.fc1.weight, weights)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_fixed_loss_scale_never_skips_even_an_overflow_as_in_apex():
    model, x, _ = net_and_data()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    model, optimizer = ascend_apex.initialize(
        model, optimizer, opt_level="O2", loss_scale=2.0**16, verbosity=0
    )
    overflowing(model, optimizer, x)
    assert not torch.isfinite(model.fc1.weight).all(), "stepped with inf gradients"
    assert ascend_apex.state_dict() == {"loss_scaler0": {"loss_scale": 65536.0, "unskipped": 1}}


def test_the_dynamic_scale_grows_and_backs_off_within_its_limits_and_is_saved():
    model, x, y = net_and_data()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    options = {"dynamic_init_scale": 4.0, "scale_window": 2, "max_loss_scale": 8.0}
    model, optimizer = ascend_apex.initialize(
        model, optimizer, opt_level="O1", num_losses=2, verbosity=0, **options
    )
    train(model, optimizer, x, y, steps=5)  # 4 -> 8 after two steps, capped at 8
    saved = ascend_apex.state_dict()
    assert saved == {
        "loss_scaler0": {"loss_scale": 8.0, "unskipped": 1},
        "loss_scaler1": {"loss_scale": 4.0, "unskipped": 0},
    }
    ascend_apex.initialize(model, opt_level="O1", num_losses=2, verbosity=0)
    ascend_apex.load_state_dict(saved)
    assert ascend_apex.state_dict() == saved
    with pytest.raises(RuntimeError, match=r"unexpected key\(s\) 'scaler'"):
        ascend_apex.load_state_dict({"scaler": {}})
    scaler = apex_scaling.LossScaler("dynamic", 4.0, 2.0, 0.5, 100, 3.0, 8.0)
    assert scaler.update(True) and scaler.scale == 3.0, "backed off to min_loss_scale"


@pytest.mark.parametrize("delay_unscale", [False, True])
def test_gradients_accumulated_over_two_backward_passes_are_unscaled_once(delay_unscale):
    model, x, y = net_and_data()
    reference = Net()
    reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = ascend_apex.initialize(
        model, optimizer, opt_level="O0", loss_scale=1024.0, verbosity=0
    )
    for half, delay in ((x[:8], delay_unscale), (x[8:], False)):
        loss = torch.nn.functional.mse_loss(model(half), y[: len(half)])
        with ascend_apex.scale_loss(loss, optimizer, delay_unscale=delay) as scaled:
            scaled.backward()
    for half in (x[:8], x[8:]):
        torch.nn.functional.mse_loss(reference(half), y[: len(half)]).backward()
    torch.testing.assert_close(
        [p.grad for p in model.parameters()], [p.grad for p in reference.parameters()]
    )


def test_apexs_fused_optimizers_go_with_amp_and_keep_gradients_combined():
    model, x, y = net_and_data()
    optimizer = apex_optim.NpuFusedSGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = ascend_apex.initialize(
        model, optimizer, opt_level="O2", loss_scale=64.0, combine_grad=True, verbosity=0
    )
    train(model, optimizer, x, y)
    masters = list(ascend_apex.master_params(optimizer))
    with ascend_apex.scale_loss(torch.nn.functional.mse_loss(model(x), y), optimizer) as scaled:
        scaled.backward()
    total = optimizer.clip_optimizer_grad_norm_fused(1e-3)
    assert total > 1e-3 and torch.linalg.vector_norm(
        torch.cat([p.grad.flatten() for p in masters])
    ) == pytest.approx(1e-3, rel=1e-4)
    with pytest.raises(RuntimeError, match="clip_model_grad_norm_fused can only be used"):
        optimizer.clip_model_grad_norm_fused(1.0)
    model.zero_grad()
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters()), "zeroed"
    with pytest.raises(AssertionError, match=r"set_to_none=True\) with combine_grad"):
        model.zero_grad(set_to_none=True)
    # Ascend's patch/npu.patch (apex/amp/_process_optimizer.py) gives optimizers both, as
    # `(self, max_norm, norm_type=2)`.
    for method in (optimizer.clip_optimizer_grad_norm_fused, optimizer.clip_model_grad_norm_fused):
        parameters = inspect.signature(method).parameters.values()
        assert [(p.name, p.default) for p in parameters] == [
            ("max_norm", inspect.Parameter.empty),
            ("norm_type", 2),
        ]


def test_enabled_false_leaves_everything_as_it_was():
    model, x, y = net_and_data()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert ascend_apex.initialize(model, optimizer, enabled=False) == (model, optimizer)
    loss = torch.nn.functional.mse_loss(model(x), y)
    with ascend_apex.scale_loss(loss, optimizer) as scaled:
        assert scaled is loss
    assert model.fc1.weight.dtype == torch.float32 and not hasattr(optimizer, "_amp_stash")


def test_cast_model_outputs_casts_o1s_outputs():
    model, x, _ = net_and_data()
    model = ascend_apex.initialize(model, cast_model_outputs=torch.float32, verbosity=0)
    assert model(x).dtype == torch.float32


@pytest.mark.parametrize(
    "arguments, says",
    [
        ({"opt_level": "O4"}, "unexpected optimization level 'O4': options are 'O0'"),
        ({"keep_batchnorm_fp32": True}, "keep_batchnorm_fp32=True does not go with opt_level='O1'"),
        ({"opt_level": "O0", "combine_grad": True}, "combine_grad=True does not go with"),
        (
            {"combine_ddp": True},
            "combine_ddp=True does not go with opt_level='O1': set combine_grad",
        ),
        ({"loss_scale": "lots"}, "loss_scale='lots': give a number"),
        ({"keep_batchnorm_fp32": "yes", "opt_level": "O2"}, "keep_batchnorm_fp32='yes': give True"),
        (
            {"master_weights": False, "opt_level": "O2", "fused": True},
            "with opt_level O2, combine_grad or NPU fused optimizers need master_weights=True",
        ),
        (
            {"opt_level": "O3", "fused": True},
            "NPU fused optimizers work with opt_level 'O1' or 'O2'",
        ),
    ],
)
def test_a_combination_apex_refuses_is_refused_in_one_line(arguments, says):
    model, _, _ = net_and_data()
    arguments = dict(arguments)
    fused = arguments.pop("fused", False)
    optimizer = (apex_optim.NpuFusedAdam if fused else torch.optim.Adam)(model.parameters())
    with pytest.raises(RuntimeError, match="^" + re.escape(f"amp.initialize: {says}")):
        ascend_apex.initialize(model, optimizer, verbosity=0, **arguments)


def test_models_must_be_on_the_npu_in_float32_and_optimizers_initialized_once(monkeypatch):
    model, _, _ = net_and_data()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match=r"before amp\.initialize: call `model, optimizer = "):
        with ascend_apex.scale_loss(torch.ones(()), optimizer):
            pass
    with pytest.raises(RuntimeError, match=r"'fc1\.weight' is already float16: pass the model in"):
        ascend_apex.initialize(Net().half(), verbosity=0)
    ascend_apex.initialize(model, optimizer, verbosity=0)
    with pytest.raises(RuntimeError, match=r"an optimizer goes through amp\.initialize once only"):
        ascend_apex.initialize(model, optimizer, verbosity=0)
    monkeypatch.setattr(ascend_apex, "_DEVICE_TYPE", "npu")
    with pytest.raises(
        RuntimeError, match=r"'fc1.weight' is on cpu, not on the NPU: move the model there first"
    ):
        ascend_apex.initialize(Net(), verbosity=0)


def test_combine_ddp_averages_gradients_over_the_ranks_it_broadcast_the_model_to():
    """apex's combine_ddp stands in for DistributedDataParallel: the model broadcast from
    rank 0 at initialize, gradients averaged at each scale_loss exit (one rank here)."""
    model, x, y = net_and_data()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    arguments = {"opt_level": "O1", "combine_grad": True, "combine_ddp": True, "verbosity": 0}
    with pytest.raises(RuntimeError, match="combine_ddp=True averages gradients over the ranks"):
        ascend_apex.initialize(model, optimizer, **arguments)
    torch.distributed.init_process_group(
        "gloo", store=torch.distributed.HashStore(), rank=0, world_size=1
    )
    try:
        model, optimizer = ascend_apex.initialize(model, optimizer, **arguments)
        loss = torch.nn.functional.mse_loss(model(x), y)
        with ascend_apex.scale_loss(loss, optimizer) as scaled:
            scaled.backward()
        averaged = [p.grad.clone() for p in model.parameters()]
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        torch.testing.assert_close(
            averaged, [p.grad for p in model.parameters()], rtol=1e-3, atol=1e-6
        )
    finally:
        torch.distributed.destroy_process_group()
