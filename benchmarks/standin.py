"""The stand-in npu device (DEVICEKIT_SIMULATE=npu): its build, its start-up, its per-step cost.

    python benchmarks/standin.py                  # about 5 minutes on 2 idle cores
    python benchmarks/standin.py --builds 1 --startup-pairs 15 --step-pairs 30 --out /tmp/s.json

Rows, all in one run, on the first two cores this process may use (pinned here, as run.py
pins its programs; every subprocess inherits it), one table printed and a JSON file written:

1. build: wall time of `python -c "import devicekit"` with DEVICEKIT_SIMULATE=npu into a
   fresh, empty DEVICEKIT_CACHE (the C++ extension compiled), --builds times. Reported only.
2. start-up: the same command with the cache warm, minus the same command without
   DEVICEKIT_SIMULATE, paired and interleaved (order reversed every other pair). The row is
   the median of the paired differences with its sign-test interval (benchmarks/stats.py);
   goal: well under a second, "met" when the interval's upper end is below 1.0 s.
2b. simulate: `python -m devicekit simulate -- python -c "import torch, torch_npu"` minus
   `python -c "import torch"`, paired as row 2: what a command pays once (devicekit
   simulate's own interpreter, which imports torch, then its command's first process).
   Reported only.
2c. simulate, per process: `python -c "import torch, torch_npu"` in the environment that
   command gives its processes (torch's autoload activating the stand-in) minus `python -c
   "import torch"`: what each Python process of the command pays (each torchrun rank, each
   DataLoader worker that imports torch anew). Same goal.
3. per step: ResNet-18 (1000 classes), batch 16, 64 px, forward + backward + SGD step (the
   batch copied to the device each step), in this one process with the stand-in active:
   one copy of the model on `npu`, one on `cpu`, same initial weights, same batches, the
   same torch.set_num_threads. After 5 warm-up steps each, blocks of --block-steps steps
   alternate, the order reversed every other pair; a block's figure is the median of its
   step times, a pair's ratio npu / cpu. The row is the median ratio with its sign-test
   interval; goal <= 1.15: "met" when the whole interval is at or below it, "not met" when
   the whole interval is above it, "inconclusive" otherwise ("too few pairs" under 95 %).
   fp32 NCHW, SGD as torch defaults it: the for-loop update on cpu, the foreach one on npu
   (torch picks foreach for a PrivateUse1 device). Reported only: the same in bf16,
   torch.autocast(device, bfloat16) on both sides (the npu side takes the CUDA autocast op
   lists, the cpu side the CPU's), and fp32 with SGD(foreach=True) on both sides, which
   leaves the stand-in's own dispatch cost. The interval holds within one run only: with
   another tenant loading the machine, whole runs' medians for 3a ranged 1.03-1.18, each
   with a tight interval; judge the goal on several runs on a quiet machine.

Never a timed assertion in a test: these figures are measured here and reported.
"""

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time

import torch
from machine import cpu_and_versions
from process import PY, ROOT, cores, environ, run
from stats import CONFIDENCE, alternate_blocks, median_interval, step_timer

IMPORT = [PY, "-c", "import devicekit"]
# What `devicekit simulate` puts first on PYTHONPATH (devicekit.simulate.SITE).
SITE = os.path.join(ROOT, "devicekit", "simulate", "site")
STARTUP_GOAL_S = 1.0
STEP_GOAL = 1.15
BATCH, SIZE, CLASSES, WARMUP_STEPS = 16, 64, 1000, 5
STEP_ROWS = {
    "3a. step fp32": (False, None),
    "3b. step bf16": (True, None),  # (amp, foreach)
    "3c. step fp32, foreach": (False, True),
}


def seconds(command, env):
    """Wall seconds of `command` run to its end with environment `env`."""
    start = time.perf_counter()
    run(command, env=env, timeout=600)
    return time.perf_counter() - start


def import_seconds(cache, simulate):
    """Wall seconds of `python -c "import devicekit"`, with or without the stand-in."""
    env = environ(DEVICEKIT_CACHE=cache)
    env.pop("DEVICEKIT_SIMULATE", None)
    if simulate:
        env["DEVICEKIT_SIMULATE"] = "npu"
    return seconds(IMPORT, env)


def builds(scratch, repeats):
    """Row 1: cold builds, each into an empty cache; returns (row, a warm cache)."""
    seconds = []
    for index in range(repeats):
        cache = os.path.join(scratch, f"cold-{index}")
        print(f"  build {index + 1}/{repeats}", file=sys.stderr, flush=True)
        seconds.append(import_seconds(cache, simulate=True))
        if not any(name.startswith("npu-standin-") for name in os.listdir(cache)):
            raise RuntimeError(f"no npu-standin build in {cache}")
    row = {
        "what": "cold build: import devicekit with DEVICEKIT_SIMULATE=npu, empty cache",
        "median_s": statistics.median(seconds),
        "runs_s": seconds,
        "verdict": "report",
    }
    return row, cache


def paired(with_run, without_run, pairs):
    """Paired, interleaved wall seconds of two callables (order reversed every other pair):
    the median difference with its sign-test interval, and both sides' figures."""
    with_s, without_s = [], []
    for index in range(pairs):
        for first in (True, False) if index % 2 == 0 else (False, True):
            (with_s if first else without_s).append(with_run() if first else without_run())
    differences = [a - b for a, b in zip(with_s, without_s, strict=False)]
    low, high, confidence = median_interval(differences)
    return {
        "median_s": statistics.median(differences),
        "interval_s": [low, high],
        "confidence": confidence,
        "pairs": pairs,
        "with_median_s": statistics.median(with_s),
        "without_median_s": statistics.median(without_s),
        "goal": f"upper end < {STARTUP_GOAL_S} s",
        "verdict": at_most(low, high, confidence, STARTUP_GOAL_S, strict=True),
        "differences_s": differences,
        "with_s": with_s,
        "without_s": without_s,
    }


def startup(cache, pairs):
    """Row 2: warm start-up with the stand-in minus without, paired and interleaved."""
    return {
        "what": "warm start-up: import devicekit with DEVICEKIT_SIMULATE=npu minus without"
    } | paired(lambda: import_seconds(cache, True), lambda: import_seconds(cache, False), pairs)


def simulate_startup(cache, pairs):
    """Rows 2b and 2c: `devicekit simulate` once per command (its own interpreter, then the
    command's first Python process), and what each Python process of the command pays
    (torch's autoload of the stand-in, `import torch_npu`), each minus `import torch`."""
    env = environ(DEVICEKIT_CACHE=cache)
    env.pop("DEVICEKIT_SIMULATE", None)
    plain = [PY, "-c", "import torch"]
    ascend = [PY, "-c", "import torch, torch_npu"]
    command = [PY, "-m", "devicekit", "simulate", "--", *ascend]
    # The environment `devicekit simulate` gives its command's processes.
    child = env | {
        "DEVICEKIT_SIMULATE": "npu",
        "DEVICEKIT_SIMULATE_DEVICES": "2",
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "1",
        "PYTHONPATH": os.pathsep.join([SITE, ROOT]),
    }
    without = lambda: seconds(plain, env)  # noqa: E731
    # A command pays for one more interpreter, which imports torch (devicekit does): reported.
    per_command = paired(lambda: seconds(command, env), without, pairs) | {
        "goal": "-",
        "verdict": "report",
    }
    per_process = paired(lambda: seconds(ascend, child), without, pairs)
    return (
        {
            "what": "devicekit simulate -- python -c 'import torch, torch_npu' minus "
            "python -c 'import torch'"
        }
        | per_command,
        {
            "what": "one process of the command: import torch, torch_npu (autoloaded "
            "stand-in) minus import torch"
        }
        | per_process,
    )


def at_most(low, high, confidence, goal, strict=False):
    """stats.verdict()'s words for a goal the figure must not exceed: "met" when the whole
    interval is at or below it (below it when `strict`), "not met" when it is all above."""
    if confidence < CONFIDENCE:
        return "too few pairs"
    if high < goal or (high == goal and not strict):
        return "met"
    if low > goal or (low == goal and strict):
        return "not met"
    return "inconclusive"


def step_ratio(pairs, block_steps, amp, foreach=None):
    """Row 3: npu / cpu step time from blocks alternating in this process."""
    import devicekit  # noqa: F401  (DEVICEKIT_SIMULATE=npu is set: the npu device exists)
    import models

    torch.manual_seed(0)
    model = models.create("resnet18", num_classes=CLASSES)
    batches = [
        (torch.randn(BATCH, 3, SIZE, SIZE), torch.randint(0, CLASSES, (BATCH,))) for _ in range(4)
    ]

    def side(device):
        net = copy.deepcopy(model).to(device)
        optimizer = torch.optim.SGD(
            net.parameters(), 0.01, momentum=0.9, weight_decay=1e-4, foreach=foreach
        )
        criterion = torch.nn.CrossEntropyLoss()

        def step(images, labels):
            images, labels = images.to(device), labels.to(device)
            with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
                loss = criterion(net(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        return step_timer(step, batches)

    npu_s, cpu_s, ratios = alternate_blocks(
        side("npu"), side("cpu"), pairs, block_steps, WARMUP_STEPS
    )
    seconds = {"npu": npu_s, "cpu": cpu_s}
    low, high, confidence = median_interval(ratios)
    words = "AMP bf16 (torch.autocast on both sides)" if amp else "fp32"
    words += ", SGD foreach on both sides" if foreach else ", SGD as torch defaults it"
    judged = not amp and foreach is None
    return {
        "what": f"npu / cpu step time: resnet18 {SIZE} px, batch {BATCH}, {words}, NCHW, "
        f"{torch.get_num_threads()} threads, blocks of {block_steps} steps",
        "cpu_ms": 1e3 * statistics.median(seconds["cpu"]),
        "npu_ms": 1e3 * statistics.median(seconds["npu"]),
        "ratio": statistics.median(ratios),
        "interval": [low, high],
        "confidence": confidence,
        "pairs": pairs,
        "goal": f"<= {STEP_GOAL}" if judged else None,
        "verdict": at_most(low, high, confidence, STEP_GOAL) if judged else "report",
        "cpu_s": seconds["cpu"],
        "npu_s": seconds["npu"],
        "ratios": ratios,
    }


def format_table(results):
    m = results["machine"]
    lines = [
        f"machine: {m['cpu']} ({m['cpu_family_model']}), {m['cores']} cores used, torch "
        f"{m['torch']} ({m['torch_cpu_capability']}), Python {m['python']}; "
        f"{m['when']}; 1-minute load average at start {m['load_average_at_start']:.2f}, "
        f"after each row "
        + ", ".join(f"{row['load_average_after']:.2f}" for row in results["rows"].values()),
        "",
        "Median of the paired figures; interval: its sign-test interval (confidence in brackets).",
        "",
        "| row | cpu / without | npu / with | median | interval | goal | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    build = results["rows"]["1. build"]
    lines.append(
        f"| 1. {build['what']} | - | - | {build['median_s']:.1f} s | runs "
        f"{', '.join(f'{s:.1f}' for s in build['runs_s'])} s | - | report |"
    )
    for name in ("2. start-up", "2b. simulate", "2c. simulate, per process"):
        start = results["rows"][name]
        lines.append(
            f"| {name.split('.')[0]}. {start['what']} | {start['without_median_s']:.3f} s | "
            f"{start['with_median_s']:.3f} s | {start['median_s']:+.3f} s | "
            f"{start['interval_s'][0]:+.3f} to {start['interval_s'][1]:+.3f} s "
            f"({start['pairs']} pairs, {start['confidence']:.1%}) | {start['goal']} | "
            f"{start['verdict']} |"
        )
    for name in STEP_ROWS:
        row = results["rows"][name]
        lines.append(
            f"| {name[:2]}. {row['what']} | {row['cpu_ms']:.1f} ms | "
            f"{row['npu_ms']:.1f} ms | {row['ratio']:.3f} | {row['interval'][0]:.3f}-"
            f"{row['interval'][1]:.3f} ({row['pairs']} pairs, "
            f"{row['confidence']:.1%}) | {row['goal'] or '-'} | {row['verdict']} |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--builds", type=int, default=2, choices=(1, 2, 3), help="cold builds (about 20 s each)"
    )
    parser.add_argument("--startup-pairs", type=int, default=25)
    parser.add_argument("--step-pairs", type=int, default=60)
    parser.add_argument("--block-steps", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "standin_results.json"))
    args = parser.parse_args()
    os.sched_setaffinity(0, [int(core) for core in cores(2).split(",")])
    torch.set_num_threads(2)
    results = {
        "machine": cpu_and_versions()
        | {
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_average_at_start": os.getloadavg()[0],
        },
        "rows": {},
    }

    def record(name, row):  # the JSON after every row: a late failure loses nothing
        results["rows"][name] = row | {"load_average_after": os.getloadavg()[0]}
        with open(args.out, "w") as handle:
            json.dump(results, handle, indent=2)

    with tempfile.TemporaryDirectory(prefix="devicekit-standin-bench.") as scratch:
        print("1. cold builds ...", file=sys.stderr, flush=True)
        row, cache = builds(scratch, args.builds)
        record("1. build", row)
        print("2. start-up pairs ...", file=sys.stderr, flush=True)
        record("2. start-up", startup(cache, args.startup_pairs))
        print("2b/2c. devicekit simulate start-up pairs ...", file=sys.stderr, flush=True)
        per_command, per_process = simulate_startup(cache, args.startup_pairs)
        record("2b. simulate", per_command)
        record("2c. simulate, per process", per_process)
        os.environ.update(DEVICEKIT_SIMULATE="npu", DEVICEKIT_CACHE=cache)
        sys.path.insert(0, ROOT)
        for name, (amp, foreach) in STEP_ROWS.items():
            print(f"{name} pairs ...", file=sys.stderr, flush=True)
            record(name, step_ratio(args.step_pairs, args.block_steps, amp, foreach))
    print(format_table(results))
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()
