"""run.py's group `startup`: seconds from the command to rank 0's first training step, 2
ranks, per launcher."""

import statistics
import subprocess
import tempfile
import threading
import time

from process import LOG_DIR, PY, ROOT, environ, stop
from rates import train_args
from stats import interleaved


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


def measure(pairs):
    """Seconds from the command to rank 0's first training step, 2 ranks, per launcher:
    median and min-max over `pairs` runs of each, interleaved."""
    # Imported here, once run.py has imported torch: devicekit imported first would switch
    # torch's device backend autoload off in this environment, which every run inherits.
    from devicekit.environments import find_free_port

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
            str(find_free_port()),
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
