"""main.py inside the test process, up to the launch: main.main(argv) runs for real (the
parser, the YAML config, every check made before any rank starts) and devicekit.launch is
replaced by a recorder. What it prints on stderr and the code it exits with are those
`python main.py` gives for a command line it refuses before the launch, without the
`import torch` of a new interpreter."""

import contextlib
import io
import os
import warnings
from unittest import mock

import torch  # before main: importing devicekit first sets TORCH_DEVICE_BACKEND_AUTOLOAD

import main as main_module
from invariant import working_directory
from support.new_process import devicekit_started_with, print_warning
from support.runs import tiny_args

# The arguments of a cheap run for the refusal tests to add to (not support.runs.TINY, the
# training run): every valid part of a command line is cheap (add --dummy or a data folder).
REFUSAL_RUN = tiny_args(dummy=False, batch=8, epochs=1, steps=2, val_steps=1, print_freq=1)


def run_main_until_launch(argv, folder, env=None):
    """main.main(argv) in `folder`, with the launch recorded: (exit code, stderr, the launch's
    call or None when main.py did not reach it).

    As a new process would: `env` is added to os.environ (which is restored afterwards,
    whatever main.py set) and is what the process "started with" for devicekit; devicekit
    starts with no kind or context; torch's thread count is put back; and every Python
    warning is printed on the captured stderr, each call's anew (the "default" action with
    fresh registries, not pytest's recorder, nor an earlier call's "already shown")."""
    stderr = io.StringIO()
    threads = torch.get_num_threads()
    with contextlib.ExitStack() as stack:
        stack.enter_context(working_directory(folder))
        stack.enter_context(mock.patch.dict(os.environ, env or {}))
        stack.enter_context(devicekit_started_with(dict(os.environ)))
        launch = stack.enter_context(mock.patch.object(main_module.devicekit, "launch"))
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("default")
        warnings.showwarning = print_warning
        stack.enter_context(contextlib.redirect_stderr(stderr))
        try:
            code = main_module.main(argv)
        except SystemExit as stop:
            code = stop.code
    torch.set_num_threads(threads)
    return code, stderr.getvalue(), launch.call_args
