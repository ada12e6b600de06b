"""main.py's precision flags: autocast (--amp/--no-amp), the float16 loss scale, and
apex-style --opt-level."""

import argparse
import math

TITLE = "precision"


def loss_scale(text: str) -> float | str:
    """--loss-scale's type: a positive, finite number, or "dynamic"."""
    if str(text).lower() == "dynamic":
        return "dynamic"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or 'dynamic'") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive, finite number")
    return value


def add_flags(group: argparse._ArgumentGroup) -> None:
    """--amp/--no-amp, --loss-scale, --opt-level (argparse checks their values)."""
    group.add_argument(
        "--amp",
        action="store_const",
        const=True,
        default=None,
        help="mixed precision (autocast); default: on where it pays on the device "
        "(CPUs with native bf16, CUDA GPUs)",
    )
    group.add_argument("--no-amp", action="store_const", const=False, dest="amp", help="full fp32")
    group.add_argument(
        "--loss-scale",
        type=loss_scale,
        default=None,
        help="float16 loss scale: a number (initial scale) or 'dynamic'",
    )
    group.add_argument(
        "--opt-level",
        default=None,
        choices=["O0", "O1", "O2", "O3"],
        help="apex-style level: O0 turns AMP off, O1..O3 turn autocast on",
    )
