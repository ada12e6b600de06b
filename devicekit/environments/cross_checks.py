"""Cross-checks of what a launcher and the options say: ranks below their sizes, options
that agree with the launcher's variables, the device index and the node's ranks within the
visible devices. Every mistake is a UsageError that names the variable or flag."""

import os
from collections.abc import Callable

from devicekit.environments.context import LaunchContext
from devicekit.environments.options import LaunchOptions
from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind


def device_source(options: LaunchOptions, rank_source: str) -> str:
    """What chose a process's device, for check_device's message: the device option, the
    device list, or else `rank_source` (the local rank's variable)."""
    if options.gpu is not None:
        return options.name("gpu")
    return options.name("device_list") if options.device_list else rank_source


def check_device(ctx: LaunchContext, kind: DeviceKind | None, source: str) -> LaunchContext:
    """`ctx`, once its device index is below the visible devices of `kind` (accelerators)."""
    if kind is None or not kind.is_accelerator:
        return ctx
    count = kind.device_count()
    if ctx.device_index >= count:
        name = (
            f"{source} {ctx.device_index}"
            if source.startswith("--")
            else f"{source}={ctx.device_index!r}"
        )
        raise UsageError(
            f"{name} but only {count} {kind.name} device(s) are visible{visible_note(kind)}: "
            f"use an index below {count}"
        )
    return ctx


def visible_note(kind: DeviceKind) -> str:
    """What narrowed the visible devices of `kind`, for a message: " (VAR='0,1')",
    " (VAR unset)", or "" for a kind of the user's own without such a variable."""
    var = kind.visible_devices_env
    if var is None:
        return ""
    return f" ({var}={os.environ[var]!r})" if var in os.environ else f" ({var} unset)"


def check_node_fits(
    kind: DeviceKind | None, ranks: int, started: str, fix: Callable[[int], str]
) -> None:
    """UsageError when the launcher started more ranks on this node than it has visible
    devices, raised by every rank alike (a launcher that lets the others run on would leave
    them waiting for the ranks that refused). `started` says how many, naming the
    launcher's variable; `fix(devices)` what to start instead."""
    if kind is None or not kind.is_accelerator:
        return
    devices = kind.device_count()
    if 0 < devices < ranks:  # no device at all is check_device's to report
        raise UsageError(
            f"{started} but only {devices} {kind.name} device(s) are visible"
            f"{visible_note(kind)}: {fix(devices)}"
        )


def check_below(name: str, value: int, limit_name: str, limit: int, explain: str = "") -> None:
    """UsageError unless `value` < `limit`."""
    if value >= limit:
        raise UsageError(f"{name}={value} is not below {limit_name}={limit}{explain}")


def check_ranks(
    rank: int,
    world_size: int,
    local_rank: int,
    local_world_size: int,
    names: tuple[str, str, str, str],
) -> None:
    """Ranks below their sizes, and the same number of ranks on every node."""
    rank_name, world_name, local_name, local_world_name = names
    check_below(rank_name, rank, world_name, world_size, f": ranks run from 0 to {world_size - 1}")
    check_below(local_name, local_rank, local_world_name, local_world_size)
    if world_size % local_world_size:
        raise UsageError(
            f"{world_name}={world_size} is not a multiple of {local_world_name}="
            f"{local_world_size}: every node must run the same number of ranks"
        )


def refuse_spawning(
    options: LaunchOptions,
    started_by: str = "a launcher already started this process (RANK/WORLD_SIZE are set)",
    fix: str = "the launcher starts one process per device",
) -> None:
    """A launcher started this process: --multiprocessing-distributed would start more."""
    if options.multiprocessing_distributed:
        flag = options.name("multiprocessing_distributed")
        raise UsageError(f"{flag} was given but {started_by}: drop {flag}, {fix}")


def check_gpu_agrees(options: LaunchOptions, local_rank: int, variable: str = "LOCAL_RANK") -> None:
    """Under a launcher the device is the local rank: a different --gpu is a mistake."""
    if options.gpu is not None and options.gpu != local_rank:
        raise UsageError(
            f"{options.show('gpu', options.gpu)} contradicts {variable}="
            f"{local_rank}: under a launcher leave out {options.name('gpu')}, "
            f"the device is {variable}"
        )


def check_local_rank_agrees(
    options: LaunchOptions, local_rank: int, variable: str = "LOCAL_RANK"
) -> None:
    """The --local-rank argument a launcher appended must match what it exported."""
    if options.local_rank is not None and options.local_rank != local_rank:
        raise UsageError(
            f"{options.show('local_rank', options.local_rank)} contradicts "
            f"{variable}={local_rank}: pass one of them"
        )
