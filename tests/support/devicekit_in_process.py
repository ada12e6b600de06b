"""`python -m devicekit ARGS` inside the test process, for the commands that start no
process of their own: `doctor`, `nproc`, `port`, `preflight` (through
support.preflight_in_process) and a `check` or `--version` that ends before any rank starts.
devicekit's command line itself runs (`devicekit.__main__.main(ARGS)`), so that a
UsageError is the same one line and exit code 2; the result is what subprocess.run gives
(returncode, stdout, stderr), without the `import torch` of a new interpreter.

As a new process would: the environment given replaces os.environ for the call and is what
the process "started with" for devicekit, which starts with no kind or context; the folder
given is the working directory; Python's warnings are printed on the captured stderr.
Everything is put back afterwards.

What it cannot be (NeedsProcess is raised, or `runs_in_process` says no): a `check` that
reaches the start of its ranks (they are processes), a command whose environment is read before
devicekit is imported (DEVICEKIT_SIMULATE), preflight's --npu-stand-in, `simulate`.
"""

import contextlib
import io
import os
import subprocess
import sys
from unittest import mock

import torch  # noqa: F401  # before devicekit: see conftest

import devicekit.__main__ as devicekit_command
from devicekit import distributed, processes
from invariant import working_directory
from support.new_process import devicekit_started_with
from support.preflight_in_process import _new_process_warnings, preflight_in_process

IN_PROCESS_COMMANDS = ("doctor", "nproc", "port", "preflight", "check", "--version")


class NeedsProcess(Exception):
    """The command went past what a test process can do for it (a check's ranks)."""


def runs_in_process(args, env):
    """Whether `python -m devicekit ARGS` with `env` may run in-process (up to NeedsProcess)."""
    if not args or args[0] not in IN_PROCESS_COMMANDS or env.get("DEVICEKIT_SIMULATE"):
        return False
    return not (args[0] == "preflight" and "--npu-stand-in" in args)


def devicekit_in_process(args, cwd, env):
    """`python -m devicekit ARGS` (each argument as str) in `cwd` with `env` as its whole
    environment, run here: a subprocess.CompletedProcess with the exit code and the text of
    stdout and stderr. Raises NeedsProcess when `check` reaches the start of its ranks."""
    argv = [str(arg) for arg in args]
    env = {str(name): str(value) for name, value in env.items()}
    if argv[:1] == ["preflight"]:
        return preflight_in_process(argv[1:], cwd, env)
    stdout, stderr = io.StringIO(), io.StringIO()
    saved_argv = sys.argv[:]
    with contextlib.ExitStack() as stack:
        stack.enter_context(working_directory(cwd))
        stack.enter_context(mock.patch.dict(os.environ, env, clear=True))
        stack.enter_context(devicekit_started_with(env))
        stack.callback(distributed.destroy_process_group)
        stack.callback(setattr, sys, "argv", saved_argv)
        sys.argv = [devicekit_command.__file__, *argv]
        # launch() runs for real up to where it would run a rank: its checks are the command's.
        needs = NeedsProcess(f"devicekit {' '.join(argv)} runs ranks")
        for runs_ranks in ("_run_here", "_supervise"):
            stack.enter_context(mock.patch.object(processes, runs_ranks, side_effect=needs))
        stack.enter_context(_new_process_warnings())
        stack.enter_context(contextlib.redirect_stdout(stdout))
        stack.enter_context(contextlib.redirect_stderr(stderr))
        try:
            code = devicekit_command.main(argv)
        except SystemExit as stop:
            code = stop.code
        code = 0 if code is None else code
    return subprocess.CompletedProcess(
        [sys.executable, "-m", "devicekit", *argv], code, stdout.getvalue(), stderr.getvalue()
    )
