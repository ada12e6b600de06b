"""Benchmarks of main.py and devicekit: one table with honest intervals, and a JSON file.

    python benchmarks/run.py                      # every group (about an hour on 2 cores)
    python benchmarks/run.py --only scaling       # groups: overhead, devices, scaling,
                                                  # startup, collectives, compile, gpu
    python benchmarks/run.py --only overhead --pairs 15 --out /tmp/overhead.json

Method. A run's figure is its steady state: images per step over the median wall time of
its steps from the 10th on (rank 0's, its data loading included; main.py prints every
step, the baselines report theirs), so that start-up and the odd step slowed by another
tenant of the machine do not decide a ratio. A group runs its programs in interleaved
rounds, the order reversed every other round (A B, B A, A B, ... or A B C, C B A, ...), 9
rounds unless --pairs says otherwise. Each row is a ratio of two of those programs: one
ratio per round (its two runs were made side by side), and the row reports the MEDIAN of
the paired ratios with an interval for it that holds whatever the noise's shape (the
sign-test interval): the k-th smallest and k-th largest ratio, k as large as keeps the
confidence at 95 % or more: for 7 pairs the min-max (98.4 %), for 9 the 2nd smallest to
the 2nd largest (96.1 %), for 15 the 4th (96.5 %). Row (a) asks about 2 %, and whole runs
here differ by up to +-8 % from one to the next, so its pairs are blocks of steps
alternating within the same processes (benchmarks/overhead_blocks.py, 3 launches of --pairs
pairs); whole runs are its cross-check. Verdict: "met" when the whole interval is at or
above the goal, "not met" when the whole interval is below it, "inconclusive" otherwise
("too few pairs" under 95 %). Groups run on the first two cores this process may use, so
that figures compare across machines. `compile` (about 15 minutes) runs only when named;
`gpu` only where a CUDA device is present.
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from machine import cpu_and_versions
from stats import CONFIDENCE, median_interval

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
RUN_TIMEOUT_S = 900  # any one run; a stopped run is stopped with its launcher's own SIGTERM path
STOP_GRACE_S = 30
LOG_DIR = os.path.join(tempfile.gettempdir(), "devicekit-bench-logs")  # run_8p.sh's rank logs


# -- running programs ------------------------------------------------------------------


def environ(**extra):
    """This environment without launcher variables or thread settings, plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            (
                "RANK",
                "LOCAL_RANK",
                "WORLD_SIZE",
                "MASTER_",
                "OMP_NUM_THREADS",
                "TORCHELASTIC",
                "LOCAL_WORLD_SIZE",
                "GROUP_",
                "NPROC_PER_NODE",
                "BIND_CORES",
                "SCRIPT",
                "DEVICEKIT_NPROC",
            )
        )
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def stop(proc):
    """SIGTERM to the run's process group (every launcher here stops its ranks on it),
    then SIGKILL to what is left after STOP_GRACE_S."""
    for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run(cmd, env=None, timeout=RUN_TIMEOUT_S):
    """stdout of `cmd` (run in the repository root, in its own session); raises on failure
    or after `timeout` seconds, having stopped every process the command started."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env or environ(),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop(proc)
            raise RuntimeError(f"{' '.join(cmd)} took longer than {timeout} s; stopped") from None
        except BaseException:
            # Ctrl-C, or benchmarks/gpu.sh's time limit (SIGINT): the run has a session of its
            # own, so the signal did not reach it; it stops with this process.
            stop(proc)
            raise
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.read()[-3000:]}")
    return out


def cores(count):
    """The first `count` cores this process may use, as a taskset list."""
    available = sorted(os.sched_getaffinity(0))
    if len(available) < count:
        raise RuntimeError(f"this benchmark needs {count} cores; {len(available)} available")
    return ",".join(map(str, available[:count]))


def pinned_ranks(nproc, script=None):
    """launch/run_8p.sh with BIND_CORES=1 on the first `nproc` cores: each rank pinned to
    one core of its own, with one compute thread. (command prefix, environment)"""
    env = environ(NPROC_PER_NODE=nproc, BIND_CORES=1, LOG_DIR=LOG_DIR)
    if script:
        env["SCRIPT"] = os.path.join(ROOT, script)
    return ["taskset", "-c", cores(nproc), "bash", "launch/run_8p.sh"], env


def one_process():
    """A plain process on the first two cores (two compute threads). (prefix, environment)"""
    return ["taskset", "-c", cores(2), PY], environ()


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


# -- statistics ------------------------------------------------------------------------


def interleaved(programs, pairs):
    """Run each program once per round, in order on even rounds and reversed on odd ones;
    returns {name: [result, ...]}."""
    names = list(programs)
    runs = {name: [] for name in names}
    for round_index in range(pairs):
        for name in names if round_index % 2 == 0 else names[::-1]:
            print(f"  round {round_index + 1}/{pairs}: {name}", file=sys.stderr, flush=True)
            runs[name].append(programs[name]())
    return runs


def verdict(low, high, confidence, goal):
    """'met', 'not met' or 'inconclusive' for a goal ratio `goal` (None: reported only);
    'too few pairs' when the interval's confidence is below CONFIDENCE."""
    if goal is None:
        return "report"
    if confidence < CONFIDENCE:
        return "too few pairs"
    if low >= goal:
        return "met"
    if high < goal:
        return "not met"
    return "inconclusive"


def ratio_row(runs, baseline, candidate, goal, what):
    """A row: the paired ratios candidate / baseline, their median and its interval."""
    base = [r["images_per_sec"] for r in runs[baseline]]
    cand = [r["images_per_sec"] for r in runs[candidate]]
    ratios = [c / b for b, c in zip(base, cand, strict=False)]
    low, high, confidence = median_interval(ratios)
    return {
        "what": what,
        "baseline": baseline,
        "candidate": candidate,
        "baseline_img_s": statistics.median(base),
        "candidate_img_s": statistics.median(cand),
        "ratio": statistics.median(ratios),
        "interval": [low, high],
        "confidence": confidence,
        "pairs": len(ratios),
        "goal": None if goal is None else f">= {goal}",
        "verdict": verdict(low, high, confidence, goal),
        "baseline_runs": base,
        "candidate_runs": cand,
        "ratios": ratios,
    }


# -- the groups ------------------------------------------------------------------------

# Global batch, 32 per rank on 2 ranks. At 64 px and 16 per rank the gradient all-reduce
# (46.8 MB a step, on the rank's one core) took about half of each step, and the runs'
# spread (0.87-1.04) was many times the goal's 2 %.
OVERHEAD = {"size": 128, "batch": 64, "steps": 40}
# Whole runs of one program differ by up to +-8 % here, so the goal is judged on blocks of
# steps alternating within the same processes (benchmarks/overhead_blocks.py): BLOCK_RUNS
# launches of `pairs` pairs each.
BLOCK_RUNS, BLOCK_STEPS = 3, 10


def overhead(pairs):
    """(a) The layer's own cost: main.py's step against a plain DDP loop doing the same work
    at the same precision and memory format (main.py's defaults on this CPU) with the same
    DDP settings. 2 ranks, each pinned to its own core; data made in the training process
    (-j 0) on both sides. Judged on alternating blocks within the same processes; whole
    separate runs are the cross-check."""
    amp, channels_last = cpu_defaults()
    main_flags, base_flags, words = precision_flags(amp, channels_last)
    size, batch, steps = OVERHEAD["size"], OVERHEAD["batch"], OVERHEAD["steps"]
    common = [
        "--arch",
        "resnet18",
        "--image-size",
        str(size),
        "--batch-size",
        str(batch),
        *base_flags,
    ]

    def plain_loop():
        prefix, env = pinned_ranks(2, "benchmarks/plain_ddp.py")
        return result_of(run(prefix + [*common, "--workers", "0", "--steps", str(steps)], env=env))

    def main_run():
        prefix, env = pinned_ranks(2)
        return main_py(prefix, env, train_args("resnet18", size, batch, steps, 0, *main_flags))

    blocks = {"plain DDP loop": [], "main.py": []}
    for launch in range(BLOCK_RUNS):
        print(
            f"  alternating blocks, launch {launch + 1}/{BLOCK_RUNS}", file=sys.stderr, flush=True
        )
        prefix, env = pinned_ranks(2, "benchmarks/overhead_blocks.py")
        result = result_json(
            run(
                prefix + [*common, "--pairs", str(pairs), "--block-steps", str(BLOCK_STEPS)],
                env=env,
            )
        )
        for name, seconds in result["block_s"].items():
            blocks[name] += [{"images_per_sec": result["images_per_block"] / s} for s in seconds]
    runs = interleaved({"plain DDP loop": plain_loop, "main.py": main_run}, pairs)
    config = (
        f"resnet18 {size} px, batch {batch // 2} per rank, 2 ranks on 1 core each, "
        f"data in the training process, {words} on both sides"
    )
    rows = {
        "a. layer overhead": ratio_row(
            blocks,
            "plain DDP loop",
            "main.py",
            0.98,
            f"main.py's step (trainer.loop with devicekit's DDP, AMP and loader) / a "
            f"plain-PyTorch DDP loop with the same DDP settings (gradient_as_bucket_view, no "
            f"buffer broadcast), alternating blocks of {BLOCK_STEPS} steps in the same "
            f"processes, {BLOCK_RUNS} launches: {config}",
        ),
        "a. cross-check: whole runs": ratio_row(
            runs,
            "plain DDP loop",
            "main.py",
            None,
            f"main.py / benchmarks/plain_ddp.py as separate runs, median step of steps "
            f"{STEADY_FROM}-{steps - 1}: {config}",
        ),
    }
    return rows, runs | {"blocks": blocks}


# No goal for (c): on a CPU the host is the device, so the reference's per-step host reads
# cost nothing there; what it measures is the step at equal precision, reported as it is.
DEVICES = {"size": 224, "batch": 32, "steps": 20, "workers": 2}


def devices(pairs):
    """(b) what main.py's per-device defaults add: main.py with them / main.py in fp32 NCHW;
    (c) main.py / the reference example's step at main.py's precision and memory format.
    One process on two cores, 2 loader workers each side."""
    amp, channels_last = cpu_defaults()
    _main_flags, base_flags, words = precision_flags(amp, channels_last)
    size, batch, steps, workers = (DEVICES[k] for k in ("size", "batch", "steps", "workers"))
    config = (
        f"resnet18 {size} px, batch {batch}, 1 process on 2 cores, {workers} loader "
        f"workers, median step of steps {STEADY_FROM}-{steps - 1}"
    )

    def main_run(*flags):
        prefix, env = one_process()
        return main_py(
            prefix, env, ["main.py", *train_args("resnet18", size, batch, steps, workers, *flags)]
        )

    def reference():
        prefix, env = one_process()
        return result_of(
            run(
                prefix
                + [
                    "benchmarks/reference_loop.py",
                    "--arch",
                    "resnet18",
                    "--image-size",
                    str(size),
                    "--batch-size",
                    str(batch),
                    "--workers",
                    str(workers),
                    "--steps",
                    str(steps),
                    *base_flags,
                ],
                env=env,
            )
        )

    programs = {
        f"reference-style loop, {words}": reference,
        f"main.py defaults ({words})": lambda: main_run(),
    }
    if amp or channels_last:
        programs["main.py fp32 NCHW"] = lambda: main_run("--no-amp", "--no-channels-last")
    runs = interleaved(programs, pairs)
    rows = {}
    if amp or channels_last:
        rows["b. per-device defaults"] = ratio_row(
            runs,
            "main.py fp32 NCHW",
            f"main.py defaults ({words})",
            None,
            f"main.py with this CPU's defaults ({words}) / main.py --no-amp --no-channels-last: "
            f"{config}",
        )
    else:
        rows["b. per-device defaults"] = {
            "what": "this CPU has no native bf16: main.py's defaults are fp32 NCHW, so this "
            "row is 1.00 by construction and was not run",
            "ratio": 1.0,
            "interval": [1.0, 1.0],
            "verdict": "report",
        }
    rows["c. vs reference step"] = ratio_row(
        runs,
        f"reference-style loop, {words}",
        f"main.py defaults ({words})",
        None,
        f"main.py / the reference example's step (per-step loss.item() and accuracy to the "
        f"host, float host images) at the same precision ({words}): {config}",
    )
    return rows, runs


SCALING = {"size": 224, "batch": 32, "steps": 22, "workers": 0}  # batch per rank


def scaling(pairs):
    """Weak scaling as users meet it: main.py at the reference's image size with the
    per-rank batch fixed, 1 rank on 1 core against 2 ranks on 1 core each (pinned, one
    compute thread), and main.py with its gradient all-reduce switched off
    (benchmarks/main_variant.py) on the same 2 cores: the ceiling, the same program.
    The data time is read from the printed steps."""
    size, batch, steps, workers = (SCALING[k] for k in ("size", "batch", "steps", "workers"))

    def ranks(nproc, *variant):
        prefix, env = pinned_ranks(nproc, "benchmarks/main_variant.py" if variant else None)
        return main_py(
            prefix, env, [*variant, *train_args("resnet18", size, batch * nproc, steps, workers)]
        )

    runs = interleaved(
        {
            "main.py, 1 rank": lambda: ranks(1),
            "main.py, 2 ranks": lambda: ranks(2),
            "main.py without all-reduce, 2 ranks": lambda: ranks(2, "--bench-no-allreduce"),
        },
        pairs,
    )
    config = (
        f"resnet18 {size} px, batch {batch} per rank, 1 core and 1 compute thread per "
        f"rank, main.py's defaults, data in the training process, median step of steps "
        f"{STEADY_FROM}-{steps - 1}"
    )
    rows = {
        "3. weak scaling": ratio_row(
            runs, "main.py, 1 rank", "main.py, 2 ranks", 1.8, f"main.py 2 ranks / 1 rank: {config}"
        ),
        "3. ceiling: no all-reduce": ratio_row(
            runs,
            "main.py, 1 rank",
            "main.py without all-reduce, 2 ranks",
            None,
            f"main.py with its gradient all-reduce switched off, 2 ranks / main.py 1 rank: "
            f"{config}",
        ),
    }
    return rows | {"3. scaling profile": scaling_profile(runs, batch)}, runs


def scaling_profile(runs, batch):
    """Where a 2-rank step's time goes, in ms (medians over the rounds): data loading,
    compute (the 1-rank step less its data), 'other' (what running two ranks side by side
    costs without any collective: shared caches and memory, the host), and the all-reduce
    (what the collective adds to the step: its CPU time on the rank's core and waits)."""

    def step_ms(name, world):
        return statistics.median(batch * world / r["images_per_sec"] for r in runs[name]) * 1e3

    one = step_ms("main.py, 1 rank", 1)
    two = step_ms("main.py, 2 ranks", 2)
    ceiling = step_ms("main.py without all-reduce, 2 ranks", 2)
    data = statistics.median(r["data_s"] for r in runs["main.py, 2 ranks"]) * 1e3
    data_one = statistics.median(r["data_s"] for r in runs["main.py, 1 rank"]) * 1e3
    return {
        "what": "ms per step of the 2-rank run (rank 0), medians over the rounds",
        "step_ms": two,
        "data_ms": data,
        "compute_ms": one - data_one,
        "other_ms": ceiling - one + data_one - data,
        "allreduce_ms": two - ceiling,
        "one_rank_step_ms": one,
        "no_allreduce_step_ms": ceiling,
    }


def compiled(pairs):
    """main.py --compile / main.py eager (opt-in: about 40 s of compilation per run)."""
    size, batch, workers = DEVICES["size"], DEVICES["batch"], DEVICES["workers"]

    def main_run(*flags):
        prefix, env = one_process()
        return main_py(
            prefix, env, ["main.py", *train_args("resnet18", size, batch, 20, workers, *flags)]
        )

    runs = interleaved(
        {"main.py eager": main_run, "main.py --compile": lambda: main_run("--compile")}, pairs
    )
    return {
        "--compile": ratio_row(
            runs,
            "main.py eager",
            "main.py --compile",
            None,
            f"main.py --compile / eager, resnet18 {size} px, batch {batch}, "
            f"1 process on 2 cores, median step of steps "
            f"{STEADY_FROM}-19",
        )
    }, runs


def gpu(pairs):
    """On a CUDA device: rows (b) and (c) at resnet50, 224 px, batch 256, 8 workers."""
    import torch

    if not torch.cuda.is_available():
        return {"gpu": {"what": "no CUDA device on this machine", "verdict": "skipped"}}, {}
    args = [
        "--dummy",
        "--device",
        "cuda",
        "-a",
        "resnet50",
        "--image-size",
        "224",
        "-b",
        "256",
        "-j",
        "8",
        "--epochs",
        "1",
        "--steps-per-epoch",
        "30",
        "--val-steps",
        "1",
        "-p",
        "1",
    ]
    name = torch.cuda.get_device_name()
    runs = interleaved(
        {
            "reference-style loop, AMP fp16 + channels_last": lambda: result_of(
                run(
                    [
                        PY,
                        "benchmarks/reference_loop.py",
                        "--arch",
                        "resnet50",
                        "--image-size",
                        "224",
                        "--batch-size",
                        "256",
                        "--workers",
                        "8",
                        "--steps",
                        "30",
                        "--device",
                        "cuda",
                        "--amp",
                        "--channels-last",
                    ]
                )
            ),
            "main.py --amp --channels-last": lambda: main_py(
                [PY], environ(), ["main.py", *args, "--amp", "--channels-last"]
            ),
            "main.py fp32 NCHW": lambda: main_py(
                [PY], environ(), ["main.py", *args, "--no-amp", "--no-channels-last"]
            ),
        },
        pairs,
    )
    return {
        "gpu b. AMP + channels_last": ratio_row(
            runs,
            "main.py fp32 NCHW",
            "main.py --amp --channels-last",
            None,
            f"main.py AMP + channels_last / fp32 NCHW, resnet50 224 px, batch 256, {name}",
        ),
        "gpu c. vs reference step": ratio_row(
            runs,
            "reference-style loop, AMP fp16 + channels_last",
            "main.py --amp --channels-last",
            None,
            f"main.py / reference-style step, both AMP + channels_last, resnet50 224 px, "
            f"batch 256, {name}",
        ),
    }, runs


def seconds_to_first_step(cmd, env, timeout=300):
    """Seconds from starting `cmd` to the first progress line of rank 0; the run is then
    stopped (SIGTERM to its process group: every launcher stops its ranks on it)."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.Popen(
            cmd + ["--output-dir", out],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        watchdog = threading.Timer(timeout, stop, [proc])
        watchdog.start()
        try:
            for line in proc.stdout:
                if line.startswith("Epoch: [0]["):
                    return time.perf_counter() - start
        finally:
            watchdog.cancel()
            stop(proc)
    raise RuntimeError(f"{' '.join(cmd)} printed no progress line within {timeout} s")


def startup(pairs):
    """Seconds from the command to rank 0's first training step, 2 ranks, per launcher:
    median and min-max over `pairs` runs of each, interleaved."""
    args = ["main.py", *train_args("tinynet", 32, 16, 1000, 0, "--num-classes", "10")]
    launchers = {
        "torchrun": lambda: [
            PY,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            *args,
        ],
        "torch.distributed.launch": lambda: [
            PY,
            "-m",
            "torch.distributed.launch",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            *args,
        ],
        "--multiprocessing-distributed (spawn)": lambda: [
            PY,
            *args,
            "--multiprocessing-distributed",
            "--nproc-per-node",
            "2",
        ],
        "launch/run_8p.sh": lambda: ["bash", "launch/run_8p.sh", *args[1:]],
    }
    programs = {
        name: (
            lambda cmd=cmd: {
                "seconds": seconds_to_first_step(cmd(), environ(NPROC_PER_NODE=2, LOG_DIR=LOG_DIR))
            }
        )
        for name, cmd in launchers.items()
    }
    runs = interleaved(programs, pairs)
    rows = {
        name: {
            "median_s": statistics.median(r["seconds"] for r in results),
            "interval": [min(r["seconds"] for r in results), max(r["seconds"] for r in results)],
            "runs": [r["seconds"] for r in results],
        }
        for name, results in runs.items()
    }
    return {"start-up": rows}, {}


def free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def collectives(_pairs):
    """gloo all_reduce bus bandwidth between 2 ranks on this host (devicekit check)."""
    report = json.loads(
        run(
            [PY, "-m", "devicekit", "check", "--json", "--device", "cpu", "--nproc-per-node", "2"],
            timeout=300,
        )
    )
    return {"collectives (gloo)": report["bandwidth"]}, {}


GROUPS = {
    "overhead": overhead,
    "devices": devices,
    "scaling": scaling,
    "startup": startup,
    "collectives": collectives,
    "compile": compiled,
    "gpu": gpu,
}
DEFAULT_GROUPS = ("overhead", "devices", "scaling", "startup", "collectives", "gpu")


# -- the machine and the table -----------------------------------------------------------


def machine():
    """What the figures were measured on."""
    import torch

    amp, channels_last = cpu_defaults()
    return cpu_and_versions() | {
        "main_py_cpu_defaults": precision_flags(amp, channels_last)[2],
        "accelerator": str(torch.accelerator.current_accelerator()),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average_at_start": os.getloadavg()[0],
    }


def describe_machine(m):
    flags = ", ".join(
        f"{flag} {'yes' if present else 'no'}" for flag, present in m["flags"].items()
    )
    return (
        f"machine: {m['cpu']}, {m['cores']} cores ({flags}); torch {m['torch']} "
        f"({m['torch_cpu_capability']}), Python {m['python']}; main.py's CPU defaults here: "
        f"{m['main_py_cpu_defaults']}; accelerator {m['accelerator']}; {m['when']}, "
        f"1-minute load average at start {m['load_average_at_start']:.2f}"
    )


def format_table(results):
    lines = [describe_machine(results["machine"])]
    rows = {
        name: row
        for name, row in results["rows"].items()
        if isinstance(row, dict) and "verdict" in row
    }  # the other tables follow
    if rows:
        lines += [
            "",
            "Ratio: median of the paired ratios; interval: the sign-test interval for "
            "that median (distribution-free; its confidence in brackets).",
            "",
            "| row | baseline img/s | devicekit img/s | ratio (median) | interval "
            "| goal | verdict |",
            "|---|---|---|---|---|---|---|",
        ]
    for name, row in rows.items():
        if "baseline_runs" in row:
            lines.append(
                f"| {name}: {row['what']} | {row['baseline_img_s']:.1f} | "
                f"{row['candidate_img_s']:.1f} | {row['ratio']:.3f} | {row['interval'][0]:.3f}-"
                f"{row['interval'][1]:.3f} ({row['pairs']} pairs, {row['confidence']:.1%}) | "
                f"{row['goal'] or '-'} | {row['verdict']} |"
            )
        else:
            lines.append(
                f"| {name}: {row['what']} | - | - | {row.get('ratio', '-')} | - | - | "
                f"{row['verdict']} |"
            )
    profile = results["rows"].get("3. scaling profile")
    if profile:
        lines += [
            "",
            "| scaling profile, ms per 2-rank step | step | data | compute | other "
            "(2 ranks side by side) | all-reduce |",
            "|---|---|---|---|---|---|",
            f"| main.py, 2 ranks on 1 core each | {profile['step_ms']:.0f} | "
            f"{profile['data_ms']:.0f} | {profile['compute_ms']:.0f} | "
            f"{profile['other_ms']:.0f} | {profile['allreduce_ms']:.0f} |",
        ]
    launchers = results["rows"].get("start-up")
    if launchers:
        lines += [
            "",
            "| start-up, 2 ranks: command to first step | median s | min-max s |",
            "|---|---|---|",
        ]
        lines += [
            f"| {name} | {r['median_s']:.1f} | {r['interval'][0]:.1f}-{r['interval'][1]:.1f} |"
            for name, r in launchers.items()
        ]
    bandwidth = results["rows"].get("collectives (gloo)")
    if bandwidth:
        lines += ["", "| gloo all_reduce, 2 ranks, bytes | busbw GB/s |", "|---|---|"]
        lines += [f"| {r['bytes']} | {r['busbw_gbps']:.3f} |" for r in bandwidth]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=9, help="interleaved rounds per group")
    parser.add_argument(
        "--only", default=None, help=f"comma-separated groups, of: {', '.join(GROUPS)}"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="JSON file (default: benchmarks/results.json for a full run; none for --only)",
    )
    args = parser.parse_args()
    names = DEFAULT_GROUPS if args.only is None else args.only.split(",")
    unknown = [name for name in names if name not in GROUPS]
    if unknown or args.pairs < 1:
        parser.error(
            f"unknown group(s) {unknown}; choose from {list(GROUPS)}"
            if unknown
            else "--pairs must be at least 1"
        )
    out = args.out or (
        os.path.join(ROOT, "benchmarks", "results.json") if args.only is None else None
    )
    results = {"machine": machine(), "rows": {}, "runs": {}, "seconds": {}}
    print(describe_machine(results["machine"]), file=sys.stderr, flush=True)
    for name in names:
        print(
            f"running {name} (load average {os.getloadavg()[0]:.2f}) ...",
            file=sys.stderr,
            flush=True,
        )
        started = time.perf_counter()
        rows, runs = GROUPS[name](args.pairs)
        results["rows"].update(rows)
        results["runs"][name] = runs
        results["seconds"][name] = time.perf_counter() - started
        results.setdefault("measured_utc", {})[name] = time.strftime(
            "%Y-%m-%d %H:%M", time.gmtime()
        )
        print(json.dumps(rows, default=str)[:2000], file=sys.stderr, flush=True)
        if out:  # after every group: a late failure loses nothing
            with open(out, "w") as handle:
                json.dump(results, handle, indent=2)
    print(format_table(results))
    if out:
        print(f"\nJSON: {out}")


if __name__ == "__main__":
    main()
