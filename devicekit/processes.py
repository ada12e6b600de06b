"""`launch()`: run a function once per rank, whatever started the script.

Under a launcher (torchrun, torch.distributed.launch, a shell loop, Ascend's
RANK_ID/RANK_SIZE, Slurm, MPI) the process already is a rank: the function runs here.
Otherwise launch() starts the ranks itself, one per device, and supervises them: the
first rank that fails stops the others, and so does a signal to this process.
"""

import ctypes
import dataclasses
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing import resource_tracker
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any, NoReturn, TypeVar

import torch.multiprocessing as mp

from devicekit import runtime
from devicekit.distributed import destroy_process_group
from devicekit.environments import LaunchContext, LaunchOptions, launcher_of
from devicekit.errors import EXIT_USAGE, UsageError, exit_on_usage_error, say, usage_line
from devicekit.kinds.base import DeviceKind

NPROC_ENV = "DEVICEKIT_NPROC_PER_NODE"
STOP_GRACE_S = 10.0  # a rank that ignores SIGTERM this long is killed
_PR_SET_PDEATHSIG = 1
LAUNCHER_PID_ENV = "DEVICEKIT_LAUNCHER_PID"
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_R = TypeVar("_R")


class RankFailed(SystemExit):
    """A rank started by launch() failed; the others were stopped.

    A SystemExit, so that `devicekit.launch(main)` as a script's last line exits with
    `exit_code` (non-zero) without a second traceback; `rank` is the local rank that
    failed first, `how` says how.
    """

    def __init__(self, rank: int, exit_code: int, how: str) -> None:
        super().__init__(exit_code)
        self.rank, self.exit_code, self.how = rank, exit_code, how

    def __str__(self) -> str:
        return f"local rank {self.rank} {self.how}; the other ranks were stopped"


@exit_on_usage_error
def launch(
    fn: Callable[..., _R],
    args: Sequence[Any] = (),
    nprocs: int | None = None,
    *,
    device_type: str | None = None,
    options: LaunchOptions | None = None,
) -> _R | None:
    """Run `fn(local_rank, *args)` once per rank of this node.

    When a launcher started this process, `fn` runs once, here. Otherwise `nprocs` ranks
    (default: $DEVICEKIT_NPROC_PER_NODE, else one per device, 2 on a CPU) are started
    with the device's start method on MASTER_ADDR/MASTER_PORT (default: loopback and a
    free port); with one, `fn` runs here. Inside `fn`, `devicekit.init_distributed()`
    joins the run. When a rank fails, the others are stopped and RankFailed is raised
    (SIGINT, SIGTERM or SIGHUP to this process stop every rank too). A usage mistake
    (devicekit.UsageError, here or in a rank) is one line on stderr and exit code 2.
    `options` carry a trainer's launch flags (node count and rank, master, device list).
    """
    options = options or LaunchOptions()
    kind = runtime.kind(device_type, source="--device" if options.cli else "device_type")
    if _runs_here(nprocs, options):
        return _run_here(fn, args, runtime.context(options))
    nprocs = _nprocs(nprocs, options)
    parent = runtime.resolve_context(
        dataclasses.replace(options, multiprocessing_distributed=True, nproc_per_node=nprocs)
    )
    if parent.local_world_size == 1:
        runtime.adopt(kind, parent.for_spawned_rank(0))
        return _run_here(fn, args, runtime.context())
    _supervise(fn, args, parent, kind)
    return None


def nprocs_per_node(nprocs: int | None = None, *, options: LaunchOptions | None = None) -> int:
    """How many ranks `launch(fn, nprocs=nprocs, options=options)` runs on this node: the
    launcher's count when a launcher started this process, else what launch() would
    start. For per-node decisions made once, before launch() (a batch split, say)."""
    options = options or LaunchOptions()
    if _runs_here(nprocs, options):
        return runtime.context(options).local_world_size
    return _nprocs(nprocs, options)


def _runs_here(nprocs: int | None, options: LaunchOptions) -> bool:
    """Whether launch() calls the function in this process instead of starting ranks."""
    if launcher_of(runtime.launcher_environ()) is not None:
        return True
    if options.cli and options.local_rank is not None:
        return True
    return not options.multiprocessing_distributed and _nprocs(nprocs, options) == 1


def _nprocs(nprocs: int | str | None, options: LaunchOptions) -> int:
    if nprocs is not None:
        name = "--nproc-per-node" if options.cli else "nprocs"
    elif options.nproc_per_node is not None:
        nprocs, name = options.nproc_per_node, options.name("nproc_per_node")
    elif options.device_list:
        return len(options.device_list)
    elif NPROC_ENV in os.environ:
        nprocs, name = os.environ[NPROC_ENV], NPROC_ENV
    else:
        return runtime.kind().default_ranks_per_node()
    try:
        value = int(str(nprocs).strip())
    except ValueError:
        value = 0
    if value < 1:
        if not name.startswith("--"):
            shown = f"{name}={nprocs!r}"
        else:  # a flag's value as typed, quoted where it holds blanks or control characters
            text = str(nprocs)
            plain = text.isprintable() and text and not any(char.isspace() for char in text)
            shown = f"{name} {text if plain else repr(text)}"
        raise UsageError(f"{shown} must be a whole number of processes, at least 1")
    return value


def _run_here(fn: Callable[..., _R], args: Sequence[Any], ctx: LaunchContext) -> _R:
    runtime.adopt(runtime.kind(), ctx)
    try:
        return fn(ctx.local_rank, *args)
    finally:
        destroy_process_group()


def die_with_parent() -> None:
    """Be killed when the parent process dies, whatever kills it (Linux; elsewhere a no-op):
    a rank must never outlive its run."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)  # the parent died before prctl took effect


def die_with_launcher() -> None:
    """In a rank that launch/run_8p.sh started (it exports its own pid as
    DEVICEKIT_LAUNCHER_PID), die when the script dies, even by SIGKILL, which it cannot
    trap to stop its ranks itself. devicekit calls this when it is imported."""
    if os.environ.get(LAUNCHER_PID_ENV) == str(os.getppid()):
        die_with_parent()


def _child(
    index: int,
    fn: Callable[..., object],
    args: Sequence[Any],
    parent: LaunchContext,
    kind_name: str,
    failures: str,
) -> None:
    die_with_parent()
    # A process group of its own, which its DataLoader workers join: stopping the rank
    # signals them in the same instant. A worker that outlived its rank by a moment while
    # handing it a batch printed a traceback (ConnectionResetError in resource_sharer).
    os.setpgid(0, 0)
    # The parent handles Ctrl-C for the whole run (one line, not one traceback per rank).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctx = parent.for_spawned_rank(index)
    runtime.adopt(runtime.kind(kind_name), ctx)
    os.environ.update(_rank_environ(ctx))

    def timed(*fn_args: Any) -> object:
        try:
            return fn(*fn_args)
        except BaseException as error:
            if isinstance(error, SystemExit) and error.code in (0, None):
                raise
            # When it failed, before leaving the group makes the other ranks fail too; and
            # its one line, which the parent prints for the first rank that failed only
            # (ranks that run out of memory together would each say so).
            line = usage_line(error)
            path = os.path.join(failures, str(index))
            with open(f"{path}.tmp", "w", encoding="utf-8") as stamp:
                stamp.write(repr(time.time()) + "\n" + (line or ""))
            os.replace(f"{path}.tmp", path)  # the parent never reads half a stamp
            if line is None:
                raise
            raise SystemExit(EXIT_USAGE) from None

    exit_on_usage_error(_run_here)(timed, args, ctx)


def _rank_environ(ctx: LaunchContext) -> dict[str, str]:
    """The variables torchrun gives a worker, for code that reads them (or env://)."""
    return {
        "RANK": str(ctx.rank),
        "LOCAL_RANK": str(ctx.local_rank),
        "WORLD_SIZE": str(ctx.world_size),
        "LOCAL_WORLD_SIZE": str(ctx.local_world_size),
        "GROUP_RANK": str(ctx.node_rank),
        "MASTER_ADDR": ctx.master_addr,
        "MASTER_PORT": str(ctx.master_port),
    }


def _supervise(
    fn: Callable[..., object], args: Sequence[Any], parent: LaunchContext, kind: DeviceKind
) -> None:
    context = mp.get_context(kind.start_method)
    # A failing rank notes when it failed in a file here (no shared memory: handing its
    # descriptor to a child that is then killed makes multiprocessing print a traceback).
    failures = tempfile.mkdtemp(prefix="devicekit-launch-")
    # typeshed types get_context(str) as BaseContext, which has no Process; every context
    # it returns at run time (spawn, fork, forkserver) has.
    procs: list[BaseProcess] = [
        context.Process(  # type: ignore[attr-defined]
            target=_child, args=(i, fn, args, parent, kind.name, failures), daemon=False
        )
        for i in range(parent.local_world_size)
    ]

    def on_signal(signum: int, frame: FrameType | None) -> NoReturn:
        _stop(procs)
        name = signal.Signals(signum).name
        say(f"devicekit: {name} received: stopped all {len(procs)} ranks")
        raise SystemExit(128 + signum)

    previous = (
        {signum: signal.signal(signum, on_signal) for signum in _STOP_SIGNALS}
        if threading.current_thread() is threading.main_thread()
        else {}
    )
    try:
        _start_quiet_resource_tracker()
        for proc in procs:
            proc.start()
        running = {proc.sentinel: index for index, proc in enumerate(procs)}
        while running:
            for sentinel in multiprocessing.connection.wait(list(running)):
                assert isinstance(sentinel, int)  # wait() returns some of the sentinels given
                index = running.pop(sentinel)
                procs[index].join()
                if procs[index].exitcode != 0:
                    first, line = _first_failure(procs, failures)
                    procs[first].join(STOP_GRACE_S)  # its traceback, its own exit code
                    _stop(procs)
                    code = procs[first].exitcode
                    assert code is not None  # _stop() joined every rank
                    raise _failure(first, code, line)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _stop(procs)
        shutil.rmtree(failures, ignore_errors=True)


def _stamps(failures: str) -> dict[int, tuple[float, str]]:
    """{local rank: (when it failed, its one line or "")} of the ranks that said so."""
    stamps: dict[int, tuple[float, str]] = {}
    for name in os.listdir(failures):
        if name.isdigit():
            with open(os.path.join(failures, name), encoding="utf-8") as stamp:
                when, _, line = stamp.read().partition("\n")
            stamps[int(name)] = (float(when), line)
    return stamps


def _start_quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker, which the ranks share, without its warning
    of "leaked semaphore objects": a rank stopped by a signal leaves its loader queues'
    semaphores to the tracker, which removes them, as is its job (the warning would follow
    every run stopped by Ctrl-C). A tracker already running is left as it is."""
    option = "ignore::UserWarning:multiprocessing.resource_tracker"
    sys.warnoptions.append(option)  # the tracker's interpreter is started with these
    try:
        resource_tracker.ensure_running()
    finally:
        sys.warnoptions.remove(option)


def _first_failure(procs: Sequence[BaseProcess], failures: str) -> tuple[int, str]:
    """The rank whose failure came first among those that failed so far (a rank killed by
    a signal, which had no time to say, else the earliest one: the others typically failed
    because it left the collective), and its one line ("" if it has none)."""
    stamps = _stamps(failures)
    failed = [i for i, proc in enumerate(procs) if proc.exitcode not in (None, 0) or i in stamps]
    killed = [i for i in failed if (procs[i].exitcode or 0) < 0 and i not in stamps]
    first = killed[0] if killed else min(failed, key=lambda i: stamps.get(i, (float("inf"), ""))[0])
    return first, stamps.get(first, (0.0, ""))[1]


def _failure(index: int, code: int, line: str) -> RankFailed:
    if code < 0:
        failure = RankFailed(index, 1, f"was killed by {signal.Signals(-code).name}")
    elif code == EXIT_USAGE:
        if line:
            say(line)
        return RankFailed(index, code, "stopped on a usage error (above)")
    else:
        failure = RankFailed(
            index,
            code,
            f"exited with code {code}"
            + (" (an uncaught exception, traceback above)" if code == 1 else ""),
        )
    say(f"error: {failure}")
    return failure


def _signal_rank(proc: BaseProcess, signum: int) -> None:
    """`signum` to a rank's process group: the rank and its DataLoader workers, also the
    workers a killed rank left behind. To the rank alone while it has not made its group
    yet (its pid is still its own while it is not reaped)."""
    if proc.pid is None:  # never started: nothing to signal
        return
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        if proc.exitcode is None:
            try:
                os.kill(proc.pid, signum)
            except ProcessLookupError:
                pass


def _stop(procs: Sequence[BaseProcess]) -> None:
    """SIGTERM the process group of every rank still running or killed by a signal (its
    workers may be left), then SIGKILL what is left after the grace time."""
    alive = [proc for proc in procs if proc.pid is not None and proc.exitcode is None]
    killed = [proc for proc in procs if proc.exitcode is not None and proc.exitcode < 0]
    for proc in alive + killed:
        _signal_rank(proc, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in alive:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.exitcode is None:
            _signal_rank(proc, signal.SIGKILL)
            proc.join()
