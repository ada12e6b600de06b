"""No launcher; this process starts its node's ranks itself: devicekit.launch() (and a
trainer's --multiprocessing-distributed parent). The context is the parent's; each child's
is `for_spawned_rank(i)`. --world-size/--rank count nodes and the node rank here (the
reference ImageNet example's meaning); the master is the init method URL, --addr/--port,
MASTER_ADDR/MASTER_PORT, or loopback and a free port on one node. The ranks meet in
devicekit's rendezvous."""

from collections.abc import Mapping

from devicekit.environments.context import LaunchContext
from devicekit.environments.master import DEFAULT_PORT, master
from devicekit.environments.options import LaunchOptions
from devicekit.environments.parsing import nodes_from_options, to_int
from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind

NAME = "spawn"
VARIABLES: tuple[str, ...] = ("MASTER_ADDR", "MASTER_PORT")
STARTED_BY_LAUNCHER = False


def detect(environ: Mapping[str, str], options: LaunchOptions) -> bool:
    """Whether this process starts its node's ranks itself (--multiprocessing-distributed)."""
    return options.multiprocessing_distributed


def context(
    options: LaunchOptions, environ: Mapping[str, str], kind: DeviceKind | None
) -> LaunchContext:
    """The spawning parent's context (each child's is `for_spawned_rank(i)`)."""
    if options.device_list:
        nprocs = len(options.device_list)
        listed = ",".join(map(str, options.device_list))
        if options.nproc_per_node not in (None, nprocs):
            raise UsageError(
                f"{options.show('nproc_per_node', options.nproc_per_node)} "
                f"disagrees with the {nprocs} ids of "
                f"{options.name('device_list')} {listed}: give one of them"
            )
        if (
            kind is not None
            and kind.is_accelerator
            and max(options.device_list) >= kind.device_count()
        ):
            raise UsageError(
                f"{options.name('device_list')} {listed} names a device beyond "
                f"the {kind.device_count()} visible {kind.name} device(s)"
            )
    elif options.nproc_per_node is not None:
        nprocs = to_int(options.nproc_per_node, options.name("nproc_per_node"), 1)
        if kind is not None and kind.is_accelerator and nprocs > kind.device_count():
            raise UsageError(
                f"{options.show('nproc_per_node', nprocs)} exceeds the {kind.device_count()} "
                f"visible {kind.name} device(s): use at most {kind.device_count()}"
            )
    elif kind is not None:
        nprocs = kind.default_ranks_per_node()
    else:
        nprocs = 1
    nnodes, node_rank = nodes_from_options(options, "when spawning")
    addr, port = master(options, environ, nnodes, None if nnodes == 1 else DEFAULT_PORT)
    device_list = tuple(options.device_list) if options.device_list else None
    return LaunchContext(
        mode=NAME,
        rank=node_rank * nprocs,
        local_rank=0,
        world_size=nnodes * nprocs,
        local_world_size=nprocs,
        node_rank=node_rank,
        nnodes=nnodes,
        master_addr=addr,
        master_port=port,
        device_index=device_list[0] if device_list else 0,
        device_list=device_list,
    )
