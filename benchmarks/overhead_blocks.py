"""Row a within one run: main.py's training step and a plain-PyTorch DDP step, alternating
in blocks of steps in the same processes.

    NPROC_PER_NODE=2 BIND_CORES=1 SCRIPT=benchmarks/overhead_blocks.py bash launch/run_8p.sh \
        --image-size 128 --batch-size 64 --pairs 8 --block-steps 10 [--amp] [--channels-last]

Whole runs of one program on the 2-core CI machine differ by up to +-8 % from one run to
the next (a run is faster or slower throughout), several times the 2 % the row asks about.
Here both sides share the processes, and so whatever makes a run fast or slow: the blocks
alternate A B, B A, ... every few seconds.

Side A is main.py's step, built as main.py's train() builds it: the model wrapped by
devicekit.wrap_ddp, devicekit's GradScaler and autocast, the trainer's loader and sampler
over main.py's --dummy data, its LR scheduler, and trainer.loop.train_one_epoch (the
function main.py calls), one call per block. Side B is benchmarks/plain_ddp.py's loop.
Both do the same work: same model, data, batch, precision, memory format, DDP settings and
optimizer. Rank 0 prints `RESULT {json}`: each block's seconds per side, after one warm-up
block each.
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import plain_ddp

import devicekit
import models
from trainer import loop, state
from trainer.datasets import build_datasets
from trainer.loaders import build_loaders


def main_side(args, ctx, batch):
    """main.py's model, loader and step (a function running one block of steps)."""
    devicekit.seed_everything(0, ctx.rank)
    device = devicekit.device()
    model = models.create(args.arch, num_classes=1000)
    model.to(
        device, memory_format=torch.channels_last if args.channels_last else torch.preserve_format
    )
    ddp_model = devicekit.wrap_ddp(model, broadcast_buffers=False)
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    scaler = devicekit.GradScaler(args.amp)
    train_set, val_set = build_datasets(None, True, args.image_size, 1000, 0)
    loader, _ = build_loaders(train_set, val_set, batch, 0, ctx, 0)
    scheduler = state.make_scheduler(optimizer, 90, 0, "step", len(loader))
    run = loop.LoopSettings(
        device=device,
        is_main=False,
        amp=args.amp,
        channels_last=args.channels_last,
        grad_accum=1,
        clip_grad=None,
        print_freq=10**9,
        steps_per_epoch=args.block_steps,
        val_steps=None,
        save_every=0,
    )

    def block(epoch):
        loader.sampler.set_epoch(epoch)
        loop.train_one_epoch(loader, ddp_model, criterion, optimizer, scheduler, scaler, epoch, run)

    return block


def main():
    parser = plain_ddp.options(argparse.ArgumentParser())
    parser.add_argument("--pairs", type=int, default=8, help="timed pairs of blocks")
    parser.add_argument("--block-steps", type=int, default=10, help="steps per block")
    args = parser.parse_args()

    ctx = devicekit.init_distributed()
    batch = args.batch_size // ctx.local_world_size
    main_block = main_side(args, ctx, batch)
    device = devicekit.device()
    plain = plain_ddp.build(args, device, ctx.local_rank, ctx.local_world_size)

    def plain_block(epoch):
        plain_ddp.train_steps(plain, args, device, args.block_steps, epoch)

    sides = {"main.py": main_block, "plain DDP loop": plain_block}
    seconds = {name: [] for name in sides}
    for index in range(args.pairs + 1):  # the first pair warms both sides up
        names = list(sides) if index % 2 == 0 else list(sides)[::-1]
        for name in names:
            start = time.perf_counter()
            sides[name](index)
            if index > 0:
                seconds[name].append(time.perf_counter() - start)
    if ctx.rank == 0:
        print(
            "RESULT "
            + json.dumps(
                {"images_per_block": batch * ctx.world_size * args.block_steps, "block_s": seconds}
            ),
            flush=True,
        )
    devicekit.destroy_process_group()


if __name__ == "__main__":
    main()
