"""Running the programs a benchmark compares: each in its own session with a clean
environment, stopped whole on a timeout or Ctrl-C, on the first cores this process may use.
Shared by run.py's groups, preflight.py, sharding.py and standin.py."""

import os
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
RUN_TIMEOUT_S = 900  # any one run; a stopped run is stopped with its launcher's own SIGTERM path
STOP_GRACE_S = 30
LOG_DIR = os.path.join(tempfile.gettempdir(), "devicekit-bench-logs")  # run_8p.sh's rank logs


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
