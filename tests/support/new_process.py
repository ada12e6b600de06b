"""What the in-process runners (support.main_in_process, support.preflight_in_process)
share to look like a new process: devicekit starting afresh, and warnings printed where a
process prints them."""

import contextlib
import sys
import warnings
from unittest import mock

from devicekit import runtime


def print_warning(message, category, filename, lineno, file=None, line=None):
    """What Python does with a warning when nothing captures it: print it on sys.stderr, the
    one in effect now (so that a redirected stderr gets it, as a process's stderr would)."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


@contextlib.contextmanager
def devicekit_started_with(environ):
    """devicekit with no kind or context, taking `environ` for the environment the process
    started with, until the block ends; afresh again afterwards."""
    with mock.patch.object(runtime, "_initial_environ", lambda: dict(environ)):
        runtime.adopt(None, None)
        try:
            yield
        finally:
            runtime.adopt(None, None)
