"""main.py's model flags: the architecture, its output count, pretrained weights, memory
format and torch.compile."""

import argparse

import models
from devicekit import UsageError
from trainer.options.checks import check_file, positive
from trainer.train_config import TrainConfig

TITLE = "model"


def add_flags(group: argparse._ArgumentGroup) -> None:
    """--arch, --pretrained, --num-classes, --channels-last/--no-channels-last, --compile."""
    group.add_argument(
        "-a",
        "--arch",
        default="resnet18",
        help=f"model: {', '.join(models.names())} (default resnet18)",
    )
    group.add_argument(
        "--pretrained",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="start from a torchvision-format state_dict file",
    )
    group.add_argument(
        "--num-classes",
        "--num_classes",
        type=int,
        default=1000,
        dest="num_classes",
        help="classes the model predicts (default 1000)",
    )
    group.add_argument(
        "--channels-last",
        action="store_const",
        const=True,
        default=None,
        help="channels_last memory format; default: where the device prefers it",
    )
    group.add_argument(
        "--no-channels-last",
        action="store_const",
        const=False,
        dest="channels_last",
        help="keep NCHW",
    )
    group.add_argument("--compile", action="store_true", help="torch.compile the model")


def check(config: TrainConfig) -> None:
    """A known architecture, at least one class, and a --pretrained file that exists."""
    positive("--num-classes", config.num_classes)
    if config.pretrained == "":
        raise UsageError(
            "--pretrained needs a PATH to a state_dict file: this machine cannot "
            "download weights (e.g. --pretrained resnet50-0676ba61.pth)"
        )
    if config.pretrained:
        check_file("--pretrained", config.pretrained, "state_dict file")
    models.check_name(config.arch, "--arch")
