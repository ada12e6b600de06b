"""loader.py's memory section: the DataLoader workers' memory over a long file list.

ImageFolder over a file list of --files empty files (1000 class folders; no image
is opened: the dataset returns a tiny tensor made from the path, as the measurement is
about the list), through the trainer's DataLoader setup (persistent workers, prefetch 4,
EpochSeededSampler) with 2 forked workers for 3 epochs, batch 256. The sum over the
workers of RSS, PSS and USS (private pages) from /proc/PID/smaps_rollup after the first
batch and after each epoch, for the file list as ImageFolder holds it (numpy arrays) and
as a Python list of (path, label) tuples (the way it was held before).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types

import torch
from loader_decode import SEED
from process import ROOT

from trainer.image_folder import ImageFolder
from trainer.loaders import build_loaders, freeze_inherited_objects


class PathOnlyFolder(ImageFolder):
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
                f"import json, sys; sys.path[:0] = [{os.path.dirname(__file__)!r}, {ROOT!r}]; "
                "import loader_memory; print(json.dumps(loader_memory.memory_variant("
                "*sys.argv[1:3], *map(int, sys.argv[3:]))))"
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
