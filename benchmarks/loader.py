"""The training data loader on a CPU: decode throughput per worker core, and worker memory.

    python benchmarks/loader.py                  # both sections (about 3 minutes on 2 cores)
    python benchmarks/loader.py --only decode --rounds 9
    python benchmarks/loader.py --only memory --files 200000

decode: ImageFolder + the training transform (RandomResizedCrop, flip, uint8 CHW out) on
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

memory: ImageFolder over a file list of --files empty files (1000 class folders; no image
is opened: the dataset returns a tiny tensor made from the path, as the measurement is
about the list), through the trainer's DataLoader setup (persistent workers, prefetch 4,
EpochSeededSampler) with 2 forked workers for 3 epochs, batch 256. The sum over the
workers of RSS, PSS and USS (private pages) from /proc/PID/smaps_rollup after the first
batch and after each epoch, for the file list as ImageFolder holds it (numpy arrays) and
as a Python list of (path, label) tuples (the way it was held before).

Results go to benchmarks/loader_results.json (--out).
"""

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types

import numpy as np
import PIL
import torch
from PIL import Image, features

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from machine import cpu_and_versions  # noqa: E402
from stats import median_interval  # noqa: E402

from trainer import data  # noqa: E402
from trainer.loaders import (  # noqa: E402
    EpochSeededDataset,
    build_loaders,
    freeze_inherited_objects,
)

SEED = 0


# -- the machine ---------------------------------------------------------------------------


def machine():
    """What the figures were measured on."""
    return cpu_and_versions() | {
        "pillow": PIL.__version__,
        "libjpeg_turbo": features.version("libjpeg_turbo"),  # None: plain libjpeg
        "numpy": np.__version__,
    }


def load_1min():
    with open("/proc/loadavg") as handle:
        return float(handle.read().split()[0])


# -- decode throughput ---------------------------------------------------------------------


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
        self.crop = data.RandomResizedCrop(size)
        self.size = size

    def __call__(self, image):
        image = image.convert("RGB")
        left, top, width, height = self.crop.box(*image.size)
        image = image.crop((left, top, left + width, top + height))
        image = image.resize((self.size, self.size), Image.BILINEAR)
        if torch.rand(1).item() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        return data.pil_to_tensor(image)


class DecodeOnly:
    """Decode the whole image and nothing else (an empty tensor out): what bounds any path
    that decodes every JPEG whole at full scale."""

    def __call__(self, image):
        image.convert("RGB")
        return torch.empty(0, dtype=torch.uint8)


PATHS = ("reference", "full decode", "now", "decode only")


def pipelines(root, size):
    """{path: EpochSeededDataset} at output size `size`."""
    now = data.train_transform(size)
    transforms = {
        "reference": ReferenceCrop(size),
        "full decode": data.Compose([FullDecode(), *now.transforms]),
        "now": now,
        "decode only": DecodeOnly(),
    }
    return {
        name: EpochSeededDataset(data.ImageFolder(root, transforms[name]), SEED) for name in PATHS
    }


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
    factors, decode = [], data.decode

    def recording(image, at_least=None):
        decoded = decode(image, at_least)
        factors.append(decoded[1])
        return decoded

    total = count = reduced_total = reduced_count = 0
    for index in range(len(sets["reference"])):
        reference = sets["reference"][(0, index)][0].int()
        data.decode = recording
        try:
            now = sets["now"][(0, index)][0].int()
        finally:
            data.decode = decode
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
    folder = data.ImageFolder(root)
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


# -- worker memory -------------------------------------------------------------------------


class PathOnlyFolder(data.ImageFolder):
    """ImageFolder that opens no file: a sample is a tiny tensor made from its path."""

    def read(self, path):
        return torch.tensor([len(path)], dtype=torch.int32)


class ListHeldFolder(PathOnlyFolder):
    """The same, with the file list held as before: a Python list of (path, label)."""

    def __init__(self, root):
        super().__init__(root)
        self.samples = [super(ListHeldFolder, self).sample(i) for i in range(len(self))]

    def sample(self, index):
        return self.samples[index]


def make_empty_files(root, count, classes=1000):
    """`count` empty files named as ImageNet's, in `classes` class folders."""
    for index in range(count):
        label = index % classes
        folder = os.path.join(root, f"n{label:08d}")
        if index < classes:
            os.makedirs(folder)
        with open(os.path.join(folder, f"n{label:08d}_{index:06d}.JPEG"), "wb"):
            pass


def memory_of(pid):
    """{rss, pss, uss} in bytes from /proc/PID/smaps_rollup."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                fields[key] = int(value.split()[0]) * 1024
    return {
        "rss": fields["Rss"],
        "pss": fields["Pss"],
        "uss": fields["Private_Clean"] + fields["Private_Dirty"],
    }


def children():
    """The pids of this process's children (the DataLoader workers)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                found.append(int(entry))
    return found


def workers_memory():
    totals = {"rss": 0, "pss": 0, "uss": 0}
    pids = children()
    for pid in pids:
        for key, value in memory_of(pid).items():
            totals[key] += value
    return {**totals, "workers": len(pids)}


def epochs_of(dataset, epochs, workers, batch, init=None):
    """Worker memory once the (persistent) workers have started (before they fetch a
    sample), after the first batch, and after each epoch."""
    context = types.SimpleNamespace(world_size=1, rank=0)
    loader, _ = build_loaders(dataset, dataset, batch, workers, context, SEED)
    loader.worker_init_fn = init
    loader.sampler.set_epoch(0, skip=len(dataset))  # an empty pass starts the workers
    for _ in loader:
        pass
    points = [{"when": "started", **workers_memory()}]
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        for step, _ in enumerate(loader):
            if epoch == 0 and step == 0:
                points.append({"when": "first batch", **workers_memory()})
        points.append({"when": f"epoch {epoch + 1}", **workers_memory()})
    del loader
    return points


VARIANTS = {
    "list of tuples (before)": (ListHeldFolder, None),
    "numpy arrays, workers without gc.freeze()": (PathOnlyFolder, None),
    "numpy arrays + gc.freeze() in each worker (now)": (PathOnlyFolder, freeze_inherited_objects),
}


def memory_variant(name, root, epochs, workers, batch):
    """The points of one variant; run in a fresh interpreter (see memory_section)."""
    folder, init = VARIANTS[name]
    return epochs_of(folder(root), epochs, workers, batch, init)


def memory_section(file_count, epochs=3, workers=2, batch=256):
    """Each variant in a fresh interpreter, as a training run starts: what a worker's
    collector finds to traverse depends on the parent's history."""
    root = tempfile.mkdtemp(prefix="loader-bench-files-")
    try:
        started = time.perf_counter()
        make_empty_files(root, file_count)
        print(
            f"memory: {file_count} files (made in {time.perf_counter() - started:.0f} s), "
            f"{workers} forked workers, batch {batch}, {epochs} epochs; the workers' sum in "
            "MiB: started, first batch, epochs 1..3; growth from the first batch on"
        )
        results = {"files": file_count, "workers": workers, "batch": batch, "epochs": epochs}
        for name in VARIANTS:
            code = (
                f"import json, sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
                "import loader; print(json.dumps(loader.memory_variant(*sys.argv[1:3], "
                "*map(int, sys.argv[3:]))))"
            )
            points = json.loads(
                subprocess.run(
                    [sys.executable, "-c", code, name, root, str(epochs), str(workers), str(batch)],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            )
            first, last = points[1], points[-1]
            growth = {key: (last[key] - first[key]) / first[key] for key in ("rss", "pss", "uss")}
            results[name] = {"points": points, "growth_from_first_batch": growth}
            print(f"  {name}")
            for key in ("pss", "uss", "rss"):
                steps = " ".join(f"{point[key] / 2**20:.1f}" for point in points)
                print(f"    {key.upper()} {steps}: {growth[key]:+.1%}", flush=True)
        return results
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- main ----------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["decode", "memory"], default=None)
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    parser.add_argument("--images", type=int, default=300, help="JPEGs to make (default 300)")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[224, 128, 64],
        help="output sizes (default 224 128 64)",
    )
    parser.add_argument(
        "--files",
        type=int,
        default=200_000,
        help="file list length for the memory section (default 200000)",
    )
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "loader_results.json"))
    args = parser.parse_args()

    multiprocessing.set_start_method("fork")  # what the memory section is about
    torch.set_num_threads(1)  # as in a DataLoader worker
    about = machine()
    results = {
        "machine": about,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_1min_before": load_1min(),
    }
    print(
        f"{about['cpu']} ({about['cpu_family_model']}), {about['cores']} cores; torch "
        f"{about['torch']}, Pillow {about['pillow']}, libjpeg-turbo "
        f"{about['libjpeg_turbo']}; load {results['load_1min_before']:.2f}",
        flush=True,
    )
    if args.only in (None, "decode"):
        cores = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {max(cores)})  # one worker core
        results["decode"] = decode_section(args.sizes, args.images, args.rounds)
        os.sched_setaffinity(0, cores)
    if args.only in (None, "memory"):
        results["memory"] = memory_section(args.files)
    results["load_1min_after"] = load_1min()
    print(f"load {results['load_1min_after']:.2f} at the end")
    with open(args.out, "w") as handle:
        json.dump(results, handle, indent=1)
    print(f"wrote {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
