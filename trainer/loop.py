"""One training epoch and one validation pass, in the reference example's print format.

Loss and accuracy are accumulated on the device and read only when a line is printed,
so the step itself never waits for the host.
"""

import dataclasses
import time

import torch

import devicekit
from trainer.observe import OFF, Observer
from trainer.transforms import normalize

WARMUP_STEPS = 5


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """What the training and validation loops read: this rank's device and role, the
    precision and memory format resolved for the device, and the run's flags that shape
    a step."""

    device: torch.device
    is_main: bool  # rank 0: prints progress lines
    amp: bool  # autocast on
    channels_last: bool  # batches in channels_last memory format
    grad_accum: int  # --grad-accum: micro-steps per optimizer step
    clip_grad: float | None  # --clip-grad: the gradient norm's bound, or None
    print_freq: int  # --print-freq
    steps_per_epoch: int | None  # --steps-per-epoch: the cap on training steps, or None
    val_steps: int | None  # --val-steps: the cap on validation steps, or None
    save_every: int | None  # --save-every: steps between mid-epoch checkpoints, or None


class Meter:
    """A running value and average, printed as `name value (average)`."""

    def __init__(self, name, fmt):
        self.name, self.fmt = name, fmt
        self.value = self.sum = 0.0
        self.count = 0

    def update(self, value, n=1):
        self.value = value
        self.sum += value * n
        self.count += n

    @property
    def avg(self):
        return self.sum / max(self.count, 1)

    def __str__(self):
        return f"{self.name} {self.value:{self.fmt}} ({self.avg:{self.fmt}})"


def progress_line(prefix, step, steps, meters):
    """`prefix[ step/steps]\\tmeter\\tmeter...`, as the reference ImageNet example prints."""
    width = len(str(steps))
    return "\t".join([f"{prefix}[{step:{width}d}/{steps}]"] + [str(m) for m in meters])


def correct_topk(output, target, ks=(1, 5)):
    """Number of samples whose target is among the top-k outputs, for each k (device tensors)."""
    maxk = min(max(ks), output.size(1))
    top = output.topk(maxk, dim=1).indices
    hits = top.eq(target.unsqueeze(1))
    return [hits[:, : min(k, maxk)].any(dim=1).sum() for k in ks]


def prepare_batch(images, target, device, channels_last):
    """Copy a uint8 batch to the device (asynchronously) and normalise it there."""
    images = images.to(device, non_blocking=True)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    return normalize(images), target.to(device, non_blocking=True)


def train_one_epoch(
    loader,
    model,
    criterion,
    optimizer,
    scheduler,
    scaler,
    epoch,
    run: LoopSettings,
    first_step=0,
    totals=None,
    save=None,
    observer: Observer = OFF,
):
    """Train `model` for one epoch (capped at run.steps_per_epoch); returns
    {"loss", "acc1", "acc5", "images_per_sec"} of this rank, measured on the device
    (images per second after the first WARMUP_STEPS steps, when the epoch is long enough).

    A resumed epoch starts at `first_step` (the loader already skips the samples before
    it) with the `totals` its checkpoint held. Every run.save_every steps within the epoch,
    after an optimizer step, `save(epoch, steps_done, totals)` writes a checkpoint.
    `observer` sees every step and each printed step's loss, top-1 and learning rate.
    """
    model.train()
    steps = first_step + len(loader)
    if run.steps_per_epoch is not None:
        steps = min(steps, run.steps_per_epoch)
    batch_time, data_time = Meter("Time", "6.3f"), Meter("Data", "6.3f")
    losses, top1, top5 = Meter("Loss", ".4e"), Meter("Acc@1", "6.2f"), Meter("Acc@5", "6.2f")
    # loss sum, top-1 hits, top-5 hits, samples
    totals = torch.zeros(4, device=run.device) if totals is None else totals.to(run.device)
    # Throughput leaves out the first steps (start-up, allocator warm-up) when there are enough.
    timed_from = first_step + (WARMUP_STEPS if steps - first_step > 2 * WARMUP_STEPS else 0)
    timed_images = 0
    start = end = time.perf_counter()
    for step, (images, target) in enumerate(loader, start=first_step):
        if step >= steps:
            break
        data_time.update(time.perf_counter() - end)
        lr = optimizer.param_groups[0]["lr"]  # this step's, before the scheduler moves it
        images, target = prepare_batch(images, target, run.device, run.channels_last)
        last_micro = (step + 1) % run.grad_accum == 0 or step + 1 == steps
        with devicekit.no_sync(model, enabled=not last_micro):
            with devicekit.autocast(enabled=run.amp):
                output = model(images)
                loss = criterion(output, target)
            scaler.scale(loss / run.grad_accum).backward()
        if last_micro:
            _optimizer_step(model, optimizer, scaler, run.clip_grad)
            scheduler.step()
        with torch.no_grad():
            hits1, hits5 = correct_topk(output, target)
            n = target.size(0)
            totals += torch.stack(
                [loss.detach().float() * n, hits1.float(), hits5.float(), totals.new_tensor(n)]
            )
        if step + 1 == timed_from:
            devicekit.synchronize()
            start = time.perf_counter()
        elif step >= timed_from:
            timed_images += n
        batch_time.update(time.perf_counter() - end)
        if run.is_main and (step % run.print_freq == 0 or step + 1 == steps):
            # The only host reads of the step: when a line is printed.
            losses.update(loss.item(), n)
            top1.update(hits1.item() * 100.0 / n, n)
            top5.update(hits5.item() * 100.0 / n, n)
            print(
                progress_line(
                    f"Epoch: [{epoch}]", step, steps, [batch_time, data_time, losses, top1, top5]
                ),
                flush=True,
            )
            observer.train_step(epoch, step, losses.value, top1.value, lr)
        if (
            save is not None
            and last_micro
            and run.save_every
            and (step + 1) % run.save_every == 0
            and step + 1 < steps
        ):
            save(epoch, step + 1, totals)
        observer.step_done()
        end = time.perf_counter()
    devicekit.synchronize()
    elapsed = time.perf_counter() - start
    loss_sum, hits1, hits5, count = totals.tolist()
    count = max(count, 1)
    return {
        "loss": loss_sum / count,
        "acc1": 100 * hits1 / count,
        "acc5": 100 * hits5 / count,
        "images_per_sec": timed_images / elapsed if elapsed > 0 else 0.0,
    }


def _optimizer_step(model, optimizer, scaler, clip_grad):
    if clip_grad is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def validate(loader, model, criterion, run: LoopSettings):
    """Evaluate on this rank's exact shard and all-reduce the sums: every validation sample
    counts once. Returns {"loss", "acc1", "acc5", "samples"} for the whole set."""
    model.eval()
    steps = len(loader) if run.val_steps is None else min(len(loader), run.val_steps)
    batch_time = Meter("Time", "6.3f")
    totals = torch.zeros(3, device=run.device)
    count = 0
    end = time.perf_counter()
    with torch.no_grad():
        for step, (images, target) in enumerate(loader):
            if step >= steps:
                break
            images, target = prepare_batch(images, target, run.device, run.channels_last)
            with devicekit.autocast(enabled=run.amp):
                output = model(images)
                loss = criterion(output, target)
            hits1, hits5 = correct_topk(output, target)
            n = target.size(0)
            count += n
            totals += torch.stack([loss.float() * n, hits1.float(), hits5.float()])
            batch_time.update(time.perf_counter() - end)
            if run.is_main and step % run.print_freq == 0:
                print(progress_line("Test: ", step, steps, [batch_time]), flush=True)
            end = time.perf_counter()
    totals = torch.cat([totals, torch.tensor([float(count)], device=run.device)])
    loss_sum, hits1, hits5, count = devicekit.all_reduce_sum(totals).tolist()
    count = max(count, 1)
    result = {
        "loss": loss_sum / count,
        "acc1": 100 * hits1 / count,
        "acc5": 100 * hits5 / count,
        "samples": int(count),
    }
    if run.is_main:
        print(f" * Acc@1 {result['acc1']:.3f} Acc@5 {result['acc5']:.3f}", flush=True)
    return result
