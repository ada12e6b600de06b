"""The model registry, the ResNet layouts (parameter counts and state_dict naming), and
the small CPU models."""

import functools
import pathlib
import re

import pytest
import torch
from torch import nn

import models
from devicekit.errors import UsageError

RESNETS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]
SMALL = ["tinynet", "tinynet_nobn", "tinymlp"]
NO_BN = ["tinynet_nobn", "tinymlp"]

# Published parameter counts with the 1000-class head.
PUBLISHED_PARAMS = {
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
}

# Blocks per stage and whether the block is a bottleneck (three convs) or basic (two).
LAYOUT = {
    "resnet18": ((2, 2, 2, 2), False),
    "resnet34": ((3, 4, 6, 3), False),
    "resnet50": ((3, 4, 6, 3), True),
    "resnet101": ((3, 4, 23, 3), True),
    "resnet152": ((3, 8, 36, 3), True),
}

# state_dict entries (num_batches_tracked included), counted by hand:
# stem 1 conv + 5 BN entries = 6; fc 2; a basic block 2 x (1 + 5) = 12, a bottleneck
# 3 x 6 = 18; a downsample 6, in the first block of stages 2-4 (basic) or of every
# stage (bottleneck: stage 1 goes from 64 to 256 channels).
# resnet18:  6 + 8*12 + 3*6 + 2 = 122      resnet34:  6 + 16*12 + 3*6 + 2 = 218
# resnet50:  6 + 16*18 + 4*6 + 2 = 320     resnet101: 6 + 33*18 + 4*6 + 2 = 626
# resnet152: 6 + 50*18 + 4*6 + 2 = 932
STATE_DICT_ENTRIES = {
    "resnet18": 122,
    "resnet34": 218,
    "resnet50": 320,
    "resnet101": 626,
    "resnet152": 932,
}

BN_ENTRIES = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


@functools.cache
def built(name):
    """One 1000-class instance per architecture for the whole module (read-only use)."""
    torch.manual_seed(0)
    return models.create(name)


def expected_resnet_keys(name):
    """The reference state_dict key list, written out from the naming rules."""
    blocks_per_stage, bottleneck = LAYOUT[name]
    convs = 3 if bottleneck else 2

    def conv_bn(prefix_conv, prefix_bn):
        return [f"{prefix_conv}.weight"] + [f"{prefix_bn}.{e}" for e in BN_ENTRIES]

    keys = conv_bn("conv1", "bn1")
    for stage, count in enumerate(blocks_per_stage, start=1):
        for index in range(count):
            block = f"layer{stage}.{index}"
            for i in range(1, convs + 1):
                keys += conv_bn(f"{block}.conv{i}", f"{block}.bn{i}")
            if index == 0 and (stage > 1 or bottleneck):
                keys += conv_bn(f"{block}.downsample.0", f"{block}.downsample.1")
    return keys + ["fc.weight", "fc.bias"]


# --- registry ------------------------------------------------------------------------


def test_names_are_sorted_and_complete():
    names = models.names()
    assert names == [
        "resnet18",
        "resnet34",
        "resnet50",
        "resnet101",
        "resnet152",
        "tinymlp",
        "tinynet",
        "tinynet_nobn",
    ]
    assert set(RESNETS + SMALL) <= set(names)


def test_unknown_name_suggests_the_close_one():
    with pytest.raises(UsageError) as caught:
        models.create("resnt50")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("unknown architecture 'resnt50': choose one of resnet18, ")
    assert "did you mean 'resnet50'?" in message
    for name in models.names():
        assert name in message


def test_unknown_name_without_close_match_lists_choices_only():
    with pytest.raises(UsageError) as caught:
        models.create("vgg")
    message = str(caught.value)
    assert message == ("unknown architecture 'vgg': choose one of " + ", ".join(models.names()))


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_num_classes_is_a_usage_error(bad):
    with pytest.raises(UsageError, match="num_classes"):
        models.create("tinynet", num_classes=bad)


def test_register_adds_a_name_and_refuses_duplicates():
    from models import registry

    @models.register("test_only_identity")
    def build(num_classes=1000):
        return nn.Linear(3, num_classes)

    try:
        assert "test_only_identity" in models.names()
        assert models.create("test_only_identity", num_classes=4).out_features == 4
        with pytest.raises(ValueError, match="twice"):
            models.register("test_only_identity")(build)
    finally:
        registry._BUILDERS.pop("test_only_identity")
    assert "test_only_identity" not in models.names()


def test_model_sources_name_no_device():
    sources = pathlib.Path(models.__file__).parent.glob("*.py")
    pattern = re.compile(r"cuda|npu|\bgpu\b|\.to\(|\bdevice\b", re.IGNORECASE)
    for path in sources:
        hits = [line for line in path.read_text().splitlines() if pattern.search(line)]
        assert hits == [], f"{path.name} names a device: {hits}"


# --- ResNet --------------------------------------------------------------------------


@pytest.mark.parametrize("name", RESNETS)
def test_resnet_parameter_count_is_published_figure(name):
    count = sum(p.numel() for p in built(name).parameters())
    assert count == PUBLISHED_PARAMS[name]


@pytest.mark.parametrize("name", RESNETS)
def test_resnet_state_dict_keys_follow_reference_naming(name):
    keys = list(built(name).state_dict().keys())
    assert len(keys) == STATE_DICT_ENTRIES[name]
    assert keys == expected_resnet_keys(name)


def test_resnet18_representative_keys():
    keys = set(built("resnet18").state_dict())
    for key in [
        "conv1.weight",
        "bn1.weight",
        "bn1.bias",
        "bn1.running_mean",
        "bn1.running_var",
        "bn1.num_batches_tracked",
        "layer1.0.conv1.weight",
        "layer1.0.bn1.weight",
        "layer1.0.conv2.weight",
        "layer1.1.bn2.running_var",
        "layer2.0.downsample.0.weight",
        "layer2.0.downsample.1.weight",
        "layer2.0.downsample.1.num_batches_tracked",
        "layer4.1.conv2.weight",
        "layer4.1.bn2.bias",
        "fc.weight",
        "fc.bias",
    ]:
        assert key in keys, key
    assert not any(k.startswith("layer1.0.downsample") for k in keys)
    assert not any(".conv3." in k or ".bn3." in k for k in keys)
    assert "layer1.2.conv1.weight" not in keys


def test_resnet50_representative_keys():
    keys = set(built("resnet50").state_dict())
    for key in [
        "conv1.weight",
        "bn1.running_mean",
        "layer1.0.conv1.weight",
        "layer1.0.conv3.weight",
        "layer1.0.bn3.running_var",
        "layer1.0.downsample.0.weight",
        "layer1.0.downsample.1.weight",
        "layer2.0.downsample.0.weight",
        "layer2.0.downsample.1.num_batches_tracked",
        "layer3.5.conv2.weight",
        "layer4.2.bn3.weight",
        "fc.weight",
        "fc.bias",
    ]:
        assert key in keys, key
    assert "layer1.1.downsample.0.weight" not in keys
    assert "layer3.6.conv1.weight" not in keys


def test_resnet50_shapes_and_v1_5_stride():
    model = built("resnet50")
    state = model.state_dict()
    assert state["conv1.weight"].shape == (64, 3, 7, 7)
    assert state["layer1.0.conv1.weight"].shape == (64, 64, 1, 1)
    assert state["layer1.0.conv2.weight"].shape == (64, 64, 3, 3)
    assert state["layer1.0.conv3.weight"].shape == (256, 64, 1, 1)
    assert state["layer1.0.downsample.0.weight"].shape == (256, 64, 1, 1)
    assert state["layer2.0.conv1.weight"].shape == (128, 256, 1, 1)
    assert state["layer2.0.conv2.weight"].shape == (128, 128, 3, 3)
    assert state["layer2.0.downsample.0.weight"].shape == (512, 256, 1, 1)
    assert state["layer4.2.bn3.weight"].shape == (2048,)
    assert state["fc.weight"].shape == (1000, 2048)
    assert state["fc.bias"].shape == (1000,)
    # v1.5: the stride-2 block halves the resolution in its 3x3 conv.
    for stage in (model.layer2, model.layer3, model.layer4):
        first = stage[0]
        assert first.conv1.stride == (1, 1)
        assert first.conv2.stride == (2, 2)
        assert first.downsample[0].stride == (2, 2)
    assert model.layer1[0].conv2.stride == (1, 1)


def test_resnet18_shapes():
    state = built("resnet18").state_dict()
    assert state["layer1.0.conv1.weight"].shape == (64, 64, 3, 3)
    assert state["layer2.0.conv1.weight"].shape == (128, 64, 3, 3)
    assert state["layer2.0.downsample.0.weight"].shape == (128, 64, 1, 1)
    assert state["fc.weight"].shape == (1000, 512)


def test_resnet_init():
    model = built("resnet50")
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            assert torch.all(module.weight == 1) and torch.all(module.bias == 0)
    # kaiming normal, fan_out, relu: std = sqrt(2 / (out_channels * k * k)).
    weight = model.layer3[0].conv2.weight  # 256 x 256 x 3 x 3
    expected = (2.0 / (256 * 9)) ** 0.5
    assert abs(weight.std().item() - expected) / expected < 0.05
    assert abs(weight.mean().item()) < expected * 0.05


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_zero_init_residual(name):
    model = models.create(name, num_classes=10, zero_init_residual=True)
    last = "bn3" if name == "resnet50" else "bn2"
    for stage in (model.layer1, model.layer2, model.layer3, model.layer4):
        for block in stage:
            assert torch.all(getattr(block, last).weight == 0)
            assert torch.all(block.bn1.weight == 1)
    default = models.create(name, num_classes=10)
    assert torch.all(getattr(default.layer1[0], last).weight == 1)


@pytest.mark.parametrize("name", RESNETS)
def test_resnet_forward_64px(name):
    model = built(name).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 64, 64))
    assert out.shape == (2, 1000)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_resnet_num_classes_and_small_inputs(name):
    model = models.create(name, num_classes=7)
    assert model.fc.out_features == 7
    assert model.fc.weight.shape[0] == 7
    model.eval()
    with torch.no_grad():
        for size in (32, 48, 64):
            assert model(torch.randn(2, 3, size, size)).shape == (2, 7)


# --- small models ---------------------------------------------------------------------


@pytest.mark.parametrize("name", SMALL)
def test_small_model_trains_one_step(name):
    torch.manual_seed(0)
    model = models.create(name, num_classes=10)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    images, labels = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    before = [p.detach().clone() for p in model.parameters()]
    loss = nn.functional.cross_entropy(model(images), labels)
    assert loss.shape == () and torch.isfinite(loss)
    optimizer.zero_grad()
    loss.backward()
    for p in model.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()
    optimizer.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=False))


@pytest.mark.parametrize("name", SMALL)
@pytest.mark.parametrize("size", [32, 40, 64])
def test_small_model_any_spatial_size(name, size):
    model = models.create(name, num_classes=5).eval()
    with torch.no_grad():
        assert model(torch.randn(3, 3, size, size)).shape == (3, 5)


@pytest.mark.parametrize("name", SMALL)
def test_small_models_are_small(name):
    count = sum(p.numel() for p in models.create(name, num_classes=10).parameters())
    assert 20_000 < count < 200_000


@pytest.mark.parametrize("name", NO_BN)
def test_no_bn_models_have_no_batch_norm_or_dropout(name):
    model = models.create(name, num_classes=10)
    banned = (nn.modules.batchnorm._NormBase, nn.modules.dropout._DropoutNd, nn.Dropout)
    assert not any(isinstance(m, banned) for m in model.modules())


def test_tinynet_has_batch_norm():
    model = models.create("tinynet", num_classes=10)
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules())


@pytest.mark.parametrize("name", NO_BN)
def test_no_bn_full_batch_gradient_equals_mean_of_half_batches(name):
    """One process with batch B and two with B/2 each (gradients averaged) agree."""
    torch.manual_seed(0)
    model = models.create(name, num_classes=10).double()
    images = torch.randn(8, 3, 32, 32, dtype=torch.float64)
    labels = torch.randint(0, 10, (8,))

    def grads(x, y):
        model.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        return [p.grad.clone() for p in model.parameters()]

    full = grads(images, labels)
    first, second = grads(images[:4], labels[:4]), grads(images[4:], labels[4:])
    for g, a, b in zip(full, first, second, strict=False):
        torch.testing.assert_close(g, (a + b) / 2, rtol=1e-10, atol=1e-12)
    # and it is deterministic: the same batch twice gives bit-identical gradients
    for g, again in zip(full, grads(images, labels), strict=False):
        assert torch.equal(g, again)
