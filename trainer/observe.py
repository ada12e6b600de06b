"""What a run shows beyond its progress lines, from rank 0 only: TensorBoard scalars
(--tensorboard) and a profiler trace (--profile-steps). When both are off nothing is
imported or started: each step costs one method call.

TensorBoard's x axis is the training step (epoch * steps per epoch + step): per-step
scalars at the steps that print a progress line, per-epoch scalars at the step that ends
their epoch, so both sit on one axis.
"""

import contextlib
import os
from collections.abc import Iterator

import devicekit
from devicekit.errors import UsageError
from trainer.train_config import TrainConfig

PROFILE_WAIT, PROFILE_WARMUP = 1, 1  # steps skipped (loader start-up), steps warmed up
PROFILE_FOLDER = "profile"  # under --output-dir


def check_profile_steps(profile_steps: int, steps: int) -> None:
    """Refuse --profile-steps when the run's `steps` training steps are too few for it."""
    needed = PROFILE_WAIT + PROFILE_WARMUP + profile_steps
    if steps < needed:
        raise UsageError(
            f"--profile-steps {profile_steps} needs {needed} training steps "
            f"({PROFILE_WAIT} to wait, {PROFILE_WARMUP} to warm up, "
            f"{profile_steps} to profile), but this run trains at most {steps}: "
            "lower --profile-steps or raise --epochs"
        )


class Observer:
    """Rank 0's TensorBoard writer and profiler; either may be None (off)."""

    def __init__(self, steps_per_epoch: int, writer=None, profiler=None) -> None:
        self.steps_per_epoch, self.writer, self.profiler = steps_per_epoch, writer, profiler

    def step_done(self) -> None:
        """Advance the profiler's schedule: called after every training step."""
        if self.profiler is not None:
            self.profiler.step()

    def train_step(self, epoch: int, step: int, loss: float, acc1: float, lr: float) -> None:
        """Record one printed training step's loss, top-1 and learning rate."""
        if self.writer is not None:
            at = epoch * self.steps_per_epoch + step
            for name, value in (("loss", loss), ("acc1", acc1), ("lr", lr)):
                self.writer.add_scalar(f"train/{name}", value, at)

    def epoch_done(self, epoch: int, metrics: dict[str, float]) -> None:
        """Record an epoch's metrics.jsonl row (val loss, top-1, top-5; images/s) at its end."""
        if self.writer is not None:
            at = (epoch + 1) * self.steps_per_epoch
            for tag, key in (
                ("val/loss", "val_loss"),
                ("val/acc1", "acc1"),
                ("val/acc5", "acc5"),
                ("train/images_per_sec", "images_per_sec"),
            ):
                self.writer.add_scalar(tag, metrics[key], at)


OFF = Observer(steps_per_epoch=1)  # records nothing: for a loop run without main.py's flags


@contextlib.contextmanager
def observing(config: TrainConfig, is_main: bool, steps_per_epoch: int) -> Iterator[Observer]:
    """The Observer of this rank for the training loop: on rank 0, the writer and profiler
    the flags ask for, closed (events flushed, trace written) when the block ends."""
    profile_dir = os.path.join(config.output_dir, PROFILE_FOLDER)
    with contextlib.ExitStack() as stack:
        writer = stack.enter_context(_writer(config)) if is_main and config.tensorboard else None
        profiler = (
            stack.enter_context(
                devicekit.profile(
                    profile_dir,
                    wait=PROFILE_WAIT,
                    warmup=PROFILE_WARMUP,
                    active=config.profile_steps,
                )
            )
            if is_main and config.profile_steps
            else None
        )
        yield Observer(steps_per_epoch, writer, profiler)
    if profiler is not None:
        print(f"=> profiled {config.profile_steps} steps: trace in {profile_dir}", flush=True)


def _writer(config: TrainConfig):
    """A SummaryWriter into config.tensorboard holding the run's flags as text."""
    # Imported here: a run without --tensorboard never loads tensorboard.
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(config.tensorboard)
    writer.add_text(
        "config", "\n".join(f"    {key}: {value!r}" for key, value in sorted(vars(config).items()))
    )
    return writer
