"""main.py's flags for what a run shows beyond its checkpoints: progress lines, TensorBoard
and a profiler trace (trainer.observe)."""

import argparse
import importlib.util

from devicekit import UsageError
from trainer import observe
from trainer.options.checks import check_named, check_writable_dir, positive
from trainer.train_config import TrainConfig

TITLE = "observability"


def add_flags(group: argparse._ArgumentGroup) -> None:
    """--print-freq, --tensorboard, --profile-steps."""
    group.add_argument(
        "-p", "--print-freq", type=int, default=10, help="print every N steps (default 10)"
    )
    group.add_argument(
        "--tensorboard",
        default=None,
        metavar="DIR",
        help="TensorBoard event files from rank 0 in DIR: train loss, top-1 and lr "
        "every --print-freq steps, validation loss, top-1, top-5 and images/s "
        "every epoch, the run's flags as text (needs pip install "
        "'devicekit[tensorboard]')",
    )
    group.add_argument(
        "--profile-steps",
        type=int,
        default=None,
        metavar="N",
        help=f"profile N training steps on rank 0, after {observe.PROFILE_WAIT} "
        f"step to wait and {observe.PROFILE_WARMUP} to warm up; the trace goes "
        f"to OUTPUT_DIR/{observe.PROFILE_FOLDER}/",
    )


def check(config: TrainConfig) -> None:
    """Refuse --tensorboard and --profile-steps where they cannot do their job: with
    --evaluate (nothing trains), TensorBoard not installed or its folder unwritable, fewer
    training steps than the profiler's schedule needs (counted here when --steps-per-epoch
    bounds them; otherwise each rank counts them once its loader exists)."""
    positive("--print-freq", config.print_freq)
    check_named("--tensorboard", config.tensorboard)
    for flag, value in (
        ("--tensorboard", config.tensorboard),
        ("--profile-steps", config.profile_steps),
    ):
        if value is not None and config.evaluate:
            raise UsageError(
                f"{flag} records training, and --evaluate trains nothing: drop one of them"
            )
    if config.tensorboard is not None:
        if importlib.util.find_spec("tensorboard") is None:
            raise UsageError(
                "--tensorboard needs the tensorboard package, which is not "
                "installed: pip install 'devicekit[tensorboard]'"
            )
        check_writable_dir(config.tensorboard, "--tensorboard")
    positive("--profile-steps", config.profile_steps)
    if config.profile_steps is not None and config.steps_per_epoch is not None:
        # A resumed run starts at its checkpoint's epoch, not --start-epoch: at most --epochs.
        epochs = config.epochs - (0 if config.resume else config.start_epoch)
        observe.check_profile_steps(config.profile_steps, epochs * config.steps_per_epoch)
