"""ResNet 18/34/50/101/152 (He et al., 2015), in the "v1.5" form.

The layout, and so the ``state_dict``, follows the common reference layout key for key:
``conv1``, ``bn1``, ``layer1``..``layer4`` (each a sequence of blocks numbered from 0,
each block holding ``conv1/bn1/conv2/bn2`` and, for bottlenecks, ``conv3/bn3``, plus
``downsample.0`` (1x1 conv) and ``downsample.1`` (batch norm) where the shortcut has to
change shape) and ``fc``. Weights saved from that layout load here unchanged.

"v1.5": a bottleneck block that halves the resolution does it in its 3x3 conv
(``conv2``), not in its first 1x1 conv as in the original paper.

Initialisation: convs kaiming-normal (fan_out, relu), batch-norm weight 1 and bias 0,
the fc layer keeps PyTorch's default. With ``zero_init_residual=True`` the last batch
norm of each block starts at weight 0, so every block starts as the identity.
"""

import torch
from torch import nn

from models.registry import register


def conv3x3(in_channels, out_channels, stride=1):
    """3x3 convolution with padding 1 and no bias (a batch norm follows)."""
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(in_channels, out_channels, stride=1):
    """1x1 convolution with no bias (a batch norm follows)."""
    return nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convs (resnet18/34). Output channels = ``planes``."""

    expansion = 1

    def __init__(self, in_channels, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(in_channels, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def last_bn(self):
        return self.bn2

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + shortcut)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carries the stride: v1.5), 1x1 expand (resnet50/101/152).

    Output channels = ``planes * 4``.
    """

    expansion = 4

    def __init__(self, in_channels, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv1x1(in_channels, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def last_bn(self):
        return self.bn3

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + shortcut)


class ResNet(nn.Module):
    """Stem (7x7/2 conv, BN, ReLU, 3x3/2 max pool), four stages, global pool, fc.

    ``block`` is BasicBlock or Bottleneck; ``layers`` the number of blocks per stage.
    Stages 2-4 halve the resolution in their first block; stage widths 64/128/256/512
    (times the block's expansion at the output).
    """

    def __init__(self, block, layers, num_classes=1000, zero_init_residual=False):
        super().__init__()
        self.in_channels = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_stage(block, 64, layers[0], stride=1)
        self.layer2 = self._make_stage(block, 128, layers[1], stride=2)
        self.layer3 = self._make_stage(block, 256, layers[2], stride=2)
        self.layer4 = self._make_stage(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        if zero_init_residual:
            for module in self.modules():
                if isinstance(module, (BasicBlock, Bottleneck)):
                    nn.init.zeros_(module.last_bn().weight)

    def _make_stage(self, block, planes, blocks, stride):
        out_channels = planes * block.expansion
        downsample = None
        if stride != 1 or self.in_channels != out_channels:
            downsample = nn.Sequential(
                conv1x1(self.in_channels, out_channels, stride),
                nn.BatchNorm2d(out_channels),
            )
        stage = [block(self.in_channels, planes, stride, downsample)]
        self.in_channels = out_channels
        for _ in range(1, blocks):
            stage.append(block(self.in_channels, planes))
        return nn.Sequential(*stage)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


# name -> (block, blocks per stage)
CONFIGS = {
    "resnet18": (BasicBlock, (2, 2, 2, 2)),
    "resnet34": (BasicBlock, (3, 4, 6, 3)),
    "resnet50": (Bottleneck, (3, 4, 6, 3)),
    "resnet101": (Bottleneck, (3, 4, 23, 3)),
    "resnet152": (Bottleneck, (3, 8, 36, 3)),
}


def _builder(name):
    block, layers = CONFIGS[name]

    def build(num_classes=1000, zero_init_residual=False):
        return ResNet(block, layers, num_classes=num_classes, zero_init_residual=zero_init_residual)

    build.__name__ = name
    build.__doc__ = f"{name}: {block.__name__} x {layers}."
    return build


resnet18 = register("resnet18")(_builder("resnet18"))
resnet34 = register("resnet34")(_builder("resnet34"))
resnet50 = register("resnet50")(_builder("resnet50"))
resnet101 = register("resnet101")(_builder("resnet101"))
resnet152 = register("resnet152")(_builder("resnet152"))
