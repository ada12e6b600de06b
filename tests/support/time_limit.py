"""A hard time limit per test (SIGALRM), for the modules that start real runs.

A module opts in by importing the autouse fixture into its namespace:

    from support.time_limit import _hard_time_limit, time_limit  # noqa: F401

    @time_limit(120)
    def test_something(tmp_path): ...

Every test of that module then ends with HardTimeLimit after its limit (DEFAULT_TIME_LIMIT_S
unless @time_limit says otherwise); the exception is raised in the test, so its `finally`
blocks and context managers (the process harnesses) still clean up.
"""

import signal

import pytest

DEFAULT_TIME_LIMIT_S = 300


class HardTimeLimit(Exception):
    """A test ran past its time limit (its finally blocks still clean up)."""


def time_limit(seconds):
    """Decorator: this test's hard limit in seconds (else DEFAULT_TIME_LIMIT_S)."""

    def mark(test):
        test.time_limit_s = seconds
        return test

    return mark


@pytest.fixture(autouse=True)
def _hard_time_limit(request):
    limit = getattr(request.function, "time_limit_s", DEFAULT_TIME_LIMIT_S)

    def expired(signum, frame):
        raise HardTimeLimit(f"{request.node.name} ran past its hard limit of {limit} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
