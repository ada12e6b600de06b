"""An image classifier trained the way projects built on a model library are: the
library's loss scaler, a helper module of distributed set-up (inlined here), an optional
apex path and a device chosen from the command line.

    torchrun --nproc-per-node=8 library_project.py --amp

Ported only, never run by the tests: it imports timm, which the test machines lack.
"""
import argparse
import os
import time
from contextlib import suppress
from functools import partial

import torch
import torch.distributed as dist
import torch.nn as nn
from timm.utils import NativeScaler

try:
    from apex import amp as apex_amp
    has_apex = True
except ImportError:
    apex_amp = None
    has_apex = False


class ApexLossScaler:
    """Scales through apex, for those who have it and ask for it."""

    def __call__(self, loss, optimizer):
        with apex_amp.scale_loss(loss, optimizer) as scaled:
            scaled.backward()
        optimizer.step()

    def state_dict(self):
        return apex_amp.state_dict()


def setup_distributed(device, use_gpu):
    """The device this process trains on, with the process group up when launched."""
    kind = device.split(":")[0]
    if "WORLD_SIZE" not in os.environ:
        return device, 0, 1
    if not dist.is_available():
        backend = None
    elif use_gpu and dist.is_nccl_available():
        backend = "nccl"
    else:
        backend = "gloo"
    dist.init_process_group(backend=backend)
    if kind == "cuda":
        assert torch.cuda.is_available(), f"{device} asked for, but there is no GPU"
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = f"{kind}:{local_rank}"
    if device.startswith("cuda:"):
        torch.cuda.set_device(device)
    return device, dist.get_rank(), dist.get_world_size()


def train_one_epoch(model, loader, optimizer, loss_scaler, amp_autocast, device):
    model.train()
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        start = time.perf_counter()
        with amp_autocast():
            loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        if loss_scaler is not None:
            loss_scaler(loss, optimizer)
        else:
            loss.backward()
            optimizer.step()
        if loss.is_cuda:
            torch.cuda.synchronize()
        print(f"loss {loss.item():.3f} in {time.perf_counter() - start:.3f}s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--apex-amp", action="store_true")
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()

    name, rank, world_size = setup_distributed(args.device, use_gpu=True)
    device = torch.device(name)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    amp_autocast, loss_scaler = suppress, None
    if args.apex_amp and has_apex:
        model, optimizer = apex_amp.initialize(model, optimizer, opt_level="O1")
        loss_scaler = ApexLossScaler()
    elif args.amp:
        amp_autocast = partial(torch.autocast, device_type=device.type, dtype=torch.float16)
        if device.type in ("cuda",):
            loss_scaler = NativeScaler()
    if world_size > 1:
        model = nn.parallel.DistributedDataParallel(model)

    data = torch.utils.data.TensorDataset(
        torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))
    )
    loader = torch.utils.data.DataLoader(data, batch_size=16, pin_memory=True)
    train_one_epoch(model, loader, optimizer, loss_scaler, amp_autocast, device)
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
