"""The trainer's command line: the reference ImageNet example's flags, Ascend's ResNet50
script flags, and a few of our own, in argparse groups; a YAML config underneath;
validation with one-line errors; the result a TrainConfig.

One module per group of flags, named for what they set, satisfying OptionGroup
(trainer.options.group): it adds its flags and checks them. GROUPS below is their order,
in --help and in validation (the file-system checks of data, output and a checkpoint to
resume come in their groups, the costliest last). Adding a group means one module and one
line in GROUPS.
"""

import argparse
import sys

from devicekit.errors import ArgumentParser
from trainer.config import config_argv
from trainer.options import (
    checkpoints,
    data,
    model,
    observability,
    precision,
    processes,
    training,
)
from trainer.options.checks import check_named
from trainer.options.group import OptionGroup
from trainer.train_config import TrainConfig

GROUPS: tuple[OptionGroup, ...] = (
    data,
    model,
    training,
    precision,
    processes,
    observability,
    checkpoints,
)


def build_parser() -> ArgumentParser:
    """The argparse parser for main.py: --config, then each of GROUPS' flags under its title."""
    parser = ArgumentParser(
        prog="main.py", description="ImageNet-style training on cuda, npu or cpu."
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE.yaml",
        help="YAML file of flags; the command line wins",
    )
    for group in GROUPS:
        group.add_flags(parser.add_argument_group(group.TITLE))
    return parser


def validate(config: TrainConfig) -> None:
    """Check values a parser cannot, and the paths the run will read and write; raise
    UsageError naming the flag. Runs before any rank starts (with
    --multiprocessing-distributed, once in the parent)."""
    check_named("--config", config.config, "file")
    for group in GROUPS:
        check = getattr(group, "check", None)
        if check is not None:
            check(config)


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    """Parse `argv` (default sys.argv[1:]) with the YAML config underneath, fill in what
    flags imply, validate; return the run's TrainConfig."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    first = parser.parse_args(argv)
    args = parser.parse_args(config_argv(parser, first.config) + argv) if first.config else first
    _fill_in_implied(args)
    config = TrainConfig(**vars(args))
    validate(config)
    return config


def _fill_in_implied(args: argparse.Namespace) -> None:
    """What some flags imply for others: DIR from --data, autocast from --opt-level and
    --loss-scale (unless --amp/--no-amp says), the CPU from --no-accel."""
    args.data_dir = args.data_dir or args.data
    if args.opt_level == "O0":
        args.amp = False
    elif args.amp is None and (args.opt_level is not None or args.loss_scale is not None):
        args.amp = True
    if args.no_accel:
        args.device = "cpu"
