"""Ascend's rank table: RANK_TABLE_FILE names a JSON file that lists the run's servers and
their devices, each with a global `rank_id` (every value a string):

    {"status": "completed", "version": "1.0", "server_count": "2",
     "server_list": [{"server_id": "10.0.0.1",
                      "device": [{"device_id": "0", "device_ip": "192.168.1.8", "rank_id": "0"},
                                 ...]}, ...]}

The process exports RANK_ID (its rank_id) and RANK_SIZE (the ranks in the table). Its
server is its node, its place among that server's devices (by rank_id) its local rank, its
device the entry's device_id (an index into ASCEND_RT_VISIBLE_DEVICES when that is set);
node 0 is the server of rank 0, reached at its host_ip (version 1.2) or server_id unless
MASTER_ADDR/--addr say otherwise. HCCL reads the file only at the first collective: an
inconsistent one is refused here, in one line. The ranks meet in devicekit's rendezvous.
"""

import json
import os
import re
from collections.abc import Mapping
from typing import NamedTuple, overload

from devicekit.environments.context import LaunchContext
from devicekit.environments.cross_checks import check_device
from devicekit.environments.master import DEFAULT_PORT, master
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import read_numbers, require, to_int
from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind
from devicekit.kinds.visible import parse_ascend

VISIBLE = "ASCEND_RT_VISIBLE_DEVICES"
NAME = "rank_table"
VARIABLES: tuple[str, ...] = (
    "RANK_TABLE_FILE",
    "RANK_ID",
    "RANK_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    VISIBLE,
)


class Server(NamedTuple):
    """One server_list entry: its address and its devices as (rank_id, device_id) pairs,
    in rank order."""

    host: str
    devices: list[tuple[int, int]]


@overload
def _get(container: object, key: str, location: str, label: str) -> str: ...


@overload
def _get(
    container: object, key: str, location: str, label: str, expected: type[list[object]]
) -> list[object]: ...


def _get(
    container: object,
    key: str,
    location: str,
    label: str,
    expected: type[str] | type[list[object]] = str,
) -> str | list[object]:
    """`container[key]`, a str or a non-empty list (`expected`); `location` names it in the
    error, `label` the file."""
    if not isinstance(container, dict) or key not in container:
        raise UsageError(f"{label}: {location} is missing")
    value = container[key]
    if expected is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        raise UsageError(
            f"{label}: {location} is {value!r}, a number: the rank table holds "
            f'strings, write "{value}"'
        )
    if not isinstance(value, expected) or (expected is list and not value):
        shown = {str: "a string", list: "a non-empty list"}[expected]
        raise UsageError(f"{label}: {location} is {value!r}, not {shown}")
    return value


def _whole(container: object, key: str, location: str, label: str) -> int:
    value = _get(container, key, location, label)
    # ASCII digits: str.isdigit() also takes "²", which int() refuses.
    if not re.fullmatch(r"[0-9]{1,18}", value.strip()):
        raise UsageError(f"{label}: {location} is {value!r}, not a whole number")
    return int(value)


def _host(container: object, key: str, location: str, label: str) -> str:
    value = _get(container, key, location, label)
    if not value or not value.isprintable() or any(char.isspace() for char in value):
        raise UsageError(f"{label}: {location} is {value!r}, not a host name or IP address")
    return value


def read_rank_table(path: str) -> list[Server]:
    """The servers of the rank table at `path`, checked: every field HCCL needs present
    and a string, server_count matching server_list, rank_ids 0..N-1 each once."""
    label = f"RANK_TABLE_FILE={path!r}"
    try:
        # Only a regular file: opening a FIFO would wait for a writer, /dev/zero never ends.
        if os.path.exists(path) and not os.path.isfile(path):
            raise UsageError(f"{label} is not a file: point RANK_TABLE_FILE at the rank table JSON")
        with open(path, encoding="utf-8") as handle:
            table = json.load(handle)
    except OSError as error:
        raise UsageError(
            f"{label} cannot be read ({error.strerror or error}): point "
            "RANK_TABLE_FILE at the rank table JSON"
        ) from None
    except (ValueError, UnicodeDecodeError) as error:
        where = f" at line {error.lineno}" if isinstance(error, json.JSONDecodeError) else ""
        raise UsageError(
            f"{label} is not valid JSON{where}: {getattr(error, 'msg', error)}"
        ) from None
    except RecursionError:
        raise UsageError(f"{label} is not a rank table: its JSON nests too deeply") from None
    if not isinstance(table, dict):
        raise UsageError(
            f"{label} holds {type(table).__name__}, not a JSON object with "
            "server_count and server_list"
        )
    status = table.get("status", "completed")
    if status != "completed":
        raise UsageError(
            f'{label} has status {status!r}: a rank table is usable once its status is "completed"'
        )
    server_list = _get(table, "server_list", "server_list", label, list)
    server_count = _whole(table, "server_count", "server_count", label)
    if server_count != len(server_list):
        raise UsageError(
            f'{label}: server_count is "{server_count}" but server_list has '
            f"{len(server_list)} server(s)"
        )
    servers: list[Server] = []
    seen: dict[int, str] = {}
    for s, entry in enumerate(server_list):
        at = f"server_list[{s}]"
        # Version 1.2 tables name the host's address apart from the server's id.
        key = "host_ip" if isinstance(entry, dict) and "host_ip" in entry else "server_id"
        host = _host(entry, key, f"{at}.{key}", label)
        devices: list[tuple[int, int]] = []
        device_ids: set[int] = set()
        for d, device in enumerate(_get(entry, "device", f"{at}.device", label, list)):
            where = f"{at}.device[{d}]"
            device_id = _whole(device, "device_id", f"{where}.device_id", label)
            _get(device, "device_ip", f"{where}.device_ip", label)
            rank = _whole(device, "rank_id", f"{where}.rank_id", label)
            if device_id in device_ids:
                raise UsageError(f'{label}: {at} lists device_id "{device_id}" twice')
            if rank in seen:
                raise UsageError(
                    f'{label}: rank_id "{rank}" is listed twice ({seen[rank]} and {where})'
                )
            device_ids.add(device_id)
            seen[rank] = where
            devices.append((rank, device_id))
        servers.append(Server(host, sorted(devices)))
    missing = sorted(set(range(len(seen))) - set(seen))
    if missing:
        raise UsageError(
            f"{label}: rank_id values must run from 0 to {len(seen) - 1}, but "
            f'"{missing[0]}" is not listed'
        )
    return servers


def detect(environ: Mapping[str, str], options: LaunchOptions) -> bool:
    """Whether a rank table (RANK_TABLE_FILE) and this process's RANK_ID are set."""
    return "RANK_TABLE_FILE" in environ and "RANK_ID" in environ


def context(
    options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
) -> LaunchContext:
    """Who this process is, from its entry in the rank table."""
    values = read_numbers(environ, {"RANK_ID": 0, "RANK_SIZE": 1})
    rank = require(values, "RANK_ID")
    path = environ["RANK_TABLE_FILE"]
    servers = read_rank_table(path)
    world_size = sum(len(server.devices) for server in servers)
    if values.get("RANK_SIZE", world_size) != world_size:
        raise UsageError(
            f"RANK_TABLE_FILE={path!r} lists {world_size} devices but "
            f"RANK_SIZE={values['RANK_SIZE']}: under a rank table RANK_SIZE "
            "is the number of ranks of all servers"
        )
    if rank >= world_size:
        raise UsageError(
            f"RANK_ID={rank} is not a rank_id of RANK_TABLE_FILE={path!r}: "
            f"its ranks run from 0 to {world_size - 1}"
        )
    node_rank, server = next(
        (i, server) for i, server in enumerate(servers) if any(r == rank for r, _ in server.devices)
    )
    local_rank, device_id = next(
        (i, device) for i, (r, device) in enumerate(server.devices) if r == rank
    )
    if options.gpu is not None:
        device_index, source = to_int(options.gpu, options.name("gpu")), options.name("gpu")
    else:
        device_index, source = _visible_index(environ, device_id, rank), "device_id"
    master_host = next(server.host for server in servers if any(r == 0 for r, _ in server.devices))
    addr, port = master(options, environ, len(servers), DEFAULT_PORT, lambda: master_host)
    ctx = LaunchContext(
        mode=NAME,
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        local_world_size=len(server.devices),
        node_rank=node_rank,
        nnodes=len(servers),
        master_addr=addr,
        master_port=port,
        device_index=device_index,
    )
    return check_device(ctx, kind, source)


def _visible_index(environ: Mapping[str, str], device_id: int, rank: int) -> int:
    """The torch index of physical device `device_id`: its place in ASCEND_RT_VISIBLE_DEVICES
    (the runtime numbers the visible devices from 0), or the id itself."""
    if VISIBLE not in environ:
        return device_id
    visible = parse_ascend(VISIBLE, environ[VISIBLE])
    if device_id not in visible:
        raise UsageError(
            f"rank {rank} of the rank table uses device_id {device_id}, which "
            f"{VISIBLE}={environ[VISIBLE]!r} hides: list it there, or unset it"
        )
    return visible.index(device_id)
