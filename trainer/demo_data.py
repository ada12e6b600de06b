"""A small, learnable, real-file image dataset: coloured geometric shapes.

``make_demo_dataset(root)`` writes an ImageFolder tree of PNG files::

    root/train/<shape>/<shape>_00000.png ...   (train_per_class per class)
    root/val/<shape>/<shape>_00000.png ...     (val_per_class per class)
    root/.complete                             (JSON: how it was made)

The class is the shape (circle, square, triangle, cross, ring, hbar, vbar, diamond,
plus, two_dots; the first ``num_classes`` of them). Each image has a random position,
size, shape colour, background colour and a little pixel noise, all drawn from a numpy
generator seeded by (seed, split, class, index), so the files are the same on every
machine and in any order of generation. The defaults (10 classes, 500 train + 100 val per
class, 64 px) take a few seconds to write, and a ~100k-parameter CNN on 32-48 px crops
reaches over 90 % val top-1 on it in a few minutes on 2 CPU cores.

Generation writes into a hidden temporary sibling folder and renames it to ``root`` only
when complete, with the marker file written last inside it; a ``root`` with the marker is
reused as it is, so an interrupted generation is never mistaken for a finished one.

    python -m trainer.demo_data DIR
"""

import argparse
import json
import os
import shutil
import socket
import tempfile

import numpy as np
from PIL import Image, ImageDraw

from devicekit.errors import UsageError, exit_on_usage_error, warn

SHAPES = (
    "circle",
    "square",
    "triangle",
    "cross",
    "ring",
    "hbar",
    "vbar",
    "diamond",
    "plus",
    "two_dots",
)
MARKER = ".complete"
DEFAULT_TRAIN_PER_CLASS = 500
DEFAULT_VAL_PER_CLASS = 100
NOISE_STD = 8.0
SIZE_RANGE = (0.45, 0.75)  # shape size, as a fraction of the image side
SPLIT_IDS = {"train": 0, "val": 1}


def _draw_shape(draw, shape, cx, cy, s, colour, rng):
    """Draw ``shape`` centred at (cx, cy) inside an s x s box."""
    h = s / 2.0
    stroke = max(2, round(s * 0.2))
    if shape == "circle":
        draw.ellipse((cx - h, cy - h, cx + h, cy + h), fill=colour)
    elif shape == "square":
        q = h * 0.85
        draw.rectangle((cx - q, cy - q, cx + q, cy + q), fill=colour)
    elif shape == "triangle":
        draw.polygon([(cx, cy - h), (cx + h, cy + h * 0.8), (cx - h, cy + h * 0.8)], fill=colour)
    elif shape == "cross":
        draw.line((cx - h, cy - h, cx + h, cy + h), fill=colour, width=stroke)
        draw.line((cx - h, cy + h, cx + h, cy - h), fill=colour, width=stroke)
    elif shape == "ring":
        draw.ellipse(
            (cx - h, cy - h, cx + h, cy + h), outline=colour, width=max(2, round(s * 0.15))
        )
    elif shape == "hbar":
        draw.rectangle((cx - h, cy - s * 0.13, cx + h, cy + s * 0.13), fill=colour)
    elif shape == "vbar":
        draw.rectangle((cx - s * 0.13, cy - h, cx + s * 0.13, cy + h), fill=colour)
    elif shape == "diamond":
        draw.polygon([(cx, cy - h), (cx + h, cy), (cx, cy + h), (cx - h, cy)], fill=colour)
    elif shape == "plus":
        w = stroke / 2.0
        draw.rectangle((cx - h, cy - w, cx + h, cy + w), fill=colour)
        draw.rectangle((cx - w, cy - h, cx + w, cy + h), fill=colour)
    elif shape == "two_dots":
        r = s * 0.2
        if rng.random() < 0.5:  # side by side or one above the other
            centres = [(cx - h + r, cy), (cx + h - r, cy)]
        else:
            centres = [(cx, cy - h + r), (cx, cy + h - r)]
        for x, y in centres:
            draw.ellipse((x - r, y - r, x + r, y + r), fill=colour)
    else:  # pragma: no cover - SHAPES and this function go together
        raise ValueError(f"unknown shape {shape!r}")


def _colours(rng):
    """A background and a shape colour that differ clearly."""
    while True:
        background = rng.integers(0, 256, 3)
        colour = rng.integers(0, 256, 3)
        if np.abs(background - colour).sum() >= 180:
            return tuple(int(v) for v in background), tuple(int(v) for v in colour)


def render(shape, image_size, rng):
    """One RGB PIL image of ``shape`` with random placement, size, colours and noise."""
    background, colour = _colours(rng)
    image = Image.new("RGB", (image_size, image_size), background)
    s = image_size * rng.uniform(*SIZE_RANGE)
    # Keep the shape inside the central 7/8 of the image (what the val center crop keeps).
    margin = image_size / 16.0 + s / 2.0
    cx = rng.uniform(margin, image_size - margin)
    cy = rng.uniform(margin, image_size - margin)
    _draw_shape(ImageDraw.Draw(image), shape, cx, cy, s, colour, rng)
    pixels = np.asarray(image, dtype=np.float32)
    pixels = pixels + rng.normal(0.0, NOISE_STD, pixels.shape)
    return Image.fromarray(np.clip(pixels + 0.5, 0, 255).astype(np.uint8))


def _check_count(value, what, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"{what} must be a whole number >= {minimum}, got {value!r}")


def _remove_stale_partials(parent, name):
    """Remove temporary folders left by interrupted generations on this host."""
    prefix = f".{name}.partial-{socket.gethostname()}-"
    for entry in os.scandir(parent):
        if not entry.name.startswith(prefix) or not entry.is_dir():
            continue
        try:
            pid = int(entry.name[len(prefix) :].split("-")[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(entry.path, ignore_errors=True)
        except (ValueError, PermissionError, OSError):
            continue


def read_marker(root):
    """The settings a complete demo dataset at ``root`` was made with, or None."""
    try:
        with open(os.path.join(root, MARKER), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def make_demo_dataset(
    root,
    num_classes=10,
    train_per_class=DEFAULT_TRAIN_PER_CLASS,
    val_per_class=DEFAULT_VAL_PER_CLASS,
    image_size=64,
    seed=0,
):
    """Write the shapes dataset to ``root`` (see the module docstring); return ``root``.

    A ``root`` that already holds a complete dataset (the marker file) is left as it is
    (with a warning if it was made with other settings). A ``root`` that exists, is not
    empty and has no marker is not touched: UsageError.
    """
    root = os.path.abspath(os.fspath(root))
    _check_count(num_classes, "num_classes", 2)
    if num_classes > len(SHAPES):
        raise UsageError(
            f"the demo dataset has at most {len(SHAPES)} classes, got num_classes={num_classes}"
        )
    _check_count(train_per_class, "train_per_class", 1)
    _check_count(val_per_class, "val_per_class", 1)
    _check_count(image_size, "image_size", 16)
    settings = {
        "num_classes": num_classes,
        "train_per_class": train_per_class,
        "val_per_class": val_per_class,
        "image_size": image_size,
        "seed": int(seed),
        "classes": list(SHAPES[:num_classes]),
    }

    existing = read_marker(root)
    if existing is not None:
        if existing != settings:
            warn(
                f"reusing the demo dataset in {root}, made with other settings; "
                "remove the folder to make it again"
            )
        return root
    if os.path.exists(root) and not (os.path.isdir(root) and not os.listdir(root)):
        raise UsageError(
            f"{root} exists but is not a complete demo dataset (no {MARKER} in it): "
            "remove it or choose another folder"
        )

    parent, name = os.path.split(root)
    os.makedirs(parent, exist_ok=True)
    _remove_stale_partials(parent, name)
    partial = tempfile.mkdtemp(
        prefix=f".{name}.partial-{socket.gethostname()}-{os.getpid()}-", dir=parent
    )
    try:
        for split, per_class in (("train", train_per_class), ("val", val_per_class)):
            for label, shape in enumerate(settings["classes"]):
                folder = os.path.join(partial, split, shape)
                os.makedirs(folder)
                for index in range(per_class):
                    rng = np.random.default_rng(
                        [int(seed) & 0xFFFFFFFF, SPLIT_IDS[split], label, index]
                    )
                    render(shape, image_size, rng).save(
                        os.path.join(folder, f"{shape}_{index:05d}.png")
                    )
        with open(os.path.join(partial, MARKER), "w", encoding="utf-8") as handle:
            json.dump(settings, handle, indent=1)
        if os.path.isdir(root) and not os.listdir(root):
            os.rmdir(root)
        try:
            os.rename(partial, root)
        except OSError:
            # Another process finished the same dataset first: keep theirs.
            if read_marker(root) is None:
                raise
    finally:
        if os.path.isdir(partial):
            shutil.rmtree(partial, ignore_errors=True)
    return root


@exit_on_usage_error
def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m trainer.demo_data",
        description="Write a small learnable ImageFolder dataset of coloured shapes (PNG).",
    )
    parser.add_argument("dir", help="where to write it (DIR/train/<class>, DIR/val/<class>)")
    parser.add_argument("--num-classes", type=int, default=10, help="2..10 (default 10)")
    parser.add_argument("--train-per-class", type=int, default=DEFAULT_TRAIN_PER_CLASS)
    parser.add_argument("--val-per-class", type=int, default=DEFAULT_VAL_PER_CLASS)
    parser.add_argument("--image-size", type=int, default=64, help="pixels (default 64)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    root = make_demo_dataset(
        args.dir,
        num_classes=args.num_classes,
        train_per_class=args.train_per_class,
        val_per_class=args.val_per_class,
        image_size=args.image_size,
        seed=args.seed,
    )
    made = read_marker(root)
    print(
        f"demo dataset in {root}: {made['num_classes']} classes, "
        f"{made['num_classes'] * made['train_per_class']} train + "
        f"{made['num_classes'] * made['val_per_class']} val images "
        f"({made['image_size']} px PNG)"
    )


if __name__ == "__main__":
    main()
