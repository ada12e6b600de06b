"""Image training as data pipelines write it: the Dataset decodes each image at a random
size, resizes it, erases a random patch and labels it from its bright pixels, all on the
host, and batches reach the device at one shape. With --synthetic the batches come from a
generator instead: random-size images padded on the host. Each step also erases a random
patch of the batch on the device, as prefetching loaders do: that one changes shapes there.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

import devicekit

SIDE = 16
BATCH = 4


def random_patch(side, generator):
    """Rows and columns of a patch of random height and width inside a side x side image."""
    height, width = (int(n) for n in torch.randint(2, side // 2 + 1, (2,), generator=generator))
    top = int(torch.randint(0, side - height + 1, (1,), generator=generator))
    left = int(torch.randint(0, side - width + 1, (1,), generator=generator))
    return slice(top, top + height), slice(left, left + width)


class Photos(Dataset):
    """Images decoded at their own size, resized to SIDE and randomly erased."""

    def __len__(self):
        return 4 * BATCH

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        side = int(torch.randint(SIDE - 4, SIDE + 8, (1,), generator=generator))
        image = torch.rand(3, side, side, generator=generator)
        image = F.interpolate(image[None], size=(SIDE, SIDE), mode="bilinear")[0]  # <host>
        rows, cols = random_patch(SIDE, generator)
        image[:, rows, cols] = 0.5  # <host>
        bright = image[image > 0.75]  # <host>
        return image, int(bright.numel() > image.numel() // 4)


def synthetic(steps, generator):
    """Batches of random images of random sizes, each padded to SIDE on the host."""
    for _ in range(steps):
        images = torch.zeros(BATCH, 3, SIDE, SIDE)
        for image in images:
            side = int(torch.randint(SIDE // 2, SIDE + 1, (1,), generator=generator))
            image[:, :side, :side] = torch.rand(3, side, side, generator=generator)  # <host-side>
        yield images, torch.randint(0, 2, (BATCH,), generator=generator)


parser = argparse.ArgumentParser()
parser.add_argument("--synthetic", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
device = devicekit.device()
model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2)
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
generator = torch.Generator().manual_seed(0)
if args.synthetic:
    batches = synthetic(4, generator)
else:
    batches = DataLoader(Photos(), batch_size=BATCH, shuffle=True, drop_last=True)
for images, labels in batches:
    images, labels = images.to(device), labels.to(device)
    rows, cols = random_patch(SIDE, generator)
    images[:, :, rows, cols] = 0  # <dynamic-shape>
    loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("trained on", device)
