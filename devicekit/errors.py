"""One error type for user mistakes, and the one place that turns it into an exit.

A user mistake (a bad flag, a missing variable, a device that is not there) raises
:class:`UsageError` with a message that names the problem and the fix. Command-line
entry points wrap their work in :func:`exit_on_usage_error`, which prints that message
as one line on stderr and exits with code 2; :func:`report_usage_errors` does the same for
a UsageError that escapes a user's own script. Internal bugs keep their tracebacks.
"""

import argparse
import functools
import io
import sys
from collections.abc import Callable
from types import TracebackType
from typing import NoReturn, ParamSpec, TypeVar

EXIT_USAGE = 2

_P = ParamSpec("_P")
_R = TypeVar("_R")


class UsageError(Exception):
    """A mistake the user can fix; the message names the problem and the fix.

    The message is kept to one printable line: a control character or line break that a
    variable, file name or config key brought in is shown escaped (`\\x1e`, `\\n`), so
    the message cannot be split into lines or move the cursor on the user's terminal."""

    def __init__(self, message: str = "") -> None:
        super().__init__(one_line(str(message)))


def one_line(text: str) -> str:
    """`text` with every character that is not printable (other than a space) escaped."""
    return "".join(
        char if char.isprintable() or char == " " else char.encode("unicode_escape").decode("ascii")
        for char in text
    )


def say(line: str) -> None:
    """Write `line` and its newline to stderr in one call. Ranks share their launcher's
    stderr, and print() writes the newline apart when Python runs unbuffered
    (PYTHONUNBUFFERED, common in containers): two ranks' lines could then be glued."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def keep_lines_whole() -> None:
    """Make stdout and stderr write each line in one call (line buffering). Ranks share
    their launcher's streams, and when Python runs unbuffered (PYTHONUNBUFFERED, common in
    containers) print() writes a line's text and its newline apart: two ranks' lines could
    then be glued into one."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True, write_through=False)


def warn(message: str) -> None:
    """Print a one-line devicekit warning on stderr."""
    say(f"devicekit: warning: {message}")


def out_of_memory(error: BaseException) -> str | None:
    """The one-line message for an out-of-memory error of any device kind (torch's
    OutOfMemoryError on a GPU or NPU, the CPU allocator's RuntimeError, MemoryError), with
    what torch said of the sizes; None for any other error."""
    torch = sys.modules.get("torch")
    text = str(error).strip()
    if isinstance(error, MemoryError):
        detail = f"the host ran out of memory{f' ({text})' if text else ''}"
    elif torch is not None and isinstance(error, torch.OutOfMemoryError):
        # "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of
        # 79.10 GiB of which 1.02 GiB is free. ...": the sizes are in the first sentences.
        detail = ". ".join(text.splitlines()[0].split(". ")[:3]).rstrip(".") if text else ""
        # torch_npu's: "NPU out of memory. Tried to allocate 72.00 MiB (NPU 0; 61.27 GiB total
        # capacity; ...; 58.39 GiB reserved in total by PyTorch) If reserved memory is ...".
        if "(NPU " in detail and ")" in detail[detail.index("(NPU ") :]:
            detail = detail[: detail.index(")", detail.index("(NPU ")) + 1]
    elif isinstance(error, RuntimeError) and "can't allocate memory" in text:
        # "[enforce fail at alloc_cpu.cpp:...] DefaultCPUAllocator: can't allocate memory:
        # you tried to allocate 4611686018427387904 bytes. Error code 12 (...)"
        detail = "the CPU " + text.split("DefaultCPUAllocator: ", 1)[-1].split(". Error")[0]
    else:
        return None
    return one_line(
        f"out of memory: {detail[:300]}; use a smaller batch, or split the model, its "
        "gradients and optimizer state across the ranks with devicekit.shard(model) "
        "(activation_checkpointing=True saves more)"
    )


def exit_on_usage_error(func: Callable[_P, _R]) -> Callable[_P, _R]:
    """Decorate a command-line entry point: a UsageError, or running out of memory on any
    device, becomes one line and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return func(*args, **kwargs)
        except (UsageError, RuntimeError, MemoryError) as error:
            line = usage_line(error)
            if line is None:
                raise
            say(line)
            sys.exit(EXIT_USAGE)

    return wrapper


def usage_line(error: BaseException) -> str | None:
    """The one line that ends a run on `error` with exit code 2 (a UsageError, or running
    out of memory on any device); None for any other error."""
    if isinstance(error, UsageError):
        return f"error: {error}"
    message = out_of_memory(error)
    return None if message is None else f"error: {message}"


def report_usage_errors() -> None:
    """End a script that lets a UsageError escape (say, a module-level devicekit call on a
    machine without the device asked for) as a command-line mistake ends: the one-line
    message on stderr and exit code 2, not a traceback. Running out of memory ends the same
    way, with the sizes and what to try. Other exceptions go to the hook that was installed
    before."""
    previous = sys.excepthook

    def hook(
        kind: type[BaseException], error: BaseException, traceback: TracebackType | None
    ) -> None:
        line = usage_line(error)
        if line is not None:
            say(line)
            raise SystemExit(EXIT_USAGE)  # Python exits with the code a hook raises
        previous(kind, error, traceback)

    sys.excepthook = hook


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose every mistake (an unknown flag, a value of the wrong type, a missing
    argument) is one line on stderr and exit code 2, like a UsageError; argparse itself
    prints its usage block first. Subcommand parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        command = f"python {self.prog}" if self.prog.endswith(".py") else self.prog
        say(f"error: {one_line(message)} (see: {command} --help)")
        sys.exit(EXIT_USAGE)
