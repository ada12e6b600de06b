"""ImageNet-style training that runs unchanged on NVIDIA GPUs, Ascend NPUs and CPUs.

Started any way people start the reference example: plainly, with
--multiprocessing-distributed, under torchrun or torch.distributed.launch, from a per-rank
shell loop (launch/run_8p.sh), or with Ascend's RANK_ID/RANK_SIZE scripts. Every device
decision is devicekit's; this file never names a device.
"""

# devicekit before torch: it turns torch's backend autoload off, so that an Ascend machine
# without CANN gets devicekit's one-line message rather than a traceback from `import torch`.
import devicekit

# isort: split
import functools
import math
import os
import sys
import time
from typing import Any, NamedTuple

import torch

import models
from trainer import datasets, loop, observe, state
from trainer.loaders import build_loaders, split_per_process, start_epoch
from trainer.options import parse_args
from trainer.options.processes import launch_options
from trainer.train_config import TrainConfig


@devicekit.exit_on_usage_error
def main(argv: list[str] | None = None) -> int:
    """Parse the command line and start one training process per rank."""
    config = parse_args(argv)  # every flag, checked
    options = launch_options(config)
    # The reference's meaning: one process unless --multiprocessing-distributed spawns
    # one per device (a launcher that started this process decides for itself).
    nprocs = None if config.multiprocessing_distributed else 1
    # Refuse a bad split here, once, rather than in every rank.
    split_per_process(
        config.batch_size, config.workers, devicekit.nprocs_per_node(nprocs, options=options)
    )
    devicekit.launch(
        main_worker, args=(config,), nprocs=nprocs, device_type=config.device, options=options
    )
    return 0


def main_worker(local_rank: int, config: TrainConfig) -> None:
    """Train as one rank: `local_rank` is this process's index on its node."""
    ctx = devicekit.init_distributed(
        config.dist_backend, timeout=config.dist_timeout, options=launch_options(config)
    )
    try:
        train(ctx, config)
    finally:
        devicekit.destroy_process_group()


def train(ctx: devicekit.LaunchContext, config: TrainConfig) -> None:
    """Seed, build and resume this rank, then validate (--evaluate) or train to --epochs."""
    devicekit.seed_everything(config.seed, ctx.rank)
    setup = build(ctx, config)
    position = resume(ctx, config, setup)
    if position is None:
        return
    if config.evaluate:
        validate(setup)
        return
    if config.profile_steps:
        observe.check_profile_steps(
            config.profile_steps,
            (config.epochs - position.epoch) * setup.steps_per_epoch - position.step,
        )
    if ctx.is_main:
        os.makedirs(config.output_dir, exist_ok=True)
        state.remove_leftovers(config.output_dir)
    with observe.observing(config, ctx.is_main, setup.steps_per_epoch) as observer:
        while position.epoch < config.epochs:
            position = run_epoch(ctx, config, setup, position, observer)
    finish(ctx, setup.model)


class Setup(NamedTuple):
    """What build() makes for one rank."""

    model: torch.nn.Module  # validated, checkpointed and fingerprinted (sharded: trains too)
    ddp_model: torch.nn.Module  # what trains: the model wrapped for DDP (and compiled)
    criterion: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    train_loader: torch.utils.data.DataLoader
    val_loader: torch.utils.data.DataLoader
    steps_per_epoch: int  # training steps
    batch_size: int  # per process
    run: loop.LoopSettings  # the settings trainer.loop reads


def build(ctx: devicekit.LaunchContext, config: TrainConfig) -> Setup:
    """Make this rank's model, optimizer, loss scaler, data loaders and LR schedule."""
    device = devicekit.device()
    batch_size, workers = split_per_process(config.batch_size, config.workers, ctx.local_world_size)
    amp = devicekit.amp_enabled(config.amp)
    channels_last = (
        devicekit.prefers_channels_last(amp)
        if config.channels_last is None
        else config.channels_last
    )
    if ctx.is_main:
        print_setup(ctx, config, batch_size, workers, amp, channels_last)
    model, ddp_model = build_model(config, device, channels_last)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=config.label_smoothing)
    optimizer = torch.optim.SGD(
        model.parameters(), config.lr, momentum=config.momentum, weight_decay=config.weight_decay
    )
    scaler = devicekit.GradScaler(
        amp, init_scale=config.loss_scale if isinstance(config.loss_scale, float) else 2.0**16
    )
    train_loader, val_loader, steps = build_data(ctx, config, batch_size, workers)
    scheduler = state.make_scheduler(
        optimizer,
        config.epochs,
        config.warmup,
        config.lr_schedule,
        math.ceil(steps / config.grad_accum),
    )
    run = loop.LoopSettings(
        device=device,
        is_main=ctx.is_main,
        amp=amp,
        channels_last=channels_last,
        grad_accum=config.grad_accum,
        clip_grad=config.clip_grad,
        print_freq=config.print_freq,
        steps_per_epoch=config.steps_per_epoch,
        val_steps=config.val_steps,
        save_every=config.save_every,
    )
    return Setup(
        model,
        ddp_model,
        criterion,
        optimizer,
        scheduler,
        scaler,
        train_loader,
        val_loader,
        steps,
        batch_size,
        run,
    )


def print_setup(
    ctx: devicekit.LaunchContext,
    config: TrainConfig,
    batch_size: int,
    workers: int,
    amp: bool,
    channels_last: bool,
) -> None:
    """Print the run's one-line summary: model, device, ranks, batch, workers, precision."""
    precision = f"AMP {devicekit.amp_dtype()}".replace("torch.", "") if amp else "fp32"
    threads = (
        ""
        if devicekit.is_available()
        else f", {torch.get_num_threads()} compute threads per process"
    )
    print(
        f"=> {config.arch} on {devicekit.device_type()} ({ctx.describe()}), batch "
        f"{batch_size} per process, {workers} loader workers per process, {precision}"
        f"{', channels_last' if channels_last else ''}{threads}",
        flush=True,
    )


def build_model(
    config: TrainConfig, device: torch.device, channels_last: bool
) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The model on `device`, and what trains: the same model wrapped for DDP (or sharded
    in place with --shard), and compiled with --compile."""
    model = models.create(config.arch, num_classes=config.num_classes)
    if config.pretrained:
        state.load_pretrained(config.pretrained, model)
    model.to(device, memory_format=torch.channels_last if channels_last else torch.preserve_format)
    ddp_model: torch.nn.Module
    if config.shard:
        # --amp's autocast sets the precision, as under DDP: the shards stay fp32.
        ddp_model = model = devicekit.shard(model, mixed_precision=False)
    else:
        # Batch norm trains on batch statistics, so rank 0's running statistics are needed
        # only for evaluation and checkpoints, and are broadcast once before each validation
        # instead of before every forward: the same weights, one collective less per step.
        ddp_model = devicekit.wrap_ddp(model, broadcast_buffers=False)
    if config.compile:
        ddp_model = devicekit.compile(ddp_model)
    return model, ddp_model


def build_data(
    ctx: devicekit.LaunchContext, config: TrainConfig, batch_size: int, workers: int
) -> tuple[torch.utils.data.DataLoader, torch.utils.data.DataLoader, int]:
    """(train_loader, val_loader, training steps per epoch) for this rank."""
    train_set, val_set = datasets.build_datasets(
        config.data_dir,
        config.dummy,
        config.image_size,
        config.num_classes,
        config.seed,
        crop_scale=config.crop_scale,
        flip=config.flip,
        augment=config.augment,
    )
    train_loader, val_loader = build_loaders(
        train_set, val_set, batch_size, workers, ctx, config.seed
    )
    steps = (
        len(train_loader)
        if config.steps_per_epoch is None
        else min(len(train_loader), config.steps_per_epoch)
    )
    if steps == 0:  # parse_args checked one node's batch; several nodes need more images
        raise devicekit.UsageError(
            f"{len(train_set)} training images make no batch of {batch_size} per process over "
            f"{ctx.world_size} processes: lower --batch-size or add images"
        )
    return train_loader, val_loader, steps


def resume(
    ctx: devicekit.LaunchContext, config: TrainConfig, setup: Setup
) -> state.Position | None:
    """Where this rank starts: --start-epoch, or the --resume checkpoint loaded into `setup`
    (None when that run already finished and there is nothing to train)."""
    position = state.Position(config.start_epoch)
    resume_from = state.resume_path(config.resume, config.output_dir)
    if not resume_from:
        return position
    position = state.resume(
        resume_from, config.arch, setup.model, setup.optimizer, setup.scheduler, setup.scaler
    )
    if position.rng_states is not None and len(position.rng_states) == ctx.world_size:
        torch.set_rng_state(position.rng_states[ctx.rank])
    if ctx.is_main:
        print(
            f"=> resumed {resume_from!r} at epoch {position.epoch}, step {position.step}",
            flush=True,
        )
    if position.epoch >= config.epochs and not config.evaluate:
        if ctx.is_main:
            print(
                f"=> nothing to train: the run finished at epoch {position.epoch} of "
                f"--epochs {config.epochs}",
                flush=True,
            )
        return None
    return position


def run_epoch(
    ctx: devicekit.LaunchContext,
    config: TrainConfig,
    setup: Setup,
    start: state.Position,
    observer: observe.Observer,
) -> state.Position:
    """Train the epoch `start` is in (from its step, when resumed mid-epoch), validate it,
    record (metrics.jsonl, `observer`) and checkpoint it; returns the position at the next
    epoch's start."""
    epoch = start.epoch
    started, lr = time.time(), setup.optimizer.param_groups[0]["lr"]
    start_epoch(setup.train_loader, epoch, skip=start.step * setup.batch_size)
    trained = loop.train_one_epoch(
        setup.train_loader,
        setup.ddp_model,
        setup.criterion,
        setup.optimizer,
        setup.scheduler,
        setup.scaler,
        epoch,
        setup.run,
        start.step,
        start.totals if start.step else None,
        functools.partial(save_mid_epoch, ctx, config, setup, start.best_acc1),
        observer,
    )
    devicekit.broadcast_buffers(setup.model)  # every rank validates rank 0's model
    validated = validate(setup)
    is_best = validated["acc1"] > start.best_acc1
    end = state.Position(epoch + 1, 0, max(validated["acc1"], start.best_acc1))
    saved = checkpoint(config, setup, end)  # a sharded model's: every rank gathers its shards
    if ctx.is_main:
        metrics = epoch_metrics(ctx, epoch, lr, trained, validated, time.time() - started)
        state.append_metrics(config.output_dir, metrics)
        observer.epoch_done(epoch, metrics)
        state.save(config.output_dir, saved, is_best)
    devicekit.barrier()
    return end


def validate(setup: Setup) -> dict[str, float]:
    """Every rank validates its share of the validation set. A sharded model is gathered
    whole for it: the shares may differ by a batch, and then so would the ranks' forward
    passes, each of which would otherwise gather parameters from every rank."""
    with devicekit.unsharded(setup.model) as model:
        return loop.validate(setup.val_loader, model, setup.criterion, setup.run)


def save_mid_epoch(
    ctx: devicekit.LaunchContext,
    config: TrainConfig,
    setup: Setup,
    best_acc1: float,
    epoch: int,
    step: int,
    totals: torch.Tensor,
) -> None:
    """Checkpoint `step` steps into `epoch`, with every rank's generator state, so that a
    resumed run draws what this one would."""
    rng_states = [None] * ctx.world_size
    torch.distributed.all_gather_object(rng_states, torch.get_rng_state())
    saved = checkpoint(config, setup, state.Position(epoch, step, best_acc1, rng_states, totals))
    if ctx.is_main:
        state.save(config.output_dir, saved, is_best=False)


def checkpoint(config: TrainConfig, setup: Setup, position: state.Position) -> dict[str, Any]:
    """The checkpoint dict of this run at `position`; every rank calls it (of a sharded
    model, rank 0 gets the whole state and writes it)."""
    return state.checkpoint_state(
        position, config.arch, setup.model, setup.optimizer, setup.scheduler, setup.scaler
    )


def epoch_metrics(
    ctx: devicekit.LaunchContext,
    epoch: int,
    lr: float,
    trained: dict[str, float],
    validated: dict[str, float],
    seconds: float,
) -> dict[str, Any]:
    """One epoch's row of metrics.jsonl."""
    return {
        "epoch": epoch,
        "train_loss": trained["loss"],
        "train_acc1": trained["acc1"],
        "val_loss": validated["loss"],
        "acc1": validated["acc1"],
        "acc5": validated["acc5"],
        "val_samples": validated["samples"],
        "lr": lr,
        "world_size": ctx.world_size,
        "images_per_sec": trained["images_per_sec"] * ctx.world_size,
        "seconds": seconds,
    }


def finish(ctx: devicekit.LaunchContext, model: torch.nn.Module) -> None:
    """Say this rank finished, with a fingerprint of its weights: equal on all ranks."""
    line = f"=> rank {ctx.rank}/{ctx.world_size} done: weights {devicekit.fingerprint(model)}\n"
    # One write: print() writes the text and its newline apart when Python runs unbuffered
    # (PYTHONUNBUFFERED, common in containers), and ranks finishing together share a line.
    sys.stdout.write(line)
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
