"""Choosing where the ranks meet: the master's address and port, from the init method URL,
the options, MASTER_ADDR/MASTER_PORT or the launcher's node 0, and a free port."""

import socket
from collections.abc import Callable, Mapping

from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import parse_dist_url, to_host, to_port
from devicekit.errors import UsageError

DEFAULT_PORT = 29500
LOOPBACK = "127.0.0.1"
# The reference ImageNet example's default, a multicast address nothing listens on.
REFERENCE_DIST_URL = "tcp://224.66.41.62:23456"


def find_free_port(host: str = LOOPBACK) -> int:
    """A TCP port that is free on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


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
