"""loader.py's decode section: the training pipeline's images per second on one core.

ImageFolder + the training transform (RandomResizedCrop, flip, uint8 CHW out) on
ImageNet-like JPEGs made here (500x375, quality 90, smooth random content plus noise, so
they compress like photos: about 100 KB each, ImageNet's average). One process pinned to
one core with one torch thread, as a DataLoader worker runs; the files are read once
before timing (the page cache serves them: this measures the CPU, not the disk). Each
sample is fetched as a worker fetches it, through EpochSeededDataset, so every path sees
the same crops and flips. Three paths:
  "reference": decode the whole image, then crop and resize with Pillow (BILINEAR), flip,
      uint8 tensor: what torchvision's RandomResizedCrop does with a PIL image, and the
      baseline of the issue's goal;
  "full decode": today's transform on an image decoded whole first: what torch's uint8
      resize alone gains;
  "now": today's transform (the JPEG decoded at 1/2, 1/4 or 1/8 where the crop keeps
      enough pixels there, the crop resized by torch's uint8 kernel);
  "decode only": the whole JPEG decoded and nothing else done: the ceiling of any path
      that decodes every file whole at full scale, as "now" must at 224 px here.
Rounds rotate the order; each round is one pass over every image, at the round's epoch.
Reported: images per second of CPU time of the one core (the wall-clock rate on an idle
core), median and sign-test interval over the rounds (the 2nd smallest to the 2nd largest
for 9), and the per-round ratios to the reference. Also per output size: how often each
reduction was used, and the mean absolute difference of "now" and the reference's pixels
(uint8 levels) over all samples and over the reduced ones.
"""

import os
import shutil
import statistics
import tempfile
import time

import numpy as np
import torch
from PIL import Image
from stats import median_interval

import trainer.transforms
from trainer.decoding import pil_to_tensor
from trainer.image_folder import ImageFolder
from trainer.loaders import EpochSeededDataset
from trainer.transforms import Compose, RandomResizedCrop, train_transform

SEED = 0


def photo_like(rng, width=500, height=375):
    """An RGB image with smooth structure at several scales plus pixel noise."""
    pixels = np.zeros((height, width, 3), np.float32)
    for cells, amplitude in ((4, 60), (16, 40), (64, 30), (160, 30), (250, 25)):
        coarse = rng.normal(0, 1, (max(2, cells * height // width), cells, 3))
        layer = Image.fromarray(np.uint8(np.clip(coarse * 40 + 128, 0, 255)))
        smooth = np.asarray(layer.resize((width, height), Image.BICUBIC), np.float32)
        pixels += (smooth - 128) / 40 * amplitude
    pixels += rng.normal(0, 6, pixels.shape) + rng.uniform(60, 190, 3)
    return Image.fromarray(np.uint8(np.clip(pixels, 0, 255)))


def make_jpegs(root, count, classes=4):
    """`count` photo-like JPEGs (quality 90) in root/c<k>/; their mean size in bytes."""
    rng = np.random.default_rng(SEED)
    sizes = []
    for index in range(count):
        folder = os.path.join(root, f"c{index % classes}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{index:05d}.jpg")
        photo_like(rng).save(path, quality=90)
        sizes.append(os.path.getsize(path))
    return statistics.mean(sizes)


class FullDecode:
    """Decode the whole image to RGB first (so the transform finds nothing to reduce)."""

    def __call__(self, image):
        return image.convert("RGB")


class ReferenceCrop:
    """Decoding the full image then cropping: the box drawn as the trainer draws it, the
    crop resized by Pillow (BILINEAR), a Pillow flip, then a uint8 tensor."""

    def __init__(self, size):
        self.crop = RandomResizedCrop(size)
        self.size = size

    def __call__(self, image):
        image = image.convert("RGB")
        left, top, width, height = self.crop.box(*image.size)
        image = image.crop((left, top, left + width, top + height))
        image = image.resize((self.size, self.size), Image.BILINEAR)
        if torch.rand(1).item() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        return pil_to_tensor(image)


class DecodeOnly:
    """Decode the whole image and nothing else (an empty tensor out): what bounds any path
    that decodes every JPEG whole at full scale."""

    def __call__(self, image):
        image.convert("RGB")
        return torch.empty(0, dtype=torch.uint8)


PATHS = ("reference", "full decode", "now", "decode only")


def pipelines(root, size):
    """{path: EpochSeededDataset} at output size `size`."""
    now = train_transform(size)
    transforms = {
        "reference": ReferenceCrop(size),
        "full decode": Compose([FullDecode(), *now.transforms]),
        "now": now,
        "decode only": DecodeOnly(),
    }
    return {name: EpochSeededDataset(ImageFolder(root, transforms[name]), SEED) for name in PATHS}


def images_per_second(dataset, epoch):
    """Images per second of this process's CPU time: per core busy, which on an idle core
    is the wall-clock rate, and on a shared one leaves out the waits for the core."""
    start = time.process_time()
    for index in range(len(dataset)):
        dataset[(epoch, index)]
    return len(dataset) / (time.process_time() - start)


def compare(sets):
    """ "now" against the reference at epoch 0: {factor: share of samples} for the
    reduction "now" decoded at, and the mean absolute difference (uint8 levels) of their
    pixels over all samples and over the reduced ones."""
    factors, decode = [], trainer.transforms.decode

    def recording(image, at_least=None):
        decoded = decode(image, at_least)
        factors.append(decoded[1])
        return decoded

    total = count = reduced_total = reduced_count = 0
    for index in range(len(sets["reference"])):
        reference = sets["reference"][(0, index)][0].int()
        trainer.transforms.decode = recording
        try:
            now = sets["now"][(0, index)][0].int()
        finally:
            trainer.transforms.decode = decode
        difference = (reference - now).abs().sum().item()
        total, count = total + difference, count + reference.numel()
        if factors[-1] > 1:
            reduced_total += difference
            reduced_count += reference.numel()
    shares = {str(int(f)): factors.count(f) / len(factors) for f in sorted(set(factors))}
    return shares, {
        "all_samples": total / count,
        "reduced_samples": reduced_total / reduced_count if reduced_count else None,
    }


def decode_costs(root, rounds):
    """{factor: CPU ms per image} to decode every JPEG whole, at 1/factor of its size (no
    crop, no resize): what a reduction saves at best."""
    folder = ImageFolder(root)
    paths = [folder.sample(index)[0] for index in range(len(folder))]
    costs = {factor: [] for factor in (1, 2, 4, 8)}
    for round_ in range(rounds):
        for factor in sorted(costs, reverse=round_ % 2 == 1):
            start = time.process_time()
            for path in paths:
                with Image.open(path) as image:
                    image.draft("RGB", (image.width // factor, image.height // factor))
                    image.load()
            costs[factor].append((time.process_time() - start) * 1000 / len(paths))
    return {str(factor): statistics.median(values) for factor, values in costs.items()}


def summary(values):
    """Median of the rounds with its sign-test interval (the min-max for 7 rounds, the 2nd
    smallest to the 2nd largest for 9)."""
    low, high, confidence = median_interval(values)
    return {
        "median": statistics.median(values),
        "interval": [low, high],
        "confidence": confidence,
        "rounds": values,
    }


def decode_section(sizes, image_count, rounds):
    root = tempfile.mkdtemp(prefix="loader-bench-jpegs-")
    try:
        mean_bytes = make_jpegs(root, image_count)
        print(
            f"decode: {image_count} JPEGs, 500x375, quality 90, mean {mean_bytes / 1024:.0f} KB;"
            f" one core, one thread; {rounds} rounds, order rotating"
        )
        results = {
            "images": image_count,
            "mean_file_bytes": mean_bytes,
            "decode_only_cpu_ms": decode_costs(root, rounds),
            "sizes": {},
        }
        print(
            "  decoding alone, CPU ms per image (median): "
            + ", ".join(
                f"{'full' if factor == '1' else '1/' + factor} {ms:.2f}"
                for factor, ms in results["decode_only_cpu_ms"].items()
            ),
            flush=True,
        )
        for size in sizes:
            sets = pipelines(root, size)
            for dataset in sets.values():  # warm: page cache, Pillow's plugins, allocator
                images_per_second(dataset, epoch=rounds)
            runs = {name: [] for name in PATHS}
            for round_ in range(rounds):
                shift = round_ % len(PATHS)
                for name in PATHS[shift:] + PATHS[:shift]:
                    runs[name].append(images_per_second(sets[name], round_))
            shares, difference = compare(sets)
            row = {name: summary(runs[name]) for name in PATHS}
            row["ratios to the reference"] = {
                name: summary([a / b for a, b in zip(runs[name], runs["reference"], strict=False)])
                for name in PATHS[1:]
            }
            row |= {"reductions": shares, "mean_abs_pixel_difference": difference}
            results["sizes"][str(size)] = row
            print_decode_row(size, row)
        return results
    finally:
        shutil.rmtree(root, ignore_errors=True)


def print_decode_row(size, row):
    def cell(s, digits=0):
        low, high = s["interval"]
        return f"{s['median']:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"

    reduced = ", ".join(f"1/{f}: {share:.0%}" for f, share in row["reductions"].items())
    difference = row["mean_abs_pixel_difference"]
    on_reduced = (
        "-" if difference["reduced_samples"] is None else f"{difference['reduced_samples']:.2f}"
    )
    ratios = row["ratios to the reference"]
    print(
        f"  {size:>3} px: " + " | ".join(f"{name} {cell(row[name])} img/s" for name in PATHS),
        flush=True,
    )
    print(
        "         to the reference: "
        + " | ".join(f"{name} {cell(ratios[name], 2)}" for name in PATHS[1:])
        + f" | now decoded at "
        f"{reduced} | now's mean |diff| {difference['all_samples']:.2f} levels (reduced "
        f"samples: {on_reduced})",
        flush=True,
    )
