"""Ascend's ResNet50 idiom: a shell loop exports RANK_ID (this node's process index) and
RANK_SIZE (processes per node) and runs `main.py --gpu $RANK_ID --rank NODE --world-size
NODES --multiprocessing-distributed` with no spawn expected; the master comes from
--addr/--port, MASTER_ADDR/MASTER_PORT or loopback. The ranks meet in devicekit's
rendezvous."""

from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.cross_checks import check_device, device_source
from devicekit.environments.master import DEFAULT_PORT, master
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import (
    listed_device,
    nodes_from_options,
    read_numbers,
    require,
    to_int,
)
from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind

NAME = "ascend"
VARIABLES: tuple[str, ...] = ("RANK_ID", "RANK_SIZE", "MASTER_ADDR", "MASTER_PORT")


def detect(environ: Mapping[str, str], options: LaunchOptions) -> bool:
    """Whether Ascend's shell loop set RANK_ID and RANK_SIZE."""
    return "RANK_ID" in environ and "RANK_SIZE" in environ


def context(
    options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
) -> LaunchContext:
    """Who this process is, from RANK_ID/RANK_SIZE and the node options."""
    values = read_numbers(environ, {"RANK_SIZE": 1, "RANK_ID": 0})
    local_world_size, rank_id = require(values, "RANK_SIZE"), require(values, "RANK_ID")
    nnodes, node_rank = nodes_from_options(options, "in Ascend's RANK_ID/RANK_SIZE idiom")
    if rank_id >= local_world_size:
        raise UsageError(f"RANK_ID={rank_id} is not below RANK_SIZE={local_world_size}")
    device_index = (
        listed_device(options, rank_id, "RANK_ID")
        if options.gpu is None
        else to_int(options.gpu, options.name("gpu"))
    )
    addr, port = master(options, environ, nnodes, DEFAULT_PORT)
    ctx = LaunchContext(
        mode=NAME,
        rank=node_rank * local_world_size + rank_id,
        local_rank=rank_id,
        world_size=nnodes * local_world_size,
        local_world_size=local_world_size,
        node_rank=node_rank,
        nnodes=nnodes,
        master_addr=addr,
        master_port=port,
        device_index=device_index,
    )
    return check_device(ctx, kind, device_source(options, "RANK_ID"))
