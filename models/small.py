"""Small models that train on a couple of CPU cores in minutes, on 32..64 px images.

- ``tinynet``: three 3x3 conv + batch norm + ReLU layers (32, 64, 128 channels, each with
  stride 2), global average pool, fc. About 95k parameters with 10 classes. Striding the
  first conv too makes it four times cheaper than at stride 1 and the demo no less accurate
  (99.0 % against 98.1 %, the 24 epochs of launch/run_8p.sh's demo on a 2-core EPYC).
- ``tinynet_nobn``: the same without batch norm (the convs carry a bias).
- ``tinymlp``: average-pool the image to 8x8, then a 2-hidden-layer MLP (256 wide).

``tinynet_nobn`` and ``tinymlp`` have no batch norm and no dropout, so a sample's
gradient does not depend on the other samples in its batch: the mean gradient over a
batch of B equals the mean of the mean gradients of its two halves (up to float
rounding), which is what one process with batch B versus two with B/2 each relies on.

All three take an NCHW float batch of any spatial size >= 32 and return
``(N, num_classes)`` logits.
"""

import torch
from torch import nn

from models.registry import register

WIDTHS = (32, 64, 128)
STRIDES = (2, 2, 2)


class TinyNet(nn.Module):
    """conv-(BN)-ReLU x 3, global average pool, fc."""

    def __init__(self, num_classes=1000, batch_norm=True):
        super().__init__()
        layers = []
        in_channels = 3
        for width, stride in zip(WIDTHS, STRIDES, strict=False):
            layers.append(
                nn.Conv2d(
                    in_channels, width, kernel_size=3, stride=stride, padding=1, bias=not batch_norm
                )
            )
            if batch_norm:
                layers.append(nn.BatchNorm2d(width))
            layers.append(nn.ReLU(inplace=True))
            in_channels = width
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(in_channels, num_classes)

        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x):
        x = self.pool(self.features(x))
        return self.fc(torch.flatten(x, 1))


class TinyMLP(nn.Module):
    """Average-pool to ``grid`` x ``grid``, flatten, Linear-ReLU x 2, Linear."""

    def __init__(self, num_classes=1000, grid=8, hidden=256):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((grid, grid))
        self.fc1 = nn.Linear(3 * grid * grid, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, num_classes)
        self.relu = nn.ReLU()

    def forward(self, x):
        x = torch.flatten(self.pool(x), 1)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


@register("tinynet")
def tinynet(num_classes=1000):
    return TinyNet(num_classes=num_classes, batch_norm=True)


@register("tinynet_nobn")
def tinynet_nobn(num_classes=1000):
    return TinyNet(num_classes=num_classes, batch_norm=False)


@register("tinymlp")
def tinymlp(num_classes=1000, grid=8, hidden=256):
    return TinyMLP(num_classes=num_classes, grid=grid, hidden=hidden)
