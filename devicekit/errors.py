"""One error type for user mistakes, and the one place that turns it into an exit.

A user mistake (a bad flag, a missing variable, a device that is not there) raises
:class:`UsageError` with a message that names the problem and the fix. Command-line
entry points wrap their work in :func:`exit_on_usage_error`, which prints that message
as one line on stderr and exits with code 2. Internal bugs keep their tracebacks.
"""

import functools
import sys

EXIT_USAGE = 2


class UsageError(Exception):
    """A mistake the user can fix; the message names the problem and the fix."""


def warn(message):
    """Print a one-line devicekit warning on stderr."""
    print(f"devicekit: warning: {message}", file=sys.stderr, flush=True)


def exit_on_usage_error(func):
    """Decorate a command-line entry point: a UsageError becomes one line and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except UsageError as error:
            print(f"error: {error}", file=sys.stderr, flush=True)
            sys.exit(EXIT_USAGE)

    return wrapper
