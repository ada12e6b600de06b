"""main.py's training flags: epochs, the node's batch, SGD and its LR schedule, the loss,
gradient accumulation and clipping, the seed, caps on steps, and --evaluate."""

import argparse
import math

from devicekit import UsageError
from trainer.options.checks import positive
from trainer.train_config import TrainConfig

TITLE = "training"

# Torch seeds are 64 bits and rank or epoch are added to --seed: a signed 64-bit seed
# keeps every such sum in range whatever the world size and epoch count.
SEED_RANGE = (-(2**63), 2**63 - 1)


def add_flags(group: argparse._ArgumentGroup) -> None:
    """--epochs, --start-epoch, --batch-size, --lr, --momentum, --wd, --evaluate, --seed,
    --warmup, --label-smoothing, --steps-per-epoch, --val-steps, --lr-schedule,
    --grad-accum, --clip-grad."""
    group.add_argument("--epochs", type=int, default=90, help="total epochs (default 90)")
    group.add_argument("--start-epoch", type=int, default=0, help="epoch to start at (default 0)")
    group.add_argument(
        "-b",
        "--batch-size",
        type=int,
        default=256,
        help="total batch size of all processes of a node (default 256)",
    )
    group.add_argument(
        "--lr",
        "--learning-rate",
        type=float,
        default=0.1,
        dest="lr",
        help="initial learning rate (default 0.1)",
    )
    group.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    group.add_argument(
        "--wd",
        "--weight-decay",
        type=float,
        default=1e-4,
        dest="weight_decay",
        help="weight decay (default 1e-4)",
    )
    group.add_argument("-e", "--evaluate", action="store_true", help="only validate")
    group.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    group.add_argument("--warmup", type=int, default=0, help="linear warmup epochs (default 0)")
    group.add_argument("--label-smoothing", type=float, default=0.0, help="(default 0)")
    group.add_argument("--steps-per-epoch", type=int, default=None, help="cap training steps")
    group.add_argument("--val-steps", type=int, default=None, help="cap validation steps")
    group.add_argument(
        "--lr-schedule",
        default="step",
        choices=["step", "cosine"],
        help="step: x0.1 every 30 epochs; cosine: to 0 (default step)",
    )
    group.add_argument(
        "--grad-accum", type=int, default=1, help="accumulate gradients over N steps (default 1)"
    )
    group.add_argument(
        "--clip-grad", type=float, default=None, metavar="NORM", help="clip the gradient norm"
    )


def check(config: TrainConfig) -> None:
    """Counts and rates in range, epochs left to train, and a 64-bit seed."""
    for name, value in (
        ("--epochs", config.epochs),
        ("--batch-size", config.batch_size),
        ("--grad-accum", config.grad_accum),
        ("--steps-per-epoch", config.steps_per_epoch),
        ("--val-steps", config.val_steps),
    ):
        positive(name, value)
    for name, amount in (
        ("--start-epoch", config.start_epoch),
        ("--warmup", config.warmup),
        ("--momentum", config.momentum),
        ("--weight-decay", config.weight_decay),
    ):
        positive(name, amount, 0)
    if not 0 < config.lr < math.inf:
        raise UsageError(f"--lr {config.lr:g} must be a positive, finite number")
    if not 0 <= config.label_smoothing < 1:
        raise UsageError(f"--label-smoothing {config.label_smoothing:g} must be in [0, 1)")
    if config.clip_grad is not None and not 0 < config.clip_grad < math.inf:
        raise UsageError(f"--clip-grad {config.clip_grad:g} must be a positive, finite number")
    if config.start_epoch >= config.epochs and not config.evaluate and not config.resume:
        raise UsageError(
            f"--start-epoch {config.start_epoch} leaves nothing to train with "
            f"--epochs {config.epochs}"
        )
    if config.warmup and config.warmup >= config.epochs:
        raise UsageError(f"--warmup {config.warmup} must be below --epochs {config.epochs}")
    if not SEED_RANGE[0] <= config.seed <= SEED_RANGE[1]:
        raise UsageError(
            f"--seed {config.seed} is out of range: use a whole number from "
            f"{SEED_RANGE[0]} to {SEED_RANGE[1]} (64 bits; the rank and the "
            "epoch are added to it)"
        )
