"""The training data loader on a CPU: decode throughput per worker core, and worker memory.

    python benchmarks/loader.py                  # both sections (about 3 minutes on 2 cores)
    python benchmarks/loader.py --only decode --rounds 9
    python benchmarks/loader.py --only memory --files 200000

decode: the training pipeline's images per second of one worker core, on JPEGs made here,
against decoding the whole image first (benchmarks/loader_decode.py says how).
memory: the DataLoader workers' memory over a long file list, as ImageFolder holds it and
as a list of tuples (benchmarks/loader_memory.py says how).

Results go to benchmarks/loader_results.json (--out).
"""

import argparse
import json
import multiprocessing
import os
import sys
import time

import numpy as np
import PIL
import torch
from PIL import features

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from loader_decode import decode_section  # noqa: E402
from loader_memory import memory_section  # noqa: E402
from machine import cpu_and_versions  # noqa: E402

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
