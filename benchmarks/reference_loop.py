"""Baseline for the "against the reference" benchmark: the training step of the reference
ImageNet example as people run it: float images made on the host (its --dummy data is
FakeData + ToTensor), a per-step `loss.item()` and per-step top-1/top-5 accuracy copied to
the host for the meters. One process. --amp and --channels-last give it main.py's
precision and memory format, so that the comparison measures the step, not the precision.

Prints `RESULT {json}`: the images per step and the wall time of each step (its data
included), as main.py's -p 1 prints it.
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import models


class FloatFakeData(torch.utils.data.Dataset):
    """Float images in [0, 1) made per sample on the host, like FakeData + ToTensor."""

    def __init__(self, length, image_size):
        self.length, self.image_size = length, image_size

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(3, self.image_size, self.image_size, generator=generator)
        return image, int(torch.randint(1000, (1,), generator=generator))


def accuracy(output, target, topk=(1, 5)):
    """As in the reference: percentages as tensors, read with .item() by the caller."""
    with torch.no_grad():
        maxk = max(topk)
        _, pred = output.topk(maxk, 1, True, True)
        correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
        return [
            correct[:k].reshape(-1).float().sum(0, keepdim=True) * (100.0 / target.size(0))
            for k in topk
        ]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", action="store_true", help="autocast as main.py's --amp")
    parser.add_argument("--channels-last", action="store_true")
    args = parser.parse_args()

    device = torch.device(args.device)
    amp_dtype = torch.bfloat16 if device.type == "cpu" else torch.float16
    torch.manual_seed(0)
    model = models.create(args.arch, num_classes=1000).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    loader = torch.utils.data.DataLoader(
        FloatFakeData(1_281_167, args.image_size),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        pin_memory=device.type != "cpu",
    )
    criterion = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp and amp_dtype == torch.float16)
    model.train()
    losses, top1, top5 = [], [], []
    step_s = []
    end = time.perf_counter()
    for step, (x, y) in enumerate(loader):
        if step == args.steps:
            break
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if args.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, enabled=args.amp, dtype=amp_dtype):
            output = model(x)
            loss = criterion(output, y)
        acc1, acc5 = accuracy(output, y)
        losses.append(loss.item())
        top1.append(acc1[0].item())
        top5.append(acc5[0].item())
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        step_s.append(time.perf_counter() - end)
        end = time.perf_counter()
    print("RESULT " + json.dumps({"images_per_step": y.size(0), "step_s": step_s}), flush=True)


if __name__ == "__main__":
    main()
