"""Reading what launchers and options hand a process: integers, ports, the master's
address, device indices. Every mistake is a UsageError that names the variable or flag."""

import os
import re
import socket
from collections.abc import Callable, Mapping
from typing import Final, Literal

from devicekit.environments.context import LaunchContext
from devicekit.environments.options import LaunchOptions
from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind

DEFAULT_PORT = 29500
LOOPBACK = "127.0.0.1"
# The reference ImageNet example's default, a multicast address nothing listens on.
REFERENCE_DIST_URL = "tcp://224.66.41.62:23456"
PORT: Final = "port"  # a read_numbers rule: a TCP port, 1..65535


def find_free_port(host: str = LOOPBACK) -> int:
    """A TCP port that is free on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def to_int(value: object, name: str, minimum: int = 0) -> int:
    """`value` as an integer of at least `minimum`; `name` is what the error calls it."""
    try:
        number = int(str(value).strip())
    except ValueError:
        raise UsageError(f"{name}={value!r} is not an integer: set it to a whole number") from None
    if number < minimum:
        raise UsageError(f"{name}={number} must be at least {minimum}")
    return number


def to_port(value: object, name: str) -> int:
    """`value` as a TCP port."""
    port = to_int(value, name, 1)
    if port > 65535:
        raise UsageError(f"{name}={port} is not a TCP port: use 1..65535")
    return port


def read_numbers(
    environ: Mapping[str, str], rules: Mapping[str, int | Literal["port"]]
) -> dict[str, int]:
    """The variables of `rules` that are set, each checked in order against its rule (a
    minimum, or PORT). A set but malformed variable is named before any missing one, so
    the user fixes the mistake rather than a symptom. An empty port counts as unset."""
    values: dict[str, int] = {}
    for name, rule in rules.items():
        value = environ.get(name)
        if value is None or (rule == PORT and not value):
            continue
        values[name] = to_port(value, name) if rule == PORT else to_int(value, name, rule)
    return values


def require(values: Mapping[str, int], name: str, fix: str = "") -> int:
    """`values[name]`; UsageError "NAME is not set" (then `fix`) when it is missing."""
    if name not in values:
        raise UsageError(f"{name} is not set{fix}")
    return values[name]


def to_host(value: str, name: str) -> str:
    """`value` as the master's address: a host name or an IP address has no blank and no
    control character (one would also break every message that shows the address)."""
    if not value.isprintable() or any(char.isspace() for char in value):
        raise UsageError(
            f"{name}={value!r} is not a host name or IP address: set it to the "
            "address of node 0 (e.g. 10.0.0.1 or node01)"
        )
    return value


def parse_dist_url(url: str, name: str) -> tuple[str, int]:
    """(host, port) of a tcp://HOST:PORT init method; `name` is what the error calls it."""
    match = re.fullmatch(r"tcp://\[?([^\]]+?)\]?:([0-9]+)", url.strip())
    if not match:
        raise UsageError(f"{name} {url!r} is not understood: use tcp://HOST:PORT or env://")
    return to_host(match.group(1), f"{name} host"), to_port(match.group(2), f"{name} port")


def master(
    options: LaunchOptions,
    environ: Mapping[str, str],
    nnodes: int,
    default_port: int | None,
    node0: Callable[[], str | None] = lambda: None,
) -> tuple[str, int]:
    """(addr, port) from the init method URL, addr/port options, MASTER_ADDR/MASTER_PORT,
    or else node 0 as the launcher tells it (`node0()`, asked only then) on several nodes
    and loopback on one. `default_port` None: a free port."""
    url = options.dist_url
    if url and url != REFERENCE_DIST_URL and not url.startswith("env://"):
        return parse_dist_url(url, options.name("dist_url"))
    if options.addr:
        addr = to_host(str(options.addr), options.name("addr"))
    elif environ.get("MASTER_ADDR"):
        addr = to_host(environ["MASTER_ADDR"], "MASTER_ADDR")
    else:
        addr = None
    port: int | None
    if options.port is not None:
        port = to_port(options.port, options.name("port"))
    elif "MASTER_PORT" in environ:
        port = to_port(environ["MASTER_PORT"], "MASTER_PORT")
    else:
        port = default_port
    if not addr and nnodes > 1:
        addr = node0()
        if not addr:
            raise UsageError(
                f"a {nnodes}-node run needs the address of node 0: set MASTER_ADDR (or "
                f"{options.name('addr')}, or {options.name('dist_url')} tcp://HOST:PORT); "
                "devicekit uses loopback only on one node"
            )
    if not addr:
        addr = LOOPBACK
    if port is None:
        port = find_free_port()
    return addr, port


def listed_device(options: LaunchOptions, local_rank: int, source: str) -> int:
    """The device of local rank `local_rank`: its entry in the device list, or the rank."""
    if not options.device_list:
        return local_rank
    if local_rank >= len(options.device_list):
        raise UsageError(
            f"{source}={local_rank} has no entry in {options.name('device_list')} "
            f"{','.join(map(str, options.device_list))}: list one device per process"
        )
    return options.device_list[local_rank]


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


def nodes_from_options(options: LaunchOptions, when: str) -> tuple[int, int]:
    """(nodes, node rank) when spawning: world_size and rank count nodes then."""
    nnodes = (
        1
        if options.world_size is None
        else to_int(options.world_size, options.name("world_size"), 1)
    )
    node_rank = 0 if options.rank is None else to_int(options.rank, options.name("rank"))
    if node_rank >= nnodes:
        raise UsageError(
            f"{options.show('rank', node_rank)} (the node rank {when}) is not "
            f"below {options.show('world_size', nnodes)} (the number of nodes)"
        )
    return nnodes, node_rank


def count(environ: Mapping[str, str], name: str) -> int:
    """A count variable for detection only: its value when it is a number, else 1."""
    value = environ.get(name, "").strip()
    # isdigit() alone also takes "²", which int() refuses; detection must never raise.
    return int(value) if value.isascii() and value.isdigit() and len(value) < 19 else 1
