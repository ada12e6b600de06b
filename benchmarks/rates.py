"""A run's figure, as run.py's groups measure it: the images/s of its steady state, read from
main.py's printed steps or a baseline's `RESULT {json}` line; main.py's arguments for those
runs, and the precision and memory format it picks on this CPU."""

import json
import re
import statistics
import tempfile

from process import PY, environ, run

# Steps before this one are start-up (allocator, oneDNN's primitive caches, the first
# collectives): at 128 px on 2 ranks they ran up to 1.7x the steady step.
STEADY_FROM = 10


def steady_rate(images_per_step, step_s):
    """Images per second at the median step time of steps STEADY_FROM on: a run's
    steady state, robust to the odd step another tenant of the machine slowed down."""
    if len(step_s) <= STEADY_FROM:
        raise RuntimeError(f"{len(step_s)} steps timed; the rate needs more than {STEADY_FROM}")
    return images_per_step / statistics.median(step_s[STEADY_FROM:])


def result_json(stdout):
    """The {json} of a benchmark script's `RESULT {json}` line."""
    line = next(line for line in stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def result_of(stdout):
    """images/s from a baseline's `RESULT {json}` line (images per step, step times)."""
    result = result_json(stdout)
    return {"images_per_sec": steady_rate(result["images_per_step"], result["step_s"])}


PROGRESS = re.compile(r"^Epoch: \[\d+\]\[\s*(\d+)/\d+\]\tTime\s+([\d.]+) .*?\tData\s+([\d.]+) ")


def main_py(prefix, env, args):
    """Run `prefix + args` (main.py or main_variant.py and their arguments, as train_args
    makes them: every step printed) and return the images/s of its steady state from rank
    0's step times (steady_rate), and rank 0's mean data-loading seconds per step there."""
    batch = int(args[args.index("-b") + 1])
    with tempfile.TemporaryDirectory() as out:
        stdout = run(prefix + [*args, "--output-dir", out], env=env)
    steps = [m for m in map(PROGRESS.match, stdout.splitlines()) if m]
    step_s = [float(m.group(2)) for m in steps]
    data = [float(m.group(3)) for m in steps[STEADY_FROM:]]
    return {"images_per_sec": steady_rate(batch, step_s), "data_s": statistics.mean(data)}


def train_args(arch, size, batch, steps, workers, *extra):
    """main.py's arguments for a synthetic-data throughput run on the CPU, every step
    printed (its step time; the print itself is outside it)."""
    return [
        "--dummy",
        "--device",
        "cpu",
        "-a",
        arch,
        "--image-size",
        str(size),
        "-b",
        str(batch),
        "-j",
        str(workers),
        "--epochs",
        "1",
        "--steps-per-epoch",
        str(steps),
        "--val-steps",
        "1",
        "-p",
        "1",
        *extra,
    ]


def baseline_args(arch, size, batch, *extra):
    """The arguments the baselines (plain_ddp.py, overhead_blocks.py, reference_loop.py)
    share: the model, the image size and the batch, then `extra`."""
    return ["--arch", arch, "--image-size", str(size), "--batch-size", str(batch), *extra]


def cpu_defaults():
    """(amp, channels_last) that main.py picks on this CPU, asked through devicekit's API."""
    code = (
        "import devicekit; a = devicekit.amp_enabled(); "
        "print(int(a), int(devicekit.prefers_channels_last(a)))"
    )
    amp, channels_last = run(
        [PY, "-c", code], env=environ(DEVICEKIT_DEVICE="cpu"), timeout=120
    ).split()
    return amp == "1", channels_last == "1"


def precision_flags(amp, channels_last):
    """(main.py flags, baseline flags, words) for one precision and memory format."""
    main_flags = [
        "--amp" if amp else "--no-amp",
        "--channels-last" if channels_last else "--no-channels-last",
    ]
    base_flags = (["--amp"] if amp else []) + (["--channels-last"] if channels_last else [])
    words = ("AMP bf16" if amp else "fp32") + (" + channels_last" if channels_last else " NCHW")
    return main_flags, base_flags, words
