"""ImageNet-style training that runs unchanged on NVIDIA GPUs, Ascend NPUs and CPUs.

Started any way people start the reference example: plainly, with
--multiprocessing-distributed, under torchrun or torch.distributed.launch, from a per-rank
shell loop (launch/run_8p.sh), or with Ascend's RANK_ID/RANK_SIZE scripts. Every device
decision is devicekit's; this file never names a device.
"""

import math
import os
import sys
import time
import types

import torch

import devicekit
import models
from trainer import data, loop, state
from trainer.batching import split_per_process
from trainer.loaders import build_loaders
from trainer.options import launch_options, parse_args


@devicekit.exit_on_usage_error
def main(argv=None):
    args = parse_args(argv)
    options = launch_options(args)
    # The reference's meaning: one process unless --multiprocessing-distributed spawns
    # one per device (a launcher that started this process decides for itself).
    nprocs = None if args.multiprocessing_distributed else 1
    # Refuse a bad split here, once, rather than in every rank.
    split_per_process(args.batch_size, args.workers,
                      devicekit.nprocs_per_node(nprocs, options=options))
    devicekit.launch(main_worker, args=(args,), nprocs=nprocs, device_type=args.device,
                     options=options)
    return 0


def main_worker(local_rank, args):
    """Train as one rank: `local_rank` is this process's index on its node."""
    ctx = devicekit.init_distributed(args.dist_backend, timeout=args.dist_timeout,
                                     options=launch_options(args))
    try:
        train(ctx, args)
    finally:
        devicekit.destroy_process_group()


def train(ctx, args):
    devicekit.seed_everything(args.seed, ctx.rank)
    device = devicekit.device()
    batch_size, workers = split_per_process(args.batch_size, args.workers,
                                            ctx.local_world_size)
    amp = devicekit.amp_enabled(args.amp)
    channels_last = (devicekit.prefers_channels_last(amp) if args.channels_last is None
                     else args.channels_last)
    if ctx.is_main:
        precision = f"AMP {devicekit.amp_dtype()}".replace("torch.", "") if amp else "fp32"
        threads = ("" if devicekit.is_available()
                   else f", {torch.get_num_threads()} compute threads per process")
        print(f"=> {args.arch} on {devicekit.device_type()} ({ctx.describe()}), batch "
              f"{batch_size} per process, {workers} loader workers per process, {precision}"
              f"{', channels_last' if channels_last else ''}{threads}", flush=True)
    model = models.create(args.arch, num_classes=args.num_classes)
    if args.pretrained:
        state.load_pretrained(args.pretrained, model)
    model.to(device, memory_format=torch.channels_last if channels_last else torch.preserve_format)
    # Batch norm trains on batch statistics, so rank 0's running statistics are needed only
    # for evaluation and checkpoints, and are broadcast once before each validation instead
    # of before every forward: the same weights, one collective less per step.
    ddp_model = devicekit.wrap_ddp(model, broadcast_buffers=False)
    if args.compile:
        ddp_model = torch.compile(ddp_model)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    scaler = devicekit.GradScaler(
        amp, init_scale=args.loss_scale if isinstance(args.loss_scale, float) else 2.0**16)

    train_set, val_set = data.build_datasets(args.data_dir, args.dummy, args.image_size,
                                             args.num_classes, args.seed,
                                             crop_scale=args.crop_scale, flip=args.flip,
                                             augment=args.augment)
    train_loader, val_loader = build_loaders(train_set, val_set, batch_size, workers, ctx,
                                             args.seed)
    steps = len(train_loader) if args.steps_per_epoch is None else min(len(train_loader),
                                                                       args.steps_per_epoch)
    if steps == 0:  # parse_args checked one node's batch; several nodes need more images
        raise devicekit.UsageError(
            f"{len(train_set)} training images make no batch of {batch_size} per process over "
            f"{ctx.world_size} processes: lower --batch-size or add images")
    scheduler = state.make_scheduler(optimizer, args.epochs, args.warmup, args.lr_schedule,
                                     math.ceil(steps / args.grad_accum))
    position = state.Position(args.start_epoch)
    resume_from = state.resume_path(args.resume, args.output_dir)
    if resume_from:
        position = state.resume(resume_from, args.arch, model, optimizer, scheduler, scaler)
        if position.rng_states is not None and len(position.rng_states) == ctx.world_size:
            torch.set_rng_state(position.rng_states[ctx.rank])
        if ctx.is_main:
            print(f"=> resumed {resume_from!r} at epoch {position.epoch}, step {position.step}",
                  flush=True)
        if position.epoch >= args.epochs and not args.evaluate:
            if ctx.is_main:
                print(f"=> nothing to train: the run finished at epoch {position.epoch} of "
                      f"--epochs {args.epochs}", flush=True)
            return

    run = types.SimpleNamespace(
        device=device, is_main=ctx.is_main, amp=amp, channels_last=channels_last,
        grad_accum=args.grad_accum, clip_grad=args.clip_grad, print_freq=args.print_freq,
        steps_per_epoch=args.steps_per_epoch, val_steps=args.val_steps,
        save_every=args.save_every)

    if args.evaluate:
        loop.validate(val_loader, model, criterion, run)
        return

    def save_mid_epoch(epoch, step, totals):
        # Every rank's generator state, so that a resumed run draws what this one would.
        rng_states = [None] * ctx.world_size
        torch.distributed.all_gather_object(rng_states, torch.get_rng_state())
        if ctx.is_main:
            state.save(args.output_dir, state.checkpoint_state(
                state.Position(epoch, step, best_acc1, rng_states, totals), args.arch, model,
                optimizer, scheduler, scaler), is_best=False)

    if ctx.is_main:
        os.makedirs(args.output_dir, exist_ok=True)
    best_acc1 = position.best_acc1
    for epoch in range(position.epoch, args.epochs):
        resumed = epoch == position.epoch and position.step > 0
        first_step = position.step if resumed else 0
        started, lr = time.time(), optimizer.param_groups[0]["lr"]
        train_loader.sampler.set_epoch(epoch, skip=first_step * batch_size)
        trained = loop.train_one_epoch(train_loader, ddp_model, criterion, optimizer, scheduler,
                                       scaler, epoch, run, first_step,
                                       position.totals if resumed else None, save_mid_epoch)
        devicekit.broadcast_buffers(model)  # every rank validates rank 0's model
        validated = loop.validate(val_loader, model, criterion, run)
        is_best = validated["acc1"] > best_acc1
        best_acc1 = max(validated["acc1"], best_acc1)
        if ctx.is_main:
            state.append_metrics(args.output_dir, {
                "epoch": epoch, "train_loss": trained["loss"], "train_acc1": trained["acc1"],
                "val_loss": validated["loss"], "acc1": validated["acc1"],
                "acc5": validated["acc5"], "val_samples": validated["samples"],
                "lr": lr, "world_size": ctx.world_size,
                "images_per_sec": trained["images_per_sec"] * ctx.world_size,
                "seconds": time.time() - started})
            state.save(args.output_dir, state.checkpoint_state(
                state.Position(epoch + 1, 0, best_acc1), args.arch, model, optimizer,
                scheduler, scaler), is_best)
        devicekit.barrier()
    # Every rank says it finished, with a fingerprint of its weights: equal on all ranks.
    print(f"=> rank {ctx.rank}/{ctx.world_size} done: weights {devicekit.fingerprint(model)}",
          flush=True)


if __name__ == "__main__":
    sys.exit(main())
