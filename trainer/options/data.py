"""main.py's data flags: the image folder (or --dummy), loader workers, the training crop
and its augmentation."""

import argparse
import os

from devicekit import UsageError
from trainer.image_folder import check_data_dir
from trainer.options.checks import positive
from trainer.train_config import TrainConfig
from trainer.transforms import DEFAULT_CROP_SCALE

TITLE = "data"


def add_flags(group: argparse._ArgumentGroup) -> None:
    """DIR, --data, --workers, --dummy, --image-size, --crop-scale, --no-flip, --no-augment."""
    group.add_argument(
        "data_dir",
        metavar="DIR",
        nargs="?",
        default=None,
        help="dataset root with train/ and val/ ImageFolder trees",
    )
    group.add_argument("--data", metavar="DIR", default=None, help="same as DIR (Ascend scripts)")
    group.add_argument(
        "-j", "--workers", type=int, default=4, help="data loading workers per node (default 4)"
    )
    group.add_argument("--dummy", action="store_true", help="synthetic data, no files")
    group.add_argument("--image-size", type=int, default=224, help="training crop (default 224)")
    group.add_argument(
        "--crop-scale",
        type=float,
        nargs=2,
        default=DEFAULT_CROP_SCALE,
        metavar=("MIN", "MAX"),
        help="training crops cover MIN to MAX of the image's area "
        "(default 0.08 1.0, the reference's)",
    )
    group.add_argument(
        "--no-flip",
        action="store_false",
        dest="flip",
        help="no random horizontal flip in training (default: half the images)",
    )
    group.add_argument(
        "--no-augment",
        action="store_false",
        dest="augment",
        help="train on the validation transform (resize + center crop): no random crop, no flip",
    )


def check(config: TrainConfig) -> None:
    """The counts and the crop in range; DIR and --data agreeing; the folder's layout, with
    at least one batch of training images (unless --dummy)."""
    positive("--workers", config.workers, 0)
    positive("--image-size", config.image_size, 32)
    low, high = config.crop_scale
    if not 0 < low <= high <= 1:
        raise UsageError(
            f"--crop-scale {low:g} {high:g} must satisfy 0 < MIN <= MAX <= 1 "
            "(fractions of the image's area)"
        )
    if not config.augment and tuple(config.crop_scale) != DEFAULT_CROP_SCALE:
        raise UsageError(
            f"--crop-scale {low:g} {high:g} does nothing with --no-augment (which "
            "crops no random area): drop one of them"
        )
    if (
        config.data_dir
        and config.data
        and os.path.abspath(config.data_dir) != os.path.abspath(config.data)
    ):
        raise UsageError(f"DIR {config.data_dir!r} and --data {config.data!r} disagree: give one")
    check_data_dir(config.data_dir, config.dummy, config.batch_size)
