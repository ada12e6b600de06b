"""How DataLoader worker processes start: forked on Linux, from a forkserver where this
interpreter can deadlock a forked child.

CPython 3.8 to 3.11 before their September 2024 releases (CPython issue gh-112275) may
copy a lock of the interpreter into a forked child while another thread holds it; the
child then waits for it forever, inside `os.fork()`, before running a line of Python. A
rank of a distributed run is such a parent: threads of torch's communication backends
enter Python (gloo's, to let go of a collective's tensors) and take that lock as they do,
so a DataLoader forking its workers during training hangs now and then (seen here with
gloo; Huawei's CANN troubleshooting guide lists the bug among the causes of stuck
multi-card training). A forkserver is one process started fresh, with no such threads,
that forks the workers.
"""

import multiprocessing
import platform
import sys
from multiprocessing.context import BaseContext

# The first release of each affected minor version that carries the fix (3.12 had it
# from 3.12.0).
_FIXED_IN = {(3, 8): 20, (3, 9): 20, (3, 10): 15, (3, 11): 10}


def fork_can_deadlock(
    version: tuple[int, int, int] | None = None, implementation: str | None = None
) -> bool:
    """Whether a child forked from a multi-threaded process of this interpreter can hang
    at birth (CPython gh-112275); by default for the running interpreter."""
    major, minor, micro = version or tuple(sys.version_info[:3])
    if (implementation or platform.python_implementation()) != "CPython":
        return False
    fixed = _FIXED_IN.get((major, minor))
    return fixed is not None and micro < fixed


def worker_context() -> BaseContext | None:
    """What to pass as `DataLoader(multiprocessing_context=...)` for this process.

    On Linux, fork: workers start in milliseconds and share the parent's pages, also in
    the ranks `launch()` spawned (whose default, spawn, would import torch and the script
    again in every worker). A forkserver instead where this interpreter can deadlock a
    forked child (CPython 3.8-3.11 before 3.8.20, 3.9.20, 3.10.15, 3.11.10): it imports the
    main script once, as spawn does (the script needs its `if __name__ == "__main__":`
    guard), pickles the dataset to each worker, and dies with the process that started it,
    its workers with it. Elsewhere None, the platform's default.
    """
    if fork_can_deadlock():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["__main__", "devicekit.forkserver_preload"])
        return context
    if sys.platform == "linux":
        return multiprocessing.get_context("fork")
    return None
