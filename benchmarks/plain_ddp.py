"""Baseline for the layer-overhead benchmark: the DDP loop a competent user writes by hand
with plain PyTorch, doing the same work as main.py (same model, data, batch, precision,
memory format, optimizer).

Run under any launcher that sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
(torchrun, launch/run_8p.sh); rank 0 prints `RESULT {json}` with the images/s of all
ranks after the warm-up steps, measured as main.py measures it. DDP gets the settings
main.py uses (gradient_as_bucket_view=True, broadcast_buffers=False), so that the
comparison measures the layer, not DDP's options.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import models  # noqa: E402
from trainer.data import DummyImageNet, normalize  # noqa: E402

WARMUP_STEPS = 5  # as main.py's trainer/loop.py


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32, help="per node, as main.py's -b")
    parser.add_argument("--workers", type=int, default=0, help="per process")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--channels-last", action="store_true")
    args = parser.parse_args()

    local_rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    device = torch.device(args.device) if args.device == "cpu" else torch.device(args.device, local_rank)
    if device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // local_world))
    dist.init_process_group(dist.get_default_backend_for_device(device))
    torch.manual_seed(0)
    model = models.create(args.arch, num_classes=1000).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=None if device.type == "cpu" else [local_rank],
        gradient_as_bucket_view=True, broadcast_buffers=False)
    dataset = DummyImageNet(1_281_167, 1000, args.image_size, 0)
    sampler = torch.utils.data.DistributedSampler(dataset, shuffle=True, seed=0, drop_last=True)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size // local_world, sampler=sampler,
        num_workers=args.workers, pin_memory=device.type != "cpu", drop_last=True,
        persistent_workers=args.workers > 0)
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    criterion = torch.nn.CrossEntropyLoss()
    amp_dtype = torch.bfloat16 if device.type == "cpu" else torch.float16
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp and amp_dtype == torch.float16)
    ddp.train()
    images = 0
    for step, (x, y) in enumerate(loader):
        if step == args.steps:
            break
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if args.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, enabled=args.amp, dtype=amp_dtype):
            loss = criterion(ddp(normalize(x)), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if step + 1 == WARMUP_STEPS:
            if device.type != "cpu":
                torch.accelerator.synchronize()
            start = time.perf_counter()
        elif step >= WARMUP_STEPS:
            images += y.size(0)
    if device.type != "cpu":
        torch.accelerator.synchronize()
    rate = images * world / (time.perf_counter() - start)
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps({"images_per_sec": rate}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
