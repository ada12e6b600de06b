"""Parsing what launchers and options hand a process: integers, ports, host names, the init
method URL, count variables, the node counts and device lists of options. Every mistake is a
UsageError that names the variable or flag."""

import re
from collections.abc import Mapping
from typing import Final, Literal

from devicekit.environments.options import LaunchOptions
from devicekit.errors import UsageError

PORT: Final = "port"  # a read_numbers rule: a TCP port, 1..65535


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


def count(environ: Mapping[str, str], name: str) -> int:
    """A count variable for detection only: its value when it is a number, else 1."""
    value = environ.get(name, "").strip()
    # isdigit() alone also takes "²", which int() refuses; detection must never raise.
    return int(value) if value.isascii() and value.isdigit() and len(value) < 19 else 1


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
