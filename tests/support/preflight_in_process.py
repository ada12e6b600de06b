"""`python -m devicekit preflight ARGS` inside the test process: devicekit's command line
itself (`devicekit.__main__.main(["preflight", *ARGS])`, so that a UsageError is the same
one line and exit code 2), with the user's script run by preflight's own runner, in the
folder and the environment given, its stdout and stderr captured. The result is what
subprocess.run gives (returncode, stdout, stderr), without the `import torch` of a new
interpreter.

As a new process would: the environment given replaces os.environ for the call, and is
what the process "started with" for devicekit; devicekit starts with no kind or context;
torch runs on $OMP_NUM_THREADS threads; the folder is first on sys.path (`python -m`
puts it there); and Python's warnings are filtered as a new interpreter filters them
(warnings.filters with no -W or PYTHONWARNINGS) and printed on the captured stderr,
each call's anew.

Everything the call changes is put back afterwards: the working directory, os.environ,
sys.argv, sys.path, the modules it imported from the script's own folder, devicekit's
kind and context, the warning filters, and the torch settings a training script changes
(the random number generators of torch, numpy and Python, the default dtype, the thread
count, grad mode, deterministic algorithms and float32 matmul precision).

What it cannot be: a process whose environment is read before torch or devicekit is
imported (DEVICEKIT_SIMULATE, --npu-stand-in, a torch_npu on PYTHONPATH), one that takes
a signal, or one whose output is written by C++ code straight to file descriptor 1 or 2
(the scripts of tests/preflight_scripts write none); those stay processes.
"""

import contextlib
import io
import os
import random
import subprocess
import sys
import warnings
from unittest import mock

import numpy as np
import torch  # before devicekit: see conftest

import devicekit.__main__ as devicekit_command
from devicekit import distributed
from devicekit.preflight import recording, sites
from invariant import working_directory
from support.new_process import devicekit_started_with, print_warning

# A new interpreter's warning filters (`python -c "import warnings; print(warnings.filters)"`
# with no -W option and no PYTHONWARNINGS), first filter first.
_NEW_PROCESS_FILTERS = (
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, None),
    ("ignore", PendingDeprecationWarning, None),
    ("ignore", ImportWarning, None),
    ("ignore", ResourceWarning, None),
)


@contextlib.contextmanager
def _new_process_warnings():
    """Python's warnings as a new interpreter has them, until the block ends."""
    with warnings.catch_warnings():
        warnings.resetwarnings()  # also forgets what was shown: each call's warnings anew
        for action, category, module in reversed(_NEW_PROCESS_FILTERS):
            if module is None:
                warnings.simplefilter(action, category)
            else:
                warnings.filterwarnings(action, category=category, module=module)
        warnings.showwarning = print_warning
        yield


@contextlib.contextmanager
def _torch_settings_kept(threads):
    """Run the block on `threads` torch threads (None: as now); then put back what a
    training script changes in torch, numpy and Python's random."""
    saved_threads = torch.get_num_threads()
    saved_dtype = torch.get_default_dtype()
    saved_grad = torch.is_grad_enabled()
    saved_deterministic = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    saved_precision = torch.get_float32_matmul_precision()
    saved_rng = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_rng_state(saved_rng[0])
        np.random.set_state(saved_rng[1])
        random.setstate(saved_rng[2])
        torch.set_float32_matmul_precision(saved_precision)
        torch.use_deterministic_algorithms(saved_deterministic[0], warn_only=saved_deterministic[1])
        torch.set_grad_enabled(saved_grad)
        torch.set_default_dtype(saved_dtype)
        torch.set_num_threads(saved_threads)


def _import_root(name, path):
    """The folder on sys.path that module `name`, read from `path`, was imported from."""
    folder = os.path.dirname(path)
    for _ in range(name.count(".") + os.path.basename(path).startswith("__init__.")):
        folder = os.path.dirname(folder)
    return os.path.realpath(folder)


@contextlib.contextmanager
def _script_modules_dropped(roots):
    """Forget the modules the block imported from folders other than `roots` (the script's
    own, found in the folder preflight puts first on sys.path): a new process imports them
    anew. Modules found in `roots`, the test process's own sys.path, stay (the repository's
    `models` and `trainer` for main.py, torch's submodules)."""
    before = set(sys.modules)
    try:
        yield
    finally:
        for name in set(sys.modules) - before:
            path = getattr(sys.modules[name], "__file__", None)
            if path and _import_root(name, path) not in roots:
                del sys.modules[name]


def _calling_files():
    """The files of every frame that calls into here, the test's own included."""
    files = []
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename not in files:
            files.append(frame.f_code.co_filename)
        frame = frame.f_back
    return tuple(files)


def preflight_in_process(args, cwd, env):
    """`python -m devicekit preflight ARGS` (each argument as str) in `cwd` with `env` as
    its whole environment, run here: a subprocess.CompletedProcess with the exit code and
    the text of stdout and stderr."""
    argv = [str(arg) for arg in args]
    env = {str(name): str(value) for name, value in env.items()}
    stdout, stderr = io.StringIO(), io.StringIO()
    threads = env.get("OMP_NUM_THREADS", "")
    threads = int(threads) if threads.isdigit() and int(threads) > 0 else None
    saved_argv, saved_path, saved_hook = sys.argv[:], sys.path[:], sys.excepthook
    saved_device_seen = recording.Recorder.device_seen
    saved_user_code = dict(sites._user_code)
    callers = _calling_files()
    # The folders of the test process's sys.path ("" is the working directory of the moment).
    roots = {os.path.realpath(entry) for entry in sys.path if entry}
    with contextlib.ExitStack() as stack:
        stack.enter_context(working_directory(cwd))
        stack.enter_context(mock.patch.dict(os.environ, env, clear=True))
        stack.enter_context(devicekit_started_with(env))
        stack.callback(distributed.destroy_process_group)
        # The frames below the command (this module, the test, pytest) are not the user's
        # script, as a process has no frames below it: none is recorded, scanned or shown.
        stack.enter_context(mock.patch.object(sites, "_NOT_USER", sites._NOT_USER + callers))
        sites._user_code.clear()

        @stack.callback
        def _put_back():
            sys.argv, sys.path[:] = saved_argv, saved_path
            sys.excepthook = saved_hook  # init_process_group wraps it, and never unwraps it
            recording.Recorder.device_seen = saved_device_seen
            sites._user_code.clear()
            sites._user_code.update(saved_user_code)

        stack.enter_context(_script_modules_dropped(roots))
        sys.argv = [devicekit_command.__file__, "preflight", *argv]
        sys.path.insert(0, os.getcwd())  # as `python -m` has it
        stack.enter_context(_torch_settings_kept(threads))
        stack.enter_context(_new_process_warnings())
        stack.enter_context(contextlib.redirect_stdout(stdout))
        stack.enter_context(contextlib.redirect_stderr(stderr))
        try:
            code = devicekit_command.main(["preflight", *argv])
        except SystemExit as stop:
            code = stop.code
        if code is None:
            code = 0
        elif not isinstance(code, int):  # sys.exit("text"): Python prints it, exit code 1
            print(code, file=sys.stderr)
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
    return subprocess.CompletedProcess(
        [sys.executable, "-m", "devicekit", "preflight", *argv],
        code,
        stdout.getvalue(),
        stderr.getvalue(),
    )
