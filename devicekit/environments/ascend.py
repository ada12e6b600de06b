"""Ascend's ResNet50 idiom: a shell loop exports RANK_ID (this node's process index) and
RANK_SIZE (processes per node) and runs `main.py --gpu $RANK_ID --rank NODE --world-size
NODES --multiprocessing-distributed` with no spawn expected; the master comes from
--addr/--port, MASTER_ADDR/MASTER_PORT or loopback. The ranks meet in devicekit's
rendezvous."""

from collections.abc import Mapping

from devicekit.environments.base import LaunchEnvironment
from devicekit.environments.context import LaunchContext
from devicekit.environments.options import LaunchOptions
from devicekit.environments.reading import (
    DEFAULT_PORT,
    check_device,
    device_source,
    listed_device,
    master,
    nodes_from_options,
    read_numbers,
    require,
    to_int,
)
from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind


class Ascend(LaunchEnvironment):
    name = "ascend"
    variables = ("RANK_ID", "RANK_SIZE", "MASTER_ADDR", "MASTER_PORT")

    def detect(self, environ: Mapping[str, str], options: LaunchOptions) -> bool:
        return "RANK_ID" in environ and "RANK_SIZE" in environ

    def context(
        self, options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
    ) -> LaunchContext:
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
            self.name,
            node_rank * local_world_size + rank_id,
            rank_id,
            nnodes * local_world_size,
            local_world_size,
            node_rank,
            nnodes,
            addr,
            port,
            device_index,
        )
        return check_device(ctx, kind, device_source(options, "RANK_ID"))
