"""Which local network interface reaches the master: gloo needs it on multi-node runs.

gloo picks its address by resolving this host's name, which on many machines (and in
containers) gives 127.0.0.1; ranks on other nodes then cannot connect. The interface
the kernel routes MASTER_ADDR through is the one to use.
"""

import fcntl
import ipaddress
import socket
import struct

_SIOCGIFADDR = 0x8915


def local_address_towards(host: str, port: int) -> str:
    """The local IPv4 address the kernel would use to reach `host` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((socket.gethostbyname(host), port))
        address: str = sock.getsockname()[0]  # (host, port) for AF_INET
        return address


def interface_with_address(address: str) -> str | None:
    """The name of the interface that holds IPv4 `address`, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(
                    sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15])
                )
            except OSError:
                continue
            if socket.inet_ntoa(packed[20:24]) == address:
                return name
    return None


def interface_towards(host: str, port: int) -> str | None:
    """The non-loopback interface that reaches `host`, or None when it is local-only."""
    try:
        address = local_address_towards(host, port)
    except OSError:
        return None
    if ipaddress.ip_address(address).is_loopback:
        return None
    return interface_with_address(address)
