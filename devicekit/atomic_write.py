"""Writing a file atomically: `path` is always the old or the new file, never half of one,
also when the process is stopped by a signal midway."""

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import BinaryIO


def fsync_dir(path: str) -> None:
    """Make a rename in the folder `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, write: Callable[[BinaryIO], object]) -> None:
    """Write `path` with `write` (given the open file) so that `path` is always either the
    old or the new file: into a temporary file beside it, flushed, fsync'ed and renamed over
    it. The temporary files that writers killed midway left beside it are removed."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with _stop_signals_raise():
        fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(path), suffix=".tmp", dir=directory)
        try:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide it from the group
            with os.fdopen(fd, "wb") as handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    fsync_dir(directory)
    remove_leftovers(path)  # of writers killed mid-write: garbage now


def _temporary_prefix(path: str) -> str:
    return f".{os.path.basename(path)}."


def copy_atomic(source: str, path: str) -> None:
    """Copy the file `source` to `path` with the same guarantee as write_atomic."""
    with open(source, "rb") as src:
        write_atomic(path, lambda handle: shutil.copyfileobj(src, handle))


def remove_leftovers(path: str | os.PathLike[str]) -> None:
    """Remove the temporary files that writes of `path` killed midway (SIGKILL, a power
    cut) left beside it."""
    directory, prefix = os.path.dirname(os.path.abspath(path)), _temporary_prefix(os.fspath(path))
    with contextlib.suppress(OSError):  # no folder: nothing left
        for name in os.listdir(directory):
            if name.startswith(prefix) and name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(directory, name))


class _Stopped(BaseException):
    """A stop signal that came during a checkpoint write."""


@contextlib.contextmanager
def _stop_signals_raise() -> Iterator[None]:
    """While a file is written, SIGTERM, SIGHUP and SIGUSR1 (how launchers stop ranks, the
    terminal closing, Slurm's `scancel --signal=USR1`), whose default action ends the
    process on the spot, raise instead, so that the temporary file is removed; then the
    signal is given again with its default action, and the process ends as it would have.
    A handler of the script's own stays as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread can set handlers (and runs them)
        return
    came: list[int] = []

    def stop(signum: int, frame: object) -> None:
        came.append(signum)
        if len(came) == 1:  # a second one (launchers repeat theirs) must not cut the undoing
            raise _Stopped

    previous = {
        signum: signal.signal(signum, stop)
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
        if signal.getsignal(signum) is signal.SIG_DFL
    }
    try:
        yield
    except _Stopped:
        pass  # the write is undone; the signal ends the process below
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if came:
            os.kill(os.getpid(), came[0])
            raise SystemExit(128 + came[0])  # only where the signal is blocked


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
