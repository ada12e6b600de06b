"""What a process settles once: the device kind it runs on and who it is in the run.

Everything in devicekit's flat API reads these two answers from here. Both are resolved
on first use (from the environment a launcher left, or from what `launch()` or
`init_distributed()` were told) and then stay fixed for the life of the process.
"""

import multiprocessing
import os
from collections.abc import Mapping

from devicekit.environments import LaunchContext, LaunchOptions, launcher_of, resolve_launch
from devicekit.errors import UsageError, warn
from devicekit.kinds.base import DeviceKind
from devicekit.kinds.resolve import resolve_kind

# The variables a launcher hands a process; if the script overwrites one of them (the DDP
# tutorial's `os.environ["MASTER_PORT"] = "12355"`), the launcher's value is the one
# every other rank uses.
_LAUNCHER_OWNED = ("MASTER_ADDR", "MASTER_PORT")
_LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}

_kind: DeviceKind | None = None
_context: LaunchContext | None = None
_device_bound = False


def _initial_environ() -> dict[str, str]:
    """The environment this process was started with (what its launcher exported), before
    the script changed os.environ; os.environ where the OS does not tell."""
    try:
        with open(f"/proc/{os.getpid()}/environ", "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:
        return _IMPORT_ENVIRON
    initial: dict[str, str] = {}
    for entry in entries:
        name, sep, value = entry.partition(b"=")
        if sep:
            initial[os.fsdecode(name)] = os.fsdecode(value)
    return initial


_IMPORT_ENVIRON = dict(os.environ)


def kind(device_type: str | None = None, source: str = "device_type") -> DeviceKind:
    """The DeviceKind of this process, resolved once: `device_type` ("cuda", "npu", "cpu",
    "gpu", "auto"/None) on first call, else DEVICEKIT_DEVICE, else auto-detection. A
    later call naming another kind is an error (`source` names the argument)."""
    global _kind
    if _kind is None:
        _kind = resolve_kind(device_type, source=source)
    elif device_type not in (None, "", "auto"):
        wanted = resolve_kind(device_type, source=source)
        if wanted.name != _kind.name:
            raise UsageError(
                f"{source}={device_type!r}, but this process already runs on "
                f"{_kind.name}: choose the device once, before the first devicekit "
                "call (or set DEVICEKIT_DEVICE)"
            )
    return _kind


def adopt(new_kind: DeviceKind, ctx: LaunchContext) -> None:
    """Fix this process's kind and context (launch() does, before it calls the function)."""
    global _kind, _context, _device_bound
    _kind, _context, _device_bound = new_kind, ctx, False


def bind_device() -> None:
    """Note that this process has chosen its current device (set_device, init_distributed)."""
    global _device_bound
    _device_bound = True


def device_bound() -> bool:
    """Whether this process has chosen its current device."""
    return _device_bound


def has_context() -> bool:
    """Whether who this process is has been settled already."""
    return _context is not None


def context(options: LaunchOptions | None = None) -> LaunchContext:
    """Who this process is in the run, resolved once (see `resolve_context`)."""
    global _context
    if _context is None:
        _context = resolve_context(options or LaunchOptions())
    return _context


def resolve_context(options: LaunchOptions) -> LaunchContext:
    """Who this process is, from a launcher's environment or from `options`.

    A launcher's numbers are facts (it started the processes): explicit values that differ
    are ignored, with one warning. Without a launcher, explicit values describe the
    process; with none at all, this is a single process -- unless it was started by
    multiprocessing (a script's own mp.spawn), where running alone would silently train
    one model per process.
    """
    current = kind()
    environ = launcher_environ()
    launched = launcher_of(environ) is not None or (options.cli and options.local_rank is not None)
    if launched:
        ctx = resolve_launch(_without_explicit_ranks(options), environ=environ, kind=current)
        warn_if_contradicted(options, ctx)
        return ctx
    if (
        options.rank is None
        and options.world_size is None
        and not options.multiprocessing_distributed
        and multiprocessing.parent_process()
    ):
        raise UsageError(
            "init_distributed() was called in a process started by multiprocessing (the "
            "script's own mp.spawn?) without its rank, and no launcher variables are set: "
            "pass init_distributed(rank=i, world_size=n) in each process, or start them "
            "with devicekit.launch(fn) instead of mp.spawn"
        )
    return resolve_launch(options, environ=environ, kind=current)


def _without_explicit_ranks(options: LaunchOptions) -> LaunchOptions:
    # Under a launcher the script's own rank/world_size (Python callers) are checked
    # against the launcher's afterwards, not used; a trainer's flags keep their meaning.
    if options.cli:
        return options
    return LaunchOptions(
        local_rank=options.local_rank, gpu=options.gpu, device_list=options.device_list
    )


def warn_if_contradicted(options: LaunchOptions, ctx: LaunchContext) -> None:
    """One warning when a script's explicit rank/world_size differ from the launcher's."""
    if options.cli:
        return
    told = {"rank": options.rank, "world_size": options.world_size}
    actual = {"rank": ctx.rank, "world_size": ctx.world_size}
    differing = [
        name for name, value in told.items() if value is not None and value != actual[name]
    ]
    if differing:
        given = ", ".join(f"{name}={told[name]}" for name in differing)
        real = ", ".join(f"{name} {actual[name]}" for name in differing)
        warn(
            f"init_distributed({given}) differs from what the launcher ({ctx.mode}) set up "
            f"({real}): using the launcher's"
        )


def launcher_environ() -> Mapping[str, str]:
    """os.environ, except that MASTER_ADDR/MASTER_PORT as the launcher exported them win
    over values the script wrote into os.environ since."""
    initial = _initial_environ()
    if launcher_of(initial) is None:
        return os.environ
    environ = dict(os.environ)
    environ.update({name: initial[name] for name in _LAUNCHER_OWNED if name in initial})
    return environ


def settle_master(ctx: LaunchContext) -> None:
    """Make os.environ's MASTER_ADDR/MASTER_PORT those of the run `ctx` describes (torch's
    env:// reads them), saying once when the script had set other values."""
    if ctx.mode == "single":
        return
    who = "devicekit.launch()" if ctx.mode == "spawn" else f"the launcher ({ctx.mode})"
    for name, value in (("MASTER_ADDR", ctx.master_addr), ("MASTER_PORT", str(ctx.master_port))):
        current = os.environ.get(name)
        if current is not None and _differs(current, value) and ctx.rank == 0:
            warn(
                f"{name}={current!r} set by the script is ignored: {who} runs this job at "
                f"{name}={value}, which every rank uses"
            )
        os.environ[name] = value


def _differs(current: str, value: str) -> bool:
    return current != value and not {current, value} <= _LOOPBACK_NAMES
