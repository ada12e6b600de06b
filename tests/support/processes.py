"""Starting real processes from a test without leaving any behind (launchers.py builds the
command lines of a run, this module starts and waits for them).

Each child runs in its own session with its output in files (no pipe can fill up), and
every wait has a timeout. While waiting, every descendant of the children is noted (pid and
start time from /proc): torchrun's workers and run_8p.sh's ranks start sessions of their
own, so killing a child's process group alone could leave them running. When the `with`
block ends, the children's groups and every noted descendant are killed.
"""

import contextlib
import os
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _process_table():
    """{pid: (ppid, start time)} for every process, read from /proc (zombies left out)."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                text = handle.read().decode(errors="replace")
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
        if fields[0] in ("Z", "X"):
            continue
        table[int(name)] = (int(fields[1]), fields[19])
    return table


def _wait_gone(pid, started, timeout):
    """Wait (at most `timeout` s) for the process `pid` that started at `started` to end;
    whether it did. A pidfd becomes readable when its process ends, child of ours or not."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        entry = _process_table().get(pid)
        if entry is None or entry[1] != started:  # gone already (or the pid was reused)
            return True
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready)
    finally:
        os.close(fd)


@contextlib.contextmanager
def taken_port():
    """A loopback port that something else listens on (and never answers), for the block."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]
    finally:
        holder.close()


def output_file(path):
    """A fresh file for a child's output, opened in append mode. The child shares this open
    file with the test: with O_APPEND its writes land at the end whatever position the test
    reads from (a plain "w+" file shares one offset, so the test's seek(0) made the child
    overwrite the start of its own output)."""
    open(path, "w").close()
    return open(path, "a+")


class Finished:
    """What one process left behind."""

    def __init__(self, returncode, stdout, stderr, seconds):
        self.returncode, self.stdout, self.stderr, self.seconds = (
            returncode,
            stdout,
            stderr,
            seconds,
        )

    def stderr_lines(self):
        return [line for line in self.stderr.splitlines() if line.strip()]


def describe(results):
    """Every result's exit code and output, for an assertion message."""
    return "\n".join(
        f"--- process {i}: exit {r.returncode}\n[stdout]\n{r.stdout}\n[stderr]\n{r.stderr}"
        for i, r in enumerate(results)
    )


class Processes:
    """The processes one test starts (a context manager; see the module docstring)."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._started = []  # (Popen, stdout file, stderr file, start time)
        self._seen = {}  # pid -> (start time, pid of the child it descends from)

    def __enter__(self):
        return self

    def start(self, name, argv, env, cwd=REPO):
        """Start `argv` in `cwd` (the repository unless told), in its own session, output to
        `<name>.stdout` / `<name>.stderr`."""
        out, err = (
            output_file(self.directory / f"{name}.{stream}") for stream in ("stdout", "stderr")
        )
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        self._started.append((proc, out, err, time.monotonic()))
        self._note_descendants()
        return proc

    def _note_descendants(self):
        table = _process_table()
        children = {}
        for pid, (ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        for proc, *_ in self._started:
            stack = [proc.pid]
            while stack:
                for child in children.get(stack.pop(), []):
                    if child not in self._seen:
                        self._seen[child] = (table[child][1], proc.pid)
                        stack.append(child)

    def read(self, proc):
        """What `proc` has written so far (and its exit code, once it has one)."""
        _, out, err, started = next(entry for entry in self._started if entry[0] is proc)
        for handle in (out, err):
            handle.flush()
            handle.seek(0)
        return Finished(proc.returncode, out.read(), err.read(), time.monotonic() - started)

    def finish(self, proc, timeout):
        """Wait at most `timeout` s for `proc` alone; what it left."""
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"{proc.args} did not finish within {timeout} s\n" + describe([self.read(proc)])
            )
        return self.read(proc)

    def finish_all(self, procs, timeout):
        """Wait for every one of `procs` and then for everything they started (all within
        `timeout` s); what each of `procs` left. A descendant that outlives them fails."""
        deadline = time.monotonic() + timeout
        for proc in procs:
            while True:
                self._note_descendants()
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(
                        f"the run did not finish within {timeout} s\n"
                        + describe([self.read(p) for p in procs])
                    )
                try:
                    proc.wait(timeout=min(1.0, left))
                    break
                except subprocess.TimeoutExpired:
                    continue
        roots = {proc.pid for proc in procs}
        for pid, (started, root) in list(self._seen.items()):
            if root in roots and not _wait_gone(
                pid, started, max(0.0, deadline - time.monotonic())
            ):
                pytest.fail(
                    f"process {pid} outlived its launcher by {timeout} s\n"
                    + describe([self.read(p) for p in procs])
                )
        return [self.read(proc) for proc in procs]

    def __exit__(self, *exc):
        self._note_descendants()
        for proc, *_ in self._started:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the session's group this test created
            except (ProcessLookupError, PermissionError):
                pass  # gone already, with its group
        table = _process_table()
        for pid, (started, _) in self._seen.items():
            if pid in table and table[pid][1] == started:  # the same process, not a reused pid
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for proc, out, err, _ in self._started:
            proc.wait()
            out.close()
            err.close()
        return False
