"""The process harness of the fault tests (test_faults.py, and the two-node tests): the shared
harness of processes.py plus a marker that finds every process of a test, wherever it went.

    with Tracked(tmp_path) as run:
        proc = run.start("launcher", argv, run.env(fault, NPROC_PER_NODE=2))
        result, exited_at = run.wait("launcher", 90)
        gone_s = run.wait_all_gone(GONE_BOUND_S)

How it differs from processes.Processes, on which it is built (starting, output files,
reading, killing the children's groups and their noted descendants at the end are
Processes'):

- Every process it starts carries FAULT_TEST_MARKER=<unique> in its environment, and so does
  everything they start (launchers' workers, spawned ranks, DataLoader workers). A process
  of the test is one with the marker in its environment or tmp_path on its command line:
  found at any moment from /proc (`alive()`), also when its parent died and it was
  reparented before Processes could note it as a descendant (a killed rank's loader
  workers, a process that escaped into a session of its own).
- `wait_all_gone(bound)` polls until none is left and says how long it took: the fault
  tests' measure of "every rank was stopped".
- When the block ends, a process of the test still alive (one that had to be *killed*,
  instead of ending on its own) fails the test, unless it failed already; so does one that
  survived SIGKILL.
- Processes are named: `wait(name, timeout)`, `read(name)` (a Finished that prints itself
  with its name, for assertion messages), `proc(name)`.
- `env(fault, **extra)`: launchers.child_env() plus the marker, and with `fault` the fault
  injector of tests/fault_injection first on PYTHONPATH with its FAULT_* settings.
- `start_baseline(name, argv, env)`: beside a rank whose wait is bounded, the same command as
  a rank out of range, which stops where setup begins: its time is what starting Python,
  torch and the trainer costs under the machine's load of the moment, so a bound on the
  wait is asserted as `result.seconds - baseline.seconds`, not on a whole run that a loaded
  CI worker can make three times as long.
"""

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from support import processes
from support.launchers import child_env
from support.paths import TESTS

FAULT_DIR = TESTS / "fault_injection"
GONE_BOUND_S = 30  # from a launcher's exit until no process of its run is left
MARKER_VARIABLE = "FAULT_TEST_MARKER"


def _proc_read(pid, name):
    with open(f"/proc/{pid}/{name}", "rb") as handle:
        return handle.read()


def marked_processes(marker, paths=()):
    """{pid: command line} of live processes whose environment holds `marker` or whose
    command line names one of `paths` (zombies excluded: they hold nothing)."""
    found = {}
    needles = [str(p).encode() for p in paths]
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            state = _proc_read(entry, "stat").rsplit(b")", 1)[1].split()[0]
            if state in (b"Z", b"X"):
                continue
            cmdline = _proc_read(entry, "cmdline")
            environ = _proc_read(entry, "environ")
        except OSError:
            continue  # gone meanwhile (or not ours to read)
        if marker.encode() in environ or any(n in cmdline for n in needles):
            found[int(entry)] = cmdline.replace(b"\0", b" ").decode(errors="replace")[:200]
    return found


def marked_env(marker, fault=None, **extra):
    """launchers.child_env() (no launcher, run_8p.sh or fault variable, the repository
    importable, cpu, one thread per process) without GLOO_SOCKET_IFNAME (what an earlier
    two-node run may have left), the fault injector first on PYTHONPATH with FAULT_<KEY>
    for each item of `fault` when it is given, `marker`, plus `extra`."""
    env = child_env(GLOO_SOCKET_IFNAME=None)
    if fault is not None:
        path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join([str(FAULT_DIR), *path])
        env.update({f"FAULT_{k.upper()}": str(v) for k, v in fault.items()})
    env[MARKER_VARIABLE] = marker
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Finished(processes.Finished):
    """processes.Finished with the process's name; str() gives both outputs' ends."""

    def __init__(self, name, result):
        super().__init__(result.returncode, result.stdout, result.stderr, result.seconds)
        self.name = name

    def __str__(self):
        return (
            f"--- {self.name}: exit {self.returncode} after {self.seconds:.1f} s\n"
            f"[stdout]\n{self.stdout[-6000:]}\n[stderr]\n{self.stderr[-6000:]}"
        )


def poll_until(predicate, timeout, what, on_timeout=lambda: ""):
    """Poll `predicate` every 50 ms until it returns a true value; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout:.0f} s\n{on_timeout()}")
        time.sleep(0.05)


class Tracked(processes.Processes):
    """The processes of one test (see the module docstring): each starts in its own session
    with the test's marker in its environment and its output in files under tmp_path/subdir.
    On exit every process of the test is killed; one that needed killing fails the test
    (unless it failed already)."""

    def __init__(self, tmp_path, subdir="procs"):
        self.tmp_path = Path(tmp_path)  # named on the command lines of the test's processes
        super().__init__(self.tmp_path / subdir)
        self.marker = f"dkfault-{uuid.uuid4().hex}"
        self._named = {}  # name -> Popen

    def env(self, fault=None, **extra):
        return marked_env(self.marker, fault, **extra)

    def start(self, name, argv, env, cwd=processes.REPO):
        proc = super().start(name, [str(a) for a in argv], env, cwd)
        self._named[name] = proc
        return proc

    def start_baseline(self, name, argv, env):
        """Start `name`-baseline: `argv` with the rank one past the last (RANK=WORLD_SIZE, or
        RANK_ID=RANK_SIZE), refused with exit 2 once Python, torch and devicekit are loaded.
        `baseline(name)` waits for it and returns it: call it before waiting for `name`,
        since a Finished's seconds run until it is read."""
        env = dict(env)
        for rank, size in (("RANK", "WORLD_SIZE"), ("RANK_ID", "RANK_SIZE")):
            if size in env:
                env[rank] = env[size]
        return self.start(f"{name}-baseline", argv, env)

    def baseline(self, name, timeout=60):
        """The Finished of `name`-baseline, checked to have been refused as out of range."""
        result, _ = self.wait(f"{name}-baseline", timeout)
        assert result.returncode == 2 and "is not below" in result.stderr, result
        return result

    def proc(self, name):
        return self._named[name]

    def read(self, name):
        return Finished(name, super().read(self._named[name]))

    def wait(self, name, timeout):
        """Wait at most `timeout` s for `name` to exit; return (Finished, time.time() at exit)."""
        try:
            self._named[name].wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} did not exit within {timeout:.0f} s\n{self.read(name)}")
        return self.read(name), time.time()

    def alive(self):
        return marked_processes(self.marker, [self.tmp_path])

    def wait_all_gone(self, timeout):
        """Poll until no process of this test is alive; return the seconds it took."""
        started = time.monotonic()
        while True:
            left = self.alive()
            if not left:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                listing = "\n".join(f"  {pid}: {cmd}" for pid, cmd in sorted(left.items()))
                pytest.fail(
                    f"processes of the run still alive {timeout} s after it ended:\n{listing}"
                )
            time.sleep(0.05)

    def __exit__(self, exc_type, exc, tb):
        survivors = self.alive()
        # The children's groups and their noted descendants (Processes), then whatever
        # carries the marker: launchers put workers in sessions of their own (torchrun,
        # run_8p's setsid), and a process reparented early was never noted.
        super().__exit__(exc_type, exc, tb)
        for _ in range(3):
            for pid in self.alive():
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        deadline = time.monotonic() + 10
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        unkillable = self.alive()
        if exc_type is None:
            assert not unkillable, f"processes survived SIGKILL: {unkillable}"
            assert not survivors, f"processes had to be killed after the test: {survivors}"
        return False
