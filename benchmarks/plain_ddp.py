"""Baseline for the layer-overhead benchmark: the DDP loop a competent user writes by hand
with plain PyTorch, doing the same work as main.py (same model, data, batch, precision,
memory format, optimizer).

Run under any launcher that sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
(torchrun, launch/run_8p.sh); rank 0 prints `RESULT {json}`: the images of all ranks per
step and rank 0's wall time of each step (its data included), as main.py's -p 1 prints it.
DDP gets the settings main.py uses (gradient_as_bucket_view=True, broadcast_buffers=False),
so that the comparison measures the layer, not DDP's options. benchmarks/overhead_blocks.py
runs the same loop (build and train_steps) beside main.py's in one process.
"""

import argparse
import json
import os
import sys
import time
import types

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import models
from trainer.datasets import DummyImageNet
from trainer.transforms import normalize


def options(parser):
    """The arguments this loop shares with benchmarks/overhead_blocks.py."""
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32, help="per node, as main.py's -b")
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--channels-last", action="store_true")
    return parser


def build(args, device, local_rank, local_world, workers=0):
    """The model wrapped in DDP, its loader, optimizer, loss and scaler (a namespace)."""
    torch.manual_seed(0)
    model = models.create(args.arch, num_classes=1000).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model,
        device_ids=None if device.type == "cpu" else [local_rank],
        gradient_as_bucket_view=True,
        broadcast_buffers=False,
    )
    dataset = DummyImageNet(1_281_167, 1000, args.image_size, 0)
    sampler = torch.utils.data.DistributedSampler(dataset, shuffle=True, seed=0, drop_last=True)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=args.batch_size // local_world,
        sampler=sampler,
        num_workers=workers,
        pin_memory=device.type != "cpu",
        drop_last=True,
        persistent_workers=workers > 0,
    )
    amp_dtype = torch.bfloat16 if device.type == "cpu" else torch.float16
    ddp.train()
    return types.SimpleNamespace(
        ddp=ddp,
        loader=loader,
        amp_dtype=amp_dtype,
        optimizer=torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4),
        criterion=torch.nn.CrossEntropyLoss(),
        scaler=torch.amp.GradScaler(device.type, enabled=args.amp and amp_dtype == torch.float16),
    )


def train_steps(parts, args, device, steps, epoch=0):
    """`steps` training steps of epoch `epoch`; the wall time of each, its data included."""
    parts.loader.sampler.set_epoch(epoch)
    step_s = []
    end = time.perf_counter()
    for step, (x, y) in enumerate(parts.loader):
        if step == steps:
            break
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if args.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, enabled=args.amp, dtype=parts.amp_dtype):
            loss = parts.criterion(parts.ddp(normalize(x)), y)
        parts.scaler.scale(loss).backward()
        parts.scaler.step(parts.optimizer)
        parts.scaler.update()
        parts.optimizer.zero_grad(set_to_none=True)
        if device.type != "cpu":
            torch.accelerator.synchronize()
        step_s.append(time.perf_counter() - end)
        end = time.perf_counter()
    return step_s


def main():
    parser = options(argparse.ArgumentParser())
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int, default=0, help="per process")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    local_rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    device = (
        torch.device(args.device) if args.device == "cpu" else torch.device(args.device, local_rank)
    )
    if device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // local_world))
    dist.init_process_group(dist.get_default_backend_for_device(device))
    parts = build(args, device, local_rank, local_world, args.workers)
    step_s = train_steps(parts, args, device, args.steps)
    if dist.get_rank() == 0:
        print(
            "RESULT "
            + json.dumps(
                {"images_per_step": args.batch_size // local_world * world, "step_s": step_s}
            ),
            flush=True,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
